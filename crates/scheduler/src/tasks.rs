//! `tasks.schedule` / `tasks.list` / `tasks.unschedule`: command tasks over both backends.
//!
//! `schedule` validates ([`CommandTask::from_request`]), then for `durable: false` saves
//! the task and arms a daemon timer, and for `durable: true` installs systemd units through
//! [`OsScheduler::install_command`] (which saves the task first). `unschedule` accepts a
//! bare id or a full label, stops any daemon timer, removes any managed OS units and
//! deletes the task file; an unknown id is not an error (`deleted: false`), a prompt task's
//! id is (field `id`).

use crate::command::CommandTaskExt as _;
use crate::command::{
    CommandTask, CommandTaskSummary, ScheduleRequest, ScheduleResponse, UnscheduleResponse,
};
use crate::render::LABEL_PREFIX;
use crate::store::StoredTask;
use crate::util::check_id;
use crate::{DaemonTimers, OsScheduler, SchedulerError, TaskStore};

/// The `tasks.*` engine. Give it clones of the daemon's one store, timers and OS scheduler.
#[derive(Debug, Clone)]
pub struct CommandTasks {
    store: TaskStore,
    timers: DaemonTimers,
    os: OsScheduler,
}

impl CommandTasks {
    /// Ties the three together.
    pub fn new(store: TaskStore, timers: DaemonTimers, os: OsScheduler) -> Self {
        Self { store, timers, os }
    }

    /// `tasks.schedule`.
    pub async fn schedule(&self, req: ScheduleRequest) -> Result<ScheduleResponse, SchedulerError> {
        let mut task = CommandTask::from_request(req)?;
        // Six random hex digits rarely collide, but a collision must not replace a task.
        while self.store.path_of(&task.id)?.exists() {
            task.id = crate::command_task_id(&task.name);
        }
        let detail = if task.durable {
            Some(self.os.install_command(&task).await?.detail)
        } else {
            {
                let _guard = self.store.lock(&task.id).await;
                self.store.save_command(&task)?;
            }
            if let Err(e) = self.timers.schedule(&task) {
                let _ = self.store.delete(&task.id);
                return Err(e);
            }
            None
        };
        tracing::info!(task = %task.id, backend = ?task.backend, "command task scheduled");
        Ok(ScheduleResponse {
            id: task.id.clone(),
            durable: task.durable,
            backend: task.backend,
            task,
            detail,
        })
    }

    /// `tasks.list`: every stored command task, sorted by id.
    pub fn list(&self) -> Result<Vec<CommandTaskSummary>, SchedulerError> {
        Ok(self
            .store
            .list()?
            .into_iter()
            .filter_map(|t| match t {
                StoredTask::Command(c) => Some(c.summary()),
                StoredTask::Prompt(_) => None,
            })
            .collect())
    }

    /// `tasks.unschedule` (bare id or `ai.parslee.car.task.<id>`).
    pub async fn unschedule(
        &self,
        id_or_label: &str,
    ) -> Result<UnscheduleResponse, SchedulerError> {
        let id = id_or_label
            .strip_prefix(LABEL_PREFIX)
            .unwrap_or(id_or_label);
        check_id("id", id)?;
        match self.store.load(id) {
            Ok(Some(StoredTask::Prompt(_))) => {
                return Err(SchedulerError::invalid(
                    "id",
                    format!("`{id}` is a prompt task, not a command task"),
                ))
            }
            // A file nothing can read any more is removed all the same.
            Err(e @ SchedulerError::Corrupt { .. }) => {
                tracing::warn!(task = id, error = %e, "unscheduling a corrupt task")
            }
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        self.timers.unschedule(id);
        let os_removed = self.os.uninstall(id).await?.removed;
        let deleted = {
            let _guard = self.store.lock(id).await;
            self.store.delete(id)?
        };
        tracing::info!(task = id, os_removed, deleted, "command task unscheduled");
        Ok(UnscheduleResponse {
            id: id.to_owned(),
            os_removed,
            deleted,
        })
    }
}
