//! The shapes of `scheduler.*` and `tasks.*`: prompt tasks and their executions, command
//! tasks, and the OS-schedule reports. They are CAR's, field for field; `car-scheduler`
//! creates, validates, stores and runs them.
//!
//! Decoding is lenient, as CAR's is: unknown fields are ignored and `null` is an absent
//! field. Times are RFC 3339 strings in UTC with milliseconds ([`crate::clock::rfc3339`]);
//! any offset is accepted on input.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::methods::fields::{null_default, Json};

/// Default `max_turns` of a prompt task.
pub const DEFAULT_MAX_TURNS: u32 = 10;

/// When a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// Only when asked.
    #[default]
    Manual,
    /// Once, at the RFC 3339 time in `schedule`.
    Once,
    /// At the times the cron expression in `schedule` matches (UTC).
    Cron,
    /// Every `schedule` seconds, counted from `created_at`.
    Interval,
    /// When `watch_path` changes (the daemon watches; here it runs like `manual`).
    FileWatch,
}

impl Trigger {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Once => "once",
            Trigger::Cron => "cron",
            Trigger::Interval => "interval",
            Trigger::FileWatch => "file_watch",
        }
    }

    /// Parses a wire name; the error names the accepted ones.
    pub fn parse(s: &str) -> Result<Trigger, String> {
        Ok(match s {
            "manual" => Trigger::Manual,
            "once" => Trigger::Once,
            "cron" => Trigger::Cron,
            "interval" => Trigger::Interval,
            "file_watch" => Trigger::FileWatch,
            _ => {
                return Err(format!(
                    "unknown trigger `{s}` (expected manual, once, cron, interval or file_watch)"
                ))
            }
        })
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A prompt task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Never run.
    #[default]
    Pending,
    /// A run is under way.
    Running,
    /// The last run succeeded.
    Completed,
    /// The last run failed.
    Failed,
}

/// How one run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// The runner returned an answer.
    Completed,
    /// The runner returned an error.
    Failed,
}

/// One run of a prompt task, keyed by its occurrence id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Execution {
    /// `<task id>:int:<k>`, `<task id>:cron:<unix minute>`, `<task id>:once` or
    /// `<task id>:manual:<random>`.
    pub execution_id: String,
    /// When the runner was called.
    #[serde(with = "ts")]
    #[schemars(with = "String")]
    pub started_at: DateTime<Utc>,
    /// When it returned.
    #[serde(with = "ts")]
    #[schemars(with = "String")]
    pub finished_at: DateTime<Utc>,
    /// How it ended.
    pub status: ExecutionStatus,
    /// The answer (empty on failure).
    #[serde(default, deserialize_with = "null_default")]
    pub answer: String,
    /// The error (`None` on success).
    #[serde(default)]
    pub error: Option<String>,
    /// Wall time of the run in milliseconds.
    #[serde(default)]
    pub duration_ms: f64,
}

fn no_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

fn default_id() -> String {
    new_task_id()
}
fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}
fn default_true() -> bool {
    true
}

/// A fresh prompt-task id: 8 hex, `-`, 1 hex (`9946d03a-b`), CAR's shape.
pub fn new_task_id() -> String {
    let h = crate::token::random_hex(5);
    format!("{}-{}", &h[..8], &h[8..9])
}

/// A prompt task, exactly CAR's wire shape. Every field except `name` and `prompt` has a
/// default: `id` a fresh one, `trigger` `manual`, `max_turns` 10, `enabled` true, `status`
/// `pending`, `created_at` none (filled from the stored copy or the clock when it runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    /// 10 characters like `9946d03a-b`; a fresh one when absent (the schema shows no
    /// default: it is random).
    #[serde(default = "default_id")]
    #[schemars(transform = no_default)]
    pub id: String,
    /// A person's name for it.
    pub name: String,
    /// What the agent is asked.
    pub prompt: String,
    /// When it runs.
    #[serde(default)]
    pub trigger: Trigger,
    /// Seconds (interval), cron expression (cron), RFC 3339 time (once), else ignored.
    #[serde(default, deserialize_with = "null_default")]
    pub schedule: String,
    /// The watched path of a `file_watch` task.
    #[serde(default, deserialize_with = "null_default")]
    pub watch_path: String,
    /// Passed to the runner untouched.
    #[serde(default, deserialize_with = "null_default")]
    pub agent_metadata: serde_json::Map<String, Json>,
    /// Passed to the runner.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Passed to the runner.
    #[serde(default, deserialize_with = "null_default")]
    pub system_prompt: String,
    /// The task's state.
    #[serde(default)]
    pub status: TaskStatus,
    /// Creation time; anchors interval occurrences.
    #[serde(default, with = "opt_ts")]
    #[schemars(with = "Option<String>")]
    pub created_at: Option<DateTime<Utc>>,
    /// When it last ran.
    #[serde(default, with = "opt_ts")]
    #[schemars(with = "Option<String>")]
    pub last_run_at: Option<DateTime<Utc>>,
    /// How many times the runner was called.
    #[serde(default, deserialize_with = "null_default")]
    pub run_count: u64,
    /// Past runs, oldest first (a bounded number is kept).
    #[serde(default, deserialize_with = "null_default")]
    pub executions: Vec<Execution>,
    /// CAR's flag; an explicit run always runs.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Ours: the principal whose run first stored it (`agent:<id>`); absent for the user's
    /// tasks. Set by the daemon, never taken from a posted task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// Where a command task's timer lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// The daemon's own timers (`durable: false`).
    Daemon,
    /// A systemd user timer (`durable: true`).
    Systemd,
}

