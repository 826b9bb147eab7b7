//! The public data types: configuration, launch spec, observed runtime state, log tails
//! and errors. Plain data; the behaviour lives in `supervisor` and `runner`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where the supervisor keeps its files and how it paces restarts and rotation.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// `CAR_HOME/logs`; each agent logs to `<logs_dir>/agents/<id>/stdout.log` and
    /// `stderr.log` (rotated copies `.1` … `.N`).
    pub logs_dir: PathBuf,
    /// `CAR_HOME/run/agents`; holds one `<id>.json` pid record per live child.
    pub run_dir: PathBuf,
    /// SIGTERM → SIGKILL grace on a stop.
    pub grace: Duration,
    /// Size of a stream file beyond which it is rotated.
    pub log_max_bytes: u64,
    /// Rotated files kept per stream (0: rotation only truncates).
    pub log_keep: usize,
    /// A run that lasted at least this long resets the crash-loop counter.
    pub stable_after: Duration,
    /// Cap of the exponential restart backoff.
    pub max_backoff: Duration,
}

impl SupervisorConfig {
    /// Defaults: grace 5 s, 8 MiB per stream file, 3 rotated files, stable after 60 s,
    /// backoff capped at 60 s.
    pub fn new(logs_dir: impl Into<PathBuf>, run_dir: impl Into<PathBuf>) -> Self {
        SupervisorConfig {
            logs_dir: logs_dir.into(),
            run_dir: run_dir.into(),
            grace: Duration::from_secs(5),
            log_max_bytes: 8 * 1024 * 1024,
            log_keep: 3,
            stable_after: Duration::from_secs(60),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// Restart policy applied when a child exits on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restart {
    /// Never restart: exit 0 → `stopped`, anything else → `errored`.
    #[default]
    Never,
    /// Restart after a non-zero exit or a signal; exit 0 → `stopped`.
    OnFailure,
    /// Restart after every exit.
    Always,
}

/// What to run for one agent. The daemon builds it from its stored spec and adds the
/// agent's credentials to `env`.
#[derive(Clone)]
pub struct LaunchSpec {
    /// File-name safe (validated by the daemon; re-checked here: no `/`, not `.`/`..`).
    pub id: String,
    /// Absolute path of the program.
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Working directory; `None` inherits the daemon's.
    pub cwd: Option<PathBuf>,
    /// The child's whole environment: the daemon's own is never inherited. Without a
    /// `PATH` here the child gets [`crate::DEFAULT_PATH`].
    pub env: BTreeMap<String, String>,
    pub restart: Restart,
    /// Consecutive restarts (without a run of `stable_after`) allowed before `errored`.
    pub max_restarts: u32,
    /// Base backoff: restart k (1-based) waits `min(backoff * 2^(k-1), max_backoff)`.
    pub backoff: Duration,
    /// File access the child is denied (Landlock, where the kernel has it).
    pub confine: Option<crate::confine::Confinement>,
}

impl LaunchSpec {
    /// A spec with no args, no cwd, no env, `Restart::Never`, 5 restarts, 1 s backoff.
    pub fn new(id: impl Into<String>, command: impl Into<PathBuf>) -> Self {
        LaunchSpec {
            id: id.into(),
            command: command.into(),
            args: Vec::new(),
            cwd: None,
            env: BTreeMap::new(),
            restart: Restart::Never,
            max_restarts: 5,
            backoff: Duration::from_secs(1),
            confine: None,
        }
    }
}

/// Env values are redacted: the daemon puts the agent's token there.
impl fmt::Debug for LaunchSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchSpec")
            .field("id", &self.id)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env_keys", &self.env.keys().collect::<Vec<_>>())
            .field("restart", &self.restart)
            .field("max_restarts", &self.max_restarts)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// An agent's lifecycle state (CAR's `ManagedAgent.status` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Stopped,
    Starting,
    Running,
    Backoff,
    Errored,
}

impl Status {
    /// The wire name (`"running"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Stopped => "stopped",
            Status::Starting => "starting",
            Status::Running => "running",
            Status::Backoff => "backoff",
            Status::Errored => "errored",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRuntime {
    pub status: Status,
    /// The live child's pid (also its process group id); `None` unless running.
    pub pid: Option<u32>,
    /// `None` when the last run was killed by a signal or its exit is unknown (adopted).
    pub last_exit_code: Option<i32>,
    pub last_signal: Option<i32>,
    /// Restarts since the last `start`.
    pub restart_count: u32,
    /// RFC 3339 (millis) start of the current run; `None` unless running.
    pub started_at: Option<String>,
    /// Why the agent is `errored` or in `backoff`.
    pub reason: Option<String>,
    /// The current run was adopted from a previous daemon.
    pub adopted: bool,
}

impl AgentRuntime {
    pub(crate) fn stopped() -> Self {
        AgentRuntime {
            status: Status::Stopped,
            pid: None,
            last_exit_code: None,
            last_signal: None,
            restart_count: 0,
            started_at: None,
            reason: None,
            adopted: false,
        }
    }
}

/// Which stream(s) `tail_log` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStream {
    #[default]
    Combined,
    Stdout,
    Stderr,
}

impl LogStream {
    pub(crate) fn includes_stdout(self) -> bool {
        matches!(self, LogStream::Combined | LogStream::Stdout)
    }
    pub(crate) fn includes_stderr(self) -> bool {
        matches!(self, LogStream::Combined | LogStream::Stderr)
    }
}

/// One page of an agent's logs (see the crate docs for the paging rules).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailLog {
    /// The stdout window followed by the stderr window.
    pub lines: Vec<String>,
    pub stdout: Vec<String>,
    pub stderr: Vec<String>,
    /// Lines in the scanned tail of each included stream (0 for an excluded one).
    pub stdout_total: usize,
    pub stderr_total: usize,
    pub stdout_path: String,
    pub stderr_path: String,
    /// Older lines exist on some included stream (before the window, or before the scan).
    pub more: bool,
}

