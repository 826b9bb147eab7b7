//! Daemon-to-client traffic: reverse calls (server-initiated requests such as
//! `tools.execute`) and server-pushed notifications.
//!
//! This module owns the handler registry, which outlives any one connection so handlers
//! survive reconnects, and the rules for running handlers:
//!
//! - a reverse call runs off the reader task (a blocking-pool thread for synchronous handlers, a
//!   task for async ones), so one slow tool never delays other responses;
//! - its `Ok` becomes `result`, its [`HandlerError`] becomes `error` (with `data.terminal = true`
//!   when asked), a panic becomes `-32603`, and a method nobody registered becomes `-32601`;
//! - notifications have one subscriber per method and run one at a time in arrival order on a
//!   blocking-pool thread; a panic is logged and the next notification still runs.
//!
//! - a `tools.execute` call carries an [`AbortSignal`] ([`ToolCall::abort`]); a `tools.cancel`
//!   naming its `request_id` sets it before the `tools.cancel` subscriber (if any) runs, so a tool
//!   can stop the work the daemon gave up on.
//!
//! - a crate-internal handler may instead run inline with the [`Peer`] the call arrived on
//!   (`RequestHandler::Peer`): it must answer at once without blocking or running user code, and
//!   may hand back a follow-up ([`Answer::after`]) the connection runs only once the reply is
//!   queued — how `agent.chat` acks before its turn streams events.
//!
//! The registry lock is only held to clone a handler out: no user code runs under it.
//! Sockets are not touched here; the connection sends the frames this module builds.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::jsonrpc::{error_frame, result_frame};
use futures_util::FutureExt;
use serde_json::{json, Value};

use crate::error::HandlerError;
use crate::peer::Peer;

/// What a reverse-call handler returns.
pub type HandlerResult = Result<Value, HandlerError>;
/// A boxed `Send` future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

type SyncFn = dyn Fn(&Value, Value) -> HandlerResult + Send + Sync;
type AsyncFn = dyn Fn(&Value, Value) -> BoxFuture<HandlerResult> + Send + Sync;
type NotifyFn = dyn Fn(Value) + Send + Sync;
/// Work to run once a reply is queued (see [`Answer::after`]); it must not block.
pub(crate) type AfterReply = Box<dyn FnOnce() + Send>;
/// An inline handler given the connection it serves (see the module docs).
pub(crate) type PeerFn =
    dyn Fn(&Value, Value, &Peer) -> (HandlerResult, Option<AfterReply>) + Send + Sync;
/// A tool function serving the `tools.execute` calls of one proposal run.
pub(crate) type ToolFn = dyn Fn(ToolCall) -> HandlerResult + Send + Sync;

/// A registered reverse-call handler; it is given the request id and the params.
#[derive(Clone)]
pub(crate) enum RequestHandler {
    /// Runs on the blocking pool: may block (a Python callback, a subprocess).
    Sync(Arc<SyncFn>),
    /// Runs as a task: must not block.
    Async(Arc<AsyncFn>),
    /// Runs inline on the dispatching task with the connection it serves: crate code only,
    /// answers at once, never blocks.
    Peer(Arc<PeerFn>),
}

/// The response frame for one reverse call and what to run once it is queued.
pub(crate) struct Answer {
    pub(crate) frame: String,
    /// Run by the connection after `frame` was queued (never when it could not be), so
    /// whatever it sends on the connection follows the reply.
    pub(crate) after: Option<AfterReply>,
}

impl Answer {
    fn frame(frame: String) -> Self {
        Self { frame, after: None }
    }
}

/// Every handler registered on a client; shared by all of its connections.
#[derive(Default)]
pub(crate) struct HandlerRegistry {
    requests: RwLock<HashMap<String, RequestHandler>>,
    notifications: RwLock<HashMap<String, Arc<NotifyFn>>>,
    /// `session_id → tool function` for `execute_proposal` runs; a `tools.execute` whose
    /// `session_id` names one goes there instead of the registered tool handler.
    scoped_tools: RwLock<HashMap<String, Arc<ToolFn>>>,
    /// `request_id` (as text) → the abort signal of a `tools.execute` call in flight.
    aborts: Mutex<HashMap<String, AbortSignal>>,
}

/// Set when the daemon cancels the tool call it belongs to (`tools.cancel`). Cheap to
/// clone; every clone sees the same state. Two signals always compare equal (a signal is
/// not part of what a call is).
#[derive(Clone, Default)]
pub struct AbortSignal(Arc<(Mutex<bool>, Condvar)>);

