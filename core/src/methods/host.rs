//! `host.*`: the host surface (reference `host` section and host-protocol.md): the registry
//! of agents, devices and approvals a host UI renders, and the `host.event` stream.
//!
//! Shapes are CAR's: `HostAgent`, `HostDevice`, `HostApproval`, `HostEvent`. Additive,
//! beyond CAR: every `HostEvent` carries `seq` (equal to CAR's `sequence`: gap-free from 1
//! within one daemon run) and that run's `epoch`, and `host.subscribe {after_seq, epoch}`
//! replays what a reconnecting host missed (docs/protocol-choices.md, "Host state").

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
use super::{agent, member, op, opt, whole, ArgKind::Int, Declaration};
use crate::methods::json;

/// An agent's status (CAR's seven values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Idle,
    Running,
    WaitingForApproval,
    Paused,
    Completed,
    Errored,
    Stopped,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Idle => "idle",
            AgentStatus::Running => "running",
            AgentStatus::WaitingForApproval => "waiting_for_approval",
            AgentStatus::Paused => "paused",
            AgentStatus::Completed => "completed",
            AgentStatus::Errored => "errored",
            AgentStatus::Stopped => "stopped",
        }
    }
}

/// CAR's `HostAgent`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HostAgent {
    pub id: String,
    pub name: String,
    pub kind: String,
    pub capabilities: Vec<String>,
    pub project: Option<String>,
    pub status: AgentStatus,
    pub current_task: Option<String>,
    pub pid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<Json>,
    pub metadata: Json,
    /// The registering session (`sess-<n>`), the only one that may mutate the row.
    pub session_id: String,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

/// CAR's `HostDevice`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HostDevice {
    pub id: String,
    pub name: String,
    pub platform: String,
    pub capabilities: Vec<String>,
    pub status: String,
    pub session_id: String,
    pub updated_at: String,
    pub metadata: Json,
}

/// An approval's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
}

/// CAR's `HostApproval`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HostApproval {
    pub id: String,
    pub agent_id: Option<String>,
    /// What is to be approved: the request's `title`, or `ws.method:<method>` for the
    /// dispatcher's approval gate.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub details: Json,
    pub options: Vec<String>,
    pub status: ApprovalStatus,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    pub required_approvals: u32,
    /// The session that raised it (only it may resolve); `null` for a system approval
    /// (the dispatcher's gate), which a host session resolves.
    pub client_id: Option<String>,
}

/// CAR's `HostEvent`, plus `seq` and `epoch`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct HostEvent {
    pub id: String,
    /// Gap-free from 1 within one daemon run (CAR's field).
    pub sequence: u64,
    /// The same number: the replay cursor `host.subscribe {after_seq}` takes.
    pub seq: u64,
    /// This daemon run's id: a `seq` from another epoch cannot be resumed.
    pub epoch: String,
    pub timestamp: String,
    /// `agent.registered`, `agent.unregistered`, `agent.status_changed`,
    /// `approval.requested`, `approval.resolved`, `device.registered`, `device.updated`,
    /// `device.unregistered`, `host.notification` or a caller's own `host.notify` kind.
    pub kind: String,
    pub agent_id: Option<String>,
    pub message: Option<String>,
    pub payload: Json,
}

/// `host.subscribe` params (beyond CAR: resume after a reconnect).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeParams {
    /// The last `seq` this host applied; needs `epoch`.
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// The `epoch` that `after_seq` belongs to.
    #[serde(default)]
    pub epoch: Option<String>,
}

/// CAR's `HostIdentity`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct HostIdentity {
    pub version: String,
    pub pid: u32,
    pub manifest_path: Option<String>,
    /// `owner`, `observer` or `none`.
    pub manifest_role: String,
}

