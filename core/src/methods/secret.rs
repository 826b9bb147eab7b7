//! `secret.*` and `diagnostics.secret_store_activity`: the daemon's secret store
//! (`CAR_HOME/secrets/`, owner-only; values never logged, never in events or errors).

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Name, NoParams};
use super::{host, json, member, op, opt, req, ArgKind::Str, Declaration};
use crate::redact::Redacted;

/// `{service?, key}`; `service` defaults to `"car"`, and `key: "openrouter"` means
/// `OPENROUTER_API_KEY` (CAR's alias).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SecretKeyParams {
    #[serde(default)]
    pub service: Option<Name>,
    pub key: Name,
}

/// `secret.put` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PutParams {
    #[serde(default)]
    pub service: Option<Name>,
    pub key: Name,
    pub value: Redacted<String>,
}

/// `secret.put` / `secret.delete` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SecretOkReply {
    pub ok: bool,
    pub service: String,
    pub key: String,
    /// `secret.delete`: whether there was a value to delete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted: Option<bool>,
}

/// `secret.get` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct GetReply {
    pub value: Redacted<String>,
}

/// `secret.status` result: metadata, never the value.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StatusReply {
    pub service: String,
    pub key: String,
    pub exists: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<u64>,
}

/// One `secret.list` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SecretNameRow {
    pub service: String,
    pub key: String,
    pub exists: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    pub secrets: Vec<SecretNameRow>,
}

/// `diagnostics.secret_store_activity` result: exactly CAR's five counters.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ActivityReply {
    pub get_attempts: u64,
    pub status_attempts: u64,
    pub availability_attempts: u64,
    pub write_attempts: u64,
    pub delete_attempts: u64,
}

/// `secret.grant` / `secret.revoke` params: which agent may read which secret.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct GrantParams {
    pub agent_id: Name,
    /// Defaults to `"car"`, as for `secret.get`.
    #[serde(default)]
    pub service: Option<Name>,
    pub key: Name,
}

/// One grant: `agent_id` may read `service`/`key` with `secret.get`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize, JsonSchema)]
pub struct GrantRow {
    pub agent_id: String,
    pub service: String,
    pub key: String,
}

/// `secret.grant` / `secret.revoke` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct GrantReply {
    pub ok: bool,
    /// Whether the grant set changed (granting twice, or revoking what was not granted,
    /// is `false`).
    pub changed: bool,
    #[serde(flatten)]
    pub grant: GrantRow,
}

/// `secret.grants {agent_id?}` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct GrantsParams {
    /// Only this agent's grants.
    #[serde(default)]
    pub agent_id: Option<Name>,
}

/// `secret.grants` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct GrantsReply {
    pub grants: Vec<GrantRow>,
}

crate::method!(
    /// `secret.put {service?, key, value}` → `{ok, service, key}`.
    Put = op("secret.put", "store a secret value under a name");
    access: Access::owned(Resource::Secrets);
    PutParams => SecretOkReply;
    member("secret_put", &[req("key", Str), req("value", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.get {service?, key}` → `{value}`.
    Get = super::agent("secret.get", "read a secret value");
    access: Access::owned(Resource::Secrets);
    SecretKeyParams => GetReply;
    member("secret_get", &[req("key", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.delete {service?, key}` → `{ok, service, key, deleted}`.
    Delete = op("secret.delete", "delete a secret");
    access: Access::owned(Resource::Secrets);
    SecretKeyParams => SecretOkReply;
    member("secret_delete", &[req("key", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.status {service?, key}` → metadata.
    Status = op("secret.status", "whether a secret exists, with its size and time (never its value)");
    access: Access::owned(Resource::Secrets);
    SecretKeyParams => StatusReply;
    member("secret_status", &[req("key", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.available` → `bool`.
    Available = op("secret.available", "whether the secret store is usable");
    access: Access::owned(Resource::Secrets);
    NoParams => bool;
    member("secret_available", &[], json())
);
crate::method!(
    /// `secret.list` → `{secrets: [{service, key, exists}]}`.
    List = op("secret.list", "the names of stored secrets (never their values)");
    access: Access::owned(Resource::Secrets);
    NoParams => ListReply;
    member("secret_list", &[], json())
);
crate::method!(
    /// `diagnostics.secret_store_activity` → the five attempt counters.
    Activity = host("diagnostics.secret_store_activity", "how many secret-store operations were attempted since the daemon started")
        .handshake();
    access: Access::daemon();
    NoParams => ActivityReply
);

crate::method!(
    /// `secret.grant {agent_id, service?, key}` → `{ok, changed, agent_id, service, key}`.
    Grant = host("secret.grant", "let an agent read one secret with secret.get (agents read no secret until granted)");
    access: Access::owned(Resource::Secrets);
    GrantParams => GrantReply;
    member("secret_grant", &[req("agent_id", Str), req("key", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.revoke {agent_id, service?, key}` → `{ok, changed, agent_id, service, key}`.
    Revoke = host("secret.revoke", "withdraw an agent's grant to read one secret");
    access: Access::owned(Resource::Secrets);
    GrantParams => GrantReply;
    member("secret_revoke", &[req("agent_id", Str), req("key", Str), opt("service", Str)], json())
);
crate::method!(
    /// `secret.grants {agent_id?}` → `{grants: [{agent_id, service, key}]}`.
    Grants = host("secret.grants", "the secrets each agent may read");
    access: Access::owned(Resource::Secrets);
    GrantsParams => GrantsReply;
    member("secret_grants", &[opt("agent_id", Str)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Put>(),
    Declaration::of::<Get>(),
    Declaration::of::<Delete>(),
    Declaration::of::<Status>(),
    Declaration::of::<Available>(),
    Declaration::of::<List>(),
    Declaration::of::<Activity>(),
    Declaration::of::<Grant>(),
    Declaration::of::<Revoke>(),
    Declaration::of::<Grants>(),
];
