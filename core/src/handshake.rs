//! The `server.handshake` rule (reference "Protocol version"; docs/protocol-choices.md,
//! "Handshake").
//!
//! [`negotiate`] is the daemon side: it validates the request params and either returns
//! the reply or the error that leaves the session unnegotiated. [`check_reply`] is the
//! bundled client's side: it fails closed on a reply that is malformed or misses a
//! capability the client required.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::capabilities;
use crate::errors::RpcError;
use crate::jsonrpc::json_type_name;
use crate::{CAR_VERSION, PROTOCOL_VERSION};

/// The longest `client_version` echoed back (it is client-controlled).
pub const CLIENT_VERSION_MAX_CHARS: usize = 64;

/// The `server.handshake` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HandshakeReply {
    pub protocol_version: u64,
    pub server_version: String,
    pub client_protocol_version: u64,
    pub client_version: String,
    pub negotiated_capabilities: Vec<String>,
}

/// Validates handshake params and computes the reply.
///
/// Errors: `-32006` for a missing, non-numeric (string, float) or different version;
/// `-32602` for capability lists that are not arrays of non-empty strings; `-32008` naming
/// every unsupported required capability. Unsupported optional entries are ignored.
pub fn negotiate(params: &Value) -> Result<HandshakeReply, RpcError> {
    let empty = serde_json::Map::new();
    let obj = match params {
        Value::Object(obj) => obj,
        Value::Null => &empty,
        other => {
            return Err(RpcError::invalid_params(format!(
                "params must be an object, got {}",
                json_type_name(other)
            )))
        }
    };
    match obj.get("protocol_version") {
        None | Some(Value::Null) => {
            return Err(RpcError::version_mismatch(format!(
                "protocol_version is required; this daemon speaks {PROTOCOL_VERSION}"
            )))
        }
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL_VERSION) => {}
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => {
            return Err(RpcError::version_mismatch(format!(
                "client speaks {n}, this daemon speaks exactly {PROTOCOL_VERSION}"
            )))
        }
        Some(other) => {
            return Err(RpcError::version_mismatch(format!(
                "protocol_version must be the integer {PROTOCOL_VERSION}, got {} {other}",
                json_type_name(other)
            )))
        }
    }
    let required = capability_list(obj, "required_capabilities")?;
    let optional = capability_list(obj, "optional_capabilities")?;
    let unsupported: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| !capabilities::is_supported(c))
        .collect();
    if !unsupported.is_empty() {
        return Err(RpcError::capability_mismatch(format!(
            "unsupported required capabilities: {}",
            unsupported.join(", ")
        )));
    }
    let negotiated: BTreeSet<String> = required
        .iter()
        .chain(optional.iter().filter(|c| capabilities::is_supported(c)))
        .map(|c| c.to_string())
        .collect();
    let client_version = match obj.get("client_version") {
        Some(Value::String(v)) if !v.trim().is_empty() => {
            v.chars().take(CLIENT_VERSION_MAX_CHARS).collect()
        }
        _ => "unknown".to_string(),
    };
    Ok(HandshakeReply {
        protocol_version: PROTOCOL_VERSION,
        server_version: CAR_VERSION.to_string(),
        client_protocol_version: PROTOCOL_VERSION,
        client_version,
        negotiated_capabilities: negotiated.into_iter().collect(),
    })
}

fn capability_list<'a>(
    obj: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<Vec<&'a str>, RpcError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) if !s.is_empty() => Ok(s.as_str()),
                other => Err(RpcError::invalid_params(format!(
                    "{field}[{i}] must be a non-empty string, got {}",
                    json_type_name(other)
                ))),
            })
            .collect(),
        Some(other) => Err(RpcError::invalid_params(format!(
            "{field} must be an array of strings, got {}",
            json_type_name(other)
        ))),
    }
}

