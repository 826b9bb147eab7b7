//! The client's error taxonomy (DESIGN.md "Errors, one taxonomy").
//!
//! This module owns the split every binding maps one to one: [`Error::Rpc`] when the daemon
//! answered and said no, [`Error::Transport`] when the connection broke, [`Error::Timeout`]
//! when the client stopped waiting, [`Error::Closed`] when the caller closed the client, and
//! [`Error::Handshake`] when connection setup (auth or protocol negotiation) failed closed.
//! [`Error::Refused`] covers the few calls the client turns down before touching the wire.
//! It also owns [`HandlerError`], the typed failure a reverse-call handler returns.
//! It never invents a JSON-RPC code for a client-side failure.

use std::time::Duration;

use car_proto::errors::RpcError;
use serde_json::{Map, Value};

/// Everything a call can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The daemon answered with a JSON-RPC error object.
    #[error("{message} (code {code})")]
    Rpc {
        code: i64,
        message: String,
        data: Option<Value>,
    },
    /// The connection could not be opened, or broke while the call was in flight.
    #[error("transport error: {0}")]
    Transport(String),
    /// The client gave up waiting; a late answer is dropped.
    #[error("{method} timed out after {}ms", after.as_millis())]
    Timeout { method: String, after: Duration },
    /// The client was closed (or disconnected) by its owner.
    #[error("client closed")]
    Closed,
    /// `session.auth` or `server.handshake` failed, so the connection was not used.
    #[error("handshake failed: {reason}")]
    Handshake {
        reason: String,
        /// The daemon's error when it answered with one.
        rpc: Option<RpcError>,
    },
    /// The client refused the call before sending anything (a usage error).
    #[error("refused: {0}")]
    Refused(String),
}

impl Error {
    /// The daemon's JSON-RPC code, for [`Error::Rpc`] only.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for failures after which the next call reconnects.
    pub fn is_connection_failure(&self) -> bool {
        matches!(self, Error::Transport(_) | Error::Handshake { .. })
    }

    pub(crate) fn handshake(reason: impl Into<String>) -> Self {
        Error::Handshake {
            reason: reason.into(),
            rpc: None,
        }
    }
}

impl From<RpcError> for Error {
    fn from(e: RpcError) -> Self {
        Error::Rpc {
            code: e.code,
            message: e.message,
            data: e.data,
        }
    }
}

/// The code a handler error carries when the handler did not choose one (the reference's
/// examples use the JSON-RPC "server error" range).
pub const HANDLER_ERROR_CODE: i64 = -32000;

/// A reverse-call handler's failure, sent back to the daemon as a JSON-RPC error.
///
/// `terminal` sets `error.data.terminal = true`, which tells the daemon's engine that a
/// retry cannot help (reference "Server-initiated requests"). The bit is only ever set
/// explicitly; the message text is never classified.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
    pub terminal: bool,
}

impl HandlerError {
    /// An ordinary (retryable) failure with code `-32000`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            code: HANDLER_ERROR_CODE,
            message: message.into(),
            data: None,
            terminal: false,
        }
    }

    /// A failure that stops the daemon's retries (`error.data.terminal = true`).
    pub fn terminal(message: impl Into<String>) -> Self {
        Self {
            terminal: true,
            ..Self::new(message)
        }
    }

    /// Chooses the JSON-RPC code.
    pub fn with_code(mut self, code: i64) -> Self {
        self.code = code;
        self
    }

    /// Attaches `error.data`; an object keeps its fields when `terminal` is added.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The wire error object.
    pub fn to_rpc_error(&self) -> RpcError {
        let mut err = RpcError::new(self.code, self.message.clone());
        if self.terminal {
            let mut data = match self.data.clone() {
                Some(Value::Object(map)) => map,
                // A non-object payload cannot carry the flag beside it, so it moves under
                // `detail` rather than being dropped.
                Some(other) => Map::from_iter([("detail".to_string(), other)]),
                None => Map::new(),
            };
            data.insert("terminal".into(), Value::Bool(true));
            err.data = Some(Value::Object(data));
        } else {
            err.data = self.data.clone();
        }
        err
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (code {})", self.message, self.code)?;
        if self.terminal {
            f.write_str(" [terminal]")?;
        }
        Ok(())
    }
}

impl std::error::Error for HandlerError {}

impl From<RpcError> for HandlerError {
    fn from(e: RpcError) -> Self {
        Self {
            code: e.code,
            message: e.message,
            data: e.data,
            terminal: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn terminal_sets_the_data_bit_and_keeps_fields() {
        let e = HandlerError::terminal("receipt journal is unavailable").to_rpc_error();
        assert_eq!(e.code, HANDLER_ERROR_CODE);
        assert_eq!(e.data, Some(json!({"terminal": true})));
        let e = HandlerError::terminal("x")
            .with_data(json!({"path": "/j"}))
            .to_rpc_error();
        assert_eq!(e.data, Some(json!({"path": "/j", "terminal": true})));
        let e = HandlerError::terminal("x")
            .with_data(json!(3))
            .to_rpc_error();
        assert_eq!(e.data, Some(json!({"detail": 3, "terminal": true})));
    }

    #[test]
    fn ordinary_errors_carry_no_terminal_bit() {
        let e = HandlerError::new("tool unavailable").to_rpc_error();
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({"code": -32000, "message": "tool unavailable"})
        );
        let e = HandlerError::new("x").with_code(-32602).to_rpc_error();
        assert_eq!(e.code, -32602);
    }

    #[test]
    fn rpc_errors_convert() {
        let e: Error = RpcError::method_not_found("nope").into();
        assert_eq!(e.code(), Some(-32601));
        assert!(Error::Transport("eof".into()).is_connection_failure());
        assert!(!Error::Closed.is_connection_failure());
    }
}
