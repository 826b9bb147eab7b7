//! `tools.*`: the connection's tool registry. Tools registered here are called back on
//! the registering connection (`tools.execute`) when a proposal runs them.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams, OneOrMany};
use super::member::{field, member, req, unit, whole, ArgKind::*, ReturnKind};
use super::{op, Declaration};

/// CAR's `ToolDefinition`: what a caller may set.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ToolDefinition {
    pub name: Name,
    #[serde(default)]
    pub description: Option<String>,
    /// The tool's parameters as a JSON Schema object.
    #[serde(default)]
    pub parameters: Option<serde_json::Map<String, Json>>,
    #[serde(default)]
    pub returns: Option<serde_json::Map<String, Json>>,
    #[serde(default)]
    pub idempotent: Option<bool>,
    #[serde(default)]
    pub cache_ttl_secs: Option<u64>,
    #[serde(default)]
    pub rate_limit: Option<Json>,
}

/// CAR's `ToolSchema`: a registered tool as `tools.list` reports it.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    pub parameters: Json,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Json>,
    pub idempotent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Json>,
    /// `user_defined` for tools registered over the wire.
    pub source: String,
}

/// `tools.list` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    /// Sorted by name.
    pub tools: Vec<ToolSchema>,
    pub count: usize,
}

/// `{name}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct NameParams {
    pub name: Name,
}

/// `tools.unregister` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnregisterReply {
    pub unregistered: String,
    /// 1 when the tool was present, else 0.
    pub removed: u64,
}

crate::method!(
    /// `tools.register` (one `ToolDefinition` or an array) → how many were registered.
    Register = op("tools.register", "register one tool descriptor or an array of them");
    access: Access::daemon();
    OneOrMany<ToolDefinition> => u64;
    member("register_tool", &[req("name", Str)], unit()),
    member("register_tool_schema", &[whole("schema_json")], unit())
);
crate::method!(
    /// `tools.list` → `{tools, count}`.
    List = op("tools.list", "this connection's tools, sorted by name");
    access: Access::daemon();
    NoParams => ListReply;
    member("list_tools", &[], field("tools", ReturnKind::Json))
);
crate::method!(
    /// `tools.unregister` → `{unregistered, removed}`.
    Unregister = op("tools.unregister", "remove a tool by name");
    access: Access::daemon();
    NameParams => UnregisterReply;
    member("unregister_tool", &[req("name", Str)], field("removed", ReturnKind::Int))
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Register>(),
    Declaration::of::<List>(),
    Declaration::of::<Unregister>(),
];
