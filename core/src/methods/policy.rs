//! `policy.*`: the connection's policies, checked before every action attempt.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name};
use super::member::{field, member, opt, opt_at, req, unit, ArgKind::*, ReturnKind};
use super::{op, Declaration};

/// CAR's `PolicyDefinition`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyDefinition {
    pub name: Name,
    /// `deny_tool`, `deny_tool_param` or `require_state`.
    pub rule: String,
    #[serde(default)]
    pub target: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub pattern: Option<String>,
    #[serde(default)]
    pub value: Option<Json>,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// `"global"` or `{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Scope {
    Global(String),
    Session { session_id: String },
}

impl Scope {
    pub fn of(session_id: Option<&str>) -> Self {
        match session_id {
            Some(id) => Scope::Session {
                session_id: id.to_string(),
            },
            None => Scope::Global("global".into()),
        }
    }
}

/// `policy.register` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterReply {
    pub registered: String,
    pub scope: Scope,
}

/// `policy.unregister` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnregisterParams {
    pub name: Name,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// `policy.unregister` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnregisterReply {
    pub unregistered: String,
    pub removed: u64,
    pub scope: Scope,
}

/// `policy.list` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ListParams {
    #[serde(default)]
    pub session_id: Option<String>,
}

/// One policy as listed.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicySummary {
    pub name: String,
    pub description: String,
}

/// `policy.list` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    /// In registration order.
    pub policies: Vec<PolicySummary>,
    pub scope: Scope,
}

crate::method!(
    /// `policy.register` → `{registered, scope}`.
    Register = op("policy.register", "add a deny_tool, deny_tool_param, require_state or deny_connector policy");
    access: Access::daemon();
    PolicyDefinition => RegisterReply;
    member("register_policy", &[req("name", Str), req("rule", Str), opt("target", Str), opt("key", Str), opt("pattern", Str), opt_at("value_json", "value", Json), opt("session_id", Str)], unit())
);
crate::method!(
    /// `policy.unregister` → `{unregistered, removed, scope}`.
    Unregister = op("policy.unregister", "remove every policy registered under a name");
    access: Access::daemon();
    UnregisterParams => UnregisterReply;
    member("unregister_policy", &[req("name", Str)], field("removed", ReturnKind::Int))
);
crate::method!(
    /// `policy.list` → `{policies, scope}`.
    List = op("policy.list", "the policies in force, in registration order");
    access: Access::daemon();
    ListParams => ListReply;
    member("list_policies", &[], field("policies", ReturnKind::Json))
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Register>(),
    Declaration::of::<Unregister>(),
    Declaration::of::<List>(),
];
