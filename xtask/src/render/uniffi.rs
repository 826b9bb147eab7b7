//! The UniFFI library's generated `src/generated.rs`: typed members and JSON-string
//! wrappers as one `#[uniffi::export] impl CarDaemonClient` block and one `impl
//! HostClient` block for the `host` methods (Kotlin and Swift come from uniffi-bindgen).
//!
//! A typed member converts its arguments to JSON values and calls the client's
//! `member_<kind>` helper (`client::MemberCalls`), which runs `car_daemon_client::typed` through
//! the shared client. Optional arguments are `Option<T>` with a `None` default in Kotlin and
//! Swift.

use car_proto::methods::{ArgKind, ReturnKind};

use super::{doc, Members, Surface, Typed, Wrapper, HEADER};

fn rust_arg(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Str | ArgKind::Json => "String",
        ArgKind::Int => "i64",
        ArgKind::Float => "f64",
        ArgKind::Bool => "bool",
        ArgKind::StrList => "Vec<String>",
        ArgKind::IntList => "Vec<i64>",
    }
}

/// The Rust return type of a member and the client helper that produces it.
fn rust_return(kind: ReturnKind) -> (&'static str, &'static str) {
    match kind {
        ReturnKind::Unit => ("()", "member_unit"),
        ReturnKind::Json | ReturnKind::Text => ("String", "member_string"),
        ReturnKind::Int => ("i64", "member_int"),
        ReturnKind::Bool => ("bool", "member_bool"),
        ReturnKind::StrList => ("Vec<String>", "member_str_list"),
    }
}

fn member(t: &Typed) -> String {
    let params: Vec<String> = t
        .member
        .args
        .iter()
        .map(|a| {
            if a.optional {
                format!("{}: Option<{}>", a.name, rust_arg(a.kind))
            } else {
                format!("{}: {}", a.name, rust_arg(a.kind))
            }
        })
        .collect();
    let values: Vec<String> = t
        .member
        .args
        .iter()
        .map(|a| format!("Some({}.into())", a.name))
        .collect();
    let defaults: Vec<String> = t
        .member
        .args
        .iter()
        .filter(|a| a.optional)
        .map(|a| format!("{} = None", a.name))
        .collect();
    let attr = if defaults.is_empty() {
        String::new()
    } else {
        format!("    #[uniffi::method(default({}))]\n", defaults.join(", "))
    };
    let (ret, helper) = rust_return(t.member.returns.kind);
    let mut receiver = vec!["&self".to_string()];
    receiver.extend(params);
    format!(
        "    /// {}\n{attr}    pub fn {}({}) -> Result<{ret}, CarError> {{\n        self.{helper}(\"{}\", \"{}\", vec![{}])\n    }}\n\n",
        doc(t.spec),
        t.member.name,
        receiver.join(", "),
        t.spec.name,
        t.member.name,
        values.join(", "),
    )
}

fn wrapper(w: &Wrapper) -> String {
    let bridge = if w.host() {
        "daemon_call_host_management"
    } else {
        "daemon_call"
    };
    format!(
        "    /// {}\n    pub fn {}(&self, params_json: String) -> Result<String, CarError> {{\n        self.{bridge}(\"{}\".to_string(), params_json)\n    }}\n\n",
        doc(w.spec),
        w.name,
        w.spec.name,
    )
}

/// One `#[uniffi::export] impl` block of `generated.rs`.
fn block(owner: &str, members: &Members) -> String {
    let mut s = format!("\n#[uniffi::export]\nimpl {owner} {{\n");
    for t in &members.typed {
        s.push_str(&member(t));
    }
    for w in &members.wrappers {
        s.push_str(&wrapper(w));
    }
    let trimmed = s.trim_end().to_string();
    format!("{trimmed}\n}}\n")
}

/// `generated.rs`.
pub fn rust(surface: &Surface) -> String {
    let mut s = format!(
        "// {HEADER}\n\n//! CAR's typed members, then one JSON-string wrapper per daemon method whose name no\n//! typed member takes: the `host` methods' on `HostClient`, every other on\n//! `CarDaemonClient`.\n\n#![allow(clippy::too_many_arguments)]\n\nuse crate::client::MemberCalls;\nuse crate::{{CarDaemonClient, CarError, HostClient}};\n"
    );
    s.push_str(&block("CarDaemonClient", &surface.runtime));
    if !(surface.host.typed.is_empty() && surface.host.wrappers.is_empty()) {
        s.push_str(&block("HostClient", &surface.host));
    }
    s
}

