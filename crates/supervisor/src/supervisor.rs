//! The public [`Supervisor`] handle: a map of agent slots plus the operations on them.
//!
//! Each operation on one agent takes that slot's `ctl` lock, so start/stop/restart/forget
//! of the same id never interleave; different agents are independent.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, watch, OwnedMutexGuard};
use tokio::task::JoinHandle;

use crate::logs::{self, TAIL_SCAN_BYTES};
use crate::record;
use crate::runner::{self, mark_ended, Runner};
use crate::slot::{lock, Shared, Slot, StopMode};
use crate::types::{
    AgentRuntime, LaunchSpec, LogStream, Status, SupervisorConfig, SupervisorError, TailLog,
};

type Result<T> = std::result::Result<T, SupervisorError>;
type Ctl = OwnedMutexGuard<Option<JoinHandle<()>>>;

/// Capacity of the status-change broadcast; a slower subscriber sees `Lagged`.
const EVENT_CAPACITY: usize = 1024;

/// Supervises agent processes. Cheap to clone (one shared state).
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    closed: AtomicBool,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("config", &self.inner.shared.config)
            .field("agents", &lock(&self.inner.slots).len())
            .field("closed", &self.inner.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Supervisor {
    pub fn new(config: SupervisorConfig) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        let confines = crate::confine::available();
        if !confines {
            tracing::warn!("this kernel has no Landlock: supervised agents' file access is not confined (agents.health reports file_access: unconfined)");
        }
        Supervisor {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared {
                    config,
                    events,
                    rotate_lock: Mutex::new(()),
                    confines,
                }),
                slots: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
            }),
        }
    }
    /// Whether children's file access is confined (the kernel supports Landlock).
    pub fn confines_file_access(&self) -> bool {
        self.inner.shared.confines
    }

    pub fn config(&self) -> &SupervisorConfig {
        &self.inner.shared.config
    }

    /// Starts `spec` (a no-op returning the current state while `running`/`starting`),
    /// resetting `restart_count`. A live child recorded by a previous daemon for this id is
    /// adopted instead of spawning a duplicate. From `backoff`, the pending restart is
    /// cancelled and the agent starts now. A failed spawn leaves the agent `errored` and
    /// returns [`SupervisorError::Spawn`].
    pub async fn start(&self, spec: LaunchSpec) -> Result<AgentRuntime> {
        validate(&spec)?;
        let (slot, mut ctl) = self.lock_slot(&spec.id).await?;
        let rt = self.start_locked(&slot, &mut ctl, spec, true).await?;
        Ok(rt.unwrap_or_else(|| slot.current()))
    }

    /// Adopt-only (daemon boot, for agents it will not auto-start): supervises the live
    /// child a previous daemon left for `spec.id`, never spawning one. `Ok(None)` when
    /// there is nothing to adopt (a stale record is removed); the current state when a run
    /// is already supervised here.
    pub async fn adopt(&self, spec: LaunchSpec) -> Result<Option<AgentRuntime>> {
        validate(&spec)?;
        let (slot, mut ctl) = self.lock_slot(&spec.id).await?;
        let rt = self.start_locked(&slot, &mut ctl, spec, false).await?;
        if rt.is_none() && ctl.is_none() {
            drop(ctl);
            self.remove_if_idle(&slot);
        }
        Ok(rt)
    }

    /// Stops the agent: `kill` SIGKILLs its process group at once, otherwise SIGTERM, the
    /// grace, then SIGKILL. Returns once the group is gone, with status `stopped`. Cancels
    /// a pending restart; a stopped agent is not restarted. An id unknown here but with a
    /// live recorded orphan stops that orphan. [`SupervisorError::NotFound`] when neither.
    pub async fn stop(&self, id: &str, kill: bool) -> Result<AgentRuntime> {
        validate_id(id)?;
        let mode = if kill { StopMode::Kill } else { StopMode::Term };
        let existing = self.slot(id);
        let slot = match &existing {
            Some(slot) => {
                slot.request_stop(mode);
                slot.clone()
            }
            None if record::read(&self.inner.shared.config.run_dir, id).is_some() => {
                self.slot_or_insert(id)
            }
            None => return Err(SupervisorError::NotFound(id.to_string())),
        };
        let mut ctl = slot.ctl.clone().lock_owned().await;
        let (rt, killed_orphan) = self.stop_locked(&slot, &mut ctl, mode).await;
        // Only a stale record was there (and a racing `start` did not fill the slot).
        if existing.is_none() && !killed_orphan && rt == AgentRuntime::stopped() {
            drop(ctl);
            self.remove_if_idle(&slot);
            return Err(SupervisorError::NotFound(id.to_string()));
        }
        Ok(rt)
    }

    /// Stops (term + grace) whatever runs for `spec.id`, then starts `spec` fresh.
    pub async fn restart(&self, spec: LaunchSpec) -> Result<AgentRuntime> {
        validate(&spec)?;
        let (slot, mut ctl) = self.lock_slot(&spec.id).await?;
        self.stop_locked(&slot, &mut ctl, StopMode::Term).await;
        let rt = self.start_locked(&slot, &mut ctl, spec, true).await?;
        Ok(rt.unwrap_or_else(|| slot.current()))
    }

    /// The agent's current state; `None` if this supervisor does not know the id.
    pub fn status(&self, id: &str) -> Option<AgentRuntime> {
        self.slot(id).map(|slot| slot.current())
    }

    /// Every known agent's state, sorted by id.
    pub fn list(&self) -> Vec<(String, AgentRuntime)> {
        let mut all: Vec<_> = lock(&self.inner.slots)
            .iter()
            .map(|(id, slot)| (id.clone(), slot.current()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Ids with a pid record in `run_dir` (children a previous daemon may have left), not
    /// checked for liveness: pass their specs to [`Supervisor::adopt`] or `start` at boot.
    pub fn recorded_ids(&self) -> Vec<String> {
        record::ids(&self.inner.shared.config.run_dir)
    }

    /// Waits until the agent's status is one of `targets` (at once if it already is, or
    /// if `targets` is empty). Event-driven; it observes the latest state, so a transient
    /// state replaced before this task runs can be missed (use [`Supervisor::subscribe`]
    /// to see every transition).
    pub async fn wait(
        &self,
        id: &str,
        targets: &[Status],
        timeout: Duration,
    ) -> Result<AgentRuntime> {
        let slot = self
            .slot(id)
            .ok_or_else(|| SupervisorError::NotFound(id.to_string()))?;
        if targets.is_empty() {
            return Ok(slot.current());
        }
        let mut rx = slot.state.subscribe();
        drop(slot);
        let reached = tokio::time::timeout(timeout, async {
            rx.wait_for(|rt| targets.contains(&rt.status))
                .await
                .map(|rt| rt.clone())
        })
        .await;
        match reached {
            Ok(Ok(rt)) => Ok(rt),
            // The slot was forgotten meanwhile.
            Ok(Err(_)) => Err(SupervisorError::NotFound(id.to_string())),
            Err(_) => Err(SupervisorError::WaitTimeout {
                id: id.to_string(),
                waited: timeout,
                status: rx.borrow().status,
                targets: targets.to_vec(),
            }),
        }
    }

    /// A page of the agent's current log files (see the crate docs for the rules); rotates
    /// oversized files first. Works from the files alone, so an agent never started by this
    /// supervisor can be read; [`SupervisorError::NoLogs`] only when it has no log
    /// directory. Blocking file I/O (up to 8 MiB per stream): call it from
    /// `spawn_blocking` on a busy runtime.
    pub fn tail_log(
        &self,
        id: &str,
        n: usize,
        stream: LogStream,
        offset: usize,
    ) -> Result<TailLog> {
        validate_id(id)?;
        let logs_dir = &self.inner.shared.config.logs_dir;
        let dir = logs::agent_dir(logs_dir, id);
        if !dir.is_dir() {
            return Err(SupervisorError::NoLogs {
                id: id.to_string(),
                dir,
            });
        }
        self.inner.shared.rotate(id);
        let (out_path, err_path) = logs::stream_paths(logs_dir, id);
        let read = |path: &std::path::Path, included: bool| {
            if !included {
                return Ok(logs::StreamTail::default());
            }
            logs::tail_file(path, n, offset, TAIL_SCAN_BYTES).map_err(|source| {
                SupervisorError::Io {
                    action: "cannot read log file",
                    path: path.to_path_buf(),
                    source,
                }
            })
        };
        let out = read(&out_path, stream.includes_stdout())?;
        let err = read(&err_path, stream.includes_stderr())?;
        let mut lines = out.lines.clone();
        lines.extend(err.lines.iter().cloned());
        Ok(TailLog {
            lines,
            stdout: out.lines,
            stderr: err.lines,
            stdout_total: out.total,
            stderr_total: err.total,
            stdout_path: out_path.display().to_string(),
            stderr_path: err_path.display().to_string(),
            more: out.more || err.more,
        })
    }

    /// Stops the agent if running (term + grace), then drops its state and pid record;
    /// its logs are kept. [`SupervisorError::NotFound`] when the id is neither known nor
    /// recorded.
    pub async fn forget(&self, id: &str) -> Result<()> {
        validate_id(id)?;
        let slot = match self.slot(id) {
            Some(slot) => slot,
            None => {
                // Kills a recorded orphan, or reports NotFound.
                self.stop(id, false).await?;
                match self.slot(id) {
                    Some(slot) => slot,
                    None => return Ok(()),
                }
            }
        };
        slot.request_stop(StopMode::Term);
        let mut ctl = slot.ctl.clone().lock_owned().await;
        self.stop_locked(&slot, &mut ctl, StopMode::Term).await;
        slot.forgotten.store(true, Ordering::SeqCst);
        {
            let mut slots = lock(&self.inner.slots);
            if slots.get(id).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
                slots.remove(id);
            }
        }
        record::remove(&self.inner.shared.config.run_dir, id);
        tracing::info!(agent = id, "forgot agent");
        Ok(())
    }

    /// Every status change of every agent, as `(id, runtime)`.
    pub fn subscribe(&self) -> broadcast::Receiver<(String, AgentRuntime)> {
        self.inner.shared.events.subscribe()
    }

    /// Daemon exit. `stop_children`: stop every running child (term + grace, concurrently).
    /// Otherwise stop supervising and leave them running with their pid records, for the
    /// next daemon to adopt. Afterwards `start`/`restart`/`adopt` fail with `ShutDown`.
    pub async fn shutdown(&self, stop_children: bool) {
        self.inner.closed.store(true, Ordering::SeqCst);
        let slots: Vec<Arc<Slot>> = lock(&self.inner.slots).values().cloned().collect();
        let mode = if stop_children {
            StopMode::Term
        } else {
            StopMode::Detach
        };
        let mut tasks = tokio::task::JoinSet::new();
        for slot in slots {
            let this = self.clone();
            tasks.spawn(async move {
                slot.request_stop(mode);
                let mut ctl = slot.ctl.clone().lock_owned().await;
                if stop_children {
                    this.stop_locked(&slot, &mut ctl, mode).await;
                } else {
                    this.finish_run(&slot, &mut ctl, mode).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        tracing::info!(stop_children, "supervisor shut down");
    }

    fn slot(&self, id: &str) -> Option<Arc<Slot>> {
        lock(&self.inner.slots).get(id).cloned()
    }

    fn slot_or_insert(&self, id: &str) -> Arc<Slot> {
        lock(&self.inner.slots)
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Slot::new(id)))
            .clone()
    }

    /// Drops `slot` from the map if it is still the one there and has never run.
    fn remove_if_idle(&self, slot: &Arc<Slot>) {
        let mut slots = lock(&self.inner.slots);
        if let Some(current) = slots.get(&slot.id) {
            let idle = slot.ctl.try_lock().is_ok_and(|ctl| ctl.is_none());
            if Arc::ptr_eq(current, slot) && idle && slot.current() == AgentRuntime::stopped() {
                slots.remove(&slot.id);
            }
        }
    }

    /// The slot for `id` with its `ctl` held; retries if `forget` retired the slot meanwhile.
    async fn lock_slot(&self, id: &str) -> Result<(Arc<Slot>, Ctl)> {
        loop {
            if self.inner.closed.load(Ordering::SeqCst) {
                return Err(SupervisorError::ShutDown(id.to_string()));
            }
            let slot = self.slot_or_insert(id);
            let ctl = slot.ctl.clone().lock_owned().await;
            if !slot.forgotten.load(Ordering::SeqCst) {
                return Ok((slot, ctl));
            }
        }
    }

    /// Ends the current run (if any) in `mode` and waits for its task.
    async fn finish_run(&self, slot: &Slot, ctl: &mut Ctl, mode: StopMode) {
        if let Some(task) = ctl.take() {
            slot.request_stop(mode);
            if let Err(e) = task.await {
                tracing::error!(agent = %slot.id, error = %e, "agent supervision task failed");
                if let Some(pid) = slot.current().pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = crate::sys::signal_group(pid, libc::SIGKILL);
                }
            }
        }
        *lock(&slot.stopper) = None;
    }

    /// Ends the current run and any live recorded orphan; marks the agent `stopped`.
    /// Returns the state and whether an orphan (unsupervised child) was killed.
    async fn stop_locked(
        &self,
        slot: &Slot,
        ctl: &mut Ctl,
        mode: StopMode,
    ) -> (AgentRuntime, bool) {
        self.finish_run(slot, ctl, mode).await;
        let shared = &self.inner.shared;
        let mut killed_orphan = false;
        if let Some(mut live) = runner::adopt(shared, &slot.id, None) {
            let (_keep, mut never) = watch::channel(None);
            let exit = runner::terminate(&mut live, mode, shared.config.grace, &mut never).await;
            record::remove_if_pid(&shared.config.run_dir, &slot.id, live.pid);
            tracing::info!(agent = %slot.id, pid = live.pid, "stopped orphaned agent");
            slot.publish(shared, |rt| {
                rt.adopted = true;
                mark_ended(rt, Status::Stopped, exit, None);
            });
            killed_orphan = true;
        }
        let rt = slot.publish(shared, |rt| {
            rt.status = Status::Stopped;
            rt.pid = None;
            rt.started_at = None;
            rt.reason = None;
        });
        (rt, killed_orphan)
    }

    /// Starts a run under `ctl` (see [`Supervisor::start`]); with `spawn_allowed` false
    /// only adopts. `Ok(None)`: nothing adopted.
    async fn start_locked(
        &self,
        slot: &Arc<Slot>,
        ctl: &mut Ctl,
        spec: LaunchSpec,
        spawn_allowed: bool,
    ) -> Result<Option<AgentRuntime>> {
        let shared = &self.inner.shared;
        if let Some(task) = ctl.as_ref() {
            let current = slot.current();
            let live_run = matches!(current.status, Status::Running | Status::Starting);
            if !task.is_finished() && (live_run || !spawn_allowed) {
                return Ok(Some(current));
            }
            // Backoff (its task publishes `stopped` on the way out) or a run already ended.
            self.finish_run(slot, ctl, StopMode::Term).await;
        }
        let live = match runner::adopt(shared, &spec.id, Some(&spec.command)) {
            Some(live) => live,
            None if !spawn_allowed => return Ok(None),
            None => {
                slot.publish(shared, |rt| {
                    rt.status = Status::Starting;
                    rt.restart_count = 0;
                    rt.pid = None;
                    rt.started_at = None;
                    rt.reason = None;
                    rt.adopted = false;
                });
                match runner::spawn(shared, &spec) {
                    Ok(live) => live,
                    Err(reason) => {
                        tracing::warn!(agent = %spec.id, reason = %reason, "agent errored");
                        slot.publish(shared, |rt| {
                            rt.status = Status::Errored;
                            rt.reason = Some(reason.clone());
                        });
                        return Err(SupervisorError::Spawn {
                            id: spec.id,
                            reason,
                        });
                    }
                }
            }
        };
        let rt = slot.publish(shared, |rt| {
            rt.restart_count = 0;
            live.mark_running(rt);
        });
        let (tx, stop_rx) = watch::channel(None);
        *lock(&slot.stopper) = Some(tx);
        let runner = Runner {
            shared: shared.clone(),
            slot: slot.clone(),
            spec,
            stop_rx,
        };
        **ctl = Some(tokio::spawn(runner.run(live)));
        Ok(Some(rt))
    }
}

fn validate_id(id: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(SupervisorError::InvalidSpec {
            id: id.to_string(),
            reason: reason.to_string(),
        })
    };
    if id.is_empty() || id == "." || id == ".." {
        return bad("the id must be a file name");
    }
    if id.contains('/') || id.contains('\0') {
        return bad("the id must not contain `/` or NUL");
    }
    if id.len() > 200 {
        return bad("the id is longer than 200 bytes");
    }
    Ok(())
}

fn validate(spec: &LaunchSpec) -> Result<()> {
    validate_id(&spec.id)?;
    if !spec.command.is_absolute() {
        return Err(SupervisorError::InvalidSpec {
            id: spec.id.clone(),
            reason: format!("command {} is not an absolute path", spec.command.display()),
        });
    }
    Ok(())
}
