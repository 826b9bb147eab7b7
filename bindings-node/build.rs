//! Emits the linker flags a Node addon needs (symbols resolved by the host `node` binary).

fn main() {
    napi_build::setup();
}
