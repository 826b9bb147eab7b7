//! How client failures cross into JavaScript.
//!
//! This module owns the encoding of [`car_daemon_client::Error`] (and argument errors) into
//! a `napi::Error`: the message is [`ERROR_TAG`] followed by a JSON object
//! `{kind, message, code?, data?, method?, after_ms?}`. `index.js` recognises the tag and
//! rethrows the matching class: `DaemonRpcError` (with `.code`, `.data`) for `kind: "rpc"`,
//! `DaemonConnectionError` (no `.code`) for transport, closed and handshake failures,
//! `DaemonTimeoutError`, and a `TypeError` for bad arguments. A JSON-RPC code is only ever
//! attached when the daemon sent one.

use car_daemon_client::Error;
use serde_json::{json, Value};

/// Prefix marking a structured error message produced by this crate.
pub const ERROR_TAG: &str = "car-error:";

fn tagged(body: Value) -> napi::Error {
    napi::Error::from_reason(format!("{ERROR_TAG}{body}"))
}

/// The JS-facing error for a failed client call.
pub fn client_error(err: Error) -> napi::Error {
    let message = err.to_string();
    let body = match err {
        Error::Rpc {
            code,
            message,
            data,
        } => json!({"kind": "rpc", "code": code, "message": message, "data": data}),
        Error::Transport(_) => json!({"kind": "transport", "message": message}),
        Error::Timeout { method, after } => json!({
            "kind": "timeout",
            "message": message,
            "method": method,
            "after_ms": u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
        }),
        Error::Closed => json!({"kind": "closed", "message": message}),
        // The daemon's refusal during connect is kept as `data.rpc`, never as `.code`: the
        // call itself was not answered, the connection setup failed.
        Error::Handshake { rpc, .. } => {
            json!({"kind": "handshake", "message": message, "data": {"rpc": rpc}})
        }
        Error::Refused(_) => json!({"kind": "refused", "message": message}),
    };
    tagged(body)
}

/// A bad argument detected before anything was sent (becomes a `TypeError`).
pub fn invalid_argument(message: impl Into<String>) -> napi::Error {
    tagged(json!({"kind": "invalid_argument", "message": message.into()}))
}

/// Parses a JSON argument, naming it when it is not JSON.
pub fn parse_json(name: &str, text: &str) -> napi::Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| invalid_argument(format!("{name} is not valid JSON: {e}")))
}
