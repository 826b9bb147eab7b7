//! The error-code table and the [`RpcError`] value carried in JSON-RPC error responses.
//!
//! Every code the daemon may send is a named constant here; nothing else in the workspace
//! writes a numeric code. Messages follow the house style: lower-case, naming the field or
//! value, no trailing period. Prefixes that clients match on (`auth required:`,
//! `protocol handshake required:`, …) are part of the contract.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Text that is not JSON, or JSON nested too deeply.
pub const PARSE_ERROR: i64 = -32700;
/// Valid JSON that is not a JSON-RPC request, notification or response.
pub const INVALID_REQUEST: i64 = -32600;
/// The method is not in the daemon's method table.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Parameter extraction or validation failed; the message names the field.
pub const INVALID_PARAMS: i64 = -32602;
/// A handler failed (and, for compatibility, a wrong `session.auth` token).
pub const INTERNAL_ERROR: i64 = -32603;
/// A method other than `session.auth` was called before authenticating; the connection closes.
pub const AUTH_REQUIRED: i64 = -32001;
/// A high-risk method's approval was denied or timed out.
pub const APPROVAL_DENIED: i64 = -32003;
/// The handler overran its server-side deadline; the operation may have committed.
pub const HANDLER_DEADLINE: i64 = -32004;
/// The method needs `server.handshake` first.
pub const HANDSHAKE_REQUIRED: i64 = -32005;
/// `protocol_version` missing, non-numeric or different from [`crate::PROTOCOL_VERSION`].
pub const PROTOCOL_VERSION_MISMATCH: i64 = -32006;
/// Something in front of the model refused the content.
pub const CONTENT_REFUSED: i64 = -32007;
/// A required handshake capability is unsupported, or a gated method was not negotiated.
pub const CAPABILITY_MISMATCH: i64 = -32008;

/// Every code with its one-line meaning, in table order (published by `server.schema`).
pub const ERROR_CODES: &[(i64, &str)] = &[
    (
        PARSE_ERROR,
        "parse error: not JSON, or nested deeper than 128 levels",
    ),
    (
        INVALID_REQUEST,
        "invalid request: not a JSON-RPC 2.0 object, or a batch",
    ),
    (METHOD_NOT_FOUND, "method not found"),
    (
        INVALID_PARAMS,
        "invalid params: the message names the field",
    ),
    (INTERNAL_ERROR, "internal error: the handler failed"),
    (
        AUTH_REQUIRED,
        "auth required: send session.auth first (the connection closes)",
    ),
    (APPROVAL_DENIED, "approval denied or timed out"),
    (
        HANDLER_DEADLINE,
        "handler deadline exceeded; the operation may have committed",
    ),
    (HANDSHAKE_REQUIRED, "protocol handshake required"),
    (
        PROTOCOL_VERSION_MISMATCH,
        "protocol version missing, malformed or incompatible",
    ),
    (CONTENT_REFUSED, "content refused"),
    (CAPABILITY_MISMATCH, "protocol capability mismatch"),
];

/// A JSON-RPC error object: `{code, message, data?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// `-32700 parse error: <detail>`.
    pub fn parse(detail: impl std::fmt::Display) -> Self {
        Self::new(PARSE_ERROR, format!("parse error: {detail}"))
    }

    /// `-32600 invalid request: <detail>`.
    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_REQUEST, format!("invalid request: {detail}"))
    }

    /// `-32601 unknown method: <name>`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(METHOD_NOT_FOUND, format!("unknown method: {method}"))
    }

    /// `-32602 invalid params: <detail>`; the detail must name the field.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        Self::new(INVALID_PARAMS, format!("invalid params: {detail}"))
    }

    /// `-32603 <detail>`.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(INTERNAL_ERROR, detail.to_string())
    }

    /// `-32001 auth required: send session.auth first`.
    pub fn auth_required() -> Self {
        Self::new(AUTH_REQUIRED, "auth required: send session.auth first")
    }

    /// `-32004 handler '<method>' exceeded its <N>s response deadline`, the reference's shape.
    pub fn handler_deadline(method: &str, deadline: std::time::Duration) -> Self {
        let budget = if deadline.subsec_millis() == 0 {
            format!("{}s", deadline.as_secs())
        } else {
            format!("{}ms", deadline.as_millis())
        };
        Self::new(
            HANDLER_DEADLINE,
            format!(
                "handler '{method}' exceeded its {budget} response deadline; the operation may \
                 have committed, so read its state before retrying"
            ),
        )
    }

    /// `-32005 protocol handshake required: <detail>`.
    pub fn handshake_required(method: &str) -> Self {
        Self::new(
            HANDSHAKE_REQUIRED,
            format!("protocol handshake required: call server.handshake before {method}"),
        )
    }

    /// `-32006 protocol version mismatch: <detail>`.
    pub fn version_mismatch(detail: impl std::fmt::Display) -> Self {
        Self::new(
            PROTOCOL_VERSION_MISMATCH,
            format!("protocol version mismatch: {detail}"),
        )
    }

    /// `-32008 protocol capability mismatch: <detail>`.
    pub fn capability_mismatch(detail: impl std::fmt::Display) -> Self {
        Self::new(
            CAPABILITY_MISMATCH,
            format!("protocol capability mismatch: {detail}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_messages_lower_case() {
        let mut codes: Vec<i64> = ERROR_CODES.iter().map(|(c, _)| *c).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), ERROR_CODES.len());
        for (_, text) in ERROR_CODES {
            assert!(text.chars().next().unwrap().is_lowercase(), "{text}");
            assert!(!text.ends_with('.'), "{text}");
        }
    }

    #[test]
    fn deadline_message_has_reference_shape() {
        let e = RpcError::handler_deadline("state.get", std::time::Duration::from_secs(1800));
        assert!(e
            .message
            .starts_with("handler 'state.get' exceeded its 1800s response deadline"));
        let e = RpcError::handler_deadline("x", std::time::Duration::from_millis(250));
        assert!(e.message.contains("its 250ms response deadline"));
    }

    #[test]
    fn serializes_without_null_data() {
        let v = serde_json::to_value(RpcError::method_not_found("nope")).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"code": -32601, "message": "unknown method: nope"})
        );
    }
}
