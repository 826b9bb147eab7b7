//! One served chat turn: the context its handler is given, its event stream, its parked
//! approvals and how it ends.
//!
//! This module owns a turn's life after it was acked:
//! - events go into the turn's ordered queue (emitting never blocks, never waits on the socket) and
//!   a pump task sends them up the connection the turn arrived on, one at a time, in order; the
//!   terminal event is always the last one queued — a late emit from a clone of the context is
//!   dropped (logged at debug);
//! - a parked approval waits on its own channel, resolved by `agent.chat.approve`, or `false` by a
//!   cancel or the connection's end (the pump watches for it); nothing here waits without one of
//!   those able to end the wait;
//! - the handler runs on a dedicated thread (never a tokio worker), no lock held, a panic caught;
//!   its outcome becomes `done`/`error` (see [`super`] for the rules).

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, MutexGuard};

use serde_json::{json, Value};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ChatHandler, ChatParams, EVENT_METHOD};
use crate::client::Client;
use crate::handlers::AbortSignal;
use crate::peer::Peer;

/// The `finish_reason` of a turn that ended normally.
pub const FINISH_STOP: &str = "stop";
/// The `finish_reason` of a turn the daemon cancelled (`agent.chat.cancel`).
pub const FINISH_CANCELLED: &str = "cancelled";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a single map or option operation.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct Approvals {
    waiting: HashMap<String, std_mpsc::SyncSender<bool>>,
    /// Set once the turn was cancelled or lost its connection: new waits answer `false`.
    closed: bool,
}

/// The shared state of one turn in flight.
pub(crate) struct TurnState {
    session_id: String,
    abort: AbortSignal,
    /// The async view of `abort`.
    stop: CancellationToken,
    /// `agent.chat.cancel` arrived (as opposed to the connection ending).
    cancel_requested: AtomicBool,
    approvals: Mutex<Approvals>,
    /// `None` once the terminal event was queued.
    events: Mutex<Option<mpsc::UnboundedSender<Value>>>,
    /// A terminal event the handler sent itself (`agent.chat.event {kind: done | error}`
    /// while its turn runs): it ends the turn in place of the handler's return value.
    pub(crate) own_terminal: Mutex<Option<(String, Value)>>,
    /// Cancelled when this turn's pump has sent (or given up sending) its last event: the
    /// session's next turn sends nothing before.
    pub(crate) drained: CancellationToken,
}

/// Why a turn stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    Cancelled,
    ConnectionLost,
}

