//! Running prompt tasks (`scheduler.run`, `scheduler.run_loop`) with occurrence dedup.
//!
//! # Occurrences
//!
//! Each run services one *occurrence*, whose id becomes the execution's `execution_id`:
//!
//! | trigger | occurrence id | meaning |
//! | --- | --- | --- |
//! | interval | `<id>:int:<k>` | k = ⌊(now − created_at) / interval⌋ (0 if the clock is behind) |
//! | cron | `<id>:cron:<m>` | m = unix minute of the latest matching time ≤ now (UTC) |
//! | once | `<id>:once` | the one and only |
//! | manual, file_watch | `<id>:manual:<8 hex>` | fresh every run: never deduped |
//!
//! [`run_task`] first seeds the posted task with what the store holds for its id (the
//! stored history, run count, last run time and status win over the posted ones; a posted
//! task without `created_at` takes the stored one, else now). If the history already has the
//! current occurrence, that execution is returned and the runner is not called. Otherwise
//! the runner runs, its execution is appended (history capped at [`MAX_EXECUTIONS`],
//! oldest dropped), `status`, `last_run_at` and `run_count` are updated and the task is
//! saved atomically. Runs of one task id are serialised through the store's lock, so two
//! concurrent `scheduler.run` calls for one occurrence call the runner once.
//! `enabled` is not consulted: an explicit run always runs. An id that names a stored
//! command task is refused (`invalid id`) and the command task is left as it was.
//!
//! # Owners
//!
//! [`run_task_as`] / [`run_task_loop_as`] run on behalf of an agent (`owner:
//! Some("agent:<id>")`): a task that agent stores is recorded as its (`owner`), and a
//! stored task of anyone else — another agent's or the user's — is refused (`invalid id`,
//! left as it was), so one agent can neither run another's task nor overwrite its history.
//! The user (`owner: None`, [`run_task`]) runs any task; a stored task keeps its owner. A
//! posted task's own `owner` is never believed.
//!
//! # Loops
//!
//! [`run_task_loop`] runs manual, once and file_watch tasks once (immediately: a `once`
//! task's time is the OS or daemon's to honour; a `once` already run returns no new
//! execution). Interval and cron tasks run the current
//! occurrence unless already serviced, then sleep until the next occurrence, until
//! `max_iterations` runner calls were made. `max_iterations` defaults to 1 (CAR's default
//! is unclear; one run never blocks a caller unexpectedly); 0 is refused. Dropping the
//! future cancels it; a run in flight is then neither recorded nor saved.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::cadence::Cadence;
use crate::store::StoredTask;
use crate::task::TaskExt as _;
use crate::task::{Execution, ExecutionStatus, Task, TaskStatus, Trigger};
use crate::util;
use crate::{SchedulerError, TaskStore};

/// Most executions kept in a task's history.
pub const MAX_EXECUTIONS: usize = 200;

/// Runs one agent turn-loop for a prompt. Object-safe: the daemon passes `&dyn`.
pub trait PromptRunner: Send + Sync {
    /// Runs `prompt` and returns the answer, or an error message.
    fn run<'a>(
        &'a self,
        prompt: &'a str,
        system_prompt: &'a str,
        max_turns: u32,
        metadata: &'a Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>>;
}

/// Runs the task's current occurrence unless it was already serviced (module docs).
/// Returns the task as saved and the execution (new or prior).
pub async fn run_task(
    store: &TaskStore,
    task: Task,
    runner: &dyn PromptRunner,
) -> Result<(Task, Execution), SchedulerError> {
    run_task_as(store, task, runner, None).await
}

/// [`run_task`] on behalf of `owner` (module docs, "Owners").
pub async fn run_task_as(
    store: &TaskStore,
    task: Task,
    runner: &dyn PromptRunner,
    owner: Option<&str>,
) -> Result<(Task, Execution), SchedulerError> {
    let (task, execution, _) = run_once(store, task, runner, owner, SystemTime::now()).await?;
    Ok((task, execution))
}

/// Runs a task repeatedly on its cadence (module docs); returns the new executions.
pub async fn run_task_loop(
    store: &TaskStore,
    task: Task,
    max_iterations: Option<u32>,
    runner: &dyn PromptRunner,
) -> Result<Vec<Execution>, SchedulerError> {
    run_task_loop_as(store, task, max_iterations, runner, None).await
}

/// [`run_task_loop`] on behalf of `owner` (module docs, "Owners").
pub async fn run_task_loop_as(
    store: &TaskStore,
    task: Task,
    max_iterations: Option<u32>,
    runner: &dyn PromptRunner,
    owner: Option<&str>,
) -> Result<Vec<Execution>, SchedulerError> {
    let max = max_iterations.unwrap_or(1);
    if max == 0 {
        return Err(SchedulerError::invalid(
            "max_iterations",
            "must be at least 1",
        ));
    }
    task.validate()?;
    let cadence = task.cadence()?;
    let mut task = task;
    let mut out = Vec::new();
    loop {
        let (saved, execution, ran) =
            run_once(store, task, runner, owner, SystemTime::now()).await?;
        task = saved;
        if ran {
            out.push(execution);
        }
        let Some(cadence) = &cadence else {
            // Manual, once and file_watch run once; a serviced once returns nothing new.
            return Ok(out);
        };
        if out.len() >= max as usize {
            return Ok(out);
        }
        let now = SystemTime::now();
        let next = next_occurrence(&task, cadence, now);
        let wait = next.duration_since(now).unwrap_or_default();
        tracing::debug!(task = %task.id, wait_ms = wait.as_millis() as u64, "run loop sleeping");
        tokio::time::sleep(wait).await;
    }
}