/// The bundled client's check of a handshake reply: the exact version and every
/// capability in `required` must be present, or the connection is refused.
pub fn check_reply(result: &Value, required: &[&str]) -> Result<HandshakeReply, String> {
    let reply: HandshakeReply = serde_json::from_value(result.clone())
        .map_err(|e| format!("malformed server.handshake reply: {e}"))?;
    if reply.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "daemon speaks protocol {}, this client speaks {PROTOCOL_VERSION}",
            reply.protocol_version
        ));
    }
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| !reply.negotiated_capabilities.iter().any(|n| n == c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "daemon did not negotiate required capabilities: {}",
            missing.join(", ")
        ));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::{CAPABILITY_MISMATCH, INVALID_PARAMS, PROTOCOL_VERSION_MISMATCH};
    use serde_json::json;

    fn code(params: Value) -> i64 {
        negotiate(&params).unwrap_err().code
    }

    #[test]
    fn version_rules() {
        assert_eq!(code(json!({})), PROTOCOL_VERSION_MISMATCH);
        assert_eq!(code(Value::Null), PROTOCOL_VERSION_MISMATCH);
        assert_eq!(
            code(json!({"protocol_version": "3"})),
            PROTOCOL_VERSION_MISMATCH
        );
        assert_eq!(
            code(json!({"protocol_version": 3.0})),
            PROTOCOL_VERSION_MISMATCH
        );
        assert_eq!(
            code(json!({"protocol_version": 2})),
            PROTOCOL_VERSION_MISMATCH
        );
        assert_eq!(
            code(json!({"protocol_version": -3})),
            PROTOCOL_VERSION_MISMATCH
        );
        assert_eq!(code(json!([3])), INVALID_PARAMS);
        assert!(negotiate(&json!({"protocol_version": 3})).is_ok());
    }

    #[test]
    fn capabilities_are_validated_sorted_and_deduplicated() {
        let reply = negotiate(&json!({
            "protocol_version": 3,
            "required_capabilities": ["models.catalog-identity.v1", "infer.model-identity.v1", "models.catalog-identity.v1"],
            "optional_capabilities": ["zzz.unknown", "infer.cancel.v1"],
        }))
        .unwrap();
        assert_eq!(
            reply.negotiated_capabilities,
            [
                "infer.cancel.v1",
                "infer.model-identity.v1",
                "models.catalog-identity.v1"
            ]
        );
        let err = negotiate(
            &json!({"protocol_version": 3, "required_capabilities": ["feedback.v1", "x.v9"]}),
        )
        .unwrap_err();
        assert_eq!(err.code, CAPABILITY_MISMATCH);
        assert!(err.message.contains("feedback.v1, x.v9"), "{}", err.message);
        let err =
            negotiate(&json!({"protocol_version": 3, "optional_capabilities": [""]})).unwrap_err();
        assert_eq!(err.code, INVALID_PARAMS);
        assert!(err.message.contains("optional_capabilities[0]"));
        let err =
            negotiate(&json!({"protocol_version": 3, "required_capabilities": "x"})).unwrap_err();
        assert!(err
            .message
            .contains("required_capabilities must be an array"));
    }

    #[test]
    fn client_version_echo() {
        let long = "v".repeat(100);
        let r = negotiate(&json!({"protocol_version": 3, "client_version": long})).unwrap();
        assert_eq!(r.client_version.chars().count(), CLIENT_VERSION_MAX_CHARS);
        let r = negotiate(&json!({"protocol_version": 3, "client_version": 7})).unwrap();
        assert_eq!(r.client_version, "unknown");
        let r =
            negotiate(&json!({"protocol_version": 3, "client_version": "ß".repeat(70)})).unwrap();
        assert_eq!(r.client_version, "ß".repeat(64));
    }

    #[test]
    fn client_check_fails_closed() {
        let ok = serde_json::to_value(negotiate(&json!({"protocol_version": 3, "required_capabilities": capabilities::CLIENT_REQUIRED})).unwrap()).unwrap();
        assert!(check_reply(&ok, capabilities::CLIENT_REQUIRED).is_ok());
        let partial =
            serde_json::to_value(negotiate(&json!({"protocol_version": 3})).unwrap()).unwrap();
        assert!(check_reply(&partial, capabilities::CLIENT_REQUIRED)
            .unwrap_err()
            .contains("infer.model-identity.v1"));
        assert!(check_reply(&json!({"ok": true}), &[])
            .unwrap_err()
            .contains("malformed"));
    }
}
