//! The Python package's generated module `car_runtime/_generated.py` and its stub
//! `_generated.pyi`: a `GeneratedMethods` mixin that `CarRuntime` inherits.
//!
//! A typed member calls `self._call_member(method, member, [args…])`, which the runtime
//! hands to the native module (and so to `car_daemon_client::typed`): the member's code here
//! is only its signature. A JSON-string wrapper calls `daemon_call` (or
//! `daemon_call_host_management` for `host` methods).

use car_proto::methods::{Arg, ArgKind, ReturnKind};

use super::{doc, Surface, Typed, Wrapper, HEADER};

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
    let mut params = vec!["self".to_string()];
    params.extend(t.member.args.iter().map(param));
    let ret = return_type(t.member.returns.kind);
    let one_line = format!("    def {}({}) -> {ret}:", t.member.name, params.join(", "));
    if one_line.len() <= 100 {
        return one_line;
    }
    let mut s = format!("    def {}(\n", t.member.name);
    for p in params {
        s.push_str(&format!("        {p},\n"));
    }
    s.push_str(&format!("    ) -> {ret}:"));
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

    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str:
        raise NotImplementedError  # pragma: no cover - CarRuntime provides it

    def _call_member(self, method: str, member: str, args: List[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - CarRuntime provides it
"#;

const BRIDGE_STUB: &str = r#"    def daemon_call(
        self, method: str, params_json: str = "{}", *, timeout: Optional[float] = None
    ) -> str: ...
    def daemon_call_host_management(self, method: str, params_json: str = "{}") -> str: ...
    def _call_member(self, method: str, member: str, args: List[Any]) -> Any: ...
"#;

const CLASS_DOC: &str = "    \"\"\"Every daemon method: CAR's typed members, then a JSON-string wrapper for each\n    method whose name no typed or hand-written member takes. `CarRuntime` inherits them.\"\"\"\n";

fn tables(surface: &Surface, stub: bool) -> String {
    if stub {
        return "GENERATED_METHODS: Dict[str, str]\nTYPED_MEMBERS: Dict[str, str]\n".into();
    }
    let mut s = String::from(
        "\n\n# JSON-string wrapper → daemon method.\nGENERATED_METHODS: Dict[str, str] = {\n",
    );
    for w in &surface.wrappers {
        s.push_str(&format!("    \"{}\": \"{}\",\n", w.name, w.spec.name));
    }
    s.push_str("}\n\n# Typed member → daemon method.\nTYPED_MEMBERS: Dict[str, str] = {\n");
    for t in &surface.typed {
        s.push_str(&format!(
            "    \"{}\": \"{}\",\n",
            t.member.name, t.spec.name
        ));
    }
    s.push_str("}\n");
    s
}

/// `_generated.py`.
pub fn module(surface: &Surface) -> String {
    let mut s = format!(
        "# {HEADER}\n\"\"\"CAR's typed members and the JSON-string wrappers, one per daemon method.\"\"\"\n\n{PREAMBLE}\n\nclass GeneratedMethods:\n{CLASS_DOC}\n{BRIDGE}"
    );
    for t in &surface.typed {
        s.push_str(&format!(
            "\n{}\n        \"\"\"{}\"\"\"\n{}",
            signature(t),
            doc(t.spec),
            member_body(t)
        ));
    }
    for w in &surface.wrappers {
        s.push_str(&format!(
            "\n{}\n        \"\"\"{}\"\"\"\n{}",
            wrapper_signature(w),
            doc(w.spec),
            wrapper_body(w)
        ));
    }
    s.push_str(&tables(surface, false));
    s
}

/// `_generated.pyi`.
pub fn stub(surface: &Surface) -> String {
    let mut s = format!("# {HEADER}\n{STUB_PREAMBLE}\nclass GeneratedMethods:\n{BRIDGE_STUB}");
    for t in &surface.typed {
        s.push_str(&format!("{} ...\n", signature(t)));
    }
    for w in &surface.wrappers {
        s.push_str(&format!("{} ...\n", wrapper_signature(w)));
    }
    s.push('\n');
    s.push_str(&tables(surface, true));
    s
}
