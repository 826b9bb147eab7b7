//! [`CarError`]: the one error type every export throws, and the mapping of a foreign
//! handler's failure onto the JSON-RPC error the daemon receives.
//!
//! This module owns two translations and nothing else:
//!
//! - client → foreign: `car_daemon_client::Error` variants map one to one (DESIGN.md
//!   "Errors, one taxonomy"); the client's usage refusals (a bad URL, a missing host token,
//!   a method that is not host-management) become `Transport`, since no connection could
//!   be used for the call, and a `params_json` that is not JSON becomes `DaemonRpc` with
//!   `-32602`, the code the daemon gives every unusable parameter, with
//!   `data.source = "client"` so the two stay distinguishable;
//! - foreign → daemon: a handler's declared `CarError` becomes a [`HandlerError`]
//!   (`Handler { terminal: true }` sets `error.data.terminal`), and an undeclared foreign
//!   exception arrives as [`uniffi::UnexpectedUniFFICallbackError`] and becomes
//!   `Handler { terminal: false }` instead of a panic.
//!
//! Text fields are named `detail`, never `message`: Kotlin exceptions already have a
//! `message`, and a variant field of that name breaks UniFFI's generated Kotlin.

use car_daemon_client::{Error, HandlerError};
use car_proto::errors::INVALID_PARAMS;
use serde_json::{json, Value};

/// Everything a call (or a handler) can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, uniffi::Error)]
pub enum CarError {
    /// The daemon answered with a JSON-RPC error. `data_json` is its `error.data` as JSON
    /// (`"null"` when absent).
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
    /// The client stopped waiting for the answer; a late answer is dropped.
    #[error("call timed out")]
    Timeout,
    /// The client was closed; every later call fails the same way.
    #[error("client closed")]
    Closed,
    /// `session.auth` or `server.handshake` failed, so the connection was not used.
    #[error("handshake failed: {detail}")]
    Handshake { detail: String },
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
            Error::Refused(reason) => CarError::Transport {
                detail: format!("refused: {reason}"),
            },
            Error::Timeout { method, after } => {
                tracing::debug!(%method, ?after, "call timed out");
                CarError::Timeout
            }
            Error::Closed => CarError::Closed,
            Error::Handshake { reason, .. } => CarError::Handshake { detail: reason },
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
    /// The error for a `params_json` argument that is not JSON.
    pub(crate) fn invalid_params_json(err: &serde_json::Error) -> Self {
        CarError::DaemonRpc {
            code: INVALID_PARAMS,
            detail: format!("params_json is not valid JSON: {err}"),
            data_json: json!({ "source": "client" }).to_string(),
        }
    }

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
    use std::time::Duration;

    #[test]
    fn client_errors_map_one_to_one() {
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
            code: -32602,
            message: "bad".into(),
            data: Some(json!({"field": "key"})),
        };
        assert!(matches!(CarError::from(rpc),
            CarError::DaemonRpc { data_json, .. } if data_json == r#"{"field":"key"}"#));
        assert_eq!(
            CarError::from(Error::Transport("eof".into())),
            CarError::Transport {
                detail: "eof".into()
            }
        );
        assert_eq!(
            CarError::from(Error::Refused("x is not a host-management method".into())),
            CarError::Transport {
                detail: "refused: x is not a host-management method".into()
            }
        );
        let timeout = Error::Timeout {
            method: "m".into(),
            after: Duration::from_millis(5),
        };
        assert_eq!(CarError::from(timeout), CarError::Timeout);
        assert_eq!(CarError::from(Error::Closed), CarError::Closed);
        let hs = Error::Handshake {
            reason: "server.handshake refused".into(),
            rpc: None,
        };
        assert_eq!(
            CarError::from(hs),
            CarError::Handshake {
                detail: "server.handshake refused".into()
            }
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

    #[test]
    fn bad_params_json_names_the_argument() {
        let err = serde_json::from_str::<Value>("{nope").unwrap_err();
        let CarError::DaemonRpc {
            code,
            detail,
            data_json,
        } = CarError::invalid_params_json(&err)
        else {
            panic!("not DaemonRpc");
        };
        assert_eq!(code, -32602);
        assert!(
            detail.starts_with("params_json is not valid JSON: "),
            "{detail}"
        );
        assert_eq!(data_json, r#"{"source":"client"}"#);
    }
}
