//! `session.auth`, `session.init`, `session.clear_halt`.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
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
    /// An inference-consumer grant (`session.consumer.issue`), with its `token`.
    #[serde(default)]
    pub consumer_id: Option<String>,
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
    /// `inference_consumer` for a consumer grant (and the grant's receipt fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<ConsumerGrant>,
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

/// `session.policy.open` result: a policy-scoping session id for `policy.register
/// {session_id}` and `proposal.submit {session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyOpenReply {
    pub session_id: String,
}

/// `{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyCloseParams {
    pub session_id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyCloseReply {
    pub closed: bool,
}

/// `session.bind_context` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct BindContextParams {
    /// Absolute.
    pub working_dir: String,
    #[serde(default)]
    pub organization_id: Option<Name>,
    #[serde(default)]
    pub personal: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct BindContextReply {
    /// Always `null` here: this daemon serves no organizations, so every resolution is
    /// personal and the connection stays unbound.
    pub work_context: Option<Json>,
    pub from_default: bool,
}

/// `session.consumer.issue` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ConsumerIssueParams {
    pub methods: Vec<Name>,
    /// Default 300, at most 900.
    #[serde(default)]
    pub ttl_secs: Option<u64>,
}

/// `session.consumer.issue` result (the receipt, with the one-time `token`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ConsumerGrant {
    pub consumer_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<crate::redact::Redacted<String>>,
    pub role: String,
    pub parent_agent_id: String,
    pub resource_key: String,
    pub work_context: Option<Json>,
    pub methods: Vec<String>,
    pub issued_at_ms: u64,
    pub expires_at_ms: u64,
}

/// `{consumer_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ConsumerRevokeParams {
    pub consumer_id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ConsumerRevokeReply {
    pub consumer_id: String,
    pub revoked: bool,
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
    access: Access::session().observer();
    AuthParams => AuthReply
);
crate::method!(
    /// `session.init` → `{session_id, tools_registered, policies_registered}`.
    Init = op("session.init", "register tools and policies in one call");
    access: Access::session();
    InitParams => InitReply
);
crate::method!(
    /// `session.clear_halt` → `{cleared}`.
    ClearHalt = host("session.clear_halt", "lift this connection's halt after a terminal tool error");
    access: Access::session();
    NoParams => ClearHaltReply
);

crate::method!(
    /// `session.policy.open` → `{session_id}`.
    PolicyOpen = op("session.policy.open", "open a policy-scoping session within this connection");
    access: Access::session();
    NoParams => PolicyOpenReply
);
crate::method!(
    /// `session.policy.close {session_id}` → `{closed}`.
    PolicyClose = op("session.policy.close", "close a policy-scoping session and drop its policies");
    access: Access::session();
    PolicyCloseParams => PolicyCloseReply
);
crate::method!(
    /// `session.bind_context {working_dir, organization_id?, personal?}`.
    BindContext = agent("session.bind_context", "bind this connection to a work context (personal only: no organizations are served)");
    access: Access::session();
    BindContextParams => BindContextReply
);
crate::method!(
    /// `session.consumer.issue {methods, ttl_secs?}` → the grant receipt with its token.
    ConsumerIssue = op("session.consumer.issue", "issue a short-lived inference-only credential for a second socket of this agent");
    access: Access::session();
    ConsumerIssueParams => ConsumerGrant
);
crate::method!(
    /// `session.consumer.revoke {consumer_id}` → `{consumer_id, revoked}`.
    ConsumerRevoke = op("session.consumer.revoke", "revoke an inference-consumer grant this socket issued");
    access: Access::session();
    ConsumerRevokeParams => ConsumerRevokeReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Auth>(),
    Declaration::of::<Init>(),
    Declaration::of::<ClearHalt>(),
    Declaration::of::<PolicyOpen>(),
    Declaration::of::<PolicyClose>(),
    Declaration::of::<BindContext>(),
    Declaration::of::<ConsumerIssue>(),
    Declaration::of::<ConsumerRevoke>(),
];