impl TurnState {
    /// A turn of `session_id` and the receiving end of its event queue.
    pub(crate) fn new(session_id: &str) -> (Arc<Self>, mpsc::UnboundedReceiver<Value>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Self {
            session_id: session_id.to_string(),
            abort: AbortSignal::default(),
            stop: CancellationToken::new(),
            cancel_requested: AtomicBool::new(false),
            approvals: Mutex::default(),
            events: Mutex::new(Some(tx)),
            own_terminal: Mutex::new(None),
            drained: CancellationToken::new(),
        });
        (state, rx)
    }

    /// Sets the abort signal and resolves every parked approval (and any later one) false.
    pub(crate) fn stop(&self, why: Stop) {
        if why == Stop::Cancelled {
            self.cancel_requested.store(true, Ordering::SeqCst);
        }
        self.abort.abort();
        self.stop.cancel();
        let parked: Vec<_> = {
            let mut a = lock(&self.approvals);
            a.closed = true;
            a.waiting.drain().map(|(_, tx)| tx).collect()
        };
        for tx in parked {
            let _ = tx.send(false);
        }
        tracing::debug!(session_id = %self.session_id, ?why, "chat turn stopped");
    }

    /// Resolves the parked approval `approval_id`; false when none is parked under it.
    pub(crate) fn resolve(&self, approval_id: &str, approved: bool) -> bool {
        let parked = lock(&self.approvals).waiting.remove(approval_id);
        match parked {
            Some(tx) => tx.send(approved).is_ok(),
            None => false,
        }
    }

    /// Takes an `agent.chat.event` the handler sent for its own turn: a non-terminal kind
    /// joins the turn's ordered stream; the first `done` / `error` becomes the turn's
    /// terminal event (sent when the handler returns; later ones are dropped).
    pub(crate) fn route(&self, kind: &str, mut fields: Value) {
        if let Value::Object(map) = &mut fields {
            map.remove("session_id");
            map.remove("kind");
        }
        // CAR's `chat_event(session_id, "tool_call", name)` carries the name as `delta`.
        if kind == "tool_call" {
            if let Value::Object(map) = &mut fields {
                if !map.contains_key("tool") {
                    if let Some(delta) = map.remove("delta") {
                        map.insert("tool".into(), delta);
                    }
                }
            }
        }
        // Held across the emit (which only queues), so nothing follows the turn's own
        // terminal event.
        let mut own = lock(&self.own_terminal);
        if own.is_some() {
            tracing::debug!(session_id = %self.session_id, kind, "chat event after the turn's own terminal event dropped");
            return;
        }
        if matches!(kind, "done" | "error") {
            *own = Some((kind.to_string(), fields));
        } else {
            self.emit(kind, fields);
        }
    }

    /// Queues one event `{session_id, kind, ...fields}`; dropped once the turn ended or its
    /// connection is gone.
    fn emit(&self, kind: &str, fields: Value) {
        let event = event(&self.session_id, kind, fields);
        let queued = lock(&self.events)
            .as_ref()
            .is_some_and(|tx| tx.send(event).is_ok());
        if !queued {
            tracing::debug!(session_id = %self.session_id, kind, "chat event dropped: the turn ended or its connection is gone");
        }
    }

    /// Ends a turn that never ran with `error {error}`.
    pub(crate) fn fail(&self, error: &str) {
        self.finish("error", json!({ "error": error }));
    }

    /// Queues the terminal event and closes the queue.
    pub(crate) fn finish(&self, kind: &str, fields: Value) {
        let event = event(&self.session_id, kind, fields);
        if let Some(tx) = lock(&self.events).take() {
            if tx.send(event).is_err() {
                tracing::debug!(session_id = %self.session_id, kind, "terminal chat event dropped: the connection is gone");
            }
        }
    }
}

/// `{session_id, kind, ...fields}`.
pub(crate) fn event(session_id: &str, kind: &str, fields: Value) -> Value {
    let mut event = json!({"session_id": session_id, "kind": kind});
    if let (Some(e), Value::Object(f)) = (event.as_object_mut(), fields) {
        e.extend(f);
    }
    event
}

/// Sends a turn's events up `peer` in order until the queue closes; the connection's end
/// stops the turn (see [`Stop::ConnectionLost`]). It first waits for `previous` (the same
/// session's previous turn's pump) to drain, so a session's events never interleave
/// across turns.
pub(crate) async fn pump(
    state: Arc<TurnState>,
    peer: Peer,
    mut events: mpsc::UnboundedReceiver<Value>,
    previous: Option<CancellationToken>,
) {
    let _drained = state.drained.clone().drop_guard();
    if let Some(previous) = previous {
        tokio::select! {
            () = previous.cancelled() => {}
            () = peer.closed() => {}
        }
    }
    loop {
        let event = tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(e) => e,
                None => return,
            },
            () = peer.closed() => break,
        };
        if let Err(e) = peer.notify(EVENT_METHOD, &event).await {
            tracing::debug!(session_id = %state.session_id, error = %e, "chat event not sent");
            break;
        }
    }
    state.stop(Stop::ConnectionLost);
}

/// What a [`ChatHandler`] is given: the turn's params, its event stream, its approvals and
/// its abort signal. Cheap to clone; every clone is the same turn. A clone outliving the
/// turn cannot emit anything (its events are dropped).
#[derive(Clone)]
pub struct ChatTurnContext {
    params: Arc<ChatParams>,
    state: Arc<TurnState>,
    client: Client,
    handle: Handle,
}

