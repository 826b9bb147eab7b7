//! The Node package's generated `generated.js` and `generated.d.ts`.
//!
//! `generated.js` holds the typed members and wrappers as methods of two objects:
//! `installGenerated(proto)` copies the runtime's onto `CarRuntime.prototype` (skipping
//! names the class defines by hand) and `installGeneratedHost(proto)` the `host` methods'
//! onto `HostClient.prototype` (see `super` for the placement rule); plus the tables
//! `GENERATED_METHODS` / `TYPED_MEMBERS` and `HOST_GENERATED_METHODS` /
//! `HOST_TYPED_MEMBERS` that tests and tools read. A typed member calls `this[CALL_MEMBER](method,
//! member, [args…])`, which the runtime hands to the native addon (and so to
//! `car_daemon_client::typed`).

use car_proto::methods::{Arg, ArgKind, ReturnKind};
use serde_json::json;

use super::names::lower_camel;
use super::{doc, Members, Surface, Typed, Wrapper, HEADER};

fn ts_arg(kind: ArgKind) -> &'static str {
    match kind {
        ArgKind::Str | ArgKind::Json => "string",
        ArgKind::Int | ArgKind::Float => "number",
        ArgKind::Bool => "boolean",
        ArgKind::StrList => "string[]",
        ArgKind::IntList => "number[]",
    }
}

fn ts_return(kind: ReturnKind) -> &'static str {
    match kind {
        ReturnKind::Unit => "void",
        ReturnKind::Json | ReturnKind::Text => "string",
        ReturnKind::Int => "number",
        ReturnKind::Bool => "boolean",
        ReturnKind::StrList => "string[]",
    }
}

fn kind_name<T: serde::Serialize>(kind: T) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn arg_names(t: &Typed) -> Vec<String> {
    t.member.args.iter().map(|a| lower_camel(a.name)).collect()
}

fn table_row(t: &Typed) -> String {
    let args: Vec<serde_json::Value> = t
        .member
        .args
        .iter()
        .map(|a: &Arg| json!({"name": lower_camel(a.name), "kind": kind_name(a.kind), "optional": a.optional}))
        .collect();
    let mut returns = json!({"kind": kind_name(t.member.returns.kind)});
    if let Some(field) = t.member.returns.field {
        returns["field"] = json!(field);
    }
    let row =
        json!({"method": t.spec.name, "member": t.member.name, "args": args, "returns": returns});
    format!("  {}: {row},\n", lower_camel(t.member.name))
}

fn js_member(t: &Typed) -> String {
    let args = arg_names(t).join(", ");
    format!(
        "  /** {} */\n  async {}({args}) {{\n    return this[CALL_MEMBER]('{}', '{}', [{args}])\n  }},\n",
        doc(t.spec),
        lower_camel(t.member.name),
        t.spec.name,
        t.member.name,
    )
}

fn js_wrapper(w: &Wrapper) -> String {
    let bridge = if w.host() {
        "daemonCallHostManagement"
    } else {
        "daemonCall"
    };
    format!(
        "  /** {} */\n  async {}(paramsJson = '{{}}') {{\n    return this.{bridge}('{}', paramsJson)\n  }},\n",
        doc(w.spec),
        lower_camel(&w.name),
        w.spec.name,
    )
}

const INSTALL: &str = r#"
/**
 * Adds every member of `members` to `proto`, skipping names the prototype already defines
 * by hand (those members take callbacks).
 */
function install(members, proto) {
  for (const name of Object.getOwnPropertyNames(members)) {
    if (Object.prototype.hasOwnProperty.call(proto, name)) continue
    const descriptor = Object.getOwnPropertyDescriptor(members, name)
    Object.defineProperty(proto, name, { ...descriptor, enumerable: false })
  }
}

/** Adds `CarRuntime`'s generated members to `proto`. */
function installGenerated(proto) {
  install(MEMBERS, proto)
}

/** Adds `HostClient`'s generated members (the `host` methods') to `proto`. */
function installGeneratedHost(proto) {
  install(HOST_MEMBERS, proto)
}

module.exports = {
  GENERATED_METHODS,
  TYPED_MEMBERS,
  HOST_GENERATED_METHODS,
  HOST_TYPED_MEMBERS,
  MODULE_FUNCTIONS,
  installGenerated,
  installGeneratedHost,
  moduleFunctions,
}
"#;

/// One class's tables and members object: `{prefix}GENERATED_METHODS`,
/// `{prefix}TYPED_MEMBERS` and `{prefix}MEMBERS`.
fn js_class(members: &Members, prefix: &str, owner: &str) -> String {
    let mut s = format!(
        "\n/** {owner}'s JSON-string wrapper → daemon method. */\nconst {prefix}GENERATED_METHODS = {{\n"
    );
    for w in &members.wrappers {
        s.push_str(&format!("  {}: '{}',\n", lower_camel(&w.name), w.spec.name));
    }
    s.push_str(&format!("}}\n\n/** {owner}'s typed member → its contract: daemon method, CAR's member name, arguments, result. */\nconst {prefix}TYPED_MEMBERS = {{\n"));
    for t in &members.typed {
        s.push_str(&table_row(t));
    }
    s.push_str(&format!("}}\n\n/** The members installed on {owner}: typed members, then JSON-string wrappers. */\nconst {prefix}MEMBERS = {{\n"));
    for t in &members.typed {
        s.push_str(&js_member(t));
    }
    for w in &members.wrappers {
        s.push_str(&js_wrapper(w));
    }
    s.push_str("}\n");
    s
}

