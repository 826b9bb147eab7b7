#!/usr/bin/env bash
# Builds the Python package and runs its whole suite against real car-server daemons:
# the mypy --strict check, pytest (API, calls, callbacks, resilience, inference with the
# test model, examples). Idempotent: the venv and its tools are installed once per target
# dir. The benchmark (bench.py) runs under scripts/bench.
#
#   bindings-python/test.sh            everything
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
venv="$CARGO_TARGET_DIR/py-venv"
tools="maturin>=1.7,<2 pytest>=7 mypy>=1.8 websockets>=12"

step() { printf '\n==> python: %s\n' "$*"; }

step "python toolchain"
python=""
for candidate in python3 python; do
  if command -v "$candidate" >/dev/null 2>&1 \
    && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 9))'; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ] || ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
  python=python3
fi
"$python" --version

# The venv is rebuilt only when the tool list changes.
stamp="$venv/.car-tools"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$tools" ]; then
  step "venv with $tools"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  # shellcheck disable=SC2086
  "$venv/bin/pip" install -q $tools
  echo "$tools" >"$stamp"
fi
export PATH="$venv/bin:$PATH"
export VIRTUAL_ENV="$venv"

step "test model"
# scripts/test exports it; standalone runs fetch it (cached after the first time). The
# inference tests fail, not skip, without it.
if [ -z "${CAR_TEST_GGUF:-}" ]; then
  eval "$("$root/scripts/fetch-models")"
fi
export CAR_TEST_GGUF
echo "CAR_TEST_GGUF=$CAR_TEST_GGUF"

step "car-server"
# scripts/test has already built the whole workspace; building `-p car-server` alone would
# resolve build-dependency features differently and rebuild llama.cpp for nothing.
if [ "${CAR_SERVER_PREBUILT:-}" != 1 ]; then
  (cd "$root" && cargo build -q -p car-server)
fi

step "build and install car-runtime (maturin, abi3 wheel)"
# A stray module from `maturin develop` would shadow nothing (pytest imports the installed
# package) but would be copied into the wheel; drop it.
rm -f "$here"/python/car_runtime/_native*.so
start=$(date +%s)
pip install -q --no-build-isolation --no-deps --force-reinstall "$here"
echo "built in $(( $(date +%s) - start ))s"
python -c 'import car_runtime; print("car_runtime", car_runtime.__version__, "protocol", car_runtime.protocol_version())'

step "mypy --strict"
(cd "$here" && mypy --strict --no-incremental tests/typecheck_api.py python/car_runtime)

step "pytest"
(cd "$here" && python -m pytest -q -p no:cacheprovider tests)


echo
echo "python: all passed"