/// Everything the supervisor can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The id was never started here and no pid record names a live child of it.
    #[error("unknown agent `{0}`: not started by this supervisor and no live process recorded")]
    NotFound(String),
    /// `tail_log` for an agent that has never had a log directory.
    #[error("no logs for agent `{id}`: {} does not exist", dir.display())]
    NoLogs { id: String, dir: PathBuf },
    /// The spec is unusable (bad id, relative command).
    #[error("invalid launch spec for agent `{id}`: {reason}")]
    InvalidSpec { id: String, reason: String },
    /// The first spawn of a `start` failed; the agent is now `errored` with this reason.
    #[error("cannot start agent `{id}`: {reason}")]
    Spawn { id: String, reason: String },
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "timed out after {} waiting for agent `{id}` to become {}; it is {status}",
        humantime::format_duration(*waited),
        join_statuses(targets)
    )]
    WaitTimeout {
        id: String,
        waited: Duration,
        status: Status,
        targets: Vec<Status>,
    },
    /// `shutdown` was called; no new starts.
    #[error("the supervisor is shut down; cannot start agent `{0}`")]
    ShutDown(String),
}

fn join_statuses(targets: &[Status]) -> String {
    let names: Vec<&str> = targets.iter().map(|s| s.as_str()).collect();
    names.join(" or ")
}

/// The JSON-RPC form: an unknown agent is `-32602` naming `id`, anything else `-32603`.
impl From<SupervisorError> for car_proto::errors::RpcError {
    fn from(e: SupervisorError) -> Self {
        use car_proto::errors::RpcError;
        match e {
            SupervisorError::NotFound(id) => {
                RpcError::invalid_params(format!("id: no supervised agent '{id}'"))
            }
            other => RpcError::internal(other.to_string()),
        }
    }
}
