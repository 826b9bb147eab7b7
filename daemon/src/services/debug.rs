//! `debug.*`: methods served only with `--debug-methods`, so tests can drive deadlines,
//! slow handlers, reverse calls and notifications through a real daemon.

use std::time::Duration;

use car_proto::errors::RpcError;
use serde_json::{json, Map, Value};

use super::object;
use crate::dispatch::{Call, HandlerFuture};

/// Longest `debug.sleep` accepted (one day); longer values are a caller mistake.
const MAX_SLEEP_MS: u64 = 86_400_000;
/// Default wait for a `debug.call_client` answer.
const DEFAULT_CALL_TIMEOUT_MS: u64 = 30_000;

fn u64_field(obj: &Map<String, Value>, field: &str, max: u64) -> Result<Option<u64>, RpcError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(Some(n)),
            _ => Err(RpcError::invalid_params(format!(
                "{field} must be an integer from 0 to {max}"
            ))),
        },
    }
}

fn method_field(obj: &Map<String, Value>) -> Result<String, RpcError> {
    match obj.get("method") {
        Some(Value::String(m)) if !m.is_empty() => Ok(m.clone()),
        Some(_) => Err(RpcError::invalid_params(
            "method must be a non-empty string",
        )),
        None => Err(RpcError::invalid_params("method is required")),
    }
}

/// `debug.sleep {ms}` → `{slept_ms}`.
pub fn sleep(_call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let obj = object(params)?;
        let ms = u64_field(&obj, "ms", MAX_SLEEP_MS)?
            .ok_or_else(|| RpcError::invalid_params("ms is required"))?;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(json!({"slept_ms": ms}))
    })
}

/// `debug.echo <params>` → the params.
pub fn echo(_call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move { Ok(params) })
}

/// `debug.call_client {method, params?, timeout_ms?}` → `{result}` or `{error}`.
pub fn call_client(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let obj = object(params)?;
        let method = method_field(&obj)?;
        let timeout =
            u64_field(&obj, "timeout_ms", MAX_SLEEP_MS)?.unwrap_or(DEFAULT_CALL_TIMEOUT_MS);
        let inner = obj.get("params").cloned().unwrap_or(json!({}));
        let answer = call
            .session
            .call_client(&method, &inner, Duration::from_millis(timeout))
            .await
            .map_err(|e| RpcError::internal(format!("reverse call {method}: {e}")))?;
        match answer {
            Ok(result) => Ok(json!({"result": result})),
            Err(error) => Ok(json!({"error": error})),
        }
    })
}

/// `debug.notify_client {method, params?}` → `{sent}`.
pub fn notify_client(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let obj = object(params)?;
        let method = method_field(&obj)?;
        let inner = obj.get("params").cloned().unwrap_or(json!({}));
        Ok(json!({"sent": call.session.notify(&method, &inner)}))
    })
}
