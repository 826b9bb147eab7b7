//! `scheduler.*` (prompt tasks an agent runs, and their durable OS-level triggers) and
//! `tasks.*` (commands on a cadence, the OS backend hidden) — reference `scheduler` and
//! `tasks` sections.
//!
//! Tasks persist under `CAR_HOME/tasks/`. `scheduler.run` seeds a posted task with its
//! stored execution history, so an occurrence already serviced is not run twice. A
//! `tasks.schedule` with `durable: false` runs on the daemon's own timers, which are
//! reloaded from the store when the daemon starts; `durable: true` (the default) installs
//! a systemd user timer (on Linux; `--systemd-user-dir`), which fires with no daemon
//! running. `scheduler.os_install`, `scheduler.os_uninstall` and `scheduler.os_reconcile`
//! pass the approval gate (`gated()` below); `tasks.schedule` and `tasks.unschedule` are
//! not gated but are host-only (`host(..)`): only the host token schedules a command.

use crate::methods::{Access, Resource};
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Name, NoParams};

mod shapes;
use super::proposal::Object;
use super::{
    host, json, module_fn, op, opt, req, req_at, ArgKind::Json as JsonArg, ArgKind::Str,
    Declaration,
};
pub use shapes::*;

/// `scheduler.create` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CreateParams {
    pub name: Name,
    pub prompt: String,
    /// `manual` (default), `once`, `cron`, `interval` or `file_watch`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// Interval seconds, a 5-field cron expression, or an RFC 3339 time for `once`.
    #[serde(default)]
    pub schedule: Option<String>,
    #[serde(default)]
    pub system_prompt: Option<String>,
}

/// `scheduler.run` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RunParams {
    pub task: Object,
}

/// `scheduler.run_loop` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RunLoopParams {
    pub task: Object,
    #[serde(default)]
    pub max_iterations: Option<u32>,
}

/// `scheduler.os_render` / `scheduler.os_install` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OsScheduleParams {
    pub task: Object,
    pub program: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
}

/// `scheduler.os_uninstall {label}` (a full label or a bare task id).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OsUninstallParams {
    pub label: Name,
}

/// A `tasks.schedule` cadence: exactly one of `interval_secs` and `cron`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Cadence {
    #[serde(default)]
    pub interval_secs: Option<u64>,
    #[serde(default)]
    pub cron: Option<String>,
}

/// `tasks.schedule` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ScheduleParams {
    pub name: Name,
    /// Absolute path of the program to run.
    pub program: String,
    #[serde(default)]
    pub args: Option<Vec<String>>,
    pub cadence: Cadence,
    /// Default `true`: the OS scheduler; `false`: the daemon's timers.
    #[serde(default)]
    pub durable: Option<bool>,
    #[serde(default)]
    pub working_dir: Option<String>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub permission_tier: Option<String>,
}

/// `tasks.unschedule {id}` (a bare id or a full label).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnscheduleParams {
    pub id: Name,
}

/// CAR's `(task_json, program, args_json)`.
const OS_ARGS: &[super::Arg] = &[
    req_at("task_json", "task", JsonArg),
    req("program", Str),
    req_at("args_json", "args", JsonArg),
];

crate::method!(
    /// `scheduler.create` → the task object (nothing runs).
    Create = op("scheduler.create", "build a prompt task definition (it does not run)");
    access: Access::owned(Resource::Tasks);
    CreateParams => Task;
    module_fn(
        "create_task",
        &[req("name", Str), req("prompt", Str), opt("trigger", Str), opt("schedule", Str), opt("system_prompt", Str)],
        json()
    )
);
crate::method!(
    /// `scheduler.run {task}` → one execution record.
    Run = op("scheduler.run", "run a prompt task's due occurrence once (an occurrence already run is not repeated)");
    access: Access::owned(Resource::Tasks);
    RunParams => Execution
);
crate::method!(
    /// `scheduler.run_loop {task, max_iterations?}` → the execution records.
    RunLoop = op("scheduler.run_loop", "run a prompt task on its cadence for a number of occurrences");
    access: Access::owned(Resource::Tasks);
    RunLoopParams => Vec<Execution>
);
crate::method!(
    /// `scheduler.os_render` → every backend's rendering (no I/O).
    OsRender = op("scheduler.os_render", "preview the OS schedule (systemd, crontab, launchd, schtasks) a task would install");
    access: Access::owned(Resource::Tasks);
    OsScheduleParams => Rendered;
    module_fn("render_os_schedule", OS_ARGS, json())
);
crate::method!(
    /// `scheduler.os_install` → `{label, backend, detail}`.
    OsInstall = op("scheduler.os_install", "install a task's durable OS schedule");
    access: Access::owned(Resource::Tasks).gated();
    OsScheduleParams => InstallResult;
    module_fn("install_os_schedule", OS_ARGS, json())
);
crate::method!(
    /// `scheduler.os_uninstall {label}` → `{label, removed}`.
    OsUninstall = op("scheduler.os_uninstall", "remove a task's OS schedule");
    access: Access::owned(Resource::Tasks).gated();
    OsUninstallParams => UninstallResult;
    module_fn("uninstall_os_schedule", &[req_at("label_or_id", "label", Str)], json())
);
crate::method!(
    /// `scheduler.os_list` → the installed labels.
    OsList = op("scheduler.os_list", "the OS schedules this daemon installed");
    access: Access::owned(Resource::Tasks);
    NoParams => Vec<String>;
    module_fn("list_os_schedules", &[], json())
);
crate::method!(
    /// `scheduler.os_reconcile` → `{removed, kept, errors}`.
    OsReconcile = op("scheduler.os_reconcile", "remove OS schedules whose task is gone");
    access: Access::owned(Resource::Tasks).gated();
    NoParams => ReconcileReport;
    module_fn("reconcile_os_schedules", &[], json())
);
crate::method!(
    /// `tasks.schedule` → `{id, durable, backend, task}`.
    Schedule = host("tasks.schedule", "run a command on a cadence (daemon timers or the OS scheduler)");
    access: Access::owned(Resource::Tasks);
    ScheduleParams => ScheduleResponse;
    module_fn("schedule_task", &[req_at("spec_json", "", JsonArg)], json())
);
crate::method!(
    /// `tasks.list` → the command tasks.
    List = op("tasks.list", "the scheduled command tasks");
    access: Access::owned(Resource::Tasks).observer();
    NoParams => Vec<CommandTaskSummary>;
    module_fn("list_scheduled_tasks", &[], json())
);
crate::method!(
    /// `tasks.unschedule {id}` → `{id, os_removed, deleted}`.
    Unschedule = host("tasks.unschedule", "stop and delete a scheduled command task");
    access: Access::owned(Resource::Tasks);
    UnscheduleParams => UnscheduleResponse;
    module_fn("unschedule_task", &[req_at("id_or_label", "id", Str)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Create>(),
    Declaration::of::<Run>(),
    Declaration::of::<RunLoop>(),
    Declaration::of::<OsRender>(),
    Declaration::of::<OsInstall>(),
    Declaration::of::<OsUninstall>(),
    Declaration::of::<OsList>(),
    Declaration::of::<OsReconcile>(),
    Declaration::of::<Schedule>(),
    Declaration::of::<List>(),
    Declaration::of::<Unschedule>(),
];