impl AbortSignal {
    /// Whether the daemon cancelled the call.
    pub fn is_aborted(&self) -> bool {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until the call is cancelled or `timeout` passes; whether it was cancelled.
    pub fn wait(&self, timeout: Duration) -> bool {
        let (lock, cv) = &*self.0;
        let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = cv
            .wait_timeout_while(guard, timeout, |aborted| !*aborted)
            .unwrap_or_else(|p| p.into_inner());
        *guard
    }

    pub(crate) fn abort(&self) {
        let (lock, cv) = &*self.0;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
    }
}

impl std::fmt::Debug for AbortSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AbortSignal")
            .field(&self.is_aborted())
            .finish()
    }
}

impl PartialEq for AbortSignal {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

thread_local! {
    /// The abort signal of the `tools.execute` call this blocking-pool thread is running.
    static CURRENT_ABORT: RefCell<Option<AbortSignal>> = const { RefCell::new(None) };
}

/// The text a `tools.cancel` uses to name a call: a string id itself, else its JSON.
fn request_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl std::fmt::Debug for HandlerRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |m: Vec<String>| m;
        f.debug_struct("HandlerRegistry")
            .field(
                "requests",
                &names(read(&self.requests).keys().cloned().collect()),
            )
            .field(
                "notifications",
                &names(read(&self.notifications).keys().cloned().collect()),
            )
            .finish()
    }
}

// A panic elsewhere while holding these locks cannot leave the maps half-written (every
// critical section is a single insert/remove/get), so a poisoned lock is still usable.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl HandlerRegistry {
    pub(crate) fn set_request(&self, method: &str, handler: Option<RequestHandler>) {
        let mut map = write(&self.requests);
        match handler {
            Some(h) => map.insert(method.to_string(), h),
            None => map.remove(method),
        };
    }

    pub(crate) fn set_notification(&self, method: &str, handler: Option<Arc<NotifyFn>>) {
        let mut map = write(&self.notifications);
        match handler {
            Some(h) => map.insert(method.to_string(), h),
            None => map.remove(method),
        };
    }

    pub(crate) fn request(&self, method: &str) -> Option<RequestHandler> {
        read(&self.requests).get(method).cloned()
    }

    pub(crate) fn notification(&self, method: &str) -> Option<Arc<NotifyFn>> {
        read(&self.notifications).get(method).cloned()
    }

    fn abort_call(&self, request_id: &Value) {
        let signal = self
            .aborts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&request_key(request_id))
            .cloned();
        if let Some(signal) = signal {
            signal.abort();
        }
    }

    pub(crate) fn has_request(&self, method: &str) -> bool {
        read(&self.requests).contains_key(method)
    }

    pub(crate) fn set_scoped_tool(&self, session_id: &str, f: Option<Arc<ToolFn>>) {
        let mut map = write(&self.scoped_tools);
        match f {
            Some(f) => map.insert(session_id.to_string(), f),
            None => map.remove(session_id),
        };
    }

    /// The handler for a reverse call: a scoped tool function for `tools.execute` calls of
    /// an `execute_proposal` run, else the registered handler.
    fn route(&self, method: &str, params: &Value) -> Option<RequestHandler> {
        if method == "tools.execute" {
            let scoped = params
                .get("session_id")
                .and_then(Value::as_str)
                .and_then(|s| read(&self.scoped_tools).get(s).cloned());
            if let Some(f) = scoped {
                return Some(RequestHandler::Sync(Arc::new(
                    move |id: &Value, params: Value| f(ToolCall::from_request(id, &params)?),
                )));
            }
        }
        self.request(method)
    }
}