/// The package-level functions: `moduleFunctions(open)` returns them, each calling its
/// typed member on a short-lived runtime from `open()` (closed afterwards).
fn js_module(module: &[Typed]) -> String {
    let mut s = String::from(
        "\n/** The package-level functions → daemon method. */\nconst MODULE_FUNCTIONS = {\n",
    );
    for t in module {
        s.push_str(&format!(
            "  {}: '{}',\n",
            lower_camel(t.member.name),
            t.spec.name
        ));
    }
    s.push_str("}\n\n/**\n * CAR's package-level functions, each run on a short-lived runtime from `open()`\n * (discovered as usual) that is closed when the call ends.\n */\nfunction moduleFunctions(open) {\n  const call = async (method, member, args) => {\n    const rt = open()\n    try {\n      return await rt[CALL_MEMBER](method, member, args)\n    } finally {\n      rt.close()\n    }\n  }\n  return {\n");
    for t in module {
        let args = arg_names(t).join(", ");
        s.push_str(&format!(
            "    /** {} */\n    {}: async ({args}) => call('{}', '{}', [{args}]),\n",
            doc(t.spec),
            lower_camel(t.member.name),
            t.spec.name,
            t.member.name
        ));
    }
    s.push_str("  }\n}\n");
    s
}

/// `generated.js`.
pub fn js(surface: &Surface) -> String {
    let mut s = format!(
        "// {HEADER}\n'use strict'\n\nconst {{ CALL_MEMBER }} = require('./lib/typed.js')\n"
    );
    s.push_str(&js_class(&surface.runtime, "", "CarRuntime"));
    s.push_str(&js_class(&surface.host, "HOST_", "HostClient"));
    s.push_str(&js_module(&surface.module));
    s.push_str(INSTALL);
    s
}

fn ts_params(t: &Typed) -> String {
    t.member
        .args
        .iter()
        .map(|a| {
            if a.optional {
                format!("{}?: {} | null", lower_camel(a.name), ts_arg(a.kind))
            } else {
                format!("{}: {}", lower_camel(a.name), ts_arg(a.kind))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

const DTS_TYPES: &str = r#"
/** An argument kind of the contract. */
export type ArgKind = 'str' | 'int' | 'float' | 'bool' | 'str_list' | 'json'
/** A result projection kind of the contract. */
export type ReturnKind = 'unit' | 'json' | 'text' | 'int' | 'bool' | 'str_list'

/** One row of `TYPED_MEMBERS` / `HOST_TYPED_MEMBERS`. */
export interface TypedMemberSpec {
  readonly method: string
  /** CAR's Python name of the member. */
  readonly member: string
  readonly args: ReadonlyArray<{ readonly name: string; readonly kind: ArgKind; readonly optional: boolean }>
  readonly returns: { readonly kind: ReturnKind; readonly field?: string }
}

/** `CarRuntime`'s JSON-string wrapper → daemon method. */
export declare const GENERATED_METHODS: Record<string, string>
/** `CarRuntime`'s typed member → its contract. */
export declare const TYPED_MEMBERS: Record<string, TypedMemberSpec>
/** `HostClient`'s JSON-string wrapper → daemon method. */
export declare const HOST_GENERATED_METHODS: Record<string, string>
/** `HostClient`'s typed member → its contract. */
export declare const HOST_TYPED_MEMBERS: Record<string, TypedMemberSpec>
"#;

/// One interface of `generated.d.ts`.
fn dts_interface(name: &str, doc_text: &str, members: &Members) -> String {
    let mut s = format!("\n/** {doc_text} */\nexport interface {name} {{\n");
    for t in &members.typed {
        s.push_str(&format!(
            "  /** {} */\n  {}({}): Promise<{}>\n",
            doc(t.spec),
            lower_camel(t.member.name),
            ts_params(t),
            ts_return(t.member.returns.kind)
        ));
    }
    for w in &members.wrappers {
        s.push_str(&format!(
            "  /** {} */\n  {}(paramsJson?: string): Promise<string>\n",
            doc(w.spec),
            lower_camel(&w.name)
        ));
    }
    s.push_str("}\n");
    s
}

/// `generated.d.ts`.
pub fn dts(surface: &Surface) -> String {
    let mut s = format!("// {HEADER}\n");
    s.push_str(&dts_interface(
        "GeneratedMethods",
        "`CarRuntime`'s generated members (every method but the `host` ones, of which only those CAR's `CarRuntime` has): CAR's typed members, then a JSON-string wrapper for each method whose name no typed or hand-written member takes.",
        &surface.runtime,
    ));
    s.push_str(&dts_interface(
        "GeneratedHostMethods",
        "`HostClient`'s generated members (the `host` methods, over the host-management connection): typed members, then a JSON-string wrapper for each method whose name no typed member takes.",
        &surface.host,
    ));
    s.push_str(DTS_TYPES);
    s.push_str("\n/** The package-level functions → daemon method. */\nexport declare const MODULE_FUNCTIONS: Record<string, string>\n");
    for t in &surface.module {
        s.push_str(&format!(
            "/** {} */\nexport declare function {}({}): Promise<{}>\n",
            doc(t.spec),
            lower_camel(t.member.name),
            ts_params(t),
            ts_return(t.member.returns.kind)
        ));
    }
    s
}
