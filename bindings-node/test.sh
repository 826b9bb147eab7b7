#!/usr/bin/env bash
# Builds and tests the Node package `car-runtime` against real car-server processes.
#
#   bindings-node/test.sh            install, build (release addon), type-check, test suite,
#                                    examples (the benchmark, bench.js, runs under scripts/bench)
#
# Uses ${CARGO_TARGET_DIR:-<repo>/target} for every cargo build and the daemon at
# $CARGO_TARGET_DIR/debug/car-server (built here when missing or stale). npm packages are
# fetched once by `npm install` (pinned by package-lock.json); the inference tests need the
# test model `CAR_TEST_GGUF` (scripts/test exports it; otherwise scripts/fetch-models is run
# here, which downloads it once into its cache). Nothing is downloaded while the tests run.
# Idempotent: a second run reuses node_modules, the model cache and cargo's incremental
# builds.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

step() { printf '\n==> [node] %s\n' "$*"; }
timed() {
  local start=$SECONDS
  "$@"
  printf '    (%ss)\n' "$((SECONDS - start))"
}

step "toolchain"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node/npm not found: installing Debian's nodejs and npm" >&2
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "node >= 20.17 and npm are required (not root, so apt-get cannot install them)" >&2
    exit 1
  fi
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "node >= 20.17 is required (@napi-rs/cli), found $(node --version)" >&2
  exit 1
fi
echo "node $(node --version), npm $(npm --version), $(cargo --version)"

step "car-server"
# Skipped under scripts/test, which built the whole workspace already (a `-p car-server`
# build resolves build-dependency features differently and would rebuild llama.cpp).
if [ "${CAR_SERVER_PREBUILT:-}" != 1 ]; then
  timed cargo build -p car-server --locked --quiet
fi
export CAR_SERVER_BIN="$CARGO_TARGET_DIR/debug/car-server"

step "test model"
if [ -z "${CAR_TEST_GGUF:-}" ]; then
  eval "$("$root/scripts/fetch-models")"
fi
export CAR_TEST_GGUF
echo "CAR_TEST_GGUF=$CAR_TEST_GGUF"

cd "$here"
step "npm install"
timed npm install --no-audit --no-fund --loglevel=error

step "npm run build (napi build --release)"
timed npm run --silent build

step "type declarations: tsc --noEmit over test/types/usage.ts"
timed npm run --silent typecheck

step "examples/node: npm install (links the package)"
(cd "$root/examples/node" && npm install --no-audit --no-fund --no-package-lock --loglevel=error)

step "node --test (each suite starts its own car-server)"
timed npm test


echo
echo "[node] all passed"
