//! The Python package's generated module `car_runtime/_generated.py` and its stub
//! `_generated.pyi`: a `GeneratedMethods` mixin that `CarRuntime` inherits and a
//! `GeneratedHostMethods` mixin that `HostClient` inherits (see `super` for which class
//! gets which member).
//!
//! A typed member calls `self._call_member(method, member, [args…])`, which the runtime
//! hands to the native module (and so to `car_daemon_client::typed`): the member's code here
//! is only its signature. A JSON-string wrapper calls `daemon_call` (on the
//! runtime) or `daemon_call_host_management` (on `HostClient`, for `host` methods).

use car_proto::methods::{Arg, ArgKind, ReturnKind};

use super::{doc, Members, Surface, Typed, Wrapper, HEADER};

fn arg_type(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Str | ArgKind::Json => "str",
        ArgKind::Int => "int",
        ArgKind::Float => "float",
        ArgKind::Bool => "bool",
        ArgKind::StrList => "List[str]",
        ArgKind::IntList => "List[int]",
    }
}

/// The annotation of a member's return value.
pub fn return_type(kind: ReturnKind) -> &'static str {
    match kind {
        ReturnKind::Unit => "None",
        ReturnKind::Json | ReturnKind::Text => "str",
        ReturnKind::Int => "int",
        ReturnKind::Bool => "bool",
        ReturnKind::StrList => "List[str]",
    }
}

fn param(arg: &Arg) -> String {
    if arg.optional {
        format!("{}: Optional[{}] = None", arg.name, arg_type(arg.kind))
    } else {
        format!("{}: {}", arg.name, arg_type(arg.kind))
    }
}

fn signature(t: &Typed) -> String {
    signature_in(t, "    ", true)
}

/// A `def` line at `indent`, with `self` first for a method.
fn signature_in(t: &Typed, indent: &str, method: bool) -> String {
    let mut params: Vec<String> = if method {
        vec!["self".to_string()]
    } else {
        vec![]
    };
    params.extend(t.member.args.iter().map(param));
    let ret = return_type(t.member.returns.kind);
    let one_line = format!(
        "{indent}def {}({}) -> {ret}:",
        t.member.name,
        params.join(", ")
    );
    if one_line.len() <= 100 {
        return one_line;
    }
    let mut s = format!("{indent}def {}(\n", t.member.name);
    for p in params {
        s.push_str(&format!("{indent}    {p},\n"));
    }
    s.push_str(&format!("{indent}) -> {ret}:"));
    s
}

const MODULE_CALL: &str = r#"

def _module_call(method: str, member: str, args: List[Any]) -> Any:
    """What every package-level function calls: a short-lived `CarRuntime` (discovered as
    usual) runs the typed member; `host` methods go over its host-management connection."""
    from ._runtime import CarRuntime

    with CarRuntime() as rt:
        return rt._call_member(method, member, args)
"#;

/// The package-level functions of `_generated.py` (re-exported by the package).
fn module_functions(module: &[Typed]) -> String {
    let mut s = String::from(MODULE_CALL);
    for t in module {
        let args: Vec<&str> = t.member.args.iter().map(|a| a.name).collect();
        s.push_str(&format!(
            "\n\n{}\n    \"\"\"{}\"\"\"\n    return cast({}, _module_call(\"{}\", \"{}\", [{}]))\n",
            signature_in(t, "", false),
            doc(t.spec),
            return_type(t.member.returns.kind),
            t.spec.name,
            t.member.name,
            args.join(", ")
        ));
    }
    s.push_str("\n\n# The package-level functions (re-exported by `car_runtime`) → daemon method.\nMODULE_FUNCTIONS: Dict[str, str] = {\n");
    for t in module {
        s.push_str(&format!(
            "    \"{}\": \"{}\",\n",
            t.member.name, t.spec.name
        ));
    }
    s.push_str("}\n");
    s.push_str(&all_list(module));
    s
}

/// `__all__`: the package-level functions, spelled out (so `from ._generated import *`
/// re-exports exactly them and type checkers see it).
fn all_list(module: &[Typed]) -> String {
    let mut s = String::from("\n__all__ = [\n");
    for t in module {
        s.push_str(&format!("    \"{}\",\n", t.member.name));
    }
    s.push_str("]\n");
    s
}

fn module_stubs(module: &[Typed]) -> String {
    let mut s = String::from("\n");
    for t in module {
        s.push_str(&format!("{} ...\n", signature_in(t, "", false)));
    }
    s.push_str("\nMODULE_FUNCTIONS: Dict[str, str]\n");
    s.push_str(&all_list(module));
    s
}

fn member_body(t: &Typed) -> String {
    let args: Vec<&str> = t.member.args.iter().map(|a| a.name).collect();
    let call = format!(
        "self._call_member(\"{}\", \"{}\", [{}])",
        t.spec.name,
        t.member.name,
        args.join(", ")
    );
    match t.member.returns.kind {
        ReturnKind::Unit => format!("        {call}\n"),
        kind => format!("        return cast({}, {call})\n", return_type(kind)),
    }
}

fn wrapper_signature(w: &Wrapper) -> String {
    format!(
        "    def {}(self, params_json: str = \"{{}}\") -> str:",
        w.name
    )
}

fn wrapper_body(w: &Wrapper) -> String {
    let bridge = if w.host() {
        "daemon_call_host_management"
    } else {
        "daemon_call"
    };
    format!(
        "        return self.{bridge}(\"{}\", params_json)\n",
        w.spec.name
    )
}

