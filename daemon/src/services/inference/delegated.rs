//! Delegated models (`source: {type: "delegated"}`) and their runner's methods
//! (`inference.register_runner`, `inference.runner.event` / `complete` / `fail`); the
//! runner and its open calls are `crate::state::inference_runner`'s.
//!
//! A delegated `infer` / `infer_stream` sends the runner `inference.runner.invoke {call_id,
//! request}` (the caller's params as given, `client_ref` included) and folds what comes back:
//! `text` pieces concatenate, `tool_start` / `tool_delta` assemble calls by `index` (the deltas
//! are the arguments' JSON text), `usage` sets the counts, `done` / `complete` end the call
//! (with events, the stream is authoritative and `result` fills only what it lacks; without,
//! `result` is the answer), `error` / `fail` fail it. An `infer_stream` caller receives every
//! event as it arrives (`text`, `tool_start`, `tool_delta`, `usage`). The call fails at once
//! when the runner disconnects, when no runner is registered, when the caller's deadline
//! passes, and when the runner streams more than [`MAX_STREAM_BYTES`]. `infer.cancel` ends it
//! with what streamed so far (`stop_reason: "cancelled"`); a call abandoned before the runner
//! ended it (cancelled, past its deadline, its caller gone) is announced to the runner as
//! `inference.runner.cancel {call_id}`, and the runner's later events for it are refused. Stricter
//! than CAR: an agent session may not register as the runner (it would read every delegated prompt
//! of every principal).

use std::collections::BTreeMap;
use std::time::Instant;

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::inference::runner::{self as r, RunnerEvent, INVOKE_METHOD};
use car_proto::methods::inference::{
    GenerateParams, InferReply, InferUsage, ModelIdentity, StopReason, ToolCall,
};
use serde_json::{json, Value};

use crate::handler::{Call, Routes};
use crate::state::inference_runner::RunnerMessage;

/// The most text and tool-argument bytes one delegated call may stream; a runner that
/// sends more fails the call (the daemon holds the whole answer).
pub const MAX_STREAM_BYTES: usize = 16 << 20;

pub fn register(routes: &mut Routes) {
    routes
        .add::<r::RegisterRunner, _, _>(|call: Call, _: NoParams| async move {
            call.state.inference.runners.register(&call.session);
            Ok(r::RegisteredReply { registered: true })
        })
        .add::<r::RunnerEventMethod, _, _>(|call: Call, p: r::EventParams| async move {
            deliver(&call, &p.call_id, RunnerMessage::Event(p.event))?;
            Ok(r::EmittedReply { emitted: true })
        })
        .add::<r::RunnerComplete, _, _>(|call: Call, p: r::CompleteParams| async move {
            deliver(&call, &p.call_id, RunnerMessage::Complete(p.result))?;
            Ok(r::CompletedReply { completed: true })
        })
        .add::<r::RunnerFail, _, _>(|call: Call, p: r::FailParams| async move {
            deliver(&call, &p.call_id, RunnerMessage::Fail(p.error))?;
            Ok(r::FailedReply { failed: true })
        });
}

fn deliver(call: &Call, call_id: &str, message: RunnerMessage) -> Result<(), RpcError> {
    call.state
        .inference
        .runners
        .deliver(call.session.id, call_id, message)
        .map_err(RpcError::invalid_params)
}

/// What the stream has said so far.
#[derive(Debug, Default)]
struct Folded {
    events: usize,
    text: String,
    /// index → (id, name, arguments text).
    calls: BTreeMap<u32, (Option<String>, String, String)>,
    usage: InferUsage,
}

impl Folded {
    fn tool_calls(&self) -> Result<Vec<ToolCall>, RpcError> {
        self.calls
            .iter()
            .map(|(index, (id, name, args))| {
                let arguments = if args.trim().is_empty() {
                    json!({})
                } else {
                    serde_json::from_str(args).map_err(|e| {
                        RpcError::internal(format!(
                            "the runner's tool call {index} ({name}) has arguments that are not JSON: {e}"
                        ))
                    })?
                };
                Ok(ToolCall::new(
                    id.clone().unwrap_or_else(|| format!("call_{index}")),
                    name.clone(),
                    arguments,
                ))
            })
            .collect()
    }
}

