//! [`CarError`]: the one error type every export throws, and the mapping of a foreign
//! handler's failure onto the JSON-RPC error the daemon receives.
//!
//! This module owns two translations and nothing else:
//!
//! - client → foreign: `car_daemon_client::Error` variants map one to one
//!   (docs/protocol-choices.md, "Bindings"), keeping every detail: the daemon's code and `data`
//!   (passed through untouched as JSON, `data.reason` included), a timeout's method and wait, a
//!   handshake refusal's code and data, the client's own refusals (`Refused`), a caller's argument
//!   that cannot be sent (`InvalidArgument`: JSON text that is not JSON, a typed member's argument
//!   of the wrong type), and a result a typed member cannot project (`UnexpectedResult`). No
//!   JSON-RPC code is invented for a client-side failure;
//! - foreign → daemon: a handler's declared `CarError` becomes a [`HandlerError`] (`Handler {
//!   terminal: true }` sets `error.data.terminal`), and an undeclared foreign exception arrives as
//!   [`uniffi::UnexpectedUniFFICallbackError`] and becomes `Handler { terminal: false }` instead of
//!   a panic.
//!
//! Text fields are named `detail`, never `message`: Kotlin exceptions already have a
//! `message`, and a variant field of that name breaks UniFFI's generated Kotlin.

use car_daemon_client::{Error, HandlerError};
use serde_json::Value;

/// Everything a call (or a handler) can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum CarError {
    /// The daemon answered with a JSON-RPC error. `data_json` is its `error.data` as JSON
    /// (`"null"` when absent); refusals carry `data.reason` (`permission_denied`,
    /// `not_owner`, `host_required`).
    #[error("{detail} (code {code})")]
    DaemonRpc {
        code: i64,
        detail: String,
        data_json: String,
    },
    /// The connection could not be opened or used, or broke while the call was in flight.
    /// The next call reconnects.
    #[error("transport error: {detail}")]
    Transport { detail: String },
    /// The client stopped waiting for `method` after `after_ms` milliseconds; a late answer
    /// is dropped.
    #[error("{method} timed out after {after_ms}ms")]
    Timeout { method: String, after_ms: u64 },
    /// The connection was closed (`close`) while the call was pending.
    #[error("client closed")]
    Closed,
    /// `session.auth` or `server.handshake` failed, so the connection was not used. `code`
    /// and `data_json` are the daemon's refusal when it answered with one.
    #[error("handshake failed: {detail}")]
    Handshake {
        detail: String,
        code: Option<i64>,
        data_json: Option<String>,
    },
    /// The client refused the call before sending anything: a `wss` or malformed URL, a
    /// method that is not host-management on the host connection, a missing host token.
    #[error("refused: {detail}")]
    Refused { detail: String },
    /// An argument cannot be sent (nothing was sent): `params_json` that is not JSON, or
    /// a typed member's argument of the wrong type. `detail` names the argument.
    #[error("{detail}")]
    InvalidArgument { detail: String },
    /// The daemon answered `method`, but not with what the typed member returns.
    #[error("{method} returned {detail}")]
    UnexpectedResult { method: String, detail: String },
    /// A handler's failure (thrown by foreign code): the daemon receives a JSON-RPC error
    /// with code -32000 and `detail` as its message; `terminal` marks it as not retryable
    /// (`error.data.terminal = true`).
    #[error("handler failed: {detail}")]
    Handler { detail: String, terminal: bool },
}

impl From<Error> for CarError {
    fn from(e: Error) -> Self {
        match e {
            Error::Rpc {
                code,
                message,
                data,
            } => CarError::DaemonRpc {
                code,
                detail: message,
                data_json: data.unwrap_or(Value::Null).to_string(),
            },
            Error::Transport(detail) => CarError::Transport { detail },
            Error::Refused(detail) => CarError::Refused { detail },
            Error::Timeout { method, after } => CarError::Timeout {
                method,
                after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            },
            Error::Closed => CarError::Closed,
            Error::Handshake { reason, rpc } => CarError::Handshake {
                detail: reason,
                code: rpc.as_ref().map(|r| r.code),
                data_json: rpc.and_then(|r| r.data).map(|d| d.to_string()),
            },
            Error::InvalidArgument(detail) => CarError::InvalidArgument { detail },
            Error::UnexpectedResult { method, detail } => {
                CarError::UnexpectedResult { method, detail }
            }
        }
    }
}

impl From<uniffi::UnexpectedUniFFICallbackError> for CarError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        // Kotlin hands over the whole stack trace; the daemon gets its first line (the
        // exception and its message) and the rest stays in this process's log.
        tracing::debug!(reason = %e.reason, "handler threw an undeclared exception");
        let first_line = e.reason.lines().next().unwrap_or_default().trim();
        CarError::Handler {
            detail: format!("handler threw an undeclared exception: {first_line}"),
            terminal: false,
        }
    }
}

