//! The foreign surface, read from the built library's UniFFI metadata (what the generator
//! sees, so nothing exported can be missed):
//!
//! - `API.md` lists every exported item, under the name Kotlin and Swift use;
//! - the generated members agree with the method contract by construction: every typed member of
//!   every served declaration is a method with CAR's name, its arguments in order with the declared
//!   types (`Option<T>` defaulting to `None` when optional) and the declared return type, and every
//!   other method has its JSON-string wrapper, on `HostClient` for `host` methods (but CAR's
//!   `remove_model`), else on `CarDaemonClient`;
//! - the pinned `uniffi-bindgen` generates Kotlin and Swift sources from the built library, and
//!   both mention every exported item (the Kotlin test compiles and runs the Kotlin; Swift cannot
//!   be compiled here, so this is its check).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use car_proto::methods::{self, ArgKind, ReturnKind, Role};
use uniffi_meta::{
    DefaultValueMetadata, EnumShape, LiteralMetadata, Metadata, MethodMetadata, Type,
};

const CRATE: &str = "car_runtime_uniffi";

/// One exported name: what kind of item it is and its foreign spelling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Item {
    kind: &'static str,
    /// `Type` or `Type.member`, as Rust names it.
    rust: String,
    /// The name Kotlin and Swift use (lowerCamelCase for callables and fields).
    foreign: String,
}

fn lower_camel(snake: &str) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').filter(|p| !p.is_empty()).enumerate() {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            if i == 0 {
                out.extend(first.to_lowercase());
            } else {
                out.extend(first.to_uppercase());
            }
            out.push_str(chars.as_str());
        }
    }
    out
}

/// `target/<profile>/libcar_runtime_uniffi.so`, beside this test's `deps/` directory.
/// `cargo test` links the tests against the rlib only, so the cdylib is (re)built here; when
/// it is fresh this is a no-op.
fn cdylib() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::env::current_exe().expect("test executable");
            let profile_dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("test binary lives in target/<profile>/deps");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut build = Command::new(cargo);
            build.args(["build", "-p", "car-runtime-uniffi", "--lib"]);
            if profile_dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let status = build.status().expect("run cargo build for the cdylib");
            assert!(status.success(), "building the cdylib failed");
            let lib = profile_dir.join(format!(
                "{}{CRATE}{}",
                std::env::consts::DLL_PREFIX,
                std::env::consts::DLL_SUFFIX
            ));
            assert!(lib.exists(), "{} is missing", lib.display());
            lib
        })
        .clone()
}

fn metadata() -> Vec<Metadata> {
    let bytes = std::fs::read(cdylib()).expect("read the cdylib");
    uniffi_bindgen::macro_metadata::extract_from_bytes(&bytes)
        .expect("uniffi metadata in the cdylib")
        .into_iter()
        .filter(|m| m.module_path().split("::").next() == Some(CRATE))
        .collect()
}

fn exported_items() -> BTreeSet<Item> {
    let metadata = metadata();
    let mut items = BTreeSet::new();
    let mut add = |kind, rust: String, foreign: String| {
        items.insert(Item {
            kind,
            rust,
            foreign,
        });
    };
    for meta in metadata {
        match meta {
            Metadata::Func(f) => add("function", f.name.clone(), lower_camel(&f.name)),
            Metadata::Object(o) => {
                let kind = match o.imp {
                    uniffi_meta::ObjectImpl::Struct => "object",
                    uniffi_meta::ObjectImpl::Trait(_) => "callback interface",
                };
                add(kind, o.name.clone(), o.name.clone())
            }
            Metadata::CallbackInterface(c) => add("callback interface", c.name.clone(), c.name),
            Metadata::Constructor(c) => add(
                "constructor",
                format!("{}.{}", c.self_name, c.name),
                c.self_name.clone(),
            ),
            Metadata::Method(m) => add(
                "method",
                format!("{}.{}", m.self_name, m.name),
                lower_camel(&m.name),
            ),
            Metadata::TraitMethod(m) => add(
                "callback method",
                format!("{}.{}", m.trait_name, m.name),
                lower_camel(&m.name),
            ),
            Metadata::Enum(e) => {
                let kind = match e.shape {
                    EnumShape::Error { .. } => "error",
                    EnumShape::Enum => "enum",
                };
                add(kind, e.name.clone(), e.name.clone());
                for v in &e.variants {
                    add("variant", format!("{}.{}", e.name, v.name), v.name.clone());
                    for f in &v.fields {
                        add(
                            "field",
                            format!("{}.{}.{}", e.name, v.name, f.name),
                            lower_camel(&f.name),
                        );
                    }
                }
            }
            Metadata::Record(r) => add("record", r.name.clone(), r.name.clone()),
            _ => {}
        }
    }
    items
}

