//! Per-agent shared state: the published runtime (a `watch` channel, which `wait` and
//! `status` read), the handle of the task supervising the current run, and the channel
//! that asks that task to stop.
//!
//! Locking: `ctl` (async) serialises start/stop/restart/forget of one agent and is held
//! across their awaits; `stopper` (sync, never held across an await) lets a `kill` stop
//! escalate a `term` stop already waiting out its grace under `ctl`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::logs;
use crate::types::{AgentRuntime, SupervisorConfig};

/// What a stop request asks of a run, weakest first; a request can only be strengthened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StopMode {
    /// Stop supervising, leave the child running with its pid record (`shutdown(false)`).
    Detach,
    /// SIGTERM the group, SIGKILL it after the grace.
    Term,
    /// SIGKILL the group at once.
    Kill,
}

/// State every agent's task shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: SupervisorConfig,
    pub events: broadcast::Sender<(String, AgentRuntime)>,
    /// Serialises rotations (the 1 s ticks and `tail_log`) so two never shift at once.
    pub rotate_lock: Mutex<()>,
    /// The kernel supports Landlock: a spec's `confine` is applied.
    pub confines: bool,
}

impl Shared {
    /// Rotates the agent's stream files that are over the size limit; errors are logged.
    pub fn rotate(&self, id: &str) {
        let _guard = lock(&self.rotate_lock);
        let (out, err) = logs::stream_paths(&self.config.logs_dir, id);
        for path in [out, err] {
            if let Err(e) =
                logs::rotate_if_needed(&path, self.config.log_max_bytes, self.config.log_keep)
            {
                tracing::warn!(agent = id, path = %path.display(), error = %e, "log rotation failed");
            }
        }
    }
}

/// One agent known to the supervisor.
#[derive(Debug)]
pub(crate) struct Slot {
    pub id: String,
    pub state: watch::Sender<AgentRuntime>,
    /// The task supervising the current run (`None`: never started, or stopped).
    pub ctl: Arc<tokio::sync::Mutex<Option<JoinHandle<()>>>>,
    pub stopper: Mutex<Option<watch::Sender<Option<StopMode>>>>,
    /// Set by `forget` (under `ctl`); a `start` that raced it retries on a fresh slot.
    pub forgotten: AtomicBool,
}

impl Slot {
    pub fn new(id: &str) -> Self {
        Slot {
            id: id.to_string(),
            state: watch::Sender::new(AgentRuntime::stopped()),
            ctl: Arc::new(tokio::sync::Mutex::new(None)),
            stopper: Mutex::new(None),
            forgotten: AtomicBool::new(false),
        }
    }

    pub fn current(&self) -> AgentRuntime {
        self.state.borrow().clone()
    }

    /// Applies `change`, then broadcasts the new runtime when it differs. `change` must
    /// not read `self.state` (it runs under the channel's write lock).
    pub fn publish(&self, shared: &Shared, change: impl FnOnce(&mut AgentRuntime)) -> AgentRuntime {
        let mut changed = false;
        self.state.send_if_modified(|rt| {
            let before = rt.clone();
            change(rt);
            changed = *rt != before;
            changed
        });
        let now = self.current();
        if changed {
            tracing::debug!(agent = %self.id, status = %now.status, pid = ?now.pid, "agent state changed");
            // No subscribers is fine.
            let _ = shared.events.send((self.id.clone(), now.clone()));
        }
        now
    }

    /// Asks the current run (if any) to stop in `mode`, or more forcefully than asked so far.
    pub fn request_stop(&self, mode: StopMode) {
        if let Some(tx) = lock(&self.stopper).as_ref() {
            tx.send_if_modified(|current| {
                if current.is_none_or(|c| c < mode) {
                    *current = Some(mode);
                    true
                } else {
                    false
                }
            });
        }
    }
}

/// Locks a std mutex, ignoring poisoning (the guarded data stays consistent: `()` or an
/// `Option` that is only ever replaced whole).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
