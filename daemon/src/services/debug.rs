//! `debug.*`: methods served only with `--debug-methods`, so tests can drive deadlines,
//! slow handlers, reverse calls and notifications through a real daemon.

use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::debug::{self as m, ClientCallParams, SleepParams, SleepReply};
use serde_json::{json, Value};

use crate::handler::{Call, Routes};

/// Longest `debug.sleep` accepted (one day); longer values are a caller mistake.
const MAX_SLEEP_MS: u64 = 86_400_000;
/// Default wait for a `debug.call_client` answer.
const DEFAULT_CALL_TIMEOUT_MS: u64 = 30_000;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Echo, _, _>(|_, params: Value| async move { Ok(params) })
        .add::<m::Sleep, _, _>(sleep)
        .add::<m::CallClient, _, _>(call_client)
        .add::<m::NotifyClient, _, _>(notify_client);
}

fn bounded(field: &str, ms: u64) -> Result<Duration, RpcError> {
    if ms > MAX_SLEEP_MS {
        return Err(RpcError::invalid_params(format!(
            "{field}: must be an integer from 0 to {MAX_SLEEP_MS}"
        )));
    }
    Ok(Duration::from_millis(ms))
}

fn method_of(p: &ClientCallParams) -> Result<String, RpcError> {
    if p.method.is_empty() {
        return Err(RpcError::invalid_params("method: must not be empty"));
    }
    Ok(p.method.clone())
}

/// `debug.sleep {ms}` → `{slept_ms}`.
async fn sleep(_call: Call, p: SleepParams) -> Result<SleepReply, RpcError> {
    tokio::time::sleep(bounded("ms", p.ms)?).await;
    Ok(SleepReply { slept_ms: p.ms })
}

fn inner_params(p: &ClientCallParams) -> Value {
    if p.params.is_null() {
        json!({})
    } else {
        p.params.clone()
    }
}

/// `debug.call_client {method, params?, timeout_ms?}` → `{result}` or `{error}`.
async fn call_client(call: Call, p: ClientCallParams) -> Result<Value, RpcError> {
    let method = method_of(&p)?;
    let timeout = bounded(
        "timeout_ms",
        p.timeout_ms.unwrap_or(DEFAULT_CALL_TIMEOUT_MS),
    )?;
    let answer = call
        .session
        .call_client(&method, &inner_params(&p), timeout)
        .await
        .map_err(|e| RpcError::internal(format!("reverse call {method}: {e}")))?;
    match answer {
        Ok(result) => Ok(json!({"result": result})),
        Err(error) => Ok(json!({"error": error})),
    }
}

/// `debug.notify_client {method, params?}` → `{sent}`.
async fn notify_client(call: Call, p: ClientCallParams) -> Result<Value, RpcError> {
    let method = method_of(&p)?;
    Ok(json!({"sent": call.session.notify(&method, &inner_params(&p))}))
}