impl std::fmt::Debug for ChatTurnContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTurnContext")
            .field("session_id", &self.state.session_id)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl ChatTurnContext {
    pub(crate) fn new(
        params: ChatParams,
        state: Arc<TurnState>,
        client: Client,
        handle: Handle,
    ) -> Self {
        Self {
            params: Arc::new(params),
            state,
            client,
            handle,
        }
    }

    /// The validated `agent.chat` params.
    pub fn params(&self) -> &ChatParams {
        &self.params
    }

    pub fn session_id(&self) -> &str {
        &self.params.session_id
    }

    /// The client the turn arrived on, for calls back into the daemon (use this rather
    /// than capturing a [`Client`] in the handler: the handler is stored in the client).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs `fut` to completion on the client's runtime, blocking this (turn) thread:
    /// how a handler makes async calls, e.g. `turn.block_on(turn.client().call(..))`.
    /// Only from the turn's own thread or another thread outside any runtime.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.handle.block_on(fut)
    }

    /// Any event kind with its fields (`approval_pending`, or a kind newer than this
    /// client); `done` / `error` set the turn's terminal event (see the module docs).
    pub fn emit(&self, kind: &str, fields: Value) {
        self.state.route(kind, fields);
    }

    /// `token {delta}`.
    pub fn emit_token(&self, delta: &str) {
        self.state.emit("token", json!({ "delta": delta }));
    }

    /// `tool_call {tool, params?}`.
    pub fn emit_tool_call(&self, tool: &str, params: Option<Value>) {
        let mut fields = json!({ "tool": tool });
        if let Some(p) = params {
            fields["params"] = p;
        }
        self.state.emit("tool_call", fields);
    }

    /// `goal_evaluated {iteration, met, grounded, reason}`.
    pub fn emit_goal_evaluated(&self, iteration: u64, met: bool, grounded: bool, reason: &str) {
        self.state.emit(
            "goal_evaluated",
            json!({"iteration": iteration, "met": met, "grounded": grounded, "reason": reason}),
        );
    }

    /// Emits `approval_pending {approval_id, action, details?}` and blocks until the
    /// daemon's `agent.chat.approve` for `approval_id` decides (see
    /// [`super::approves`]); `false` at once when the turn was cancelled or lost its
    /// connection, and `false` the moment either happens while waiting. Asking again
    /// under an `approval_id` still parked resolves the earlier wait `false`.
    pub fn request_approval(
        &self,
        approval_id: &str,
        action: &str,
        details: Option<Value>,
    ) -> bool {
        let (tx, rx) = std_mpsc::sync_channel(1);
        {
            let mut a = lock(&self.state.approvals);
            if a.closed {
                return false;
            }
            if let Some(earlier) = a.waiting.insert(approval_id.to_string(), tx) {
                let _ = earlier.send(false);
            }
        }
        // Parked before it is announced, so an immediate answer finds it.
        let mut fields = json!({"approval_id": approval_id, "action": action});
        if let Some(d) = details {
            fields["details"] = d;
        }
        self.state.emit("approval_pending", fields);
        rx.recv().unwrap_or(false)
    }

    /// True once the daemon cancelled the turn or its connection ended.
    pub fn is_cancelled(&self) -> bool {
        self.state.abort.is_aborted()
    }

    /// The turn's abort signal (set with [`ChatTurnContext::is_cancelled`]); its
    /// [`AbortSignal::wait`] blocks until then.
    pub fn abort_signal(&self) -> AbortSignal {
        self.state.abort.clone()
    }

    /// Resolves once the turn is cancelled or its connection ended (for async work run
    /// with [`ChatTurnContext::block_on`]).
    pub fn cancelled(&self) -> impl Future<Output = ()> + Send + 'static {
        let stop = self.state.stop.clone();
        async move { stop.cancelled().await }
    }
}

