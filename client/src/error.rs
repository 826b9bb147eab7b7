//! The client's error taxonomy (docs/protocol-choices.md, "Bindings").
//!
//! This module owns the split every binding maps one to one: [`Error::Rpc`] when the daemon
//! answered and said no, [`Error::Transport`] when the connection broke, [`Error::Timeout`]
//! when the client stopped waiting, [`Error::Closed`] when the caller closed the client, and
//! [`Error::Handshake`] when connection setup (auth or protocol negotiation) failed closed.
//! [`Error::Refused`] covers the few calls the client turns down before touching the wire,
//! [`Error::InvalidArgument`] a caller's argument that cannot be sent (JSON text that is not
//! JSON, a typed member's argument of the wrong type), and [`Error::UnexpectedResult`] a
//! daemon answer a typed member cannot project (`memory.add_fact returned a non-integer`).
//!
//! [`ErrorReport`] is the one structured projection of an [`Error`] that every binding maps
//! to its host language (Python exception classes, Node `Error` subclasses, UniFFI
//! variants): its kind, the daemon's code and data when the daemon said no (passed through
//! untouched, `data.reason` included), the method and waited-for duration of a timeout.
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
    /// An argument the caller passed cannot be sent (nothing was sent): JSON text that is
    /// not JSON, or a typed member's argument of the wrong type. The text names the
    /// argument.
    #[error("{0}")]
    InvalidArgument(String),
    /// The daemon answered, but not with what a typed member projects (an integer, a
    /// string, a field). `detail` says what came back.
    #[error("{method} returned {detail}")]
    UnexpectedResult { method: String, detail: String },
}

/// What kind of failure an [`Error`] is; every binding maps each kind to one host type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The daemon said no ([`Error::Rpc`]).
    Rpc,
    /// The connection broke or could not be opened ([`Error::Transport`]).
    Transport,
    /// The client stopped waiting ([`Error::Timeout`]).
    Timeout,
    /// The connection was closed by its owner while the call was pending ([`Error::Closed`]).
    Closed,
    /// Connection setup failed closed ([`Error::Handshake`]).
    Handshake,
    /// A client-side refusal ([`Error::Refused`]).
    Refused,
    /// A caller's argument that cannot be sent ([`Error::InvalidArgument`]).
    InvalidArgument,
    /// A daemon answer a typed member cannot project ([`Error::UnexpectedResult`]).
    UnexpectedResult,
}

impl ErrorKind {
    /// The kind's stable snake_case name (`rpc`, `invalid_argument`, …), as bindings
    /// publish it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Rpc => "rpc",
            ErrorKind::Transport => "transport",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Closed => "closed",
            ErrorKind::Handshake => "handshake",
            ErrorKind::Refused => "refused",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::UnexpectedResult => "unexpected_result",
        }
    }
}

/// The structured projection of an [`Error`] that bindings translate.
///
/// `code` and `data` are set only when the daemon answered the call with an error
/// ([`ErrorKind::Rpc`]); `data` is the daemon's `error.data` exactly as sent. `refusal` is
/// the daemon's error behind a failed `session.auth` / `server.handshake`. `method` names
/// the call for timeouts and unexpected results, `after` how long a timed-out call waited.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorReport {
    pub kind: ErrorKind,
    /// The daemon's message for [`ErrorKind::Rpc`], else the error's text (`Display`).
    pub message: String,
    pub code: Option<i64>,
    pub data: Option<Value>,
    pub refusal: Option<RpcError>,
    pub method: Option<String>,
    pub after: Option<Duration>,
}

impl Error {
    /// The daemon's JSON-RPC code, for [`Error::Rpc`] only.
    pub fn code(&self) -> Option<i64> {
        match self {
            Error::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Rpc { .. } => ErrorKind::Rpc,
            Error::Transport(_) => ErrorKind::Transport,
            Error::Timeout { .. } => ErrorKind::Timeout,
            Error::Closed => ErrorKind::Closed,
            Error::Handshake { .. } => ErrorKind::Handshake,
            Error::Refused(_) => ErrorKind::Refused,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::UnexpectedResult { .. } => ErrorKind::UnexpectedResult,
        }
    }

    /// The structured projection bindings translate (see [`ErrorReport`]).
    pub fn report(&self) -> ErrorReport {
        let mut report = ErrorReport {
            kind: self.kind(),
            message: self.to_string(),
            code: None,
            data: None,
            refusal: None,
            method: None,
            after: None,
        };
        match self {
            Error::Rpc {
                code,
                message,
                data,
            } => {
                report.code = Some(*code);
                report.message = message.clone();
                report.data = data.clone();
            }
            Error::Handshake { rpc, .. } => report.refusal = rpc.clone(),
            Error::Timeout { method, after } => {
                report.method = Some(method.clone());
                report.after = Some(*after);
            }
            Error::UnexpectedResult { method, .. } => report.method = Some(method.clone()),
            Error::Transport(_) | Error::Closed | Error::Refused(_) | Error::InvalidArgument(_) => {
            }
        }
        report
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
    fn reports_keep_every_detail_and_invent_no_code() {
        let data = json!({"reason": "host_required", "method": "models.remove"});
        let rpc = Error::Rpc {
            code: -32601,
            message: "agent_method_not_allowed".into(),
            data: Some(data.clone()),
        }
        .report();
        assert_eq!(
            (rpc.kind, rpc.code, rpc.data),
            (ErrorKind::Rpc, Some(-32601), Some(data))
        );
        assert_eq!(rpc.message, "agent_method_not_allowed");
        let timeout = Error::Timeout {
            method: "debug.sleep".into(),
            after: Duration::from_millis(250),
        }
        .report();
        assert_eq!(timeout.kind.as_str(), "timeout");
        assert_eq!(timeout.method.as_deref(), Some("debug.sleep"));
        assert_eq!(timeout.after, Some(Duration::from_millis(250)));
        assert_eq!(timeout.message, "debug.sleep timed out after 250ms");
        for client_side in [
            Error::InvalidArgument("value_json is not valid JSON: eof".into()),
            Error::Refused("wss is not supported".into()),
            Error::Transport("eof".into()),
            Error::Closed,
            Error::UnexpectedResult {
                method: "memory.add_fact".into(),
                detail: "a non-integer: null".into(),
            },
        ] {
            let r = client_side.report();
            assert_eq!((r.code, r.data), (None, None), "{client_side:?}");
        }
        let bad = Error::UnexpectedResult {
            method: "memory.add_fact".into(),
            detail: "a non-integer: null".into(),
        };
        assert_eq!(
            bad.to_string(),
            "memory.add_fact returned a non-integer: null"
        );
        let hs = Error::Handshake {
            reason: "session.auth refused".into(),
            rpc: Some(RpcError::new(-32603, "auth failed")),
        }
        .report();
        assert_eq!((hs.kind, hs.code), (ErrorKind::Handshake, None));
        assert_eq!(hs.refusal.map(|r| r.code), Some(-32603));
    }

    #[test]
    fn rpc_errors_convert() {
        let e: Error = RpcError::method_not_found("nope").into();
        assert_eq!(e.code(), Some(-32601));
        assert!(Error::Transport("eof".into()).is_connection_failure());
        assert!(!Error::Closed.is_connection_failure());
    }
}