/// `host.subscribe` result: CAR's snapshot, plus the resume fields.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeReply {
    pub subscribed: bool,
    pub agents: Vec<HostAgent>,
    pub devices: Vec<HostDevice>,
    pub approvals: Vec<HostApproval>,
    /// The most recent events (at most 100), oldest first.
    pub events: Vec<HostEvent>,
    pub identity: HostIdentity,
    pub epoch: String,
    /// The newest `seq` so far (0 before any event); live events follow it.
    pub seq: u64,
    /// Present when `after_seq` was given: whether the missed events were replayed (as
    /// `host.event` notifications, before any live one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
    /// `gap` (the ring no longer holds them all) or `epoch` (another daemon run) when
    /// `replayed` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How many events were replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_count: Option<u64>,
}

/// `host.events` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct EventsParams {
    /// At most this many of the newest events (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EventsReply {
    pub events: Vec<HostEvent>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalsReply {
    pub approvals: Vec<HostApproval>,
}

/// `host.register_agent` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterAgentParams {
    #[serde(default)]
    pub id: Option<Name>,
    pub name: Name,
    pub kind: Name,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub project: Option<String>,
    #[serde(default)]
    pub pid: Option<u64>,
    #[serde(default)]
    pub display: Option<Json>,
    #[serde(default)]
    pub metadata: Option<Json>,
}

/// `{agent_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentIdParams {
    pub agent_id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OkReply {
    pub ok: bool,
}

/// `host.set_status` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetStatusParams {
    pub agent_id: Name,
    pub status: AgentStatus,
    #[serde(default)]
    pub current_task: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub payload: Option<Json>,
}

/// `host.notify` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct NotifyParams {
    /// Default `host.notification`.
    #[serde(default)]
    pub kind: Option<Name>,
    #[serde(default)]
    pub agent_id: Option<Name>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub payload: Option<Json>,
}

/// Event-kind prefixes only the daemon publishes: `host.notify` with a `kind` under one of
/// them is refused (`-32602`, reason `reserved`), so no caller can forge an
/// `approval.resolved` or `agent.status_changed` that host UIs trust.
pub const RESERVED_EVENT_PREFIXES: &[&str] = &[
    "agent.",
    "approval.",
    "device.",
    "inference.",
    "memory.",
    "permission.",
    "run.",
    "session.",
    "supervision.",
    "task.",
    "tool.",
    "workflow.",
];

/// `host.request_approval` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RequestApprovalParams {
    #[serde(default)]
    pub agent_id: Option<Name>,
    pub title: Name,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub context: Option<Json>,
    #[serde(default)]
    pub required_approvals: Option<u32>,
}

/// `host.resolve_approval` params: CAR's `approved: bool`, or the gate's
/// `resolution: "approve" | "deny"`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResolveApprovalParams {
    pub approval_id: Name,
    #[serde(default)]
    pub approved: Option<bool>,
    #[serde(default)]
    pub resolution: Option<Resolution>,
    #[serde(default)]
    pub notes: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Approve,
    Deny,
}

/// `host.register_device` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterDeviceParams {
    #[serde(default)]
    pub id: Option<Name>,
    pub name: Name,
    pub platform: Name,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub metadata: Option<Json>,
}

/// `host.update_device` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UpdateDeviceParams {
    pub device_id: Name,
    #[serde(default)]
    pub name: Option<Name>,
    #[serde(default)]
    pub platform: Option<Name>,
    #[serde(default)]
    pub capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub metadata: Option<Json>,
}

