//! `session.auth`, `session.init`, `session.clear_halt`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, NoParams};
use super::policy::PolicyDefinition;
use super::tools::ToolDefinition;
use super::{agent, host, op, DeadlineClass, Declaration};

/// `session.auth` params: `{token, agent_id?, memory_namespace?}` or `{host_token}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct AuthParams {
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub host_token: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub memory_namespace: Option<String>,
    /// Inference-consumer credentials; not served by this daemon (refused).
    #[serde(default)]
    pub consumer_id: Option<Json>,
}

/// `session.auth` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AuthReply {
    pub ok: bool,
    pub auth_enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The bound agent's `method_allowlist`, when its registration has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method_allowlist: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_namespace: Option<String>,
}

/// `session.init` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct InitParams {
    #[serde(default)]
    pub tools: Option<Vec<ToolDefinition>>,
    #[serde(default)]
    pub policies: Option<Vec<PolicyDefinition>>,
}

/// `session.init` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InitReply {
    pub session_id: String,
    pub tools_registered: usize,
    pub policies_registered: usize,
}

/// `session.clear_halt` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ClearHaltReply {
    /// Whether the connection was halted.
    pub cleared: bool,
}

crate::method!(
    /// `session.auth` → `{ok, auth_enabled, role?, agent_id?, memory_namespace?}`.
    Auth = agent("session.auth", "authenticate this connection with the daemon token or the host token")
        .deadline(DeadlineClass::Immediate);
    AuthParams => AuthReply
);
crate::method!(
    /// `session.init` → `{session_id, tools_registered, policies_registered}`.
    Init = op("session.init", "register tools and policies in one call");
    InitParams => InitReply
);
crate::method!(
    /// `session.clear_halt` → `{cleared}`.
    ClearHalt = host("session.clear_halt", "lift this connection's halt after a terminal tool error");
    NoParams => ClearHaltReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Auth>(),
    Declaration::of::<Init>(),
    Declaration::of::<ClearHalt>(),
];