/// A stored command task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandTask {
    /// `<slug>-<6 hex>`.
    pub id: String,
    /// As given.
    pub name: String,
    /// Absolute path of the executable.
    pub program: String,
    /// Its arguments.
    #[serde(default, deserialize_with = "null_default")]
    pub args: Vec<String>,
    /// `interval` or `cron`.
    pub trigger: Trigger,
    /// Whole seconds or a cron expression.
    pub schedule: String,
    /// OS timer (`true`) or daemon timer.
    pub durable: bool,
    /// Which backend holds the timer.
    pub backend: Backend,
    /// Loaded by the daemon timers only when true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Where it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Extra environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Stored for the daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_tier: Option<String>,
    /// When it was scheduled.
    #[serde(with = "ts")]
    #[schemars(with = "String")]
    pub created_at: DateTime<Utc>,
    /// When it last ran (daemon backend only).
    #[serde(default, with = "opt_ts")]
    #[schemars(with = "Option<String>")]
    pub last_run_at: Option<DateTime<Utc>>,
    /// How many times it was started (daemon backend only).
    #[serde(default, deserialize_with = "null_default")]
    pub run_count: u64,
    /// Exit code of the last run; `None` before one or when killed by a signal.
    #[serde(default)]
    pub last_exit_code: Option<i32>,
    /// Why the last run failed to start or ended by signal.
    #[serde(default)]
    pub last_error: Option<String>,
}

/// One `tasks.list` entry: CAR's fields plus `last_run_at`, `run_count`, `last_exit_code`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandTaskSummary {
    pub id: String,
    pub name: String,
    pub program: String,
    pub args: Vec<String>,
    pub trigger: Trigger,
    pub schedule: String,
    pub durable: bool,
    pub backend: Backend,
    pub enabled: bool,
    #[serde(with = "opt_ts")]
    #[schemars(with = "Option<String>")]
    pub last_run_at: Option<DateTime<Utc>>,
    pub run_count: u64,
    pub last_exit_code: Option<i32>,
}

/// `tasks.schedule` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleResponse {
    /// The new task's id.
    pub id: String,
    /// As requested.
    pub durable: bool,
    /// `daemon` or `systemd`.
    pub backend: Backend,
    /// The stored task.
    pub task: CommandTask,
    /// For the systemd backend: what activation did (ours, additive to CAR's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `tasks.unschedule` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnscheduleResponse {
    /// The bare id.
    pub id: String,
    /// Whether OS timer units were removed.
    pub os_removed: bool,
    /// Whether the task file was deleted.
    pub deleted: bool,
}

/// `scheduler.os_render` result: every rendering, each with its error.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Rendered {
    /// `ai.parslee.car.task.<id>`.
    pub label: String,
    /// A launchd property list.
    pub launchd_plist: Option<String>,
    /// Why there is none.
    pub launchd_error: Option<String>,
    /// One crontab line.
    pub crontab_line: Option<String>,
    /// Why there is none.
    pub crontab_error: Option<String>,
    /// Task Scheduler XML.
    pub schtasks_xml: Option<String>,
    /// Why there is none.
    pub schtasks_error: Option<String>,
    /// `car-task-<id>.service`.
    pub systemd_service: Option<String>,
    /// `car-task-<id>.timer`.
    pub systemd_timer: Option<String>,
    /// Why there are none.
    pub systemd_error: Option<String>,
}

/// `scheduler.os_install` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InstallResult {
    /// `ai.parslee.car.task.<id>`.
    pub label: String,
    /// Always `systemd`.
    pub backend: Backend,
    /// What was written and what activation did.
    pub detail: String,
}

/// `scheduler.os_uninstall` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UninstallResult {
    /// The label.
    pub label: String,
    /// Whether any managed unit file was removed.
    pub removed: bool,
}

/// `scheduler.os_reconcile` result.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ReconcileReport {
    /// Labels uninstalled.
    pub removed: Vec<String>,
    /// Managed units left in place.
    pub kept: usize,
    /// Problems that kept a unit in place or stopped its removal.
    pub errors: Vec<String>,
}

/// Serde for `DateTime<Utc>` as `2026-12-01T17:41:08.022Z` (any RFC 3339 offset accepted).
pub mod ts {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::clock::rfc3339(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let s = String::deserialize(d)?;
        crate::clock::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// Serde for `Option<DateTime<Utc>>`: `null` (or `""`) or a [`ts`] string.
pub mod opt_ts {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&crate::clock::rfc3339(t)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            None => Ok(None),
            Some(s) if s.is_empty() => Ok(None),
            Some(s) => crate::clock::parse_rfc3339(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}