const PREAMBLE: &str = r#"from __future__ import annotations

from typing import Any, Dict, List, Optional, cast
"#;

const STUB_PREAMBLE: &str = r#"from __future__ import annotations

from typing import Any, Dict, List, Optional
"#;

const BRIDGE: &str = r#"    def daemon_call(
        self, method: str, params_json: str = "{}", *, timeout: Optional[float] = None
    ) -> str:
        raise NotImplementedError  # pragma: no cover - CarRuntime provides it

    def _call_member(self, method: str, member: str, args: List[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - CarRuntime provides it
"#;

const HOST_BRIDGE: &str = r#"    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str:
        raise NotImplementedError  # pragma: no cover - HostClient provides it

    def _call_member(self, method: str, member: str, args: List[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - HostClient provides it
"#;

const BRIDGE_STUB: &str = r#"    def daemon_call(
        self, method: str, params_json: str = "{}", *, timeout: Optional[float] = None
    ) -> str: ...
    def _call_member(self, method: str, member: str, args: List[Any]) -> Any: ...
"#;

const HOST_BRIDGE_STUB: &str = r#"    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str: ...
    def _call_member(self, method: str, member: str, args: List[Any]) -> Any: ...
"#;

const CLASS_DOC: &str = "    \"\"\"Every daemon method but the `host` ones (of those, only what CAR's `CarRuntime` has):\n    CAR's typed members, then a JSON-string wrapper for each method whose name no typed or\n    hand-written member takes. `CarRuntime` inherits them.\"\"\"\n";

const HOST_CLASS_DOC: &str = "    \"\"\"Every `host` method (host methods stay off `CarRuntime`): its typed members, then a\n    JSON-string wrapper for each method whose name no typed member takes, all over the\n    host-management connection. `HostClient` inherits them.\"\"\"\n";

/// One class's tables: wrapper → method and typed member → method.
fn tables(members: &Members, prefix: &str, stub: bool) -> String {
    if stub {
        return format!(
            "{prefix}GENERATED_METHODS: Dict[str, str]\n{prefix}TYPED_MEMBERS: Dict[str, str]\n"
        );
    }
    let owner = if prefix.is_empty() {
        "CarRuntime"
    } else {
        "HostClient"
    };
    let mut s = format!(
        "\n\n# {owner}'s JSON-string wrapper → daemon method.\n{prefix}GENERATED_METHODS: Dict[str, str] = {{\n"
    );
    for w in &members.wrappers {
        s.push_str(&format!("    \"{}\": \"{}\",\n", w.name, w.spec.name));
    }
    s.push_str(&format!(
        "}}\n\n# {owner}'s typed member → daemon method.\n{prefix}TYPED_MEMBERS: Dict[str, str] = {{\n"
    ));
    for t in &members.typed {
        s.push_str(&format!(
            "    \"{}\": \"{}\",\n",
            t.member.name, t.spec.name
        ));
    }
    s.push_str("}\n");
    s
}

/// One class of `_generated.py`.
fn class(name: &str, doc_text: &str, bridge: &str, members: &Members) -> String {
    let mut s = format!("\n\nclass {name}:\n{doc_text}\n{bridge}");
    for t in &members.typed {
        s.push_str(&format!(
            "\n{}\n        \"\"\"{}\"\"\"\n{}",
            signature(t),
            doc(t.spec),
            member_body(t)
        ));
    }
    for w in &members.wrappers {
        s.push_str(&format!(
            "\n{}\n        \"\"\"{}\"\"\"\n{}",
            wrapper_signature(w),
            doc(w.spec),
            wrapper_body(w)
        ));
    }
    s
}

/// One class of `_generated.pyi`.
fn stub_class(name: &str, bridge: &str, members: &Members) -> String {
    let mut s = format!("\nclass {name}:\n{bridge}");
    for t in &members.typed {
        s.push_str(&format!("{} ...\n", signature(t)));
    }
    for w in &members.wrappers {
        s.push_str(&format!("{} ...\n", wrapper_signature(w)));
    }
    s
}

/// `_generated.py`.
pub fn module(surface: &Surface) -> String {
    let mut s = format!(
        "# {HEADER}\n\"\"\"CAR's typed members and the JSON-string wrappers, one per daemon method:\n`GeneratedMethods` for `CarRuntime`, `GeneratedHostMethods` for `HostClient`.\"\"\"\n\n{PREAMBLE}"
    );
    s.push_str(&class(
        "GeneratedMethods",
        CLASS_DOC,
        BRIDGE,
        &surface.runtime,
    ));
    s.push_str(&class(
        "GeneratedHostMethods",
        HOST_CLASS_DOC,
        HOST_BRIDGE,
        &surface.host,
    ));
    s.push_str(&tables(&surface.runtime, "", false));
    s.push_str(&tables(&surface.host, "HOST_", false));
    s.push_str(&module_functions(&surface.module));
    s
}

/// `_generated.pyi`.
pub fn stub(surface: &Surface) -> String {
    let mut s = format!("# {HEADER}\n{STUB_PREAMBLE}");
    s.push_str(&stub_class(
        "GeneratedMethods",
        BRIDGE_STUB,
        &surface.runtime,
    ));
    s.push_str(&stub_class(
        "GeneratedHostMethods",
        HOST_BRIDGE_STUB,
        &surface.host,
    ));
    s.push('\n');
    s.push_str(&tables(&surface.runtime, "", true));
    s.push_str(&tables(&surface.host, "HOST_", true));
    s.push_str(&module_stubs(&surface.module));
    s
}
