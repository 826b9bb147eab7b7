//! **The method contract**: every daemon method, declared once, with typed params and
//! result.
//!
//! A method is a unit struct implementing [`Method`]: its [`MethodSpec`] (name, CAR's role
//! label, capability gate, handshake gate, deadline class, summary), its `Params` and
//! `Result` types (serde + `schemars`), and, where a binding has a typed member for it, the
//! [`Member`] that describes that member's name, arguments and result projection.
//! Declarations are grouped by namespace (`methods/<ns>.rs`); each namespace module lists its
//! declarations in one `DECLARATIONS` slice, and [`NAMESPACES`] lists the namespaces.
//!
//! From the declarations:
//! - the daemon decodes params into the declared type before the handler runs ([`decode_params`]:
//!   unknown fields ignored, `null` = absent, a wrong type is `-32602` naming the field path) and
//!   routes to the typed handler each service registers;
//! - `capabilities.list` and `server.schema` (params and result JSON Schema per method, see
//!   [`crate::schema`]) are generated;
//! - the client derives each call's timeout from the deadline class;
//! - `cargo xtask codegen` writes every binding's wrappers and typed members.
//!
//! Each declaration also states its access rule ([`Access`]: owner scope, observer
//! read, default approval gate, consumer-grantable, reserved param values); dispatch
//! enforces it before any handler, and the daemon's access-matrix test is generated from
//! it. A `method!` without an `access:` line does not compile.
//!
//! A method that is not declared does not exist (`-32601`). Declarations marked
//! [`MethodSpec::debug`] exist only on a daemon started with `--debug-methods`.

mod member;
mod spec;

pub mod agent_messages;
pub mod agent_permissions;
pub mod agent_supervisor;
pub mod agents;
pub mod connectors;
pub mod debug;
pub mod declagents;
pub mod events;
pub mod fields;
pub mod goal;
pub mod host;
pub mod inference;
pub mod memory;
pub mod memory_proactive;
pub mod models;
pub mod multi;
pub mod outcomes;
pub mod permission;
pub mod policy;
pub mod proposal;
pub mod proposal_checks;
pub mod replan;
pub mod runs;
pub mod scheduler;
pub mod secret;
pub mod server;
pub mod session;
pub mod skills;
pub mod state;
pub mod supervision;
pub mod tools;
pub mod workflow;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::errors::RpcError;

pub use member::{
    boolean, field, int, json, member, module_fn, opt, opt_at, req, req_at, str_list, text, unit,
    whole, Arg, ArgKind, Member, ReturnKind, Returns,
};
pub use spec::{
    agent, host, op, owner, Access, CallerRole, DeadlineClass, MethodSpec, Reserved, Resource,
    Role, Scope,
};

/// One daemon method: the single declaration dispatch, schema, client timeouts and the
/// bindings are derived from.
pub trait Method: 'static {
    /// Name, role, gates, deadline class and summary.
    const SPEC: MethodSpec;
    /// The typed members bindings generate for this method (CAR's names; often one, some
    /// methods have several, e.g. `infer` / `infer_tracked`).
    const MEMBERS: &'static [Member] = &[];
    /// What `params` decodes to. `null` or absent params decode as `{}`.
    type Params: DeserializeOwned + JsonSchema + Send + 'static;
    /// What the handler answers.
    type Result: Serialize + JsonSchema + Send + 'static;
}

/// A method's declaration with its types erased, so declarations can be listed.
#[derive(Clone, Copy)]
pub struct Declaration {
    pub spec: MethodSpec,
    pub members: &'static [Member],
    params_schema: fn(&mut SchemaGenerator) -> Schema,
    result_schema: fn(&mut SchemaGenerator) -> Schema,
    check_params: fn(Value) -> Result<(), RpcError>,
}

impl std::fmt::Debug for Declaration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declaration")
            .field("spec", &self.spec)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

