//! Daemon timers: the `durable: false` backend of `tasks.schedule`.
//!
//! [`DaemonTimers::start`] (inside a tokio runtime) loads every enabled non-durable
//! command task from the store and arms a timer for each, so timers survive a daemon
//! restart. [`DaemonTimers::schedule`] / [`DaemonTimers::unschedule`] change them live.
//! Both interval and cron cadences work here (CAR's daemon backend refuses cron).
//!
//! Firing times: an interval task fires every interval counted from when its timer was
//! armed (scheduling, or daemon start), first one interval after (not immediately). A cron
//! task fires at each matching UTC minute. One timer runs one command at a time: a firing
//! that comes while the previous run is still going is skipped, not overlapped, and the
//! next firing is the first one due after the run ends.
//!
//! A run spawns `program args` directly (no shell) in `working_dir` (default: the
//! daemon's), with the daemon's environment plus `env`, stdin from `/dev/null`, stdout and
//! stderr appended to `<logs_dir>/tasks/<id>.log` (0600) between `--- … ---` marker lines.
//! When it ends, `run_count`, `last_run_at`, `last_exit_code` and `last_error` are updated in
//! the store, unless the task file is gone (unscheduled meanwhile).
//!
//! Unscheduling or [`DaemonTimers::shutdown`] stops the timer; a command still running is
//! given the grace period to finish, then killed (SIGKILL). `shutdown` waits for all of it.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cadence::Cadence;
use crate::command::CommandTask;
use crate::command::CommandTaskExt as _;
use crate::util::{self, ensure_dir};
use crate::{SchedulerError, TaskStore};

/// How long a running command may go on after its timer is stopped, by default.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);

/// In-process timers for non-durable command tasks. Cheap to clone; clones share timers.
#[derive(Debug, Clone)]
pub struct DaemonTimers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: TaskStore,
    logs_dir: PathBuf,
    grace: Duration,
    root: CancellationToken,
    tracker: TaskTracker,
    timers: Mutex<HashMap<String, CancellationToken>>,
}

impl DaemonTimers {
    /// Starts timers for the store's enabled non-durable command tasks; run logs go under
    /// `<logs_dir>/tasks/`. A task whose cadence does not parse is skipped with a warning.
    /// Must be called inside a tokio runtime.
    pub fn start(
        store: TaskStore,
        logs_dir: impl Into<PathBuf>,
        kill_grace: Duration,
    ) -> Result<Self, SchedulerError> {
        let timers = Self::idle(store, logs_dir, kill_grace);
        for stored in timers.inner.store.list()? {
            if let crate::StoredTask::Command(task) = stored {
                if task.enabled && !task.durable {
                    if let Err(e) = timers.schedule(&task) {
                        tracing::warn!(task = %task.id, error = %e, "not arming stored task");
                    }
                }
            }
        }
        Ok(timers)
    }

