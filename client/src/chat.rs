//! Serving chat turns: the agent side of CAR's `agent.chat`.
//!
//! A lifecycle agent serves the chat sessions the daemon routes to it. The wire contract
//! (CAR's):
//!
//! - the daemon reverse-calls **`agent.chat`** `{session_id, prompt, stream?, context?, model?,
//!   attachments?, goal?: {check, max_iterations?}}` ([`ChatParams`]). The agent acks at once with
//!   `{accepted: true, session_id}` — or a JSON-RPC error: `-32602` naming the field for invalid
//!   params, `-32000` when that session already has a turn in flight (one turn per session at a
//!   time; the next is accepted once the previous one's terminal event was queued, and sends
//!   nothing before that event went out) — and then runs the turn without holding up the
//!   connection;
//! - the turn streams **`agent.chat.event`** notifications `{session_id, kind, ...}` up the
//!   connection the `agent.chat` arrived on, in order: `token {delta}`, `tool_call {tool,
//!   params?}`, `approval_pending {approval_id, action, details?}`, `goal_evaluated {iteration,
//!   met, grounded, reason}`, and exactly one terminal event last: `done {finish_reason, text?}` or
//!   `error {error}`. The ack is queued before the first event;
//! - **`agent.chat.cancel {session_id}`** (a notification) sets the turn's abort signal and
//!   resolves its parked approvals `false`. A cancelled turn always ends with `done {finish_reason:
//!   "cancelled", text?}` (`text` when the handler still returned some), whatever the handler
//!   returned: cancellation is the caller's choice, not a failure;
//! - **`agent.chat.approve {session_id, approval_id, decision}`** (a request) resolves the matching
//!   parked approval — approved for `true` or `"approve"`/`"approved"`/`"yes"` ([`approves`]),
//!   denied otherwise — and answers `{resolved: true}`; `{resolved: false}` when that session has
//!   no turn in flight or no approval parked under that id.
//!
//! A handler may also send its events the way CAR's bindings do, as `agent.chat.event`
//! calls (`chat_event(session_id, kind, delta?)`): while that session's turn runs on this
//! client, [`Client::call`] routes them into the turn instead of the daemon — non-terminal
//! kinds into its ordered stream, the first `done` / `error` as its terminal event (its
//! `delta` becomes `text` / `error`), sent when the handler returns.
//!
//! [`Client::serve_chat`] installs a [`ChatHandler`]: it is given a [`ChatTurnContext`]
//! and returns the turn's final text (→ `done {finish_reason: "stop", text}`) or an error
//! (→ `error {error}`); a panic becomes `error` too. It runs on a dedicated thread per
//! turn, never on a tokio worker and never under a lock, so it may block, e.g. on the
//! agent loop through [`ChatTurnContext::block_on`]. When the connection ends mid-turn the
//! turn is stopped as by a cancel (its parked approval resolves `false`, its abort signal
//! is set) and whatever it emits afterwards is dropped (logged at debug): nothing waits
//! on a dead connection.
//!
//! [`Client::serve_chat_with_agent_loop`] is the standard runner (what CAR's `--serve`
//! harness does): each turn runs through [`Client::run_chat_turn`] on a per-session
//! in-memory thread, bounded by [`ChatThreadLimits`].
//!
//! The turns in flight are the client's, keyed by session id across its connections, so
//! a cancel or an approval reaches its turn even after the handler was replaced.

mod agent_runner;
mod params;
mod turn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::runtime::Handle;

pub use agent_runner::ChatThreadLimits;
pub use params::{approves, ChatGoal, ChatParams};
pub use turn::{ChatTurnContext, FINISH_CANCELLED, FINISH_STOP};

use crate::client::{Client, WeakClient};
use crate::error::HandlerError;
use crate::handlers::{self, AfterReply, HandlerResult, RequestHandler};
use crate::peer::Peer;
use params::ApproveParams;
use turn::{Stop, TurnState};

/// The daemon's reverse call that starts a turn.
pub const CHAT_METHOD: &str = "agent.chat";
/// The notification carrying a turn's events up to the daemon.
pub const EVENT_METHOD: &str = "agent.chat.event";
/// The daemon's notification cancelling a turn.
pub const CANCEL_METHOD: &str = "agent.chat.cancel";
/// The daemon's request deciding a parked approval.
pub const APPROVE_METHOD: &str = "agent.chat.approve";