fn check_params_of<T: DeserializeOwned>(params: Value) -> Result<(), RpcError> {
    decode_params::<T>(params).map(drop)
}

impl Declaration {
    /// The declaration of method `M`.
    pub const fn of<M: Method>() -> Self {
        Declaration {
            spec: M::SPEC,
            members: M::MEMBERS,
            params_schema: schema_of::<M::Params>,
            result_schema: schema_of::<M::Result>,
            check_params: check_params_of::<M::Params>,
        }
    }

    /// Decodes `params` into this method's params type and drops the value: what dispatch
    /// would answer for them before any handler runs (fuzzing and contract tests).
    pub fn check_params(&self, params: Value) -> Result<(), RpcError> {
        (self.check_params)(params)
    }

    pub fn name(&self) -> &'static str {
        self.spec.name
    }

    /// The params JSON Schema (references resolve into `generator`'s definitions).
    pub fn params_schema(&self, generator: &mut SchemaGenerator) -> Schema {
        (self.params_schema)(generator)
    }

    /// The result JSON Schema (references resolve into `generator`'s definitions).
    pub fn result_schema(&self, generator: &mut SchemaGenerator) -> Schema {
        (self.result_schema)(generator)
    }
}

/// Every namespace's declarations. Adding a namespace adds one line here; adding a method
/// touches only its namespace module.
pub const NAMESPACES: &[&[Declaration]] = &[
    server::DECLARATIONS,
    session::DECLARATIONS,
    state::DECLARATIONS,
    memory::DECLARATIONS,
    memory_proactive::DECLARATIONS,
    skills::DECLARATIONS,
    tools::DECLARATIONS,
    policy::DECLARATIONS,
    proposal::DECLARATIONS,
    proposal_checks::DECLARATIONS,
    events::DECLARATIONS,
    runs::DECLARATIONS,
    inference::DECLARATIONS,
    inference::runner::DECLARATIONS,
    models::DECLARATIONS,
    outcomes::DECLARATIONS,
    host::DECLARATIONS,
    agents::DECLARATIONS,
    permission::DECLARATIONS,
    agent_permissions::DECLARATIONS,
    supervision::DECLARATIONS,
    multi::DECLARATIONS,
    agent_supervisor::DECLARATIONS,
    agent_messages::DECLARATIONS,
    workflow::DECLARATIONS,
    scheduler::DECLARATIONS,
    secret::DECLARATIONS,
    connectors::DECLARATIONS,
    declagents::DECLARATIONS,
    goal::DECLARATIONS,
    replan::DECLARATIONS,
    debug::DECLARATIONS,
];

static BY_NAME: LazyLock<BTreeMap<&'static str, &'static Declaration>> = LazyLock::new(|| {
    let mut map = BTreeMap::new();
    for decl in NAMESPACES.iter().flat_map(|ns| ns.iter()) {
        let previous = map.insert(decl.spec.name, decl);
        assert!(
            previous.is_none(),
            "method {} is declared twice",
            decl.spec.name
        );
    }
    map
});

/// Every declaration, sorted by method name.
pub fn all() -> impl Iterator<Item = &'static Declaration> {
    BY_NAME.values().copied()
}

/// The declarations a daemon serves, sorted by name: all of them with `debug`, else the
/// non-debug ones.
pub fn active(debug: bool) -> impl Iterator<Item = &'static Declaration> {
    all().filter(move |d| debug || !d.spec.debug)
}

/// Looks a method up among all declarations (callers check [`MethodSpec::debug`]).
pub fn lookup(name: &str) -> Option<&'static Declaration> {
    BY_NAME.get(name).copied()
}

/// The methods the dashboard's observer session may call (declared `.observer()`).
pub fn observer_methods() -> impl Iterator<Item = &'static Declaration> {
    all().filter(|d| d.spec.access.observer)
}

