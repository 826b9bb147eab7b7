//! One connection's session: who it is (auth state, role, namespace), what it negotiated,
//! how to reach its peer (the outbound queue), and its table of reverse calls.
//!
//! Services receive an `Arc<Session>`; they never touch the socket. Reverse calls
//! (daemon → client requests such as `tools.execute`) get ids `"cb-<n>"`, unique per
//! daemon process (DECISIONS 13); each waits on a oneshot in [`ReverseCalls`]. When the
//! connection dies the table is failed as a whole, so no reverse call outlives its peer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::jsonrpc::{notification_frame, request_frame};
use car_proto::methods::CallerRole;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::outbound::Outbound;

/// Ids for daemon-originated requests, shared by every session of the process.
static NEXT_CALLBACK_ID: AtomicU64 = AtomicU64::new(1);

/// How this session authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub authenticated: bool,
    pub role: CallerRole,
    pub agent_id: Option<String>,
    pub memory_namespace: Option<String>,
}

/// Per-connection state.
#[derive(Debug)]
pub struct Session {
    pub id: u64,
    /// `tcp` or `unix`, for logs.
    pub transport: &'static str,
    identity: Mutex<Identity>,
    negotiated: Mutex<Option<Vec<String>>>,
    host_subscribed: AtomicBool,
    outbound: Outbound,
    reverse: ReverseCalls,
    /// Cancelled when the connection ends; long-lived session tasks watch it.
    pub closed: CancellationToken,
}

impl Session {
    /// A session that starts authenticated (auth off: every session may call everything)
    /// or unauthenticated (auth on).
    pub fn new(
        id: u64,
        transport: &'static str,
        auth_enabled: bool,
        outbound: Outbound,
        closed: CancellationToken,
    ) -> Self {
        let identity = Identity {
            authenticated: !auth_enabled,
            role: if auth_enabled {
                CallerRole::Operator
            } else {
                CallerRole::Host
            },
            agent_id: None,
            memory_namespace: None,
        };
        Session {
            id,
            transport,
            identity: Mutex::new(identity),
            negotiated: Mutex::new(None),
            host_subscribed: AtomicBool::new(false),
            outbound,
            reverse: ReverseCalls::default(),
            closed,
        }
    }

    pub fn identity(&self) -> Identity {
        self.identity.lock().expect("identity lock").clone()
    }

    pub fn set_identity(&self, identity: Identity) {
        *self.identity.lock().expect("identity lock") = identity;
    }

    /// The negotiated capabilities, or `None` before a successful `server.handshake`.
    pub fn negotiated(&self) -> Option<Vec<String>> {
        self.negotiated.lock().expect("negotiated lock").clone()
    }

    pub fn set_negotiated(&self, caps: Vec<String>) {
        *self.negotiated.lock().expect("negotiated lock") = Some(caps);
    }

    /// Marks the session subscribed to `host.event`; true if it was not already.
    pub fn subscribe_host_events(&self) -> bool {
        !self.host_subscribed.swap(true, Ordering::AcqRel)
    }

    pub fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    /// Sends a notification to the peer; false when the connection is gone.
    pub fn notify(&self, method: &str, params: &Value) -> bool {
        self.outbound.send_text(notification_frame(method, params))
    }

    /// Sends a request to the peer and waits for its answer: `Ok(Ok(result))`,
    /// `Ok(Err(the peer's error object))`, or `Err` when the call could not complete
    /// (timeout, connection closed).
    pub async fn call_client(
        &self,
        method: &str,
        params: &Value,
        timeout: Duration,
    ) -> Result<Result<Value, RpcError>, RpcError> {
        let id = format!("cb-{}", NEXT_CALLBACK_ID.fetch_add(1, Ordering::Relaxed));
        let rx = self.reverse.insert(id.clone());
        if !self
            .outbound
            .send_text(request_frame(&Value::String(id.clone()), method, params))
        {
            self.reverse.remove(&id);
            return Err(RpcError::internal(format!(
                "reverse call {method}: connection closed"
            )));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(RpcError::internal(format!(
                "reverse call {method}: connection closed before the client answered"
            ))),
            Err(_) => {
                self.reverse.remove(&id);
                Err(RpcError::internal(format!(
                    "reverse call {method} timed out after {}ms",
                    timeout.as_millis()
                )))
            }
        }
    }

    /// Routes a response frame from the peer to the reverse call waiting for it.
    pub fn complete_reverse_call(&self, id: &Value, outcome: Result<Value, RpcError>) {
        let waiter = id.as_str().and_then(|id| self.reverse.remove(id));
        match waiter {
            Some(tx) => {
                let _ = tx.send(outcome);
            }
            None => {
                tracing::debug!(session = self.id, %id, "response to an unknown reverse-call id dropped")
            }
        }
    }

    /// Fails every pending reverse call at once (the connection ended).
    pub fn fail_reverse_calls(&self) {
        self.reverse.clear();
    }
}

type Waiter = oneshot::Sender<Result<Value, RpcError>>;

/// `request id → waiter` for daemon → client requests.
#[derive(Debug, Default)]
struct ReverseCalls {
    waiting: Mutex<HashMap<String, Waiter>>,
}

impl ReverseCalls {
    fn insert(&self, id: String) -> oneshot::Receiver<Result<Value, RpcError>> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("reverse lock").insert(id, tx);
        rx
    }

    fn remove(&self, id: &str) -> Option<Waiter> {
        self.waiting.lock().expect("reverse lock").remove(id)
    }

    fn clear(&self) {
        // Dropping the senders wakes every waiter with a closed-channel error.
        let drained: Vec<Waiter> = self
            .waiting
            .lock()
            .expect("reverse lock")
            .drain()
            .map(|(_, tx)| tx)
            .collect();
        drop(drained);
    }
}
