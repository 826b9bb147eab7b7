//! The delegated-inference runner (`inference.register_runner`) and its calls in flight.
//!
//! One runner per daemon (CAR: one per process): registering again replaces it. Each
//! delegated `infer` opens a call (`call_id`, a channel) owned by the runner session it was
//! sent to; only that session may deliver its events, completion or failure (another
//! session naming the id is refused as if it did not exist, so a stranger can neither read
//! nor finish someone's call). The waiting `infer` also watches the runner session's
//! `closed` token, so a runner that disconnects fails its calls at once. A call is removed
//! when its waiter drops it ([`Pending`]'s guard), whatever the outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use car_proto::methods::inference::runner::{RunnerEvent, RunnerResult};
use tokio::sync::mpsc;

use crate::state::session::Session;

/// What a runner sends for one call.
#[derive(Debug)]
pub enum RunnerMessage {
    Event(RunnerEvent),
    Complete(RunnerResult),
    Fail(String),
}

#[derive(Debug)]
struct Call {
    runner: u64,
    tx: mpsc::UnboundedSender<RunnerMessage>,
}

#[derive(Debug, Default)]
struct Inner {
    runner: Option<Weak<Session>>,
    calls: HashMap<String, Call>,
}

/// The runner and its calls.
#[derive(Debug, Default)]
pub struct Runners {
    inner: Mutex<Inner>,
    next: AtomicU64,
}

/// One open call: its id and what the runner sends; dropping it closes the call.
#[derive(Debug)]
pub struct Pending {
    pub call_id: String,
    pub rx: mpsc::UnboundedReceiver<RunnerMessage>,
    runners: Arc<Runners>,
    runner: Weak<Session>,
    /// Set once the runner ended the call (complete, fail, done or error).
    pub finished: bool,
}

/// The notification a runner gets when a call it serves is abandoned (cancelled, past its
/// deadline, or its caller gone): `{call_id}`; its later events for the call are refused.
pub const CANCEL_METHOD: &str = "inference.runner.cancel";

impl Drop for Pending {
    fn drop(&mut self) {
        self.runners.lock().calls.remove(&self.call_id);
        if !self.finished {
            if let Some(runner) = self.runner.upgrade() {
                runner.notify(CANCEL_METHOD, &serde_json::json!({"call_id": self.call_id}));
            }
        }
    }
}

impl Runners {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes `session` the runner (replacing any earlier one).
    pub fn register(&self, session: &Arc<Session>) {
        self.lock().runner = Some(Arc::downgrade(session));
    }

    /// The runner session, while it is connected.
    pub fn runner(&self) -> Option<Arc<Session>> {
        self.lock()
            .runner
            .as_ref()
            .and_then(Weak::upgrade)
            .filter(|s| !s.closed.is_cancelled())
    }

    /// Opens a call served by `runner`.
    fn runner_weak(&self, runner: &Session) -> Weak<Session> {
        self.lock()
            .runner
            .clone()
            .filter(|w| w.upgrade().is_some_and(|s| s.id == runner.id))
            .unwrap_or_default()
    }

    pub fn open(self: &Arc<Self>, runner: &Session) -> Pending {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let call_id = format!("dlg-{}-{n}", std::process::id());
        let (tx, rx) = mpsc::unbounded_channel();
        self.lock().calls.insert(
            call_id.clone(),
            Call {
                runner: runner.id,
                tx,
            },
        );
        Pending {
            call_id,
            rx,
            runners: self.clone(),
            runner: self.runner_weak(runner),
            finished: false,
        }
    }

    /// Delivers `message` for `call_id` from session `from`; fails unless that session
    /// runs that open call.
    pub fn deliver(&self, from: u64, call_id: &str, message: RunnerMessage) -> Result<(), String> {
        let inner = self.lock();
        match inner.calls.get(call_id) {
            Some(call) if call.runner == from => call
                .tx
                .send(message)
                .map_err(|_| format!("call_id: call {call_id:?} has ended")),
            _ => Err(format!(
                "call_id: no delegated call {call_id:?} is running on this session"
            )),
        }
    }
}
