//! Prompt tasks (`scheduler.*`): creation and validation ([`TaskExt`]); the shape is the
//! contract's (`car_proto::methods::scheduler::Task`).
//!
//! The shape is CAR's, field for field. Decoding is lenient: unknown fields are ignored
//! and every field except `name` and `prompt` has a default (`null` counts as missing):
//! `id` a fresh one, `trigger` `manual`, `max_turns` 10, `enabled` true, `status`
//! `pending`, `created_at` none (filled by [`crate::run_task`] from the stored copy or the
//! clock). An unknown `trigger` is an error (CAR silently maps it to `manual`).

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cadence::{parse_cron, parse_interval, Cadence};
use car_proto::methods::fields::null_default;

use crate::util;
use crate::SchedulerError;

pub use car_proto::methods::scheduler::{
    new_task_id, Execution, ExecutionStatus, Task, TaskStatus, Trigger, DEFAULT_MAX_TURNS,
};

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

/// Creating and checking a [`Task`] (the shape is the contract's; the rules are here).
pub trait TaskExt: Sized {
    /// Validates `scheduler.create` params and builds the task (`pending`, created now).
    /// Does no I/O: the task is persisted by [`crate::run_task`] or an OS install.
    fn create(new: NewTask) -> Result<Self, SchedulerError>;
    /// Checks the id, name, prompt, schedule (per trigger) and watch path.
    fn validate(&self) -> Result<(), SchedulerError>;
    /// The recurrence of an interval or cron task (`None` for the others); errors name
    /// `schedule`.
    fn cadence(&self) -> Result<Option<Cadence>, SchedulerError>;
}

impl TaskExt for Task {
    fn create(new: NewTask) -> Result<Task, SchedulerError> {
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

    fn validate(&self) -> Result<(), SchedulerError> {
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

    fn cadence(&self) -> Result<Option<Cadence>, SchedulerError> {
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
