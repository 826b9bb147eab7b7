//! `infer`, `infer_stream`, `infer.cancel`, `infer.deadline`, `embed`, `classify`,
//! `tokenize`, `detokenize` and `models.*`: JSON-RPC over the shared inference service
//! (`crate::inference`).
//!
//! A generation call: registers itself (so `infer.cancel {id}` can reach it), starts its
//! `infer.progress {id}` heartbeat, waits for an admission slot (queued calls heartbeat
//! too, and leave the queue when their connection drops), then runs the engine on the
//! blocking pool. `infer_stream` sends `inference.stream.event {id, request_id, event}` for
//! each text piece (`{type: "text", data}`), then `usage` and `stop_reason` events, then
//! answers with the final result. Engine errors map by kind: caller mistakes `-32602`, an
//! unknown model `-32602` naming `model`, a provider's content refusal `-32007`, anything
//! else `-32603`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use car_inference::{
    ErrorKind, GenerateRequest, InferenceError, Message, RegisterRequest, StreamControl,
};
use car_proto::errors::{RpcError, CONTENT_REFUSED};
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};
use crate::inference::{refresh_memory_embedder, Heartbeat, InferenceService};

fn engine_error(e: InferenceError) -> RpcError {
    match e.kind() {
        ErrorKind::InvalidParams | ErrorKind::NotFound => RpcError::invalid_params(e),
        ErrorKind::ContentRefused => {
            RpcError::new(CONTENT_REFUSED, format!("content refused: {e}"))
        }
        ErrorKind::Internal => {
            tracing::error!(error = %e, "inference failure");
            RpcError::internal(format!("inference: {e}"))
        }
    }
}

fn service(call: &Call) -> Arc<InferenceService> {
    call.state.inference.clone()
}

/// Runs a blocking engine call on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, InferenceError> + Send + 'static,
) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RpcError::internal(format!("inference task failed: {e}")))?
        .map_err(engine_error)
}

const GENERATE_FIELDS: &[&str] = &[
    "prompt",
    "messages",
    "system",
    "context",
    "model",
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "stop",
    "tools",
];

fn opt_f32(p: &Params, field: &str) -> Result<Option<f32>, RpcError> {
    match p.value(field) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|f| Some(f as f32))
            .ok_or_else(|| RpcError::invalid_params(format!("{field} must be a number, got {v}"))),
    }
}

/// Reads a generation request; `context` is appended to the system instruction.
fn generate_request(params: Value) -> Result<(Option<String>, GenerateRequest), RpcError> {
    let p = Params::new(params)?.only(GENERATE_FIELDS)?;
    if let Some(tools) = p.value("tools") {
        if tools.as_array().is_none_or(|t| !t.is_empty()) {
            return Err(RpcError::invalid_params(
                "tools: tool calling is not supported by this daemon's engines (send no tools)",
            ));
        }
    }
    let messages = match p.value("messages") {
        None => None,
        Some(v) => Some(
            serde_json::from_value::<Vec<Message>>(v.clone()).map_err(|e| {
                RpcError::invalid_params(format!(
                    "messages must be an array of {{role, content}}: {e}"
                ))
            })?,
        ),
    };
    let system = match (p.opt_text("system")?, p.opt_text("context")?) {
        (s, None) => s,
        (None, Some(c)) => Some(format!("Context:\n{c}")),
        (Some(s), Some(c)) => Some(format!("{s}\n\nContext:\n{c}")),
    };
    let request = GenerateRequest {
        prompt: p.opt_text("prompt")?,
        messages,
        system,
        max_tokens: p
            .opt_u64("max_tokens", 1, u32::MAX as u64)?
            .map(|n| n as u32),
        temperature: opt_f32(&p, "temperature")?,
        top_p: opt_f32(&p, "top_p")?,
        seed: p.opt_u64("seed", 0, u32::MAX as u64)?.map(|n| n as u32),
        stop: p.opt_str_list("stop")?.unwrap_or_default(),
    };
    Ok((p.opt_str("model")?, request))
}

