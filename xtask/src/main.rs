//! `cargo xtask codegen [--check]` (an alias in `.cargo/config.toml`): writes (or checks)
//! every file generated from the method contract in `car-proto` (`core/src/methods/`): the
//! binding members and wrappers, `bindings-uniffi/MEMBERS.md` and `docs/methods.md`.
//!
//! Owns: every generated file (written from the contract). Must not touch: hand-written
//! sources.
//!
//! For every declaration a default daemon serves (the `--debug-methods` ones are left out):
//!
//! - each of its typed [`Member`](car_proto::methods::Member)s, with CAR's name and signature:
//!   Python `add_fact(self, subject: str, …) -> int`, Node `addFact(subject, …): Promise<number>`,
//!   UniFFI `add_fact(&self, subject: String, …) -> Result<i64, CarError>`; each calls the
//!   binding's native `call_member`, so params are built and results projected once, in
//!   `car_daemon_client::typed`;
//! - a CAR-compatible JSON-string wrapper, `memory_add_fact(params_json="{}") -> str`, unless a
//!   typed member (or, in Python and Node, a hand-written member such as `infer_stream`) has its
//!   name.
//!
//! The `host` methods' members are `HostClient`'s (CAR's rule: host methods stay off
//! `CarRuntime`) and go through `daemon_call_host_management`; the few CAR's `CarRuntime`
//! has as well (`render::RUNTIME_HOST_MEMBERS`) are generated on the runtime too.
//!
//! Files: Python `bindings-python/python/car_runtime/_generated.py` + `_generated.pyi`
//! (`GeneratedMethods`, which `CarRuntime` inherits, and `GeneratedHostMethods`, which
//! `HostClient` inherits), Node `bindings-node/generated.js` + `generated.d.ts`
//! (`installGenerated(proto)` / `installGeneratedHost(proto)` and the `GENERATED_METHODS` /
//! `TYPED_MEMBERS` / `HOST_GENERATED_METHODS` / `HOST_TYPED_MEMBERS` tables), UniFFI
//! `bindings-uniffi/src/generated.rs` (`#[uniffi::export] impl CarDaemonClient` and `impl
//! HostClient` blocks).
//!
//! Name rule (docs/protocol-choices.md, "Bindings"): split the method on `.` and `/`, snake_case
//! each segment, join with `_`; Node, Kotlin and Swift use the lowerCamelCase of that. `--check`
//! exits 1 naming every stale file, so CI fails when the contract changed and the generated files
//! were not rewritten.

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
            eprintln!("usage: cargo xtask codegen [--check]");
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
            "stale generated files (run `cargo xtask codegen`): {}",
            stale.join(", ")
        );
        ExitCode::from(1)
    }
}
