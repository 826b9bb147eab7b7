//! `connectors.*`: the daemon as an MCP **client** (reference `connectors`). Remote servers
//! over Streamable HTTP (`connectors.add`) and local servers over stdio
//! (`connectors.add_stdio`) become tool sources shared by every session; a connector's tools
//! are disabled until `connectors.enable_tools` names them, and an enabled tool is
//! registered in every session as `mcp_{slug}_{tool}`, run by the daemon against the server
//! when a proposal calls it (`docs/connectors.md`).
//!
//! Header and environment values are secrets: they go to the daemon's secret store, never to
//! `connectors.json`. A server that wants OAuth 2.1 is added by `connectors.authenticate`
//! (discovery, dynamic client registration, a PKCE authorize URL; the daemon keeps the
//! pending flow under `state`) and `connectors.complete_authentication` (the code exchange;
//! the tokens go to the secret store and are refreshed before use).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{null_default, Name};
use super::{op, Declaration};
use crate::methods::Access;

/// `connectors.add` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AddParams {
    pub name: Name,
    pub url: String,
    /// Secret auth-header name → value (stored in the secret store, not the manifest).
    #[serde(default, deserialize_with = "null_default")]
    pub headers: BTreeMap<String, String>,
}

/// `connectors.add_stdio` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AddStdioParams {
    pub name: Name,
    pub command: String,
    #[serde(default, deserialize_with = "null_default")]
    pub args: Vec<String>,
    /// The server's environment beyond `PATH` and `HOME` (values stored as secrets).
    #[serde(default, deserialize_with = "null_default")]
    pub env: BTreeMap<String, String>,
}

/// `connectors.authenticate` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AuthenticateParams {
    pub name: Name,
    pub url: String,
    /// The caller's own callback (a loopback it listens on, an app scheme).
    pub redirect_uri: String,
}

/// `connectors.authenticate` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AuthenticateReply {
    /// Open it in a browser; the authorization server redirects to `redirect_uri` with
    /// `code` and `state`.
    pub authorize_url: String,
    pub state: String,
}

/// `connectors.complete_authentication` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CompleteAuthenticationParams {
    pub state: String,
    pub code: String,
}

/// `{slug}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SlugParams {
    pub slug: Name,
}

/// `{slug, tools}`: bare server-side tool names.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ToolsParams {
    pub slug: Name,
    pub tools: Vec<String>,
}

/// CAR's `ConnectorStatus`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ConnectorStatus {
    pub slug: String,
    pub name: String,
    /// The server's URL, or `stdio:` and its command line.
    pub url: String,
    pub connected: bool,
    pub tool_count: u64,
    pub enabled_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// `connectors.list` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    pub connectors: Vec<ConnectorStatus>,
}

/// CAR's `ToolView`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ToolView {
    /// The bare server-side name.
    pub name: String,
    /// The model-visible `mcp_{slug}_{name}`.
    pub canonical: String,
    #[serde(default)]
    pub description: Option<String>,
    pub enabled: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EnabledReply {
    pub enabled: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DisabledReply {
    pub disabled: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RemovedReply {
    pub removed: String,
}

crate::method!(
    /// `connectors.add` → `ConnectorStatus`.
    Add = op("connectors.add", "add a remote MCP server over Streamable HTTP and discover its tools");
    access: Access::daemon().not_for_agents();
    AddParams => ConnectorStatus
);
crate::method!(
    /// `connectors.add_stdio` → `ConnectorStatus`.
    AddStdio = op("connectors.add_stdio", "add a local MCP server run as a child process over stdio");
    access: Access::daemon().not_for_agents();
    AddStdioParams => ConnectorStatus
);
crate::method!(
    /// `connectors.authenticate {name, url, redirect_uri}` → `{authorize_url, state}`.
    Authenticate = op("connectors.authenticate", "begin OAuth 2.1 for a remote MCP server: discovery, client registration, a PKCE authorize URL");
    access: Access::daemon().not_for_agents();
    AuthenticateParams => AuthenticateReply
);
crate::method!(
    /// `connectors.complete_authentication {state, code}` → `ConnectorStatus`.
    CompleteAuthentication = op("connectors.complete_authentication", "exchange the authorization code, keep the tokens as secrets, add and connect the server");
    access: Access::daemon().not_for_agents();
    CompleteAuthenticationParams => ConnectorStatus
);
crate::method!(
    /// `connectors.list` → `{connectors}`.
    List = op("connectors.list", "the connectors and their health");
    access: Access::daemon();
    super::fields::NoParams => ListReply
);
crate::method!(
    /// `connectors.tools` → `ToolView[]`.
    Tools = op("connectors.tools", "a connector's tools and whether each is enabled");
    access: Access::daemon();
    SlugParams => Vec<ToolView>
);
crate::method!(
    /// `connectors.enable_tools` → `{enabled}`.
    EnableTools = op("connectors.enable_tools", "enable tools of a connector in every session");
    access: Access::daemon().not_for_agents();
    ToolsParams => EnabledReply
);
crate::method!(
    /// `connectors.disable_tools` → `{disabled}`.
    DisableTools = op("connectors.disable_tools", "disable tools of a connector in every session");
    access: Access::daemon().not_for_agents();
    ToolsParams => DisabledReply
);
crate::method!(
    /// `connectors.refresh` → `ToolView[]`.
    Refresh = op("connectors.refresh", "reconnect if needed and re-run tools/list");
    access: Access::daemon().not_for_agents();
    SlugParams => Vec<ToolView>
);
crate::method!(
    /// `connectors.remove` → `{removed}`.
    Remove = op("connectors.remove", "disconnect a connector and delete it and its secrets");
    access: Access::daemon().not_for_agents();
    SlugParams => RemovedReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Add>(),
    Declaration::of::<AddStdio>(),
    Declaration::of::<Authenticate>(),
    Declaration::of::<CompleteAuthentication>(),
    Declaration::of::<List>(),
    Declaration::of::<Tools>(),
    Declaration::of::<EnableTools>(),
    Declaration::of::<DisableTools>(),
    Declaration::of::<Refresh>(),
    Declaration::of::<Remove>(),
];
