#!/usr/bin/env bash
# Builds and tests the UniFFI package (issue 8):
#
#   1. installs what it needs once: Java (Debian), JNA (Debian libjna-java) and kotlinc
#      (npm kotlin-compiler, into $CARGO_TARGET_DIR/uniffi-tools);
#   2. builds car-server, the library (cdylib + staticlib) and the pinned uniffi-bindgen;
#   3. runs the Rust tests (bridge against real daemons, API.md completeness, generated
#      Kotlin/Swift mention every exported item);
#   4. generates the Kotlin and Swift sources from the built library;
#   5. compiles the Kotlin test program and the Kotlin example once, with one kotlinc run;
#   6. runs the Kotlin test against real daemons, then the examples against a daemon (the
#      local-agent one on the test model, CAR_TEST_GGUF).
#
# Uses ${CARGO_TARGET_DIR:-<repo>/target}; nothing is downloaded after step 1.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
target="$CARGO_TARGET_DIR"
tools="$target/uniffi-tools"
gen="$target/uniffi-bindings"
kotlin_version="2.4.20"
jna=/usr/share/java/jna.jar

step() { printf '\n==> uniffi: %s\n' "$*"; }
elapsed() { printf '    (%ss)\n' "$(( $(date +%s) - $1 ))"; }

apt_install() {
  # Try without refreshing the package lists first; refresh only when that fails.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
  }
}

# The local-agent example runs on the test model; scripts/test exports it, standalone runs
# fetch it once (cached).
if [ -z "${CAR_TEST_GGUF:-}" ]; then
  eval "$("$root/scripts/fetch-models")"
fi
export CAR_TEST_GGUF

t=$(date +%s)
step "install Java, JNA and kotlinc $kotlin_version"
command -v java >/dev/null 2>&1 || apt_install openjdk-17-jre-headless
[ -f "$jna" ] || apt_install libjna-java
command -v npm >/dev/null 2>&1 || apt_install nodejs npm
kotlinc="$tools/node_modules/kotlin-compiler/bin/kotlinc"
if [ ! -x "$kotlinc" ] || ! grep -q "\"version\": \"$kotlin_version\"" \
    "$tools/node_modules/kotlin-compiler/package.json" 2>/dev/null; then
  mkdir -p "$tools"
  npm install --no-audit --no-fund --no-save --prefix "$tools" "kotlin-compiler@$kotlin_version" >/dev/null
fi
java -version 2>&1 | head -1
elapsed "$t"

t=$(date +%s)
step "build car-server, the library and uniffi-bindgen"
cd "$root"
# Under scripts/test the workspace (car-server included) is built already; building
# `-p car-server` alone would resolve build-dependency features differently and rebuild
# llama.cpp for nothing.
if [ "${CAR_SERVER_PREBUILT:-}" = 1 ]; then
  cargo build --locked -p car-runtime-uniffi
else
  cargo build --locked -p car-server -p car-runtime-uniffi
fi
lib="$target/debug/libcar_runtime_uniffi.so"
bindgen="$target/debug/uniffi-bindgen"
daemon_bin="$target/debug/car-server"
elapsed "$t"

t=$(date +%s)
step "Rust tests"
cargo test --locked -p car-runtime-uniffi
elapsed "$t"

t=$(date +%s)
step "generate Kotlin and Swift from the built library"
rm -rf "$gen"
# Run from the workspace: uniffi-bindgen reads bindings-uniffi/uniffi.toml via cargo metadata.
"$bindgen" generate --no-format --library "$lib" --language kotlin --out-dir "$gen/kotlin"
"$bindgen" generate --no-format --library "$lib" --language swift --out-dir "$gen/swift"
for f in "$gen/kotlin/uniffi/car_runtime_uniffi/car_runtime_uniffi.kt" \
         "$gen/swift/car_runtime_uniffi.swift" \
         "$gen/swift/car_runtime_uniffiFFI.h" \
         "$gen/swift/car_runtime_uniffiFFI.modulemap"; do
  [ -s "$f" ] || { echo "missing generated file $f" >&2; exit 1; }
done
elapsed "$t"

t=$(date +%s)
step "compile the Kotlin test, example and benchmark (one kotlinc run)"
jar="$gen/kotlin-tests.jar"
"$kotlinc" -nowarn -include-runtime -cp "$jna" -d "$jar" \
  "$gen/kotlin" "$here/tests/kotlin" "$root/examples/kotlin" "$here/bench"
elapsed "$t"

scratch="$(mktemp -d)"
example_daemon=""
cleanup() {
  if [ -n "$example_daemon" ] && kill -0 "$example_daemon" 2>/dev/null; then
    kill -TERM "$example_daemon" 2>/dev/null || true
    wait "$example_daemon" 2>/dev/null || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT

# The JVM sees only the CAR_HOME given here: no developer daemon settings leak in.
jvm() {
  env -u CAR_AUTH_TOKEN -u CAR_AUTH_TOKEN_FILE -u CAR_DAEMON_URL -u CAR_SERVER_SOCKET \
      -u CAR_MEMORY_NAMESPACE -u CAR_NO_AUTH -u XDG_RUNTIME_DIR -u RUST_BACKTRACE \
      CAR_HOME="$1" CAR_SERVER_BIN="$daemon_bin" \
      timeout 300 java -Djna.library.path="$(dirname "$lib")" -cp "$jar:$jna" "${@:2}"
}

t=$(date +%s)
step "Kotlin test against real daemons"
mkdir -p "$scratch/kt-home"
jvm "$scratch/kt-home" CarDaemonClientTestKt | tee "$scratch/kotlin-test.log"
grep -q "^all .* Kotlin tests passed" "$scratch/kotlin-test.log"
elapsed "$t"

t=$(date +%s)
step "Kotlin example against a daemon"
home="$scratch/example-home"
mkdir -p "$home"
env -u XDG_RUNTIME_DIR -u CAR_SERVER_SOCKET CAR_HOME="$home" CAR_LOG=info \
  "$daemon_bin" --port 0 --ready-file "$scratch/ready.json" \
  </dev/null >/dev/null 2>"$scratch/example-daemon.log" &
example_daemon=$!
for _ in $(seq 1 600); do
  [ -s "$scratch/ready.json" ] && break
  kill -0 "$example_daemon" 2>/dev/null || { cat "$scratch/example-daemon.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$scratch/ready.json" ] || { echo "car-server did not become ready" >&2; exit 1; }
jvm "$home" example.MainKt | tee "$scratch/example.log"
grep -q 'HELLO FROM KOTLIN' "$scratch/example.log"
grep -q 'code -32601' "$scratch/example.log"
# The local-model agent example (SmolLM2 from CAR_TEST_GGUF, offline).
jvm "$home" example.LocalAgentKt "$CAR_TEST_GGUF" | tee "$scratch/local-agent.log"
grep -q '^local agent done' "$scratch/local-agent.log"
kill -TERM "$example_daemon"
wait "$example_daemon"
example_daemon=""
elapsed "$t"

echo
echo "uniffi: all suites passed"
