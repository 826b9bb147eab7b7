//! `cargo run -p xtask -- codegen [--check]`: writes (or checks) the binding wrappers
//! generated from the method table in `car-proto`.
//!
//! One wrapper per method of the table a default daemon serves (the `--debug-methods`
//! rows are left out), each a call of the generic bridge with a JSON params string:
//!
//! - Python `bindings-python/python/car_runtime/_generated.py`: a `GeneratedMethods` mixin,
//!   `def memory_add_fact(self, params_json: str = "{}") -> str`; `CarRuntime` inherits it,
//!   so a hand-written method of the same name wins;
//! - Node `bindings-node/generated.js` + `generated.d.ts`: `installGenerated(proto)` adds
//!   `memoryAddFact(paramsJson = "{}")` where the prototype has no such member yet;
//! - UniFFI `bindings-uniffi/src/generated.rs`: a `#[uniffi::export] impl CarDaemonClient`
//!   block of `memory_add_fact(params_json: String) -> Result<String, CarError>`.
//!
//! Name rule (bindings-api.md): split the method on `.` and `/`, snake_case each segment,
//! join with `_`; Node uses the lowerCamelCase of that. `--check` exits 1 naming every stale
//! file, so CI fails when the table changed and the generated files were not rewritten.

#![allow(clippy::print_stdout)]

mod render;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repo")
        .to_path_buf()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    match args.first().map(String::as_str) {
        Some("codegen") => codegen(&repo_root(), check),
        _ => {
            eprintln!("usage: cargo run -p xtask -- codegen [--check]");
            ExitCode::from(2)
        }
    }
}

fn codegen(root: &Path, check: bool) -> ExitCode {
    let mut stale = Vec::new();
    for (path, contents) in render::all() {
        let full = root.join(path);
        let current = std::fs::read_to_string(&full).ok();
        if current.as_deref() == Some(contents.as_str()) {
            continue;
        }
        if check {
            stale.push(path);
        } else {
            if let Some(dir) = full.parent() {
                std::fs::create_dir_all(dir).expect("create the output directory");
            }
            std::fs::write(&full, contents).expect("write a generated file");
            println!("wrote {path}");
        }
    }
    if stale.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "stale generated files (run `cargo run -p xtask -- codegen`): {}",
            stale.join(", ")
        );
        ExitCode::from(1)
    }
}
