//! `agents.*`: the durable agent registry (identities with per-agent tokens), the built-in
//! agent tools, and chat turns routed to an attached agent (reference `agents` section,
//! host-protocol.md "agents.chat").
//!
//! The registry keeps CAR's `AgentSpec` in `CAR_HOME/agents.json` and mints one token per
//! agent at `agents.upsert`; a connection presenting `session.auth {token, agent_id}` with
//! that token is bound to the agent. Supervising agent processes (`agents.start`/`stop`/…)
//! is declared in [`super::agent_supervisor`]; a listed agent's `status` is its supervised
//! process's, or `running` while a connection is attached to an agent the daemon did not
//! start.

use crate::methods::{Access, Resource};
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
use super::{
    agent, host, json, member, module_fn, op, opt, req, req_at, unit, ArgKind::Json as JsonArg,
    ArgKind::Str, DeadlineClass, Declaration,
};

/// CAR's restart policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RestartPolicy {
    #[default]
    Never,
    OnFailure,
    Always,
}

/// CAR's `AgentSpec` (`agents.upsert` params; stored as given, with `command` resolved).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct AgentSpec {
    /// File-name safe: ASCII letters, digits, `-`, `_`, `.`; at most 128 bytes.
    pub id: Name,
    pub name: Name,
    /// Absolute path of the program (or give `interpreter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<RestartPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_start: Option<bool>,
    /// A program name resolved against `PATH` once, at upsert, into `command`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// The only methods a connection bound to this agent may call (`session.auth` and
    /// `server.handshake` always); absent means unrestricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method_allowlist: Option<Vec<String>>,
    /// Advertised capabilities (`chat` makes a host show a chat tab).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
}

/// CAR's `ManagedAgent`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ManagedAgent {
    pub spec: AgentSpec,
    /// `stopped`, `starting`, `running`, `backoff` or `errored`.
    pub status: String,
    pub pid: Option<u32>,
    pub last_exit_code: Option<i32>,
    pub restart_count: u32,
    pub started_at: Option<String>,
    /// Why the agent is `errored` or in `backoff` (beyond CAR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The captured stdout and stderr files of a supervised agent (CAR's fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_log_path: Option<String>,
    /// Whether a connection is bound to this agent (`session.auth {agent_id}`).
    pub attached: bool,
    /// The bound connection's session id while attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub manifest_path: String,
    /// Beyond CAR: the owner-only file holding this agent's token, for a host that
    /// launches the agent itself (`CAR_AGENT_ID` + `CAR_AGENT_TOKEN`).
    pub token_path: String,
}

/// One `agents.list` entry: a registry agent, or (read-merged, CAR's rule) a declarative
/// agent run in-daemon (`kind: "declarative"`, `enabled` instead of a process status,
/// `capabilities: ["chat"]`: `agents.chat` reaches it).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum AgentListEntry {
    Managed(Box<ManagedAgent>),
    Declarative(DeclarativeEntry),
}

/// A declarative agent in `agents.list`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeclarativeEntry {
    pub id: String,
    pub name: String,
    /// Always `declarative`.
    pub kind: String,
    pub enabled: bool,
    pub capabilities: Vec<String>,
    pub tools: Vec<String>,
}

impl ManagedAgent {
    /// What replaces each `env` value shown to anyone but the host.
    pub const HIDDEN_ENV_VALUE: &'static str = "[redacted]";

    /// The agent as a caller sees it: whole for the host, [`Self::with_env_values_hidden`]
    /// for everyone else.
    pub fn shown_to(self, host: bool) -> Self {
        if host {
            self
        } else {
            self.with_env_values_hidden()
        }
    }

    /// The agent with its `env` values replaced by [`Self::HIDDEN_ENV_VALUE`] (the names
    /// stay, so a reader still sees which variables are set). Stricter than CAR, which
    /// returns them verbatim to every caller (docs/security.md).
    pub fn with_env_values_hidden(mut self) -> Self {
        if let Some(env) = self.spec.env.as_mut() {
            env.values_mut()
                .for_each(|v| *v = Self::HIDDEN_ENV_VALUE.to_string());
        }
        self
    }
}

/// `{id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct IdParams {
    pub id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RemoveReply {
    pub removed: bool,
}

/// CAR's image content block (`agents.chat` attachments).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageBlock {
    ImageBase64 {
        data: String,
        media_type: ImageMediaType,
    },
    ImageUrl {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ImageMediaType {
    #[serde(rename = "image/png")]
    Png,
    #[serde(rename = "image/jpeg")]
    Jpeg,
    #[serde(rename = "image/gif")]
    Gif,
    #[serde(rename = "image/webp")]
    Webp,
}

/// A chat turn's completion contract.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatGoal {
    pub check: Name,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

/// `agents.chat` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatParams {
    pub agent_id: Name,
    pub prompt: String,
    #[serde(default)]
    pub session_id: Option<Name>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub voice_input: Option<bool>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub attachments: Option<Vec<ImageBlock>>,
    #[serde(default)]
    pub goal: Option<ChatGoal>,
}