#[test]
fn the_surface_is_what_bindings_api_promises() {
    let items = exported_items();
    let names: BTreeSet<&str> = items.iter().map(|i| i.rust.as_str()).collect();
    for promised in [
        "CarDaemonClient",
        "CarDaemonClient.new",
        "CarDaemonClient.daemon_call",
        "CarDaemonClient.daemon_call_host_management",
        "CarDaemonClient.register_daemon_handler",
        "CarDaemonClient.register_daemon_notification_handler",
        "CarDaemonClient.close",
        "CarDaemonClient.connection_epoch",
        "CarDaemonClient.add_fact",
        "CarDaemonClient.infer_tracked_with_request",
        "CarDaemonClient.memory_delete",
        "CarDaemonClient.remove_model",
        "HostClient",
        "HostClient.new",
        "HostClient.daemon_call_host_management",
        "HostClient.agents_upsert",
        "HostClient.session_clear_halt",
        "CarDaemonClient.serve_chat",
        "CarDaemonClient.stop_serving_chat",
        "ChatHandler",
        "ChatHandler.run",
        "ChatTurn",
        "ChatTurn.emit_token",
        "ChatTurn.request_approval",
        "CarDaemonClient.register_agent_runner",
        "CarDaemonClient.unregister_agent_runner",
        "AgentRunner",
        "AgentRunner.run",
        "DaemonHandler",
        "DaemonHandler.handle",
        "DaemonNotificationHandler",
        "DaemonNotificationHandler.notify",
        "AgentLoop",
        "AgentLoop.new",
        "AgentLoop.run",
        "AgentTool",
        "AgentTool.call",
        "ToolAbort",
        "ToolAbort.is_aborted",
        "ToolAbort.wait",
        "AgentLoopConfig",
        "AgentOutcome",
        "AgentMetrics",
        "CarError",
        "CarError.DaemonRpc.code",
        "CarError.DaemonRpc.detail",
        "CarError.DaemonRpc.data_json",
        "CarError.Transport.detail",
        "CarError.Timeout.method",
        "CarError.Timeout.after_ms",
        "CarError.Closed",
        "CarError.Handshake.detail",
        "CarError.Handshake.code",
        "CarError.Handshake.data_json",
        "CarError.Refused.detail",
        "CarError.InvalidArgument.detail",
        "CarError.UnexpectedResult.method",
        "CarError.UnexpectedResult.detail",
        "CarError.Handler.detail",
        "CarError.Handler.terminal",
        "protocol_version",
        "client_version",
    ] {
        assert!(names.contains(promised), "{promised} is not exported");
    }
    // Kotlin exceptions already have `message`; a field of that name breaks the bindings.
    assert!(
        !items
            .iter()
            .any(|i| i.kind == "field" && i.foreign == "message"),
        "an error field is named message"
    );
}

fn arg_type(kind: ArgKind) -> Type {
    match kind {
        ArgKind::Str | ArgKind::Json => Type::String,
        ArgKind::Int => Type::Int64,
        ArgKind::Float => Type::Float64,
        ArgKind::Bool => Type::Boolean,
        ArgKind::StrList => Type::Sequence {
            inner_type: Box::new(Type::String),
        },
        ArgKind::IntList => Type::Sequence {
            inner_type: Box::new(Type::Int64),
        },
    }
}

fn return_type(kind: ReturnKind) -> Option<Type> {
    match kind {
        ReturnKind::Unit => None,
        ReturnKind::Json | ReturnKind::Text => Some(Type::String),
        ReturnKind::Int => Some(Type::Int64),
        ReturnKind::Bool => Some(Type::Boolean),
        ReturnKind::StrList => Some(Type::Sequence {
            inner_type: Box::new(Type::String),
        }),
    }
}

fn snake_name(method: &str) -> String {
    method.replace(['.', '/'], "_")
}

/// Members of `host` methods that CAR's CarRuntime has besides its HostClient (the
/// codegen's `RUNTIME_HOST_MEMBERS`): `CarDaemonClient` has them too.
const RUNTIME_HOST_MEMBERS: &[&str] = &[
    "remove_model",
    "agent_permissions_list_grants",
    "agent_permissions_revoke_grant",
];

/// The objects the member `name` of a method in `role` is exported on: `host` methods'
/// are `HostClient`'s (and `CarDaemonClient`'s too for CAR's few).
fn owners(role: Role, name: &str) -> Vec<String> {
    match role {
        Role::Host if RUNTIME_HOST_MEMBERS.contains(&name) => {
            vec!["CarDaemonClient".into(), "HostClient".into()]
        }
        Role::Host => vec!["HostClient".into()],
        _ => vec!["CarDaemonClient".into()],
    }
}