/// Runs one chat turn (see the module docs): `Ok(final text)` or `Err(error text)`.
/// Any `Fn(&ChatTurnContext) -> Result<String, String>` closure is one.
pub trait ChatHandler: Send + Sync + 'static {
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String>;
}

impl<F> ChatHandler for F
where
    F: Fn(&ChatTurnContext) -> Result<String, String> + Send + Sync + 'static,
{
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String> {
        self(turn)
    }
}

/// The turns in flight, by session id, and the pumps of the turns that just ended.
#[derive(Default)]
pub(crate) struct ChatSessions {
    turns: Mutex<Turns>,
}

#[derive(Default)]
struct Turns {
    in_flight: HashMap<String, Arc<TurnState>>,
    /// A session's last ended turn's `drained` token: its next turn's pump waits on it.
    draining: HashMap<String, tokio_util::sync::CancellationToken>,
}

impl std::fmt::Debug for ChatSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatSessions")
            .field("in_flight", &self.lock().in_flight.len())
            .finish()
    }
}

impl ChatSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, Turns> {
        // Single map operations only: a poisoned lock is still consistent.
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, session_id: &str) -> Option<Arc<TurnState>> {
        self.lock().in_flight.get(session_id).cloned()
    }

    /// Routes an `agent.chat.event` a handler sent as a call (CAR's `chat_event`) into its
    /// turn when that session's turn is in flight on this client; false otherwise (the
    /// event then goes to the daemon as sent).
    pub(crate) fn route(&self, params: &Value) -> bool {
        let session = params.get("session_id").and_then(Value::as_str);
        let kind = params.get("kind").and_then(Value::as_str);
        match (session.and_then(|s| self.get(s)), kind) {
            (Some(turn), Some(kind)) => {
                turn.route(kind, params.clone());
                true
            }
            _ => false,
        }
    }

    /// Registers `state` as `session_id`'s turn: `None` when one is already in flight,
    /// else the previous turn's `drained` token (if it may still be sending).
    #[allow(clippy::option_option)]
    fn claim(
        &self,
        session_id: &str,
        state: &Arc<TurnState>,
    ) -> Option<Option<tokio_util::sync::CancellationToken>> {
        let mut turns = self.lock();
        if turns.in_flight.contains_key(session_id) {
            return None;
        }
        turns
            .in_flight
            .insert(session_id.to_string(), state.clone());
        let previous = turns
            .draining
            .remove(session_id)
            .filter(|t| !t.is_cancelled());
        Some(previous)
    }

    /// Ends `state`'s turn: `last` (queueing its terminal event) runs under the lock, so a
    /// new turn of the session is claimed only after that event is in the stream.
    fn release(&self, session_id: &str, state: &Arc<TurnState>, last: impl FnOnce()) {
        let mut turns = self.lock();
        last();
        if turns
            .in_flight
            .get(session_id)
            .is_some_and(|t| Arc::ptr_eq(t, state))
        {
            turns.in_flight.remove(session_id);
            turns.draining.retain(|_, t| !t.is_cancelled());
            turns
                .draining
                .insert(session_id.to_string(), state.drained.clone());
        }
    }
}

/// A session's claim on its turn slot, released when dropped: at the turn's end, or when
/// the turn never started (its ack could not be queued).
struct Claim {
    sessions: Arc<ChatSessions>,
    session_id: String,
    state: Arc<TurnState>,
    ended: bool,
}

impl Claim {
    /// Queues the turn's terminal event and frees the session (see
    /// [`ChatSessions::release`]).
    fn end(mut self, kind: &str, fields: Value) {
        let (sessions, state) = (self.sessions.clone(), self.state.clone());
        sessions.release(&self.session_id, &state, || state.finish(kind, fields));
        self.ended = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.ended {
            self.sessions.release(&self.session_id, &self.state, || {});
        }
    }
}