/// Runs the handler for one reverse call that arrived on `peer` and returns the response
/// frame to send.
pub(crate) async fn answer(
    registry: &HandlerRegistry,
    id: Value,
    method: String,
    params: Value,
    peer: &Peer,
) -> Answer {
    let Some(handler) = registry.route(&method, &params) else {
        tracing::debug!(%method, "no handler for reverse call");
        return Answer::frame(error_frame(&id, &RpcError::method_not_found(&method)));
    };
    let handler = match handler {
        RequestHandler::Peer(f) => {
            return match std::panic::catch_unwind(AssertUnwindSafe(|| f(&id, params, peer))) {
                Ok((outcome, after)) => Answer {
                    frame: outcome_frame(&id, outcome),
                    after,
                },
                Err(panic) => Answer::frame(panicked(&id, &method, panic_text(panic.as_ref()))),
            };
        }
        other => other,
    };
    // A tool call gets an abort signal that `tools.cancel` can reach while it runs.
    let abort = (method == "tools.execute").then(|| {
        let key = request_key(
            params
                .get("request_id")
                .filter(|v| !v.is_null())
                .unwrap_or(&id),
        );
        let signal = AbortSignal::default();
        lock_aborts(registry).insert(key.clone(), signal.clone());
        (key, signal)
    });
    let signal = abort.as_ref().map(|(_, s)| s.clone());
    let outcome = match handler {
        RequestHandler::Sync(f) => {
            let call_id = id.clone();
            let run = move || {
                CURRENT_ABORT.with(|c| *c.borrow_mut() = signal);
                let out = f(&call_id, params);
                CURRENT_ABORT.with(|c| c.borrow_mut().take());
                out
            };
            match tokio::task::spawn_blocking(run).await {
                Ok(outcome) => Ok(outcome),
                Err(e) if e.is_panic() => Err(panic_text(e.into_panic().as_ref())),
                Err(e) => Err(e.to_string()),
            }
        }
        RequestHandler::Peer(_) => unreachable!("answered above"),
        RequestHandler::Async(f) => {
            let call_id = id.clone();
            // The handler is invoked inside the future so a panic while building it is
            // caught as well as one while polling it.
            AssertUnwindSafe(async move { f(&call_id, params).await })
                .catch_unwind()
                .await
                .map_err(|p| panic_text(p.as_ref()))
        }
    };
    if let Some((key, _)) = abort {
        lock_aborts(registry).remove(&key);
    }
    Answer::frame(match outcome {
        Ok(outcome) => outcome_frame(&id, outcome),
        Err(panic) => panicked(&id, &method, panic),
    })
}

fn outcome_frame(id: &Value, outcome: HandlerResult) -> String {
    match outcome {
        Ok(value) => result_frame(id, &value),
        Err(err) => error_frame(id, &err.to_rpc_error()),
    }
}

fn panicked(id: &Value, method: &str, panic: String) -> String {
    tracing::error!(%method, %panic, "reverse-call handler panicked");
    error_frame(
        id,
        &RpcError::internal(format!("handler for {method} panicked: {panic}")),
    )
}

/// Runs the notification handler for `method`, if any, on the blocking pool; a panic is
/// logged and swallowed. Callers await it before the next notification to keep order.
pub(crate) async fn deliver(registry: &HandlerRegistry, method: String, params: Value) {
    if method == "tools.cancel" {
        registry.abort_call(params.get("request_id").unwrap_or(&Value::Null));
    }
    let Some(handler) = registry.notification(&method) else {
        tracing::trace!(%method, "notification without a subscriber dropped");
        return;
    };
    if let Err(e) = tokio::task::spawn_blocking(move || handler(params)).await {
        if e.is_panic() {
            let panic = panic_text(e.into_panic().as_ref());
            tracing::error!(%method, %panic, "notification handler panicked");
        }
    }
}

fn lock_aborts(
    registry: &HandlerRegistry,
) -> std::sync::MutexGuard<'_, HashMap<String, AbortSignal>> {
    registry.aborts.lock().unwrap_or_else(|p| p.into_inner())
}

/// The message of a caught panic (`&str` and `String` payloads; any other is named as such).
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Wraps a plain `params -> result` function as a synchronous handler.
pub(crate) fn sync_handler<F>(f: F) -> RequestHandler
where
    F: Fn(Value) -> HandlerResult + Send + Sync + 'static,
{
    RequestHandler::Sync(Arc::new(move |_id: &Value, params| f(params)))
}

/// Wraps an async `params -> result` function.
pub(crate) fn async_handler<F, Fut>(f: F) -> RequestHandler
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    RequestHandler::Async(Arc::new(move |_id: &Value, params| Box::pin(f(params))))
}

/// One `tools.execute` reverse call, normalised (docs/protocol-choices.md, "Reverse calls and
/// heartbeats").
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool: String,
    /// The tool arguments, from `parameters` or (older daemons) `params`.
    pub params: Value,
    /// The proposal action id; empty for legacy callers.
    pub action_id: String,
    /// The daemon's callback-routing id (equal to the JSON-RPC id); `tools.cancel` names it.
    pub request_id: Value,
    pub timeout_ms: Option<u64>,
    pub session_id: Option<String>,
    /// 1-based retry counter.
    pub attempt: u64,
    /// Set when the daemon cancels this call (`tools.cancel`).
    pub abort: AbortSignal,
}