/// The methods the approval gate holds by default (declared `.gated()`).
pub fn gated_methods() -> impl Iterator<Item = &'static Declaration> {
    all().filter(|d| d.spec.access.gated)
}

/// The methods a consumer grant may carry (declared `.grantable()`).
pub fn grantable_methods() -> impl Iterator<Item = &'static Declaration> {
    all().filter(|d| d.spec.access.grantable)
}

/// The capability names the gates refer to must be ones the daemon supports.
pub fn gates_are_supported() -> bool {
    all()
        .filter_map(|d| d.spec.capability)
        .all(crate::capabilities::is_supported)
}

/// Decodes a request's `params` into `T`.
///
/// The rules: absent or `null` params are `{}`; unknown fields are ignored (a newer client
/// may send fields this daemon does not know); `null` for an optional field is absent; a
/// known field of the wrong type or value is `-32602 invalid params: <path>: <problem>`,
/// with the path to the field (`actions[2].tool`).
pub fn decode_params<T: DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    decode_at(params, "")
}

/// Decodes `value`, one element of a request at path `at` (`proposal.actions[3]`; empty for
/// the params themselves), into `T` with [`decode_params`]'s messages, the path prefixed.
pub fn decode_at<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, RpcError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let full = match (at, path.as_str()) {
            ("", ".") => "params".to_string(),
            ("", p) => p.to_string(),
            (at, ".") => at.to_string(),
            (at, p) if p.starts_with('[') => format!("{at}{p}"),
            (at, p) => format!("{at}.{p}"),
        };
        RpcError::invalid_params(format!("{full}: {inner}"))
    })
}

/// Whether `T`'s JSON Schema admits an array (`true`, `type: "array"`, or an `anyOf` /
/// `oneOf` branch that does, following `$ref`s).
pub fn accepts_array<T: JsonSchema>() -> bool {
    fn admits(schema: &Value, root: &Value, depth: usize) -> bool {
        if depth > 16 {
            return false;
        }
        match schema {
            Value::Bool(b) => *b,
            Value::Object(o) => {
                if o.is_empty() {
                    return true;
                }
                if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                    let target = r
                        .strip_prefix("#/$defs/")
                        .and_then(|name| root.get("$defs").and_then(|d| d.get(name)));
                    return target.is_some_and(|t| admits(t, root, depth + 1));
                }
                let typed = match o.get("type") {
                    Some(Value::String(t)) => t == "array",
                    Some(Value::Array(ts)) => ts.iter().any(|t| t == "array"),
                    _ => false,
                };
                typed
                    || ["anyOf", "oneOf"].iter().any(|k| {
                        o.get(*k)
                            .and_then(Value::as_array)
                            .is_some_and(|bs| bs.iter().any(|b| admits(b, root, depth + 1)))
                    })
                    || (o.get("type").is_none()
                        && !o.contains_key("anyOf")
                        && !o.contains_key("oneOf")
                        && !o.contains_key("properties"))
            }
            _ => false,
        }
    }
    let root = schemars::schema_for!(T).to_value();
    admits(&root, &root, 0)
}

/// Declares one method: a unit struct implementing [`Method`].
///
/// ```text
/// method!(
///     /// `state.get`
///     Get = op("state.get", "a state value, or null");
///     KeyParams => Value;
///     member("state_get", &[req("key", Str), opt_at("tenant", "tenant_id", Str)], json())
/// );
/// ```
#[macro_export]
macro_rules! method {
    ($(#[$meta:meta])* $name:ident = $spec:expr; access: $access:expr; $params:ty => $result:ty $(; $($member:expr),+)? $(;)?) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;
        impl $crate::methods::Method for $name {
            const SPEC: $crate::methods::MethodSpec = $spec.with_access($access);
            $(const MEMBERS: &'static [$crate::methods::Member] = &[$($member),+];)?
            type Params = $params;
            type Result = $result;
        }
    };
}

#[cfg(test)]
mod tests;
