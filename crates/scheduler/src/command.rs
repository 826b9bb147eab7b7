//! Command tasks (`tasks.*`): a program run on a cadence. The shapes are CAR's, declared in
//! the contract (`car_proto::methods::scheduler`); the rules are [`CommandTaskExt`].
//!
//! A command task is stored in the same directory as prompt tasks, as `<id>.json` with
//! `"kind": "command"` added to CAR's stored shape. Its id is `<slug of name>-<6 hex>`
//! (`nightly-backup-3f09a1`): lower-case ASCII letters and digits, runs of anything else
//! turned into one `-`, at most 40 characters, `task` if nothing is left.
//!
//! `permission_tier` is stored and returned untouched; enforcing it is the daemon's job.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Deserialize;

use crate::cadence::{parse_cron, MAX_INTERVAL_SECS};
use crate::task::Trigger;
use car_proto::methods::fields::null_default;

use crate::util;
use crate::SchedulerError;

pub use car_proto::methods::scheduler::{
    Backend, CommandTask, CommandTaskSummary, ScheduleResponse, UnscheduleResponse,
};

/// `tasks.schedule`'s `cadence`: exactly one of the two.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct CadenceRequest {
    /// Whole seconds ≥ 1 (a JSON number).
    #[serde(default)]
    pub interval_secs: Option<serde_json::Number>,
    /// A 5-field cron expression or macro.
    #[serde(default)]
    pub cron: Option<String>,
}

fn default_true() -> bool {
    true
}

/// `tasks.schedule` params.
#[derive(Debug, Clone, Deserialize)]
pub struct ScheduleRequest {
    /// A person's name; the id is derived from it.
    pub name: String,
    /// Absolute path of an existing executable file.
    pub program: String,
    /// Arguments, passed as they are (no shell).
    #[serde(default, deserialize_with = "null_default")]
    pub args: Vec<String>,
    /// When it runs.
    pub cadence: CadenceRequest,
    /// `true` (default): an OS timer (systemd); `false`: a daemon timer.
    #[serde(default = "default_true")]
    pub durable: bool,
    /// Absolute directory to run in (default: the daemon's).
    #[serde(default)]
    pub working_dir: Option<String>,
    /// Added to the daemon's environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Stored for the daemon.
    #[serde(default)]
    pub permission_tier: Option<String>,
}

/// Building and reading a [`CommandTask`] (the shape is the contract's).
pub trait CommandTaskExt: Sized {
    /// Validates a `tasks.schedule` request and builds the task.
    fn from_request(req: ScheduleRequest) -> Result<Self, SchedulerError>;
    /// Its `tasks.list` entry.
    fn summary(&self) -> CommandTaskSummary;
    /// Its cadence.
    fn cadence(&self) -> Result<crate::Cadence, SchedulerError>;
    /// The stored form: CAR's shape plus `"kind": "command"`.
    fn to_stored_json(&self) -> serde_json::Value;
}

impl CommandTaskExt for CommandTask {
    /// Validates `tasks.schedule` params and builds the task to store (no I/O but
    /// checking `program` and `working_dir`). Errors name the JSON field path.
    fn from_request(req: ScheduleRequest) -> Result<CommandTask, SchedulerError> {
        if req.name.trim().is_empty() {
            return Err(SchedulerError::invalid("name", "must not be empty"));
        }
        check_program(&req.program)?;
        for (i, a) in req.args.iter().enumerate() {
            if a.contains('\0') || a.contains('\n') {
                return Err(SchedulerError::invalid(
                    format!("args[{i}]"),
                    "must not contain NUL or newline",
                ));
            }
        }
        let (trigger, schedule) = cadence_of_request(&req.cadence)?;
        if let Some(dir) = &req.working_dir {
            let p = Path::new(dir);
            if !p.is_absolute() || !p.is_dir() {
                return Err(SchedulerError::invalid(
                    "working_dir",
                    format!("`{dir}` is not an absolute path to an existing directory"),
                ));
            }
        }
        for (k, v) in req.env.iter().flatten() {
            let bad_key = k.is_empty() || k.contains(['=', '\0', '\n']);
            if bad_key || v.contains(['\0', '\n']) {
                return Err(SchedulerError::invalid(
                    "env",
                    format!("`{k}`: names must be non-empty without `=`; no NUL or newline"),
                ));
            }
        }
        let backend = if req.durable {
            Backend::Systemd
        } else {
            Backend::Daemon
        };
        Ok(CommandTask {
            id: command_task_id(&req.name),
            name: req.name,
            program: req.program,
            args: req.args,
            trigger,
            schedule,
            durable: req.durable,
            backend,
            enabled: true,
            working_dir: req.working_dir,
            env: req.env,
            permission_tier: req.permission_tier,
            created_at: util::now(),
            last_run_at: None,
            run_count: 0,
            last_exit_code: None,
            last_error: None,
        })
    }

    /// The `tasks.list` view.
    fn summary(&self) -> CommandTaskSummary {
        CommandTaskSummary {
            id: self.id.clone(),
            name: self.name.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
            trigger: self.trigger,
            schedule: self.schedule.clone(),
            durable: self.durable,
            backend: self.backend,
            enabled: self.enabled,
            last_run_at: self.last_run_at,
            run_count: self.run_count,
            last_exit_code: self.last_exit_code,
        }
    }

    /// The task's cadence (a stored task was validated when scheduled; a hand-edited
    /// file may not be, hence the `Result`).
    fn cadence(&self) -> Result<crate::Cadence, SchedulerError> {
        match self.trigger {
            Trigger::Interval | Trigger::Cron => {
                Ok(crate::task::cadence_of(self.trigger, &self.schedule)?.expect("recurring"))
            }
            other => Err(SchedulerError::invalid(
                "trigger",
                format!("a command task's trigger must be interval or cron, not {other}"),
            )),
        }
    }

    fn to_stored_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("command task serialises");
        if let Some(map) = v.as_object_mut() {
            map.insert("kind".into(), "command".into());
        }
        v
    }
}

fn check_program(program: &str) -> Result<(), SchedulerError> {
    let p = Path::new(program);
    let ok = p.is_absolute()
        && p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(SchedulerError::invalid(
            "program",
            format!("`{program}` is not an absolute path to an existing executable file"),
        ))
    }
}

fn cadence_of_request(c: &CadenceRequest) -> Result<(Trigger, String), SchedulerError> {
    match (&c.interval_secs, &c.cron) {
        (Some(n), None) => {
            let secs = n.as_u64().filter(|s| (1..=MAX_INTERVAL_SECS).contains(s));
            match secs {
                Some(s) => Ok((Trigger::Interval, s.to_string())),
                None => Err(SchedulerError::invalid(
                    "cadence.interval_secs",
                    format!(
                        "must be a whole number of seconds from 1 to {MAX_INTERVAL_SECS}, got {n}"
                    ),
                )),
            }
        }
        (None, Some(cron)) => {
            let expr = parse_cron(cron).map_err(|m| SchedulerError::invalid("cadence.cron", m))?;
            Ok((Trigger::Cron, expr.as_str().to_owned()))
        }
        _ => Err(SchedulerError::invalid(
            "cadence",
            "give exactly one of `interval_secs` and `cron`",
        )),
    }
}

/// `<slug of name>-<6 hex>`.
pub fn command_task_id(name: &str) -> String {
    let mut slug = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    slug.truncate(40);
    let slug = slug.trim_end_matches('-');
    let slug = if slug.is_empty() { "task" } else { slug };
    format!("{slug}-{}", util::random_hex(6))
}
