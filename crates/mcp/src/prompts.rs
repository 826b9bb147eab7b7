//! The `car_context` prompt (over `memory.build_context`) and `completion/complete`.
//!
//! This module owns the prompt catalog and argument completion; it reaches the daemon only
//! through the [`DaemonAccess`] it is handed, as the caller. `car_context` takes `query` (required)
//! and `mode` (`full`, the default, or `fast`). This daemon's `memory.build_context` has one
//! assembly path, so both modes produce the same context; `mode` is validated so a host's typo is
//! reported rather than silently ignored.

use crate::daemon::{CallError, Caller, DaemonAccess};
use car_proto::errors::{self, RpcError};
use serde_json::{json, Value};

/// The one prompt.
pub const CAR_CONTEXT: &str = "car_context";

/// The values `car_context`'s `mode` takes.
const MODES: &[&str] = &["fast", "full"];

/// The `prompts/list` result.
pub fn list() -> Value {
    json!({
        "prompts": [{
            "name": CAR_CONTEXT,
            "description": "CAR's layered context (constraints, relevant facts, known unknowns) for a query, as one user message to prepend to a prompt",
            "arguments": [
                {"name": "query", "description": "what the context is for", "required": true},
                {"name": "mode", "description": "`full` (default) or `fast`", "required": false},
            ],
        }]
    })
}

/// `prompts/get`.
pub async fn get(
    access: &DaemonAccess,
    params: &Value,
    caller: &Caller,
) -> Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("name: a prompt name is required"))?;
    if name != CAR_CONTEXT {
        return Err(RpcError::invalid_params(format!(
            "name: unknown prompt: {name}"
        )));
    }
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(Value::Object(map)) => Value::Object(map.clone()),
        Some(_) => return Err(RpcError::invalid_params("arguments: must be an object")),
    };
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| {
            RpcError::invalid_params("arguments.query: a non-empty string is required")
        })?;
    if let Some(mode) = arguments.get("mode").filter(|m| !m.is_null()) {
        if !mode.as_str().is_some_and(|m| MODES.contains(&m)) {
            return Err(RpcError::invalid_params(format!(
                "arguments.mode: must be `full` or `fast`, got {mode}"
            )));
        }
    }
    let context = access
        .call("memory.build_context", json!({"query": query}), caller)
        .await
        .map_err(|e| match e {
            CallError::Unauthenticated(m) => RpcError::new(errors::AUTH_REQUIRED, m),
            CallError::Failed(m) => RpcError::internal(format!("memory.build_context failed: {m}")),
        })?;
    let text = match context {
        Value::String(text) => text,
        other => other.to_string(),
    };
    Ok(json!({
        "description": format!("CAR context for: {query}"),
        "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
    }))
}

/// `completion/complete`: `car_context`'s `mode` by prefix; resource URIs by prefix (CAR
/// lists no resources, so none); anything else CAR does not know completes to nothing. A
/// request naming nothing to complete (no `ref`, no `argument`, no `argument.name`) is
/// `-32602`.
pub fn complete(params: &Value) -> Result<Value, RpcError> {
    let reference = params
        .get("ref")
        .filter(|r| r.is_object())
        .ok_or_else(|| RpcError::invalid_params("ref: an object is required"))?;
    let argument = params
        .get("argument")
        .filter(|a| a.is_object())
        .ok_or_else(|| RpcError::invalid_params("argument: an object is required"))?;
    let name = argument
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("argument.name: a string is required"))?;
    let prefix = argument.get("value").and_then(Value::as_str).unwrap_or("");
    let values: Vec<&str> = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt")
            if reference.get("name").and_then(Value::as_str) == Some(CAR_CONTEXT)
                && name == "mode" =>
        {
            MODES
                .iter()
                .copied()
                .filter(|m| m.starts_with(prefix))
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(json!({
        "completion": {"values": values, "total": values.len(), "hasMore": false}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_completes_by_prefix() {
        let ask = |value: &str| {
            complete(&json!({
                "ref": {"type": "ref/prompt", "name": CAR_CONTEXT},
                "argument": {"name": "mode", "value": value},
            }))
            .unwrap()["completion"]["values"]
                .clone()
        };
        assert_eq!(ask(""), json!(["fast", "full"]));
        assert_eq!(ask("fu"), json!(["full"]));
        assert_eq!(ask("x"), json!([]));
    }

    #[test]
    fn unknown_references_complete_to_nothing() {
        for reference in [
            json!({"type": "ref/prompt", "name": "other"}),
            json!({"type": "ref/resource", "uri": "car://x"}),
            json!({"type": "ref/unknown"}),
        ] {
            let out = complete(&json!({"ref": reference, "argument": {"name": "a", "value": ""}}))
                .unwrap();
            assert_eq!(out["completion"]["values"], json!([]));
            assert_eq!(out["completion"]["hasMore"], false);
        }
    }

    #[test]
    fn naming_nothing_is_invalid_params() {
        for params in [
            json!({}),
            json!({"ref": {"type": "ref/prompt", "name": CAR_CONTEXT}}),
            json!({"ref": {"type": "ref/prompt"}, "argument": {"value": "f"}}),
            json!({"argument": {"name": "mode"}}),
        ] {
            assert_eq!(complete(&params).unwrap_err().code, -32602, "{params}");
        }
    }

    #[test]
    fn list_names_the_prompt_and_its_arguments() {
        let l = list();
        assert_eq!(l["prompts"][0]["name"], CAR_CONTEXT);
        assert_eq!(l["prompts"][0]["arguments"][0]["required"], true);
    }
}