/// Seeds, dedups, runs and saves. The bool says whether the runner was called.
async fn run_once(
    store: &TaskStore,
    mut task: Task,
    runner: &dyn PromptRunner,
    owner: Option<&str>,
    now: SystemTime,
) -> Result<(Task, Execution, bool), SchedulerError> {
    task.validate()?;
    let _guard = store.lock(&task.id).await;
    let stored = match store.load(&task.id)? {
        // A command task (`tasks.schedule`, host-only) is never replaced by a prompt task
        // (any caller's `scheduler.run`): that would swap a host's command for an agent's
        // prompt under the same id (issue 24).
        Some(StoredTask::Command(_)) => {
            return Err(SchedulerError::invalid(
                "id",
                format!(
                    "{:?} is a command task (tasks.schedule); a prompt task cannot replace it",
                    task.id
                ),
            ))
        }
        Some(StoredTask::Prompt(stored)) => Some(stored),
        None => None,
    };
    if let (Some(agent), Some(stored)) = (owner, &stored) {
        if stored.owner.as_deref() != Some(agent) {
            return Err(SchedulerError::invalid(
                "id",
                format!(
                    "{:?} is another principal's prompt task; an agent runs only its own",
                    task.id
                ),
            ));
        }
    }
    task.owner = match &stored {
        Some(stored) => stored.owner.clone(),
        None => owner.map(str::to_string),
    };
    if let Some(stored) = stored {
        task.executions = stored.executions;
        task.run_count = stored.run_count;
        task.last_run_at = stored.last_run_at;
        task.status = stored.status;
        task.created_at = task.created_at.or(stored.created_at);
    }
    let created_at = *task.created_at.get_or_insert_with(util::now);
    let occurrence = occurrence_id(&task, created_at, now)?;
    if let Some(prior) = task
        .executions
        .iter()
        .rev()
        .find(|e| e.execution_id == occurrence)
    {
        tracing::debug!(task = %task.id, occurrence, "occurrence already serviced");
        let prior = prior.clone();
        return Ok((task, prior, false));
    }

    tracing::info!(task = %task.id, occurrence, "running prompt task");
    let started_at = util::now();
    let clock = std::time::Instant::now();
    let result = runner
        .run(
            &task.prompt,
            &task.system_prompt,
            task.max_turns,
            &task.agent_metadata,
        )
        .await;
    // Whole microseconds: a short decimal survives the JSON round trip exactly.
    let duration_ms = clock.elapsed().as_micros() as f64 / 1000.0;
    let finished_at = util::now();
    let (status, answer, error) = match result {
        Ok(answer) => (ExecutionStatus::Completed, answer, None),
        Err(e) => {
            tracing::warn!(task = %task.id, occurrence, error = %e, "prompt task failed");
            (ExecutionStatus::Failed, String::new(), Some(e))
        }
    };
    let execution = Execution {
        execution_id: occurrence,
        started_at,
        finished_at,
        status,
        answer,
        error,
        duration_ms,
    };
    task.executions.push(execution.clone());
    let excess = task.executions.len().saturating_sub(MAX_EXECUTIONS);
    task.executions.drain(..excess);
    task.run_count += 1;
    task.last_run_at = Some(started_at);
    task.status = match status {
        ExecutionStatus::Completed => TaskStatus::Completed,
        ExecutionStatus::Failed => TaskStatus::Failed,
    };
    store.save_prompt(&task)?;
    Ok((task, execution, true))
}

/// The occurrence id `now` falls in (module docs).
fn occurrence_id(
    task: &Task,
    created_at: DateTime<Utc>,
    now: SystemTime,
) -> Result<String, SchedulerError> {
    let id = &task.id;
    Ok(match task.cadence()? {
        Some(Cadence::Interval(d)) => format!("{id}:int:{}", interval_index(created_at, d, now)),
        Some(Cadence::Cron(c)) => {
            let due = c.latest_at_or_before(now).unwrap_or(now);
            format!("{id}:cron:{}", unix_secs(due) / 60)
        }
        None if task.trigger == Trigger::Once => format!("{id}:once"),
        None => format!("{id}:manual:{}", util::random_hex(8)),
    })
}

fn interval_index(created_at: DateTime<Utc>, interval: Duration, now: SystemTime) -> u64 {
    let elapsed = now
        .duration_since(created_at.into())
        .unwrap_or_default()
        .as_millis();
    (elapsed / interval.as_millis().max(1)) as u64
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// When the occurrence after the one `now` falls in begins.
fn next_occurrence(task: &Task, cadence: &Cadence, now: SystemTime) -> SystemTime {
    match cadence {
        Cadence::Interval(d) => {
            let created = task.created_at.unwrap_or_else(util::now);
            let k = interval_index(created, *d, now);
            let ms = (d.as_millis() as u64).saturating_mul(k.saturating_add(1));
            SystemTime::from(created) + Duration::from_millis(ms)
        }
        Cadence::Cron(c) => c.next_after(now),
    }
}