impl CarError {
    /// What the daemon receives when a handler fails with this error.
    pub(crate) fn into_handler_error(self) -> HandlerError {
        match self {
            CarError::Handler {
                detail,
                terminal: true,
            } => HandlerError::terminal(detail),
            CarError::Handler {
                detail,
                terminal: false,
            } => HandlerError::new(detail),
            // A handler may rethrow a daemon error it got from a nested call (or build one
            // on purpose to choose the code): the code and data pass through unchanged.
            CarError::DaemonRpc {
                code,
                detail,
                data_json,
            } => {
                let err = HandlerError::new(detail).with_code(code);
                match serde_json::from_str::<Value>(&data_json) {
                    Ok(Value::Null) => err,
                    Ok(data) => err.with_data(data),
                    // Foreign code built this error by hand; keep its text rather than
                    // dropping it.
                    Err(_) => err.with_data(Value::String(data_json)),
                }
            }
            other => HandlerError::new(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_proto::errors::RpcError;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn client_errors_map_one_to_one_and_keep_every_detail() {
        let rpc = Error::Rpc {
            code: -32601,
            message: "method not found: x".into(),
            data: None,
        };
        assert_eq!(
            CarError::from(rpc),
            CarError::DaemonRpc {
                code: -32601,
                detail: "method not found: x".into(),
                data_json: "null".into()
            }
        );
        let rpc = Error::Rpc {
            code: -32601,
            message: "agent_method_not_allowed".into(),
            data: Some(json!({"reason": "host_required"})),
        };
        assert!(matches!(CarError::from(rpc),
            CarError::DaemonRpc { data_json, .. } if data_json == r#"{"reason":"host_required"}"#));
        assert_eq!(
            CarError::from(Error::Transport("eof".into())),
            CarError::Transport {
                detail: "eof".into()
            }
        );
        assert_eq!(
            CarError::from(Error::Refused("x is not a host-management method".into())),
            CarError::Refused {
                detail: "x is not a host-management method".into()
            }
        );
        let timeout = Error::Timeout {
            method: "debug.sleep".into(),
            after: Duration::from_millis(5),
        };
        let timeout = CarError::from(timeout);
        assert_eq!(
            timeout,
            CarError::Timeout {
                method: "debug.sleep".into(),
                after_ms: 5
            }
        );
        assert_eq!(timeout.to_string(), "debug.sleep timed out after 5ms");
        assert_eq!(CarError::from(Error::Closed), CarError::Closed);
        let hs = Error::Handshake {
            reason: "session.auth refused".into(),
            rpc: Some(RpcError::new(-32603, "auth failed").with_data(json!({"a": 1}))),
        };
        assert_eq!(
            CarError::from(hs),
            CarError::Handshake {
                detail: "session.auth refused".into(),
                code: Some(-32603),
                data_json: Some(r#"{"a":1}"#.into()),
            }
        );
        assert_eq!(
            CarError::from(Error::InvalidArgument("addFact: kind is required".into())),
            CarError::InvalidArgument {
                detail: "addFact: kind is required".into()
            }
        );
        let bad = CarError::from(Error::UnexpectedResult {
            method: "memory.add_fact".into(),
            detail: "a non-integer: null".into(),
        });
        assert_eq!(
            bad.to_string(),
            "memory.add_fact returned a non-integer: null"
        );
    }

    #[test]
    fn handler_failures_become_rpc_errors() {
        let plain = CarError::Handler {
            detail: "tool unavailable".into(),
            terminal: false,
        }
        .into_handler_error()
        .to_rpc_error();
        assert_eq!((plain.code, plain.data), (-32000, None));
        assert_eq!(plain.message, "tool unavailable");
        let terminal = CarError::Handler {
            detail: "journal gone".into(),
            terminal: true,
        }
        .into_handler_error()
        .to_rpc_error();
        assert_eq!(terminal.data, Some(json!({"terminal": true})));
        let rpc = CarError::DaemonRpc {
            code: -32602,
            detail: "bad path".into(),
            data_json: r#"{"field":"path"}"#.into(),
        }
        .into_handler_error()
        .to_rpc_error();
        assert_eq!(
            (rpc.code, rpc.data),
            (-32602, Some(json!({"field": "path"})))
        );
        let not_json = CarError::DaemonRpc {
            code: -32001,
            detail: "x".into(),
            data_json: "oops".into(),
        }
        .into_handler_error()
        .to_rpc_error();
        assert_eq!(not_json.data, Some(json!("oops")));
        let other = CarError::Closed.into_handler_error().to_rpc_error();
        assert_eq!(
            (other.code, other.message.as_str()),
            (-32000, "client closed")
        );
    }

    #[test]
    fn undeclared_foreign_exceptions_are_declared_handler_errors() {
        let e = CarError::from(uniffi::UnexpectedUniFFICallbackError::new(
            "java.lang.IllegalStateException: boom\n\tat Tool.run(Tool.kt:3)\n",
        ));
        assert_eq!(
            e,
            CarError::Handler {
                detail:
                    "handler threw an undeclared exception: java.lang.IllegalStateException: boom"
                        .into(),
                terminal: false
            }
        );
    }
}
