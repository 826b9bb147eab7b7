//! JavaScript functions as reverse-call, tool and notification handlers.
//!
//! This module owns the bridge from client handler calls (on tokio tasks or blocking-pool
//! threads) to JS functions (on the JS thread):
//!
//! - every JS function is held as a *weak* (unref'd) ThreadsafeFunction, so a registered handler
//!   never keeps the Node process alive; it is released when its registration is replaced or
//!   removed, when its runtime closes, or when the runtime is collected;
//! - request handlers are wrapped by `index.js` so they always return a Promise of an envelope:
//!   `"r" + resultJson`, or `"e" + {message, code?, data?, terminal}` for a thrown error. The
//!   Promise is awaited from Rust, never blocking a tokio worker, so async JS handlers and handlers
//!   that throw both yield a JSON-RPC reply, never a crash;
//! - notification listeners are queued non-blocking; the ThreadsafeFunction queue is FIFO, so they
//!   run in arrival order on the JS thread;
//! - a streaming call's event listener is queued the same way, and the call settles only after a
//!   final `null` sent through the same queue has run in JS ([`flush_stream`]), so every event has
//!   reached JS before the call's Promise settles;
//! - the process-wide tool handler and tool-cancel listener live in statics read under a lock only
//!   long enough to clone the `Arc` out; no JS runs under a Rust lock.

use std::sync::{Arc, RwLock};

use car_daemon_client::{HandlerError, HandlerResult, ToolCall, ToolCancel};
use napi::bindgen_prelude::{Promise, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use serde_json::Value;

/// A JS request handler: `(argJson) => Promise<envelope>` (wrapped by `index.js`).
pub type JsHandler = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;
/// A JS notification listener: `(paramsJson) => void` (wrapped by `index.js`, never throws).
pub type JsListener = ThreadsafeFunction<String, Unknown<'static>, String, Status, false, true>;
/// A streaming call's event listener: `(eventParamsJson | null) => void`, where `null` marks
/// the end of the stream (wrapped by `index.js`, never throws).
pub type JsStreamListener =
    ThreadsafeFunction<Option<String>, (), Option<String>, Status, false, true>;

/// The code sent back when the daemon calls a tool and no tool handler is registered.
const NO_HANDLER_CODE: i64 = -32601;

static TOOL_HANDLER: RwLock<Option<Arc<JsHandler>>> = RwLock::new(None);
static TOOL_CANCEL_LISTENER: RwLock<Option<Arc<JsListener>>> = RwLock::new(None);

/// Calls a wrapped JS handler with `arg` and waits (asynchronously) for its reply.
pub async fn invoke(handler: &JsHandler, arg: String) -> HandlerResult {
    let promise = handler
        .call_async_catch(arg)
        .await
        .map_err(|e| HandlerError::new(format!("javascript handler could not run: {e}")))?;
    let reply = promise
        .await
        .map_err(|e| HandlerError::new(format!("javascript handler failed: {e}")))?;
    parse_reply(&reply)
}

/// Queues one notification for a JS listener without waiting for it to run.
pub fn notify(listener: &JsListener, method: &str, params_json: String) {
    let status = listener.call(params_json, ThreadsafeFunctionCallMode::NonBlocking);
    if status != Status::Ok {
        tracing::debug!(%method, ?status, "notification not delivered to javascript");
    }
}

/// Queues one stream event for a JS listener without waiting for it to run.
pub fn stream_event(listener: &JsStreamListener, method: &str, params_json: String) {
    let status = listener.call(Some(params_json), ThreadsafeFunctionCallMode::NonBlocking);
    if status != Status::Ok {
        tracing::debug!(%method, ?status, "stream event not delivered to javascript");
    }
}

/// Sends the end-of-stream marker (`null`) through the listener's queue and waits
/// (asynchronously) until it has run in JS. The queue is FIFO, so every event queued before
/// it by [`stream_event`] has run by then.
pub async fn flush_stream(listener: &JsStreamListener, method: &str) {
    // Fails only when the listener cannot run any more (the environment is shutting down),
    // and then no queued event would run either.
    if let Err(e) = listener.call_async_catch(None).await {
        tracing::debug!(%method, error = %e, "end of stream not delivered to javascript");
    }
}

/// Decodes the envelope `index.js` wraps every handler's outcome in.
pub fn parse_reply(reply: &str) -> HandlerResult {
    let (tag, body) = reply.split_at_checked(1).unwrap_or(("", ""));
    match tag {
        "r" => serde_json::from_str(body)
            .map_err(|e| HandlerError::new(format!("handler result is not valid JSON: {e}"))),
        "e" => {
            let err: Value = serde_json::from_str(body)
                .map_err(|e| HandlerError::new(format!("handler error is not valid JSON: {e}")))?;
            Err(handler_error(&err))
        }
        _ => Err(HandlerError::new(format!(
            "handler reply has no envelope tag: {:?}",
            reply.chars().take(40).collect::<String>()
        ))),
    }
}

fn handler_error(err: &Value) -> HandlerError {
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("javascript handler failed");
    let mut out = if err.get("terminal") == Some(&Value::Bool(true)) {
        HandlerError::terminal(message)
    } else {
        HandlerError::new(message)
    };
    if let Some(code) = err.get("code").and_then(Value::as_i64) {
        out = out.with_code(code);
    }
    if let Some(data) = err.get("data").filter(|d| !d.is_null()) {
        out = out.with_data(data.clone());
    }
    out
}

/// Replaces (or with `None` removes) the process-wide tool handler.
pub fn set_tool_handler(handler: Option<JsHandler>) {
    let old = {
        let mut guard = TOOL_HANDLER.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, handler.map(Arc::new))
    };
    // Released outside the lock.
    drop(old);
}