#[test]
fn generated_members_agree_with_the_contract() {
    let exported: Vec<MethodMetadata> = metadata()
        .into_iter()
        .filter_map(|m| match m {
            Metadata::Method(m) => Some(m),
            _ => None,
        })
        .collect();
    let on = |owner: &str, name: &str| {
        exported
            .iter()
            .find(|m| m.self_name == owner && m.name == name)
            .cloned()
    };
    let anywhere = |name: &str| {
        let mut on: Vec<String> = exported
            .iter()
            .filter(|m| m.name == name && m.self_name != "AgentLoop")
            .map(|m| m.self_name.clone())
            .collect();
        on.sort();
        on
    };
    let mut typed = 0;
    for decl in methods::active(false) {
        // Package-level functions are Python's and Node's; UniFFI has none (its runtime's
        // JSON wrappers cover those methods).
        for member in decl.members.iter().filter(|m| !m.module) {
            let homes = owners(decl.spec.role, member.name);
            assert_eq!(anywhere(member.name), homes, "where {} is", member.name);
            for home in &homes {
                typed += 1;
                let m = on(home, member.name).unwrap_or_else(|| {
                    panic!(
                        "{home}.{} ({}) is not exported",
                        member.name, decl.spec.name
                    )
                });
                let names: Vec<&str> = m.inputs.iter().map(|p| p.name.as_str()).collect();
                let declared: Vec<&str> = member.args.iter().map(|a| a.name).collect();
                assert_eq!(names, declared, "{} arguments", member.name);
                for (param, arg) in m.inputs.iter().zip(member.args) {
                    let want = if arg.optional {
                        Type::Optional {
                            inner_type: Box::new(arg_type(arg.kind)),
                        }
                    } else {
                        arg_type(arg.kind)
                    };
                    assert_eq!(param.ty, want, "{}.{}", member.name, arg.name);
                    let none = Some(DefaultValueMetadata::Literal(LiteralMetadata::None));
                    let default = if arg.optional { none } else { None };
                    assert_eq!(
                        param.default, default,
                        "{}.{} default",
                        member.name, arg.name
                    );
                }
                assert_eq!(
                    m.return_type,
                    return_type(member.returns.kind),
                    "{} returns",
                    member.name
                );
                assert!(
                    matches!(&m.throws, Some(Type::Enum { name, .. }) if name == "CarError"),
                    "{} throws {:?}",
                    member.name,
                    m.throws
                );
            }
        }
    }
    assert!(typed > 30, "only {typed} typed members");
    for decl in methods::active(false) {
        let wrapper = snake_name(decl.spec.name);
        if decl.members.iter().any(|m| m.name == wrapper) {
            continue;
        }
        let homes = owners(decl.spec.role, &wrapper);
        assert_eq!(anywhere(&wrapper), homes, "where {wrapper} is");
        for home in &homes {
            let m = on(home, &wrapper).unwrap_or_else(|| panic!("no wrapper {home}.{wrapper}"));
            let inputs: Vec<(&str, &Type)> =
                m.inputs.iter().map(|p| (p.name.as_str(), &p.ty)).collect();
            assert_eq!(inputs, [("params_json", &Type::String)], "{wrapper}");
            assert_eq!(m.return_type, Some(Type::String), "{wrapper}");
        }
    }
    for debug in methods::all().filter(|d| d.spec.debug) {
        assert!(
            anywhere(&snake_name(debug.spec.name)).is_empty(),
            "{} is exported",
            debug.spec.name
        );
    }
}

#[test]
fn api_docs_list_every_exported_item() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = std::fs::read_to_string(dir.join("API.md")).expect("read API.md");
    // The generated members are listed by the codegen, next to the code it writes.
    docs.push_str(&std::fs::read_to_string(dir.join("MEMBERS.md")).expect("read MEMBERS.md"));
    let lines: Vec<String> = exported_items()
        .into_iter()
        .filter(|i| !docs.contains(&format!("`{}`", i.rust)))
        .map(|i| format!("| `{}` | `{}` | {} |", i.rust, i.foreign, i.kind))
        .collect();
    assert!(
        lines.is_empty(),
        "API.md (or the generated MEMBERS.md: run `cargo xtask codegen`) does not list these exported items; add rows (with a description) for:\n{}",
        lines.join("\n")
    );
}

fn generate(language: &str, out: &Path) -> String {
    let status = Command::new(env!("CARGO_BIN_EXE_uniffi-bindgen"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["generate", "--no-format", "--metadata-no-deps", "--library"])
        .arg(cdylib())
        .args(["--language", language, "--out-dir"])
        .arg(out)
        .status()
        .expect("run uniffi-bindgen");
    assert!(
        status.success(),
        "uniffi-bindgen --language {language} failed"
    );
    let mut text = String::new();
    for entry in walk(out) {
        text.push_str(&std::fs::read_to_string(entry).expect("read generated source"));
    }
    text
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn kotlin_and_swift_sources_mention_every_exported_item() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let items = exported_items();
    for language in ["kotlin", "swift"] {
        let out = scratch.path().join(language);
        let source = generate(language, &out);
        for item in &items {
            // Kotlin renames: `*Error` types become `*Exception`, and the bridge's `close`
            // is `closeClient` (uniffi.toml) because every Kotlin object has `close()`.
            let expected = match (language, item.rust.as_str()) {
                ("kotlin", "CarError") => "CarException".to_string(),
                ("kotlin", "CarDaemonClient.close") => "closeClient".to_string(),
                _ => item.foreign.clone(),
            };
            assert!(
                source.contains(&expected),
                "the generated {language} does not mention {} ({expected})",
                item.rust
            );
        }
    }
}
