//! Typed binding members: how a method appears in the Python, Node and UniFFI packages
//! beside its JSON-string wrapper.
//!
//! A [`Member`] names the member (CAR's Python name; Node and Kotlin/Swift use its
//! lowerCamelCase), lists its arguments in order, says where in the params each argument
//! goes, and how the result is projected back to the caller. The codegen
//! (`cargo xtask codegen`) renders it for every binding, so the three packages'
//! typed members agree by construction.

use serde::Serialize;

/// How a member argument is typed in the host language and encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// A string.
    Str,
    /// An integer.
    Int,
    /// A floating-point number.
    Float,
    /// A boolean.
    Bool,
    /// A list of strings.
    StrList,
    /// A list of integers.
    IntList,
    /// JSON text supplied by the caller, parsed and placed as a JSON value.
    Json,
}

/// One member argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Arg {
    /// The argument's name in Python (snake_case; Node and Kotlin use lowerCamelCase).
    pub name: &'static str,
    /// Where the value goes in params: a dotted path (`params.max_tokens`), or `""` for a
    /// [`ArgKind::Json`] argument that is the whole params object.
    pub field: &'static str,
    pub kind: ArgKind,
    /// Optional arguments default to absent (`None` / `undefined` / `null`) and are left
    /// out of the params when absent.
    pub optional: bool,
    /// Further fields the same value is placed at (CAR's `infer_with_context` sends its
    /// prompt as both `prompt` and `context_query`).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub also: &'static [&'static str],
}

impl Arg {
    /// The same argument, also placed at `fields`.
    pub const fn also(mut self, fields: &'static [&'static str]) -> Self {
        self.also = fields;
        self
    }
}

/// What a member returns to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnKind {
    /// Nothing (the result is checked to exist and discarded).
    Unit,
    /// The value as JSON text.
    Json,
    /// The value, which must be a string, as is.
    Text,
    /// The value, which must be an integer.
    Int,
    /// The value, which must be a boolean.
    Bool,
    /// The value, which must be a list of strings.
    StrList,
}

/// The result projection: a field of the result (or the whole result) and its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Returns {
    /// A top-level field of the result object, or `None` for the whole result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
    pub kind: ReturnKind,
}

/// A typed member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Member {
    /// CAR's Python name (`add_fact`); Node and Kotlin use lowerCamelCase (`addFact`).
    pub name: &'static str,
    pub args: &'static [Arg],
    pub returns: Returns,
    /// A package-level function (CAR's module-level `agents_start(id)`,
    /// `schedule_task(spec_json)`, …) rather than a runtime member: the Python and Node
    /// packages render it as a function that opens a short-lived runtime for the call
    /// (UniFFI has no package-level functions; its runtime's JSON wrappers cover them).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub module: bool,
}

/// A typed member named `name`.
pub const fn member(name: &'static str, args: &'static [Arg], returns: Returns) -> Member {
    Member {
        name,
        args,
        returns,
        module: false,
    }
}

/// A package-level function named `name` (see [`Member::module`]).
pub const fn module_fn(name: &'static str, args: &'static [Arg], returns: Returns) -> Member {
    Member {
        name,
        args,
        returns,
        module: true,
    }
}

/// A required argument stored under its own name.
pub const fn req(name: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        field: name,
        kind,
        optional: false,
        also: &[],
    }
}

/// A required argument stored at `field`.
pub const fn req_at(name: &'static str, field: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        field,
        kind,
        optional: false,
        also: &[],
    }
}

/// An optional argument stored under its own name.
pub const fn opt(name: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        field: name,
        kind,
        optional: true,
        also: &[],
    }
}

/// An optional argument stored at `field`.
pub const fn opt_at(name: &'static str, field: &'static str, kind: ArgKind) -> Arg {
    Arg {
        name,
        field,
        kind,
        optional: true,
        also: &[],
    }
}

/// A JSON-text argument that is the whole params object (`runs_start(params_json)`).
pub const fn whole(name: &'static str) -> Arg {
    Arg {
        name,
        field: "",
        kind: ArgKind::Json,
        optional: false,
        also: &[],
    }
}

const fn returns(field: Option<&'static str>, kind: ReturnKind) -> Returns {
    Returns { field, kind }
}

/// Returns nothing.
pub const fn unit() -> Returns {
    returns(None, ReturnKind::Unit)
}
/// Returns the result as JSON text.
pub const fn json() -> Returns {
    returns(None, ReturnKind::Json)
}
/// Returns the result string.
pub const fn text() -> Returns {
    returns(None, ReturnKind::Text)
}
/// Returns the result integer.
pub const fn int() -> Returns {
    returns(None, ReturnKind::Int)
}
/// Returns the result boolean.
pub const fn boolean() -> Returns {
    returns(None, ReturnKind::Bool)
}
/// Returns the result list of strings.
pub const fn str_list() -> Returns {
    returns(None, ReturnKind::StrList)
}
/// Returns one field of the result with `kind`.
pub const fn field(name: &'static str, kind: ReturnKind) -> Returns {
    returns(Some(name), kind)
}