/// Runs a delegated generation of `model` for `params` (see the module docs).
pub async fn generate(
    call: &Call,
    model: &str,
    params: &GenerateParams,
    stream: bool,
    trace_id: String,
    cancel: &car_inference::CancelToken,
) -> Result<InferReply, RpcError> {
    let started = Instant::now();
    let runners = call.state.inference.runners.clone();
    let runner = runners.runner().ok_or_else(|| {
        RpcError::internal(format!(
            "model {model:?} is delegated and no inference runner is registered (inference.register_runner)"
        ))
        .with_data(json!({"reason": "no_runner"}))
    })?;
    let mut pending = runners.open(&runner);
    let request = serde_json::to_value(params)
        .map_err(|e| RpcError::internal(format!("the request does not encode: {e}")))?;
    if !runner.notify(
        INVOKE_METHOD,
        &json!({"call_id": pending.call_id, "request": request}),
    ) {
        return Err(runner_gone());
    }
    let id = call.id.clone().unwrap_or(Value::Null);
    let mut folded = Folded::default();
    let mut first_token = None;
    let mut cancelled = false;
    let result = loop {
        let message = tokio::select! {
            m = pending.rx.recv() => m,
            () = runner.closed.cancelled() => None,
            () = cancellation(cancel) => {
                // `infer.cancel`: the runner is told (dropping `pending`), the caller gets
                // what streamed so far, as a cancelled local generation does.
                cancelled = true;
                break r::RunnerResult { text: String::new(), tool_calls: Vec::new() };
            }
        };
        let Some(message) = message else {
            return Err(runner_gone());
        };
        if matches!(
            message,
            RunnerMessage::Complete(_)
                | RunnerMessage::Fail(_)
                | RunnerMessage::Event(RunnerEvent::Done { .. } | RunnerEvent::Error { .. })
        ) {
            pending.finished = true;
        }
        match message {
            RunnerMessage::Event(event) => {
                folded.events += 1;
                let held =
                    folded.text.len() + folded.calls.values().map(|c| c.2.len()).sum::<usize>();
                if held > MAX_STREAM_BYTES {
                    return Err(failed(format!(
                        "the runner streamed more than {MAX_STREAM_BYTES} bytes for one call"
                    )));
                }
                if stream {
                    if let Some(out) = stream_event(&event) {
                        call.session.notify(
                            "inference.stream.event",
                            &json!({"id": id, "request_id": id, "event": out}),
                        );
                    }
                }
                match event {
                    RunnerEvent::Text { data } => {
                        first_token.get_or_insert_with(|| started.elapsed().as_millis() as u64);
                        folded.text.push_str(&data);
                    }
                    RunnerEvent::ToolStart { name, index, id } => {
                        folded.calls.insert(index, (id, name, String::new()));
                    }
                    RunnerEvent::ToolDelta { index, data } => match folded.calls.get_mut(&index) {
                        Some(c) => c.2.push_str(&data),
                        None => {
                            return Err(RpcError::internal(format!(
                                "the runner sent tool_delta for index {index} before its tool_start"
                            )))
                        }
                    },
                    RunnerEvent::Usage {
                        input_tokens,
                        output_tokens,
                        cache_read_input_tokens,
                        cache_creation_input_tokens,
                    } => {
                        let read = cache_read_input_tokens.unwrap_or(0);
                        folded.usage = InferUsage {
                            input_tokens,
                            output_tokens,
                            prompt_tokens: input_tokens,
                            completion_tokens: output_tokens,
                            total_tokens: input_tokens + read + output_tokens,
                            cache_read_input_tokens: read,
                            cache_creation_input_tokens: cache_creation_input_tokens.unwrap_or(0),
                        };
                    }
                    RunnerEvent::ProviderOutputItem { .. } => {}
                    RunnerEvent::Error { message } => return Err(failed(message)),
                    RunnerEvent::Done { text, tool_calls } => {
                        break r::RunnerResult { text, tool_calls }
                    }
                }
            }
            RunnerMessage::Complete(result) => break result,
            RunnerMessage::Fail(error) => return Err(failed(error)),
        }
    };
    let streamed = folded.events > 0;
    let text = if streamed && !folded.text.is_empty() {
        folded.text.clone()
    } else {
        result.text
    };
    let mut tool_calls = folded.tool_calls()?;
    if tool_calls.is_empty() {
        tool_calls = result.tool_calls;
    }
    Ok(InferReply {
        stop_reason: if cancelled {
            StopReason::Cancelled
        } else if tool_calls.is_empty() {
            StopReason::Stop
        } else {
            StopReason::ToolUse
        },
        text,
        tool_calls,
        usage: folded.usage,
        trace_id,
        model_used: model.to_string(),
        model_identity: ModelIdentity {
            id: model.to_string(),
            sha256: None,
            size: None,
        },
        latency_ms: started.elapsed().as_millis() as u64,
        time_to_first_token_ms: first_token,
        cost_usd: None,
    })
}

/// Resolves once `cancel` fires (the token is a flag: polled every 50 ms).
async fn cancellation(cancel: &car_inference::CancelToken) {
    while !cancel.is_cancelled() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The `inference.stream.event` payload for a runner event (CAR's tags).
fn stream_event(event: &RunnerEvent) -> Option<Value> {
    match event {
        RunnerEvent::Text { .. }
        | RunnerEvent::ToolStart { .. }
        | RunnerEvent::ToolDelta { .. }
        | RunnerEvent::Usage { .. } => serde_json::to_value(event).ok(),
        _ => None,
    }
}

fn runner_gone() -> RpcError {
    RpcError::internal("the inference runner disconnected before the delegated call finished")
        .with_data(json!({"reason": "runner_disconnected"}))
}

fn failed(message: String) -> RpcError {
    RpcError::internal(format!("inference failed: {message}"))
        .with_data(json!({"reason": "runner_failed"}))
}
