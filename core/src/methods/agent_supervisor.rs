//! `agents.start` / `stop` / `restart` / `wait` / `tail_log` / `health` / `install`: the
//! supervisor of registered agents (reference `agents` section).
//!
//! The daemon spawns a registered agent as a child process with `CAR_AGENT_ID`,
//! `CAR_AGENT_TOKEN`, `CAR_DAEMON_URL` and `CAR_HOME` in its environment, so it connects
//! back as that agent; restarts it by its restart policy with exponential backoff up to a
//! crash-loop limit; captures stdout/stderr to size-capped rotated logs under
//! `CAR_HOME/logs/agents/<id>/`; stops it with SIGTERM, then SIGKILL after a grace. After
//! a daemon restart, agents with `auto_start` (or left running by the previous daemon) run
//! again, and a child the previous daemon left behind is adopted, never duplicated.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::agents::ManagedAgent;
use super::fields::{Json, Name, NoParams};
use super::proposal::Object;
use super::{
    agent, host, json, module_fn, op, opt, opt_at, req, req_at, ArgKind::Float, ArgKind::Int,
    ArgKind::Json as JsonArg, ArgKind::Str, Declaration,
};

/// `agents.stop` signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopSignal {
    #[default]
    Term,
    Kill,
}

/// `agents.stop {id, signal?}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StopParams {
    pub id: Name,
    #[serde(default)]
    pub signal: Option<StopSignal>,
}

/// An agent's lifecycle status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Stopped,
    Starting,
    Running,
    Backoff,
    Errored,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Stopped => "stopped",
            AgentStatus::Starting => "starting",
            AgentStatus::Running => "running",
            AgentStatus::Backoff => "backoff",
            AgentStatus::Errored => "errored",
        }
    }
}

/// `agents.wait` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct WaitParams {
    pub id: Name,
    /// Default `["running"]`.
    #[serde(default)]
    pub targets: Option<Vec<AgentStatus>>,
    /// Default 30, at most 3600.
    #[serde(default)]
    pub timeout_secs: Option<f64>,
    /// Accepted for CAR's shape; the daemon waits on status changes, not by polling.
    #[serde(default)]
    pub poll_ms: Option<f64>,
}

/// Which captured stream `agents.tail_log` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogStreamParam {
    #[default]
    Combined,
    Stdout,
    Stderr,
}

/// `agents.tail_log` params (`lines` is CAR's legacy alias of `n`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TailLogParams {
    pub id: Name,
    #[serde(default, alias = "lines")]
    pub n: Option<u32>,
    #[serde(default)]
    pub stream: Option<LogStreamParam>,
    #[serde(default)]
    pub offset: Option<u32>,
}

/// `agents.tail_log` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TailLogReply {
    pub lines: Vec<String>,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    pub stdout_total: u64,
    pub stderr_total: u64,
    pub stdout_path: String,
    pub stderr_path: String,
    pub more: bool,
}

/// One `agents.health` row: `ok` is false when the command no longer validates, or (beyond
/// CAR) when the supervisor gave up on the agent; `reason` says why.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct HealthRow {
    pub id: String,
    pub command: Option<String>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub status: AgentStatus,
    pub restart_count: u32,
    /// Whether the agent's file access is confined (Landlock): `unconfined` where the
    /// kernel lacks it.
    pub file_access: FileAccess,
}

/// `agents.health`'s `file_access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileAccess {
    /// The agent cannot read or write the daemon's state root and credential directory
    /// (except its own agent directory).
    Confined,
    /// The kernel has no Landlock: the agent can reach whatever its user can.
    Unconfined,
}

/// `agents.install` params: CAR's `AgentManifest` (`{agent: {id, name, …}, transport:
/// {kind, command?, args?, …}, runtime?, lifecycle?, capabilities?, publisher?}`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InstallParams {
    pub agent: Object,
    pub transport: Object,
    #[serde(default)]
    pub runtime: Option<Object>,
    #[serde(default)]
    pub lifecycle: Option<Object>,
    #[serde(default)]
    pub capabilities: Option<Json>,
    #[serde(default)]
    pub publisher: Option<Json>,
}

/// `agents.install` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InstallReply {
    pub report: InstallReport,
    pub agent: Option<ManagedAgent>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct InstallReport {
    #[serde(rename = "missingOptional")]
    pub missing_optional: Vec<MissingFeature>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MissingFeature {
    pub namespace: String,
    pub feature: String,
}

crate::method!(
    /// `agents.start {id}` → `ManagedAgent` (no-op when running; resets `restart_count`).
    Start = agent("agents.start", "start a registered agent's process under supervision");
    access: Access::owned(Resource::Agents);
    super::agents::IdParams => ManagedAgent;
    module_fn("agents_start", &[req("id", Str)], json())
);
crate::method!(
    /// `agents.stop {id, signal?}` → `ManagedAgent`.
    Stop = agent("agents.stop", "stop a supervised agent (SIGTERM, then SIGKILL after the grace)");
    access: Access::owned(Resource::Agents);
    StopParams => ManagedAgent;
    module_fn("agents_stop", &[req("id", Str), opt("signal", Str)], json())
);
crate::method!(
    /// `agents.restart {id}` → `ManagedAgent`.
    Restart = agent("agents.restart", "stop and start a supervised agent");
    access: Access::owned(Resource::Agents);
    super::agents::IdParams => ManagedAgent;
    module_fn("agents_restart", &[req("id", Str)], json())
);
crate::method!(
    /// `agents.wait {id, targets?, timeout_secs?}` → `ManagedAgent` once its status is a target.
    Wait = op("agents.wait", "wait until a supervised agent reaches one of the given statuses");
    access: Access::owned(Resource::Agents);
    WaitParams => ManagedAgent;
    module_fn(
        "agents_wait",
        &[req("id", Str), opt_at("targets_json", "targets", JsonArg), opt("timeout_secs", Float), opt("poll_ms", Float)],
        json()
    )
);
crate::method!(
    /// `agents.tail_log {id, n?, stream?, offset?}` → the last lines of its captured output.
    TailLog = op("agents.tail_log", "the last lines of a supervised agent's stdout and stderr");
    access: Access::owned(Resource::AgentLogs);
    TailLogParams => TailLogReply;
    module_fn(
        "agents_tail_log",
        &[req("id", Str), opt("n", Int), opt("stream", Str), opt("offset", Int)],
        json()
    )
);
crate::method!(
    /// `agents.health` → `[{id, command, ok, reason?, status, restart_count}]`.
    Health = op("agents.health", "check every registered agent's command and supervision state");
    access: Access::owned(Resource::Agents).observer();
    NoParams => Vec<HealthRow>;
    module_fn("agents_health", &[], json())
);
crate::method!(
    /// `agents.install AgentManifest` → `{report, agent}`.
    Install = host("agents.install", "install an agent from a manifest (command-shaped externals are registered)");
    access: Access::owned(Resource::Agents);
    InstallParams => InstallReply;
    module_fn("agents_install", &[req_at("manifest_json", "", JsonArg)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Start>(),
    Declaration::of::<Stop>(),
    Declaration::of::<Restart>(),
    Declaration::of::<Wait>(),
    Declaration::of::<TailLog>(),
    Declaration::of::<Health>(),
    Declaration::of::<Install>(),
];