/// `agents.chat` result: the ack (the answer streams as `agents.chat.event`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatReply {
    pub accepted: bool,
    pub session_id: String,
}

/// `{session_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatSessionParams {
    pub session_id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatCancelReply {
    pub cancelled: bool,
    pub session_id: String,
}

/// `agents.chat.approve` params; `decision` is forwarded verbatim (a bool, or a string
/// such as `"approve"`); absent means denied.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatApproveParams {
    pub session_id: Name,
    pub approval_id: Name,
    #[serde(default)]
    pub decision: Option<Json>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatApproveReply {
    pub resolved: bool,
    pub session_id: String,
}

crate::method!(
    /// `agents.upsert AgentSpec` → `ManagedAgent` (mints the agent's token when new).
    Upsert = host("agents.upsert", "add or replace an agent in the registry (minting its token when new)");
    access: Access::owned(Resource::Agents);
    AgentSpec => ManagedAgent;
    module_fn("agents_upsert", &[req_at("spec_json", "", JsonArg)], json())
);
crate::method!(
    /// `agents.list` → `[ManagedAgent]`.
    List = op("agents.list", "the registered agents with their attachment status");
    access: Access::owned(Resource::Agents).observer();
    NoParams => Vec<AgentListEntry>;
    module_fn("agents_list", &[], json())
);
crate::method!(
    /// `agents.remove {id}` → `{removed}`.
    Remove = host("agents.remove", "remove an agent from the registry and revoke its token");
    access: Access::owned(Resource::Agents);
    IdParams => RemoveReply;
    module_fn("agents_remove", &[req("id", Str)], json())
);
crate::method!(
    /// `agents.register_basics` → `null`.
    RegisterBasics = op("agents.register_basics", "register the daemon's built-in file and calculator tools on this session");
    access: Access::owned(Resource::Agents);
    NoParams => ();
    member("register_agent_basics", &[], unit())
);
crate::method!(
    /// `agents.chat` → `{accepted, session_id}`; the turn streams as `agents.chat.event`.
    Chat = agent("agents.chat", "send a chat turn to an attached agent; its reply streams as agents.chat.event")
        .deadline(DeadlineClass::Standard);
    access: Access::owned(Resource::Agents);
    ChatParams => ChatReply
);
/// What an agent streams during a chat turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChatEventKind {
    Token,
    ToolCall,
    ApprovalPending,
    GoalEvaluated,
    Done,
    Error,
}

impl ChatEventKind {
    /// `done` and `error` end the turn.
    pub fn is_terminal(self) -> bool {
        matches!(self, ChatEventKind::Done | ChatEventKind::Error)
    }
}

/// `agent.chat.event` params (agent → daemon): `{session_id, kind, delta?, …}`; the
/// other fields of each kind (`finish_reason`, `text`, `error`, `tool`, `params`,
/// `approval_id`, …) are forwarded as given.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChatEventParams {
    pub session_id: Name,
    pub kind: ChatEventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Json>,
}

crate::method!(
    /// `agent.chat.event` (agent → daemon, usually a notification) → `null`; forwarded to
    /// the host that started the turn as `agents.chat.event`.
    ChatEvent = agent("agent.chat.event", "stream one event of a chat turn this agent is serving (forwarded to the host)")
        .deadline(DeadlineClass::Immediate);
    access: Access::owned(Resource::Agents);
    ChatEventParams => ();
    member("chat_event", &[req("session_id", Str), req("kind", Str), opt("delta", Str)], unit())
);
crate::method!(
    /// `agents.chat.cancel {session_id}` → `{cancelled, session_id}`.
    ChatCancel = op("agents.chat.cancel", "cancel an in-flight chat turn");
    access: Access::owned(Resource::Agents);
    ChatSessionParams => ChatCancelReply
);
crate::method!(
    /// `agents.chat.approve` → `{resolved, session_id}`.
    ChatApprove = op("agents.chat.approve", "resolve an approval an agent raised inside a chat turn");
    access: Access::owned(Resource::Agents);
    ChatApproveParams => ChatApproveReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Upsert>(),
    Declaration::of::<List>(),
    Declaration::of::<Remove>(),
    Declaration::of::<RegisterBasics>(),
    Declaration::of::<Chat>(),
    Declaration::of::<ChatCancel>(),
    Declaration::of::<ChatApprove>(),
    Declaration::of::<ChatEvent>(),
];