fn kotlin_arg(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Str | ArgKind::Json => "String",
        ArgKind::Int => "Long",
        ArgKind::Float => "Double",
        ArgKind::Bool => "Boolean",
        ArgKind::StrList => "List<String>",
        ArgKind::IntList => "List<Long>",
    }
}

fn kotlin_return(kind: ReturnKind) -> &'static str {
    match kind {
        ReturnKind::Unit => "",
        ReturnKind::Json | ReturnKind::Text => ": String",
        ReturnKind::Int => ": Long",
        ReturnKind::Bool => ": Boolean",
        ReturnKind::StrList => ": List<String>",
    }
}

fn summary(spec: &car_proto::methods::MethodSpec) -> String {
    spec.summary.replace('|', "\\|")
}

fn typed_rows(owner: &str, members: &Members) -> String {
    let mut s = String::new();
    for t in &members.typed {
        let params: Vec<String> = t
            .member
            .args
            .iter()
            .map(|a| {
                let name = super::names::lower_camel(a.name);
                if a.optional {
                    format!("{name}: {}? = null", kotlin_arg(a.kind))
                } else {
                    format!("{name}: {}", kotlin_arg(a.kind))
                }
            })
            .collect();
        s.push_str(&format!(
            "| `{owner}.{}` | `{}({}){}` | `{}` | {} | {}. |\n",
            t.member.name,
            super::names::lower_camel(t.member.name),
            params.join(", "),
            kotlin_return(t.member.returns.kind),
            t.spec.name,
            t.spec.role.as_str(),
            summary(t.spec),
        ));
    }
    s
}

fn wrapper_rows(owner: &str, members: &Members) -> String {
    let mut s = String::new();
    for w in &members.wrappers {
        s.push_str(&format!(
            "| `{owner}.{}` | `{}(paramsJson: String): String` | `{}` | {} | {}. |\n",
            w.name,
            super::names::lower_camel(&w.name),
            w.spec.name,
            w.spec.role.as_str(),
            summary(w.spec),
        ));
    }
    s
}

const TABLE_HEAD: &str =
    "| Rust | Kotlin / Swift | Daemon method | Role | Description |\n|---|---|---|---|---|\n";

/// `MEMBERS.md`: every generated method with its Kotlin signature (Swift labels the same
/// arguments), so `API.md` needs no hand-kept list.
pub fn docs(surface: &Surface) -> String {
    let mut s = format!(
        "<!-- {HEADER} -->\n\n# Generated `CarDaemonClient` and `HostClient` members\n\nWritten by `cargo xtask codegen` from the daemon's method contract into\n`src/generated.rs`; `tests/foreign_surface.rs` checks the built library against the same\ncontract. Signatures are Kotlin's (Swift uses the same names as argument labels and\n`Int64`, `Double`, `Bool`, `[String]`). Every member throws `CarError`. The `host`\nmethods' members are `HostClient`'s (host methods stay off `CarDaemonClient`, as CAR keeps\nthem off `CarRuntime`); the few CAR's `CarRuntime` has as well (`removeModel`,\n`agentPermissionsListGrants`, `agentPermissionsRevokeGrant`) are on `CarDaemonClient` too.\n\n## Typed members\n\nCAR's members with typed arguments: optional ones default to `null` / `nil` and are left\nout of the params; JSON arguments (`…Json`) are JSON text. The params are built and the\nresult projected by the shared client (`car_daemon_client::typed`), exactly as for Python and\nNode; a wrong argument throws `InvalidArgument`, a result of the wrong kind\n`UnexpectedResult`. A `host` method's member goes over the host-management connection.\n\n{TABLE_HEAD}"
    );
    s.push_str(&typed_rows("CarDaemonClient", &surface.runtime));
    s.push_str(&format!("\n## JSON-string wrappers\n\nOne per daemon method whose name no typed member takes: `paramsJson` in, the result JSON\nout.\n\n{TABLE_HEAD}"));
    s.push_str(&wrapper_rows("CarDaemonClient", &surface.runtime));
    s.push_str(&format!("\n## `HostClient` members\n\nThe `host` methods, over the host-management connection of the `CarDaemonClient` the\n`HostClient` was made from: typed members, then a JSON-string wrapper for each method whose\nname no typed member takes.\n\n{TABLE_HEAD}"));
    s.push_str(&typed_rows("HostClient", &surface.host));
    s.push_str(&wrapper_rows("HostClient", &surface.host));
    s
}
