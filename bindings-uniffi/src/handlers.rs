//! The callback interfaces foreign code implements, and their adapters onto the client's
//! handler registry.
//!
//! This module owns the rules for calling foreign code:
//!
//! - a [`DaemonHandler`] answers one daemon→client request method; it runs on the runtime's
//!   blocking pool (never a tokio worker, never under a Rust lock: the client clones the handler
//!   out of its registry before calling it), so it may block and may call back into the daemon;
//! - its return value must be JSON (it becomes `result`); a thrown `CarError` becomes the JSON-RPC
//!   error (see `error`), and an undeclared exception is turned into a declared one by UniFFI
//!   before it reaches Rust, so no foreign failure becomes a panic here;
//! - `tools.execute` handlers receive the normalised `call_json` of docs/protocol-choices.md,
//!   "Reverse calls and heartbeats" (`{tool, params, action_id, request_id, timeout_ms, session_id,
//!   attempt}`) whether the daemon sent the arguments under `parameters` or `params`; every other
//!   method receives the daemon's params unchanged;
//! - a [`DaemonNotificationHandler`] gets one method's notifications one at a time, in arrival
//!   order; an exception it throws (declared or not) arrives as a `CarError`, is logged, and the
//!   next notification still arrives.

use std::sync::Arc;

use car_daemon_client::{Client, HandlerError, HandlerResult, ToolCall};
use car_proto::errors::INTERNAL_ERROR;
use serde_json::Value;

use crate::error::CarError;

/// The method whose handler gets the normalised tool call instead of the raw params.
const TOOLS_EXECUTE: &str = "tools.execute";

/// Answers daemon→client requests (reverse calls) for one method.
#[uniffi::export(foreign)]
pub trait DaemonHandler: Send + Sync {
    /// Gets the request's params as JSON and returns the result as JSON. Throwing a
    /// `CarError` sends the daemon an error reply: `Handler { detail, terminal }` for a
    /// tool failure (terminal stops the daemon's retries), `DaemonRpc` to choose the code.
    fn handle(&self, params_json: String) -> Result<String, CarError>;
}

/// Receives daemon notifications for one method.
#[uniffi::export(foreign)]
pub trait DaemonNotificationHandler: Send + Sync {
    /// Gets the notification's params as JSON. Implementations need not throw; the error
    /// type is declared so that an exception thrown anyway arrives as a `CarError` (logged,
    /// and the next notification still arrives) rather than as a panic.
    fn notify(&self, params_json: String) -> Result<(), CarError>;
}

/// Routes `method`'s reverse calls on `client` to `handler`, replacing any earlier one.
pub(crate) fn register(client: &Client, method: &str, handler: Arc<dyn DaemonHandler>) {
    if method == TOOLS_EXECUTE {
        client.register_tool_handler(move |call: ToolCall| {
            call_foreign(&*handler, TOOLS_EXECUTE, call.to_call_json())
        });
    } else {
        let name = method.to_string();
        client.register_handler(method, move |params| call_foreign(&*handler, &name, params));
    }
}

/// Routes `method`'s notifications on `client` to `handler`, replacing any earlier one.
pub(crate) fn register_notification(
    client: &Client,
    method: &str,
    handler: Arc<dyn DaemonNotificationHandler>,
) {
    let name = method.to_string();
    client.register_notification_handler(method, move |params| {
        if let Err(e) = handler.notify(params.to_string()) {
            tracing::warn!(method = %name, error = %e, "notification handler failed");
        }
    });
}

fn call_foreign(handler: &dyn DaemonHandler, method: &str, params: Value) -> HandlerResult {
    match handler.handle(params.to_string()) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            HandlerError::new(format!(
                "handler for {method} returned a result that is not JSON: {e}"
            ))
            .with_code(INTERNAL_ERROR)
        }),
        Err(err) => Err(err.into_handler_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Echo;
    impl DaemonHandler for Echo {
        fn handle(&self, params_json: String) -> Result<String, CarError> {
            Ok(params_json)
        }
    }

    struct Fixed(Result<String, CarError>);
    impl DaemonHandler for Fixed {
        fn handle(&self, _: String) -> Result<String, CarError> {
            self.0.clone()
        }
    }

    #[test]
    fn results_must_be_json() {
        assert_eq!(
            call_foreign(&Echo, "m", json!({"a": 1})),
            Ok(json!({"a": 1}))
        );
        let e = call_foreign(&Fixed(Ok("not json".into())), "t.x", json!({})).unwrap_err();
        assert_eq!(e.code, -32603);
        assert!(
            e.message
                .starts_with("handler for t.x returned a result that is not JSON: "),
            "{}",
            e.message
        );
    }

    #[test]
    fn declared_errors_reach_the_daemon() {
        let err = CarError::Handler {
            detail: "disk full".into(),
            terminal: true,
        };
        let e = call_foreign(&Fixed(Err(err)), "m", json!(null)).unwrap_err();
        assert_eq!((e.message.as_str(), e.terminal), ("disk full", true));
    }
}