    /// Timers that arm nothing from the store (only what [`DaemonTimers::schedule`] is given
    /// later): for a daemon that is not the primary of its state root, so the stored tasks
    /// fire from one daemon only.
    pub fn idle(store: TaskStore, logs_dir: impl Into<PathBuf>, kill_grace: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                logs_dir: logs_dir.into(),
                grace: kill_grace,
                root: CancellationToken::new(),
                tracker: TaskTracker::new(),
                timers: Mutex::default(),
            }),
        }
    }

    /// Arms (or re-arms, replacing) the timer of `task`, which should already be stored.
    pub fn schedule(&self, task: &CommandTask) -> Result<(), SchedulerError> {
        let cadence = task.cadence()?;
        if self.inner.root.is_cancelled() {
            return Err(SchedulerError::invalid(
                "durable",
                "daemon timers are shut down",
            ));
        }
        let token = self.inner.root.child_token();
        if let Some(old) = self.lock().insert(task.id.clone(), token.clone()) {
            old.cancel();
        }
        tracing::info!(
            task = %task.id,
            trigger = %task.trigger,
            schedule = %task.schedule,
            "daemon timer armed"
        );
        let inner = self.inner.clone();
        let task = task.clone();
        self.inner
            .tracker
            .spawn(async move { timer_loop(inner, task, cadence, token).await });
        Ok(())
    }

    /// Stops the timer of task `id`; whether there was one.
    pub fn unschedule(&self, id: &str) -> bool {
        match self.lock().remove(id) {
            Some(token) => {
                token.cancel();
                tracing::info!(task = id, "daemon timer stopped");
                true
            }
            None => false,
        }
    }

    /// Ids of the armed timers, sorted.
    pub fn scheduled(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Stops every timer and waits for running commands (each killed after the grace).
    pub async fn shutdown(&self) {
        self.inner.root.cancel();
        self.lock().clear();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
        tracing::info!("daemon timers shut down");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inner.timers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn timer_loop(
    inner: Arc<Inner>,
    task: CommandTask,
    cadence: Cadence,
    token: CancellationToken,
) {
    let armed = Instant::now();
    loop {
        let wait = match &cadence {
            Cadence::Interval(d) => {
                // The first firing due after now, on the grid armed + k·interval, k ≥ 1.
                let k = armed.elapsed().as_millis() / d.as_millis().max(1) + 1;
                let at = armed + Duration::from_millis((d.as_millis() * k) as u64);
                at.saturating_duration_since(Instant::now())
            }
            Cadence::Cron(c) => {
                let now = SystemTime::now();
                c.next_after(now).duration_since(now).unwrap_or_default()
            }
        };
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        run_command(&inner, &task, &token).await;
        if token.is_cancelled() {
            return;
        }
    }
}

/// One run: spawn, log, wait (or stop after the grace), record.
async fn run_command(inner: &Inner, task: &CommandTask, token: &CancellationToken) {
    let started = util::now();
    let log_path = inner
        .logs_dir
        .join("tasks")
        .join(format!("{}.log", task.id));
    let outcome = spawn_and_wait(inner, task, token, &log_path).await;
    let (exit_code, error) = match &outcome {
        Ok(status) => (
            status.code(),
            status
                .code()
                .is_none()
                .then(|| format!("ended by {status}")),
        ),
        Err(e) => (None, Some(e.clone())),
    };
    append_log(
        &log_path,
        &format!(
            "--- {} end: {} ---\n",
            util::rfc3339(&util::now()),
            match &outcome {
                Ok(s) => s.to_string(),
                Err(e) => e.clone(),
            }
        ),
    );
    tracing::info!(task = %task.id, exit_code, error, "daemon task ran");

    let _guard = inner.store.lock(&task.id).await;
    match inner.store.load_command(&task.id) {
        Ok(Some(mut stored)) => {
            stored.run_count += 1;
            stored.last_run_at = Some(started);
            stored.last_exit_code = exit_code;
            stored.last_error = error;
            if let Err(e) = inner.store.save_command(&stored) {
                tracing::warn!(task = %task.id, error = %e, "recording run failed");
            }
        }
        Ok(None) => tracing::debug!(task = %task.id, "task gone; run not recorded"),
        Err(e) => tracing::warn!(task = %task.id, error = %e, "recording run failed"),
    }
}

async fn spawn_and_wait(
    inner: &Inner,
    task: &CommandTask,
    token: &CancellationToken,
    log_path: &std::path::Path,
) -> Result<ExitStatus, String> {
    let log_dir = log_path.parent().expect("log path has a parent");
    ensure_dir(log_dir, 0o700).map_err(|e| e.to_string())?;
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log_path)
        .map_err(|e| format!("opening log {}: {e}", log_path.display()))?;
    let _ = writeln!(
        log,
        "--- {} start: {} ---",
        util::rfc3339(&util::now()),
        task.program
    );
    let stderr = log.try_clone().map_err(|e| format!("opening log: {e}"))?;
    let mut cmd = tokio::process::Command::new(&task.program);
    cmd.args(&task.args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    if let Some(dir) = &task.working_dir {
        cmd.current_dir(dir);
    }
    cmd.envs(task.env.iter().flatten());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", task.program))?;
    tokio::select! {
        status = child.wait() => return status.map_err(|e| format!("waiting: {e}")),
        _ = token.cancelled() => {}
    }
    // Stopped while running: let it finish within the grace, then kill it.
    match tokio::time::timeout(inner.grace, child.wait()).await {
        Ok(status) => status.map_err(|e| format!("waiting: {e}")),
        Err(_) => {
            tracing::warn!(task = %task.id, "killing command after grace period");
            let _ = child.start_kill();
            child.wait().await.map_err(|e| format!("waiting: {e}"))
        }
    }
}

fn append_log(path: &std::path::Path, line: &str) {
    let result = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = result {
        tracing::debug!(path = %path.display(), error = %e, "log append failed");
    }
}