crate::method!(
    /// `host.subscribe` → CAR's snapshot; then `host.event` notifications.
    Subscribe = op("host.subscribe", "subscribe to host.event notifications; returns the host snapshot (and replays missed events after a reconnect)")
        .handshake();
    access: Access::session().observer();
    SubscribeParams => SubscribeReply
);
crate::method!(
    /// `host.agents` → `HostAgent[]`.
    Agents = op("host.agents", "the agents registered with the host");
    access: Access::owned(Resource::Agents).observer();
    NoParams => Vec<HostAgent>;
    member("host_agents", &[], json())
);
crate::method!(
    /// `host.devices` → `HostDevice[]`.
    Devices = op("host.devices", "the host devices linked to the daemon");
    access: Access::daemon().observer();
    NoParams => Vec<HostDevice>;
    member("host_devices", &[], json())
);
crate::method!(
    /// `host.events {limit?}` → `{events}`.
    Events = op("host.events", "the most recent host events, oldest first");
    access: Access::owned(Resource::Events).observer();
    EventsParams => EventsReply;
    member("host_events", &[opt("limit", Int)], json())
);
crate::method!(
    /// `host.approvals` → `{approvals}`.
    Approvals = op("host.approvals", "the approval requests the daemon holds");
    access: Access::owned(Resource::Approvals).observer();
    NoParams => ApprovalsReply;
    member("host_approvals", &[], json())
);
crate::method!(
    /// `host.register_agent` → `HostAgent`.
    RegisterAgent = op("host.register_agent", "register an agent, owned by this session, for host UIs");
    access: Access::owned(Resource::Agents);
    RegisterAgentParams => HostAgent;
    member("host_register_agent", &[whole("request_json")], json())
);
crate::method!(
    /// `host.unregister_agent {agent_id}` → `{ok}`.
    UnregisterAgent = op("host.unregister_agent", "remove an agent this session registered");
    access: Access::owned(Resource::Agents);
    AgentIdParams => OkReply;
    member("host_unregister_agent", &[whole("request_json")], json())
);
crate::method!(
    /// `host.set_status` → `HostAgent`.
    SetStatus = op("host.set_status", "update the status of an agent this session registered");
    access: Access::owned(Resource::Agents);
    SetStatusParams => HostAgent;
    member("host_set_status", &[whole("request_json")], json())
);
crate::method!(
    /// `host.register_device` → `HostDevice`.
    RegisterDevice = op("host.register_device", "register a device, owned by this session");
    access: Access::daemon();
    RegisterDeviceParams => HostDevice;
    member("host_register_device", &[whole("request_json")], json())
);
crate::method!(
    /// `host.update_device` → `HostDevice`.
    UpdateDevice = op("host.update_device", "update a device this session registered");
    access: Access::daemon();
    UpdateDeviceParams => HostDevice;
    member("host_update_device", &[whole("request_json")], json())
);
crate::method!(
    /// `host.notify` → `HostEvent`.
    Notify = op("host.notify", "record and broadcast a host event");
    access: Access::owned(Resource::Events).reserved("kind", RESERVED_EVENT_PREFIXES);
    NotifyParams => HostEvent;
    member("host_notify", &[whole("request_json")], json())
);
crate::method!(
    /// `host.request_approval` → `HostApproval`.
    RequestApproval = agent("host.request_approval", "ask the host to approve an action");
    access: Access::owned(Resource::Approvals);
    RequestApprovalParams => HostApproval;
    member("host_request_approval", &[whole("request_json")], json())
);
crate::method!(
    /// `host.resolve_approval` → `HostApproval`.
    ResolveApproval = agent("host.resolve_approval", "approve or deny a pending approval");
    access: Access::owned(Resource::Approvals);
    ResolveApprovalParams => HostApproval;
    member("host_resolve_approval", &[whole("request_json")], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Subscribe>(),
    Declaration::of::<Agents>(),
    Declaration::of::<Devices>(),
    Declaration::of::<Events>(),
    Declaration::of::<Approvals>(),
    Declaration::of::<RegisterAgent>(),
    Declaration::of::<UnregisterAgent>(),
    Declaration::of::<SetStatus>(),
    Declaration::of::<RegisterDevice>(),
    Declaration::of::<UpdateDevice>(),
    Declaration::of::<Notify>(),
    Declaration::of::<RequestApproval>(),
    Declaration::of::<ResolveApproval>(),
];
