#!/usr/bin/env bash
# Interop suite: CAR's published Python client (PyPI car-runtime 0.58.0) drives this repo's
# car-server through every method it serves.
#
#   tests/interop/test.sh                 the whole suite
#   tests/interop/test.sh -k memory -x    extra arguments go to pytest
#
# Uses the already-built $CARGO_TARGET_DIR/debug/car-server (default <repo>/target) and never
# runs cargo. The venv ($CARGO_TARGET_DIR/interop-venv) is created once and reinstalled only
# when requirements.txt changes. Exits non-zero on any failure, including "no tests ran".
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
venv="$CARGO_TARGET_DIR/interop-venv"
server="$CARGO_TARGET_DIR/debug/car-server"

step() { printf '\n==> interop: %s\n' "$*"; }

step "car-server"
if [ ! -x "$server" ]; then
  echo "interop: $server is missing; build the workspace first (scripts/test does:" \
    "cargo test --workspace --locked --no-run)" >&2
  exit 1
fi
echo "$server"

step "python"
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

# CAR's wheel is named car-runtime like ours, so it gets a venv of its own. The stamp holds
# the requirements it was installed from; the version check catches a venv someone changed.
stamp="$venv/.interop-requirements"
want="$(cat "$here/requirements.txt")"
if [ ! -x "$venv/bin/python" ] \
  || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] \
  || ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("car-runtime") != "0.58.0")' 2>/dev/null; then
  step "venv $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements.txt"
  printf '%s' "$want" >"$stamp"
fi
"$venv/bin/python" -c 'import car_runtime; print("CAR client car_runtime", car_runtime.__version__, "at", car_runtime.__file__)'

step "test models"
# scripts/test exports them; a standalone run fetches them (cached after the first time).
# The inference tests fail, not skip, without them.
if [ -z "${CAR_TEST_GGUF:-}" ] || [ -z "${CAR_TEST_EMBED_DIR:-}" ]; then
  eval "$("$root/scripts/fetch-models")"
fi
export CAR_TEST_GGUF CAR_TEST_EMBED_DIR
echo "CAR_TEST_GGUF=$CAR_TEST_GGUF"
echo "CAR_TEST_EMBED_DIR=$CAR_TEST_EMBED_DIR"

step "pytest"
export PYTHONDONTWRITEBYTECODE=1
# --rootdir and -p no:cacheprovider keep pytest inside this directory (no other conftest,
# no .pytest_cache in the tree); the per-test timeout turns a hang into a failure.
set +e
(cd "$here" && "$venv/bin/python" -m pytest --rootdir "$here" -p no:cacheprovider \
  --timeout "${CAR_INTEROP_TIMEOUT:-300}" -q -rfE "$here" "$@")
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "interop: pytest collected no tests" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "interop: failed (pytest exit $rc)" >&2
  exit "$rc"
fi
echo
echo "interop: all passed"