/// Runs `handler` for the turn on the current (dedicated) thread and returns its terminal
/// event `(kind, fields)`; the caller queues it (see `chat.rs`: together with freeing the
/// session, so the next turn of the session is accepted exactly when this one's terminal
/// event is in the stream).
pub(crate) fn outcome(handler: &dyn ChatHandler, turn: &ChatTurnContext) -> (&'static str, Value) {
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| handler.run(turn)));
    let state = &turn.state;
    let cancelled = state.cancel_requested.load(Ordering::SeqCst);
    let own = lock(&state.own_terminal).take();
    if let (Some((kind, fields)), false) = (own, cancelled) {
        let kind = if kind == "error" { "error" } else { "done" };
        let mut fields = fields;
        if !fields.is_object() {
            fields = json!({});
        }
        if let Value::Object(map) = &mut fields {
            // CAR's `chat_event(session_id, "done" | "error", delta)`: the delta is the
            // text or the error.
            let delta = map.remove("delta");
            if kind == "done" {
                map.entry("finish_reason").or_insert(json!(FINISH_STOP));
                map.entry("text").or_insert(delta.unwrap_or(json!("")));
            } else {
                map.entry("error")
                    .or_insert(delta.unwrap_or(json!("the agent reported an error")));
            }
        }
        return (kind, fields);
    }
    match outcome {
        _ if cancelled => {
            let mut fields = json!({ "finish_reason": FINISH_CANCELLED });
            if let Ok(Ok(text)) = &outcome {
                if !text.is_empty() {
                    fields["text"] = json!(text);
                }
            }
            ("done", fields)
        }
        Ok(Ok(text)) => ("done", json!({"finish_reason": FINISH_STOP, "text": text})),
        Ok(Err(error)) => ("error", json!({ "error": error })),
        Err(panic) => {
            let panic = crate::handlers::panic_text(panic.as_ref());
            tracing::error!(session_id = %state.session_id, %panic, "chat handler panicked");
            (
                "error",
                json!({ "error": format!("chat handler panicked: {panic}") }),
            )
        }
    }
}

/// [`outcome`], then its terminal event queued.
#[cfg(test)]
pub(crate) fn run(handler: &dyn ChatHandler, turn: ChatTurnContext) {
    let (kind, fields) = outcome(handler, &turn);
    turn.state.finish(kind, fields);
}

