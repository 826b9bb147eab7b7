//! Prompt tasks (`scheduler.*`): the wire shape, creation and validation.
//!
//! The shape is CAR's, field for field. Decoding is lenient: unknown fields are ignored
//! and every field except `name` and `prompt` has a default (`null` counts as missing):
//! `id` a fresh one, `trigger` `manual`, `max_turns` 10, `enabled` true, `status`
//! `pending`, `created_at` none (filled by [`crate::run_task`] from the stored copy or the
//! clock). An unknown `trigger` is an error (CAR silently maps it to `manual`).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::cadence::{parse_cron, parse_interval, Cadence};
use crate::util::{self, null_default};
use crate::SchedulerError;

/// Default `max_turns` of a prompt task.
pub const DEFAULT_MAX_TURNS: u32 = 10;

/// When a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// The runner returned an answer.
    Completed,
    /// The runner returned an error.
    Failed,
}

/// One run of a prompt task, keyed by its occurrence id (see [`crate::run_task`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// `<task id>:int:<k>`, `<task id>:cron:<unix minute>`, `<task id>:once` or
    /// `<task id>:manual:<random>`.
    pub execution_id: String,
    /// When the runner was called.
    #[serde(with = "util::ts")]
    pub started_at: DateTime<Utc>,
    /// When it returned.
    #[serde(with = "util::ts")]
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

fn default_id() -> String {
    new_task_id()
}
fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}
fn default_true() -> bool {
    true
}

/// A prompt task, exactly CAR's wire shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// 10 characters like `9946d03a-b`.
    #[serde(default = "default_id")]
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
    pub agent_metadata: Map<String, Value>,
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
    #[serde(default, with = "util::opt_ts")]
    pub created_at: Option<DateTime<Utc>>,
    /// When it last ran.
    #[serde(default, with = "util::opt_ts")]
    pub last_run_at: Option<DateTime<Utc>>,
    /// How many times the runner was called.
    #[serde(default, deserialize_with = "null_default")]
    pub run_count: u64,
    /// Past runs, oldest first (at most [`crate::MAX_EXECUTIONS`] kept).
    #[serde(default, deserialize_with = "null_default")]
    pub executions: Vec<Execution>,
    /// CAR's flag; not consulted by [`crate::run_task`] (an explicit run always runs).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Ours: the principal whose run first stored it (`agent:<id>`); absent for the user's
    /// tasks. Set by the daemon, never taken from a posted task (see [`crate::run_task_as`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// `scheduler.create` params: the user-settable part of a [`Task`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NewTask {
    /// Required, non-empty.
    pub name: String,
    /// Required, non-empty.
    pub prompt: String,
    /// Default `manual`; anything else unknown is an error naming `trigger`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// See [`Task::schedule`].
    #[serde(default, deserialize_with = "null_default")]
    pub schedule: String,
    /// See [`Task::watch_path`].
    #[serde(default, deserialize_with = "null_default")]
    pub watch_path: String,
    /// See [`Task::agent_metadata`].
    #[serde(default, deserialize_with = "null_default")]
    pub agent_metadata: Map<String, Value>,
    /// Default [`DEFAULT_MAX_TURNS`].
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// See [`Task::system_prompt`].
    #[serde(default, deserialize_with = "null_default")]
    pub system_prompt: String,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// A fresh prompt-task id: 8 hex, `-`, 1 hex (`9946d03a-b`), CAR's shape.
pub fn new_task_id() -> String {
    let h = util::random_hex(9);
    format!("{}-{}", &h[..8], &h[8..])
}

impl Task {
    /// Validates `scheduler.create` params and builds the task (`pending`, created now).
    /// Does no I/O: the task is persisted by [`crate::run_task`] or an OS install.
    pub fn create(new: NewTask) -> Result<Task, SchedulerError> {
        let trigger = match new.trigger.as_deref() {
            None | Some("") => Trigger::Manual,
            Some(t) => Trigger::parse(t).map_err(|m| SchedulerError::invalid("trigger", m))?,
        };
        let task = Task {
            id: new_task_id(),
            name: new.name,
            prompt: new.prompt,
            trigger,
            schedule: new.schedule.trim().to_owned(),
            watch_path: new.watch_path,
            agent_metadata: new.agent_metadata,
            max_turns: new.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
            system_prompt: new.system_prompt,
            status: TaskStatus::Pending,
            created_at: Some(util::now()),
            last_run_at: None,
            run_count: 0,
            executions: Vec::new(),
            enabled: new.enabled.unwrap_or(true),
            owner: None,
        };
        task.validate()?;
        Ok(task)
    }

    /// Checks the id, name, prompt, schedule (per trigger) and watch path.
    pub fn validate(&self) -> Result<(), SchedulerError> {
        util::check_id("id", &self.id)?;
        if self.name.trim().is_empty() {
            return Err(SchedulerError::invalid("name", "must not be empty"));
        }
        if self.prompt.trim().is_empty() {
            return Err(SchedulerError::invalid("prompt", "must not be empty"));
        }
        if self.trigger == Trigger::Once {
            parse_once(&self.schedule)?;
        }
        if self.trigger == Trigger::FileWatch && self.watch_path.trim().is_empty() {
            return Err(SchedulerError::invalid(
                "watch_path",
                "a file_watch task needs a path to watch",
            ));
        }
        self.cadence()?;
        Ok(())
    }

    /// The recurrence of an interval or cron task (`None` for the others); errors name
    /// `schedule`.
    pub fn cadence(&self) -> Result<Option<Cadence>, SchedulerError> {
        cadence_of(self.trigger, &self.schedule)
    }
}

/// The cadence `schedule` denotes under `trigger`, validated; errors name `schedule`.
pub fn cadence_of(trigger: Trigger, schedule: &str) -> Result<Option<Cadence>, SchedulerError> {
    let invalid = |m: String| SchedulerError::invalid("schedule", m);
    match trigger {
        Trigger::Interval => Ok(Some(Cadence::Interval(
            parse_interval(schedule).map_err(invalid)?,
        ))),
        Trigger::Cron => Ok(Some(Cadence::Cron(parse_cron(schedule).map_err(invalid)?))),
        _ => Ok(None),
    }
}

fn parse_once(schedule: &str) -> Result<DateTime<Utc>, SchedulerError> {
    DateTime::parse_from_rfc3339(schedule.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            SchedulerError::invalid(
                "schedule",
                format!("a once task needs an RFC 3339 time, got `{schedule}`: {e}"),
            )
        })
}