async fn generate(call: Call, params: Value, stream: bool) -> Result<Value, RpcError> {
    let (model, request) = generate_request(params)?;
    let svc = service(&call);
    let id = call.id.clone().unwrap_or(Value::Null);
    let guard = svc
        .track(call.session.id, &id)
        .map_err(RpcError::invalid_params)?;
    let _heartbeat = Heartbeat::start(call.session.clone(), id.clone(), svc.progress_every);
    let queued = Instant::now();
    let slot = svc
        .admission
        .clone()
        .acquire_owned()
        .await
        .expect("admission never closes");
    tracing::debug!(session = call.session.id, waited = ?queued.elapsed(), "admitted");
    let engine = svc.engine.clone();
    let entry = guard.entry.clone();
    let session = call.session.clone();
    let result = blocking(move || {
        // The slot is held until the generation itself ends, even if the handler was
        // dropped meanwhile and the cancel token is still being noticed.
        let _slot = slot;
        let cancel = entry.cancel.clone();
        let mut on_piece = |piece: &str| {
            if entry.past_deadline() {
                return StreamControl::Stop;
            }
            if stream {
                session.notify(
                    "inference.stream.event",
                    &json!({"id": id, "request_id": id, "event": {"type": "text", "data": piece}}),
                );
            }
            StreamControl::Continue
        };
        let out = engine.generate(model.as_deref(), &request, &cancel, Some(&mut on_piece));
        if let Ok(r) = &out {
            if stream {
                for event in [
                    json!({"type": "usage", "prompt_tokens": r.usage.prompt_tokens, "completion_tokens": r.usage.completion_tokens}),
                    json!({"type": "stop_reason", "data": r.stop_reason}),
                ] {
                    session.notify("inference.stream.event", &json!({"id": id, "request_id": id, "event": event}));
                }
            }
        }
        out
    })
    .await?;
    drop(guard);
    let model_used = result.model_identity.id.clone();
    Ok(json!({
        "text": result.text,
        "tool_calls": [],
        "usage": result.usage,
        "model_used": model_used,
        "model_identity": result.model_identity,
        "latency_ms": result.latency_ms,
        "time_to_first_token_ms": result.time_to_first_token_ms,
        "stop_reason": result.stop_reason,
    }))
}

/// `infer {prompt | messages, system?, context?, model?, max_tokens?, temperature?, top_p?, seed?, stop?}`.
pub fn infer(call: Call, params: Value) -> HandlerFuture {
    Box::pin(generate(call, params, false))
}

/// `infer_stream`: `infer` plus `inference.stream.event` notifications.
pub fn infer_stream(call: Call, params: Value) -> HandlerFuture {
    Box::pin(generate(call, params, true))
}

/// `infer.cancel {id}` (needs `infer.cancel.v1`) → `{cancelled: true}`.
pub fn cancel(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["id"])?;
        let id = p.required_value("id")?.clone();
        let running = service(&call).find(call.session.id, &id).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "id: no infer call {id} is running on this connection"
            ))
        })?;
        running.cancel.cancel();
        Ok(json!({"cancelled": true}))
    })
}

/// `infer.deadline {id, deadline_ms}` (needs `infer.deadline.v1`): stop call `id` once
/// `deadline_ms` from now has passed (its stop reason is then `cancelled`).
pub fn deadline(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["id", "deadline_ms"])?;
        let id = p.required_value("id")?.clone();
        let ms = p
            .opt_u64("deadline_ms", 0, 86_400_000)?
            .ok_or_else(|| RpcError::invalid_params("deadline_ms is required"))?;
        let running = service(&call).find(call.session.id, &id).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "id: no infer call {id} is running on this connection"
            ))
        })?;
        *running.deadline.lock().expect("deadline lock") =
            Some(Instant::now() + Duration::from_millis(ms));
        Ok(json!({"deadline_ms": ms}))
    })
}

fn texts(p: &Params) -> Result<Vec<String>, RpcError> {
    match p.value("texts") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| RpcError::invalid_params(format!("texts[{i}] must be a string")))
            })
            .collect(),
        Some(Value::Array(_)) => Err(RpcError::invalid_params("texts must not be empty")),
        Some(_) => Err(RpcError::invalid_params(
            "texts must be an array of strings",
        )),
        None => Err(RpcError::invalid_params("texts is required")),
    }
}