/// Whether `stop` already happened (tests).
#[cfg(test)]
impl TurnState {
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_session_and_kind_and_end_with_the_terminal_one() {
        let (state, mut rx) = TurnState::new("s1");
        state.emit("token", json!({"delta": "a"}));
        state.finish("done", json!({"finish_reason": "stop", "text": "a"}));
        state.emit("token", json!({"delta": "late"}));
        assert_eq!(
            rx.try_recv().unwrap(),
            json!({"session_id": "s1", "kind": "token", "delta": "a"})
        );
        assert_eq!(
            rx.try_recv().unwrap(),
            json!({"session_id": "s1", "kind": "done", "finish_reason": "stop", "text": "a"})
        );
        // The queue is closed: the late emit was dropped, nothing follows the terminal.
        assert!(matches!(
            rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    #[test]
    fn resolving_unknown_approvals_is_false_and_stop_closes_new_waits() {
        let (state, _rx) = TurnState::new("s1");
        assert!(!state.resolve("nope", true));
        state.stop(Stop::ConnectionLost);
        assert!(state.is_stopped() && state.abort.is_aborted());
        assert!(!state.cancel_requested.load(Ordering::SeqCst));
        assert!(lock(&state.approvals).closed);
    }
}

#[cfg(test)]
mod approval_tests {
    use super::*;
    use crate::{ClientConfig, EnvSnapshot};
    use std::time::Duration;

    /// A context whose client never connects (nothing here needs the daemon).
    fn context(rt: &tokio::runtime::Runtime) -> (ChatTurnContext, mpsc::UnboundedReceiver<Value>) {
        let (state, rx) = TurnState::new("s1");
        let params = ChatParams {
            session_id: "s1".into(),
            ..ChatParams::default()
        };
        let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(
            "/nonexistent-car-home",
        )));
        (
            ChatTurnContext::new(params, state, client, rt.handle().clone()),
            rx,
        )
    }

    /// Waits (bounded) for the next queued event.
    fn next(rt: &tokio::runtime::Runtime, rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("an event within the hang guard")
                .expect("queue open")
        })
    }

    #[test]
    fn an_approval_parks_until_decided_and_a_stop_denies_the_rest() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (turn, mut rx) = context(&rt);
        let waiter = {
            let turn = turn.clone();
            std::thread::spawn(move || turn.request_approval("a1", "rm -rf", Some(json!({"p": 1}))))
        };
        // The event is queued only once the approval is parked, so resolving now hits it.
        assert_eq!(
            next(&rt, &mut rx),
            json!({"session_id": "s1", "kind": "approval_pending", "approval_id": "a1",
                   "action": "rm -rf", "details": {"p": 1}})
        );
        assert!(turn.state.resolve("a1", true));
        assert!(waiter.join().unwrap());
        assert!(!turn.state.resolve("a1", true), "already resolved");

        // A re-request under a parked id denies the earlier wait.
        let first = {
            let turn = turn.clone();
            std::thread::spawn(move || turn.request_approval("a2", "x", None))
        };
        assert_eq!(next(&rt, &mut rx)["approval_id"], "a2");
        let second = {
            let turn = turn.clone();
            std::thread::spawn(move || turn.request_approval("a2", "x", None))
        };
        assert!(!first.join().unwrap());
        assert_eq!(next(&rt, &mut rx)["approval_id"], "a2");

        // A stop (cancel or a lost connection) denies the parked wait and every later one.
        turn.state.stop(Stop::Cancelled);
        assert!(!second.join().unwrap());
        assert!(turn.is_cancelled() && turn.abort_signal().wait(Duration::ZERO));
        assert!(!turn.request_approval("a3", "y", None));
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), turn.cancelled())
                .await
                .expect("cancelled() resolves after a stop")
        });
    }

    #[test]
    fn handler_outcomes_become_terminal_events() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let cases: Vec<(Box<dyn ChatHandler>, bool, Value)> = vec![
            (
                Box::new(|_: &ChatTurnContext| Ok("hi".to_string())),
                false,
                json!({"kind": "done", "finish_reason": "stop", "text": "hi"}),
            ),
            (
                Box::new(|_: &ChatTurnContext| Err("model unavailable".to_string())),
                false,
                json!({"kind": "error", "error": "model unavailable"}),
            ),
            (
                Box::new(|_: &ChatTurnContext| Ok("partial".to_string())),
                true,
                json!({"kind": "done", "finish_reason": "cancelled", "text": "partial"}),
            ),
            (
                Box::new(|_: &ChatTurnContext| Err("cancelled".to_string())),
                true,
                json!({"kind": "done", "finish_reason": "cancelled"}),
            ),
        ];
        for (handler, cancel, want) in cases {
            let (turn, mut rx) = context(&rt);
            if cancel {
                turn.state.stop(Stop::Cancelled);
            }
            run(&*handler, turn);
            let mut got = next(&rt, &mut rx);
            got.as_object_mut().unwrap().remove("session_id");
            assert_eq!(got, want);
        }
        let (turn, mut rx) = context(&rt);
        run(
            &|_: &ChatTurnContext| -> Result<String, String> { panic!("handler blew up") },
            turn,
        );
        let got = next(&rt, &mut rx);
        assert_eq!(got["kind"], "error");
        assert!(
            got["error"].as_str().unwrap().contains("handler blew up"),
            "{got}"
        );
    }
}
