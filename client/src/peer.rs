//! The calls waiting on one connection, and [`Peer`], the handle a reverse call's handler
//! answers through: what `connection` (which owns the socket and its tasks) and `handlers`
//! (which run the handlers) share, so neither imports the other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use car_proto::jsonrpc::notification_frame;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

pub(crate) type Outcome = Result<Value, Error>;

pub(crate) struct Pending {
    pub(crate) tx: oneshot::Sender<Outcome>,
    /// Present for idle-window calls: poked by progress notifications.
    pub(crate) activity: Option<Arc<Notify>>,
    /// Present for streaming calls: receives this call's `inference.stream.event` params,
    /// in order and before its response.
    pub(crate) events: Option<mpsc::UnboundedSender<Value>>,
}

#[derive(Default)]
pub(crate) struct PendingState {
    pub(crate) calls: HashMap<u64, Pending>,
    /// Set once the connection ended; new calls get this error without being sent.
    pub(crate) closed: Option<Error>,
}

/// The id-routed table of calls awaiting an answer.
#[derive(Default)]
pub(crate) struct PendingCalls {
    pub(crate) state: Mutex<PendingState>,
}

impl PendingCalls {
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, PendingState> {
        // Critical sections are single map operations, so a poisoned lock is consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn insert(&self, id: u64, pending: Pending) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(err) = &state.closed {
            return Err(err.clone());
        }
        state.calls.insert(id, pending);
        Ok(())
    }

    pub(crate) fn complete(&self, id: u64, outcome: Outcome) -> bool {
        let pending = self.lock().calls.remove(&id);
        match pending {
            Some(p) => {
                // The caller may have stopped waiting; that is not an error.
                let _ = p.tx.send(outcome);
                true
            }
            None => false,
        }
    }

    /// Hands a stream event to the call it names; false when no streaming call wants it.
    pub(crate) fn route_event(&self, id: u64, params: &Value) -> bool {
        let sink = self.lock().calls.get(&id).and_then(|p| p.events.clone());
        match sink {
            Some(tx) => tx.send(params.clone()).is_ok(),
            None => false,
        }
    }

    pub(crate) fn touch(&self, id: u64) {
        let activity = self.lock().calls.get(&id).and_then(|p| p.activity.clone());
        if let Some(a) = activity {
            a.notify_one();
        }
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().calls.remove(&id);
    }

    pub(crate) fn closed_reason(&self) -> Error {
        self.lock()
            .closed
            .clone()
            .unwrap_or_else(|| Error::Transport("connection closed".into()))
    }

    /// Fails every pending call with `err` (the first reason wins) and refuses new ones.
    pub(crate) fn fail_all(&self, err: Error) {
        let (reason, drained) = {
            let mut state = self.lock();
            let reason = state.closed.get_or_insert(err).clone();
            let drained: Vec<Pending> = state.calls.drain().map(|(_, p)| p).collect();
            (reason, drained)
        };
        // Senders are completed outside the lock: a woken caller may touch the table.
        for p in drained {
            let _ = p.tx.send(Err(reason.clone()));
        }
    }
}

/// Removes a call's entry when its caller stops waiting (timeout or dropped future).
pub(crate) struct PendingGuard<'a> {
    pub(crate) pending: &'a PendingCalls,
    pub(crate) id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.pending.remove(self.id);
    }
}

/// The connection a reverse call arrived on, as its handler sees it: notifications sent
/// through it go up that connection only, and [`Peer::closed`] says when it ended.
/// Holding one does not keep the connection open.
#[derive(Clone)]
pub(crate) struct Peer {
    pub(crate) outbound: mpsc::Sender<Message>,
    pub(crate) pending: Arc<PendingCalls>,
    pub(crate) shutdown: CancellationToken,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl Peer {
    /// Queues the notification `method` for the socket; the connection's end reason once
    /// it has ended (also while waiting for room in a full queue).
    pub(crate) async fn notify(&self, method: &str, params: &Value) -> Result<(), Error> {
        if self.is_closed() {
            return Err(self.pending.closed_reason());
        }
        let frame = Message::text(notification_frame(method, params));
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => Err(self.pending.closed_reason()),
            sent = self.outbound.send(frame) => sent.map_err(|_| self.pending.closed_reason()),
        }
    }

    /// Resolves once the connection has ended.
    pub(crate) async fn closed(&self) {
        self.shutdown.cancelled().await
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// A peer whose connection has already ended (unit tests of handlers).
    #[cfg(test)]
    pub(crate) fn ended() -> Self {
        let (outbound, _) = mpsc::channel(1);
        let pending = Arc::new(PendingCalls::default());
        pending.fail_all(Error::Closed);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        Self {
            outbound,
            pending,
            shutdown,
        }
    }
}