impl Client {
    /// Serves `agent.chat` with `handler` (see the module docs), replacing any earlier
    /// chat handler (and any handler registered for `agent.chat`, `agent.chat.cancel` or
    /// `agent.chat.approve`). Turns in flight keep their handler. The handler should
    /// reach the daemon through [`ChatTurnContext::client`] rather than a captured
    /// [`Client`], which would keep the client alive through its own handler registry.
    pub fn serve_chat<H: ChatHandler>(&self, handler: H) {
        let handler: Arc<dyn ChatHandler> = Arc::new(handler);
        let sessions = self.extension::<ChatSessions>();
        {
            let sessions = sessions.clone();
            self.route_locally(
                EVENT_METHOD,
                Arc::new(move |params: &Value| sessions.route(params)),
            );
        }
        let weak = self.downgrade();
        let registry = self.registry();
        {
            let sessions = sessions.clone();
            registry.set_request(
                CHAT_METHOD,
                Some(RequestHandler::Peer(Arc::new(
                    move |_id: &Value, params: Value, peer: &Peer| {
                        accept(&handler, &sessions, &weak, &params, peer)
                    },
                ))),
            );
        }
        {
            let sessions = sessions.clone();
            registry.set_notification(
                CANCEL_METHOD,
                Some(Arc::new(move |params: Value| cancel(&sessions, &params))),
            );
        }
        registry.set_request(
            APPROVE_METHOD,
            Some(handlers::sync_handler(move |params| {
                approve(&sessions, &params)
            })),
        );
    }

    /// Stops accepting new turns (`agent.chat` is then `-32601`, as for a client that
    /// never served chat). Turns in flight run to their end, and cancels and approvals
    /// still reach them.
    pub fn stop_serving_chat(&self) {
        self.registry().set_request(CHAT_METHOD, None);
    }
}

/// Validates an `agent.chat`, claims its session and acks; the turn starts once the ack
/// is queued. Runs inline on the connection's dispatch task: nothing here blocks.
fn accept(
    handler: &Arc<dyn ChatHandler>,
    sessions: &Arc<ChatSessions>,
    weak: &WeakClient,
    params: &Value,
    peer: &Peer,
) -> (HandlerResult, Option<AfterReply>) {
    let parsed = match ChatParams::from_params(params) {
        Ok(p) => p,
        Err(e) => return (Err(e), None),
    };
    let (Some(client), Ok(handle)) = (weak.upgrade(), Handle::try_current()) else {
        return (
            Err(HandlerError::new("agent.chat: the client is shutting down")),
            None,
        );
    };
    let session_id = parsed.session_id.clone();
    let (state, events) = TurnState::new(&session_id);
    let Some(previous) = sessions.claim(&session_id, &state) else {
        return (
            Err(HandlerError::new(format!(
                "agent.chat: session {session_id} already has a turn in flight"
            ))),
            None,
        );
    };
    let claim = Claim {
        sessions: sessions.clone(),
        session_id: session_id.clone(),
        state: state.clone(),
        ended: false,
    };
    let ack = json!({"accepted": true, "session_id": session_id});
    let (handler, peer) = (handler.clone(), peer.clone());
    let start: AfterReply = Box::new(move || {
        handle.spawn(turn::pump(state.clone(), peer, events, previous));
        let turn = turn::ChatTurnContext::new(parsed, state.clone(), client, handle);
        let spawned = std::thread::Builder::new()
            .name("car-chat-turn".into())
            .spawn(move || {
                let (kind, fields) = turn::outcome(&*handler, &turn);
                claim.end(kind, fields);
            });
        if let Err(e) = spawned {
            // The closure (and with it the claim) is dropped: the session is free again.
            tracing::error!(session_id = %session_id, error = %e, "cannot start the chat turn's thread");
            state.fail(&format!("cannot start the turn: {e}"));
        }
    });
    (Ok(ack), Some(start))
}

/// `agent.chat.cancel {session_id}`: stops that session's turn, if one is in flight.
fn cancel(sessions: &ChatSessions, params: &Value) {
    let session_id = params.get("session_id").and_then(Value::as_str);
    match session_id.and_then(|s| sessions.get(s)) {
        Some(turn) => turn.stop(Stop::Cancelled),
        None => tracing::debug!(?session_id, "agent.chat.cancel for no turn in flight"),
    }
}

/// `agent.chat.approve`: `{resolved}`.
fn approve(sessions: &ChatSessions, params: &Value) -> HandlerResult {
    let p = ApproveParams::from_params(params)?;
    let resolved = sessions
        .get(&p.session_id)
        .is_some_and(|turn| turn.resolve(&p.approval_id, p.approved));
    Ok(json!({ "resolved": resolved }))
}
