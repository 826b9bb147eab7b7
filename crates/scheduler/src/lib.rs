//! `car-scheduler`: the engine behind the daemon's `scheduler.*` and `tasks.*` methods.
//!
//! Owns: task files under the directory it is given, cadences, daemon timers, OS schedule
//! renderings, command-task processes. Must not touch: JSON-RPC, models (prompt tasks run
//! through the `PromptRunner` seam), or files outside the directories the daemon passes in.
//!
//! The shapes (`Task`, `Execution`, `CommandTask`, the OS reports) are the contract's
//! (`car_proto::methods::scheduler`), re-exported here; this crate owns their rules
//! ([`TaskExt`], [`CommandTaskExt`]).
//!
//! The daemon does JSON-RPC, decodes params ([`decode`] gives serde errors a field path)
//! and runs agents; this crate takes typed values and callbacks. Its only side effects are
//! file I/O under directories the daemon passes in, spawning command-task processes, and,
//! when an [`OsScheduler`] is built with `activate`, running `systemctl --user`. It never
//! reads the real crontab, systemd directories or home on its own.
//!
//! # Pieces
//!
//! | method | API | module |
//! | --- | --- | --- |
//! | `scheduler.create` | [`TaskExt::create`] from [`NewTask`] | [`task`] |
//! | `scheduler.run` | [`run_task`] with a [`PromptRunner`] | [`run`] |
//! | `scheduler.run_loop` | [`run_task_loop`] | [`run`] |
//! | `scheduler.os_render` | [`render()`] / [`render_spec`] → [`Rendered`] | [`mod@render`] |
//! | `scheduler.os_install` / `os_uninstall` / `os_list` / `os_reconcile` | [`OsScheduler`] | [`os`] |
//! | `tasks.schedule` / `tasks.list` / `tasks.unschedule` | [`CommandTasks`] | [`tasks`] |
//!
//! Durable command tasks go to the [`OsScheduler`]; the others to [`DaemonTimers`]
//! ([`timers`]), which the daemon starts at boot so they survive restarts. All tasks, prompt
//! and command, live in one [`TaskStore`] directory ([`store`]), one JSON file per task.
//! Cadences ([`Cadence`], [`parse_cron`]) are evaluated in UTC ([`cadence`]).
//!
//! # Errors
//!
//! Everything returns [`SchedulerError`]; validation failures are
//! [`SchedulerError::Invalid`] with the JSON path of the offending field (see [`error`]).
//!
//! # Logging
//!
//! `tracing` only: runs and installs at `info`, skipped or failed work at `warn`. Prompt
//! text, answers and command output are never logged (command output goes to its log file).

pub mod cadence;
pub mod command;
pub mod error;
pub mod os;
pub mod render;
pub mod run;
pub mod store;
pub mod task;
pub mod tasks;
pub mod timers;
mod util;

pub use cadence::{parse_cron, parse_interval, Cadence, CronExpr};
pub use command::{
    command_task_id, Backend, CadenceRequest, CommandTask, CommandTaskExt, CommandTaskSummary,
    ScheduleRequest, ScheduleResponse, UnscheduleResponse,
};
pub use error::{decode, SchedulerError};
pub use os::{InstallResult, OsScheduler, ReconcileReport, UninstallResult};
pub use render::{label_of, render, render_spec, RenderSpec, Rendered, LABEL_PREFIX};
pub use run::{
    run_task, run_task_as, run_task_loop, run_task_loop_as, PromptRunner, MAX_EXECUTIONS,
};
pub use store::{StoredTask, TaskStore};
pub use task::{
    new_task_id, Execution, ExecutionStatus, NewTask, Task, TaskExt, TaskStatus, Trigger,
    DEFAULT_MAX_TURNS,
};
pub use tasks::CommandTasks;
pub use timers::{DaemonTimers, DEFAULT_KILL_GRACE};