pub fn has_tool_handler() -> bool {
    TOOL_HANDLER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .is_some()
}

/// Replaces (or with `None` removes) the process-wide `tools.cancel` listener.
pub fn set_tool_cancel_listener(listener: Option<JsListener>) {
    let old = {
        let mut guard = TOOL_CANCEL_LISTENER
            .write()
            .unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *guard, listener.map(Arc::new))
    };
    drop(old);
}

/// Serves a `tools.execute` reverse call with the process-wide tool handler.
pub async fn run_global_tool(params: Value) -> HandlerResult {
    // The daemon always sends `request_id` in the params; the JSON-RPC id is only its
    // fallback, which an async handler does not see.
    let call = ToolCall::from_request(&Value::Null, &params)?;
    let handler = TOOL_HANDLER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let Some(handler) = handler else {
        return Err(HandlerError::new(format!(
            "no tool handler registered for tool {}: call registerToolHandler() first",
            call.tool
        ))
        .with_code(NO_HANDLER_CODE));
    };
    invoke(&handler, call.to_call_json().to_string()).await
}

/// Delivers a `tools.cancel` notification to the process-wide listener (its `request_id`).
pub fn deliver_tool_cancel(cancel: ToolCancel) {
    let listener = TOOL_CANCEL_LISTENER
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(listener) = listener {
        let request_id = match cancel.request_id {
            Value::String(s) => s,
            other => other.to_string(),
        };
        notify(&listener, "tools.cancel", request_id);
    }
}

#[allow(unsafe_code)] // `#[napi]` expands to unsafe FFI glue; nothing here is hand-written unsafe.
pub mod exports {
    use napi_derive::napi;

    use super::{JsHandler, JsListener};

    /// Sets the process-wide `tools.execute` handler (already wrapped by `index.js`).
    #[napi]
    pub fn set_tool_handler(handler: JsHandler) {
        super::set_tool_handler(Some(handler));
    }

    #[napi]
    pub fn clear_tool_handler() {
        super::set_tool_handler(None);
    }

    #[napi]
    pub fn has_tool_handler() -> bool {
        super::has_tool_handler()
    }

    /// Sets the process-wide `tools.cancel` listener; it gets the cancelled `request_id`.
    #[napi]
    pub fn set_tool_cancel_handler(listener: JsListener) {
        super::set_tool_cancel_listener(Some(listener));
    }

    #[napi]
    pub fn clear_tool_cancel_handler() {
        super::set_tool_cancel_listener(None);
    }
}