impl ToolCall {
    /// Builds the call from the request id and params; `-32602` naming the field when the
    /// params are unusable.
    pub fn from_request(id: &Value, params: &Value) -> Result<Self, HandlerError> {
        let invalid = |detail: &str| {
            HandlerError::from(RpcError::invalid_params(format!("tools.execute: {detail}")))
        };
        if !params.is_object() {
            return Err(invalid("params must be an object"));
        }
        let tool = match params.get("tool") {
            Some(Value::String(t)) if !t.is_empty() => t.clone(),
            _ => return Err(invalid("tool is required")),
        };
        let args = params
            .get("parameters")
            .filter(|v| !v.is_null())
            .or_else(|| params.get("params").filter(|v| !v.is_null()))
            .cloned()
            .unwrap_or_else(|| json!({}));
        Ok(Self {
            tool,
            params: args,
            action_id: params
                .get("action_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            request_id: params
                .get("request_id")
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or_else(|| id.clone()),
            timeout_ms: params.get("timeout_ms").and_then(Value::as_u64),
            session_id: params
                .get("session_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            attempt: params.get("attempt").and_then(Value::as_u64).unwrap_or(1),
            abort: CURRENT_ABORT
                .with(|c| c.borrow().clone())
                .unwrap_or_default(),
        })
    }

    /// The JSON a binding hands its tool callback (`call_json`):
    /// `{tool, params, action_id, request_id, timeout_ms, session_id, attempt}`.
    pub fn to_call_json(&self) -> Value {
        json!({
            "tool": self.tool,
            "params": self.params,
            "action_id": self.action_id,
            "request_id": self.request_id,
            "timeout_ms": self.timeout_ms,
            "session_id": self.session_id,
            "attempt": self.attempt,
        })
    }
}

/// One `tools.cancel` notification: the daemon gave up on the named `tools.execute`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCancel {
    pub request_id: Value,
    pub action_id: Option<String>,
    pub reason: Option<String>,
}

impl ToolCancel {
    pub fn from_params(params: &Value) -> Self {
        Self {
            request_id: params.get("request_id").cloned().unwrap_or(Value::Null),
            action_id: params
                .get("action_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            reason: params
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// Wraps a tool function as the `tools.execute` handler.
pub(crate) fn tool_handler<F>(f: F) -> RequestHandler
where
    F: Fn(ToolCall) -> HandlerResult + Send + Sync + 'static,
{
    RequestHandler::Sync(Arc::new(move |id: &Value, params: Value| {
        f(ToolCall::from_request(id, &params)?)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_proto::jsonrpc::{classify, Incoming};

    fn outcome(frame: &str) -> Result<Value, RpcError> {
        match classify(frame).unwrap() {
            Incoming::Response { outcome, .. } => outcome,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn results_errors_panics_and_unknown_methods() {
        let reg = HandlerRegistry::default();
        reg.set_request("ok", Some(sync_handler(|p| Ok(json!({"got": p})))));
        reg.set_request(
            "fail",
            Some(sync_handler(|_| Err(HandlerError::new("nope")))),
        );
        reg.set_request("boom", Some(sync_handler(|_| panic!("tool exploded"))));
        reg.set_request(
            "aboom",
            Some(async_handler(|_| async { panic!("async exploded") })),
        );
        reg.set_request(
            "pboom",
            Some(RequestHandler::Peer(Arc::new(|_: &Value, _, _: &Peer| {
                panic!("peer exploded")
            }))),
        );
        let peer = Peer::ended();
        let ask = |m: &str, p: Value| {
            let (reg, id, peer) = (&reg, json!("cb-1"), &peer);
            let m = m.to_string();
            async move { answer(reg, id, m, p, peer).await.frame }
        };
        let ok = ask("ok", json!(1)).await;
        assert_eq!(outcome(&ok), Ok(json!({"got": 1})));
        let e = outcome(&ask("fail", json!(null)).await).unwrap_err();
        assert_eq!((e.code, e.message.as_str(), e.data), (-32000, "nope", None));
        for (m, text) in [
            ("boom", "tool exploded"),
            ("aboom", "async exploded"),
            ("pboom", "peer exploded"),
        ] {
            let e = outcome(&ask(m, json!(null)).await).unwrap_err();
            assert_eq!(e.code, -32603);
            assert!(e.message.contains(text), "{}", e.message);
        }
        let e = outcome(&ask("nobody", json!(null)).await).unwrap_err();
        assert_eq!(e.code, -32601);
    }

    #[test]
    fn tool_calls_accept_parameters_or_params() {
        let id = json!("cb-9");
        let a = ToolCall::from_request(&id, &json!({"tool": "t", "parameters": {"x": 1}})).unwrap();
        let b = ToolCall::from_request(&id, &json!({"tool": "t", "params": {"x": 1}})).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.request_id, id);
        assert_eq!(a.attempt, 1);
        assert_eq!(
            a.to_call_json(),
            json!({"tool": "t", "params": {"x": 1}, "action_id": "", "request_id": "cb-9",
                   "timeout_ms": null, "session_id": null, "attempt": 1})
        );
        let e = ToolCall::from_request(&id, &json!({"parameters": {}})).unwrap_err();
        assert_eq!(e.code, -32602);
        assert!(e.message.contains("tool is required"));
    }
}