/// `embed {texts, model?}` → `{embeddings, model_identity}`.
pub fn embed(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["texts", "model"])?;
        let (texts, model) = (texts(&p)?, p.opt_str("model")?);
        let engine = service(&call).engine.clone();
        let r = blocking(move || engine.embed(model.as_deref(), &texts)).await?;
        Ok(json!({"embeddings": r.embeddings, "model_identity": r.model_identity}))
    })
}

/// `classify {text, labels, model?}` → `{scores: [{label, score}], model_identity}`.
pub fn classify(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["text", "labels", "model"])?;
        let text = p
            .opt_text("text")?
            .ok_or_else(|| RpcError::invalid_params("text is required"))?;
        let labels = p
            .opt_str_list("labels")?
            .ok_or_else(|| RpcError::invalid_params("labels is required"))?;
        let model = p.opt_str("model")?;
        let engine = service(&call).engine.clone();
        let r = blocking(move || engine.classify(model.as_deref(), &text, &labels)).await?;
        Ok(json!({"scores": r.scores, "model_identity": r.model_identity}))
    })
}

/// `tokenize {text, model?}` → `{tokens}`.
pub fn tokenize(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["text", "model"])?;
        let text = p
            .opt_text("text")?
            .ok_or_else(|| RpcError::invalid_params("text is required"))?;
        let model = p.opt_str("model")?;
        let engine = service(&call).engine.clone();
        Ok(json!({"tokens": blocking(move || engine.tokenize(model.as_deref(), &text)).await?}))
    })
}

/// `detokenize {tokens, model?}` → `{text}`.
pub fn detokenize(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["tokens", "model"])?;
        let tokens: Vec<i32> = match p.value("tokens") {
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    v.as_i64()
                        .and_then(|n| i32::try_from(n).ok())
                        .ok_or_else(|| {
                            RpcError::invalid_params(format!(
                                "tokens[{i}] must be a 32-bit integer"
                            ))
                        })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "tokens must be an array of integers",
                ))
            }
            None => return Err(RpcError::invalid_params("tokens is required")),
        };
        let model = p.opt_str("model")?;
        let engine = service(&call).engine.clone();
        Ok(json!({"text": blocking(move || engine.detokenize(model.as_deref(), &tokens)).await?}))
    })
}

/// `models.list` → registered models with their identities and whether they are loaded.
pub fn models_list(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        let engine = service(&call).engine.clone();
        let loaded = engine.loaded_models();
        let rows: Vec<Value> = engine
            .list()
            .into_iter()
            .map(|e| {
                let mut row = serde_json::to_value(&e).unwrap_or(Value::Null);
                row["kind"] = json!(e.kind_name());
                row["identity"] = serde_json::to_value(e.identity()).unwrap_or(Value::Null);
                row["loaded"] = json!(loaded.contains(&e.id));
                row
            })
            .collect();
        Ok(Value::Array(rows))
    })
}

/// `models.register {id?, path} | {id?, base_url, model, api_key_env?}` → the entry.
pub fn models_register(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["id", "path", "base_url", "model", "api_key_env"])?;
        let request = RegisterRequest {
            id: p.opt_str("id")?,
            path: p.opt_text("path")?.map(Into::into),
            base_url: p.opt_str("base_url")?,
            model: p.opt_str("model")?,
            api_key_env: p.opt_str("api_key_env")?,
        };
        let engine = service(&call).engine.clone();
        let entry = blocking({
            let engine = engine.clone();
            move || engine.register(&request)
        })
        .await?;
        refresh_memory_embedder(&engine, &call.state.memory);
        let mut row = serde_json::to_value(&entry).unwrap_or(Value::Null);
        row["kind"] = json!(entry.kind_name());
        row["identity"] = serde_json::to_value(entry.identity()).unwrap_or(Value::Null);
        Ok(row)
    })
}

/// `models.remove {id}` → the removed entry.
pub fn models_remove(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let id = Params::new(params)?.only(&["id"])?.str("id")?;
        let engine = service(&call).engine.clone();
        let entry = blocking({
            let engine = engine.clone();
            move || engine.remove(&id)
        })
        .await?;
        refresh_memory_embedder(&engine, &call.state.memory);
        Ok(serde_json::to_value(entry).unwrap_or(Value::Null))
    })
}
