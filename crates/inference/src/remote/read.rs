//! Reading a chat-completions answer: one JSON body, or an SSE stream of chunks.
//!
//! Owns: finish-reason mapping, usage, refusal checks on choices, local stop-sequence
//! enforcement, tool-call assembly (through `openai`) and delivering stream events. Must
//! not touch: request bodies, retries or HTTP errors (see `remote`), or what of an
//! `{"error": …}` object reaches an error (see `remote::provider_error`; `key` is the API key to
//! keep out of it).
//!
//! Tool calls: a result carries the provider's calls with `StopReason::ToolUse` (when the
//! finish reason is `tool_calls`, or any call was produced). When a stop sequence ends the
//! text, nothing after it counts, calls included. A stream's calls are reported as
//! [`StreamEvent::ToolCall`] after the last text piece, once the stream has ended: a stream
//! does not mark the end of a single call, so only then is each known to be complete. A
//! callback answering `Stop` to one ends the call as `Cancelled` with the calls reported so
//! far.

use std::io::BufReader;
use std::time::{Duration, Instant};

use serde_json::Value;
use ureq::http::Response;
use ureq::Body;

use crate::error::{InferenceError, Result};
use crate::generate::{StopReason, StreamControl, StreamEvent, TextAssembler, Usage};
use crate::llama::Generated;
use crate::remote::openai::{message_tool_calls, StreamedToolCalls};
use crate::remote::provider_error::check_error_object;
use crate::remote::sse::EventReader;
use crate::remote::{malformed, read_json};
use crate::CancelToken;

pub(crate) fn cancelled(
    usage: Usage,
    text: String,
    ttft: Option<u64>,
    tool_calls: Vec<crate::tools::ToolCall>,
) -> Generated {
    Generated {
        text,
        tool_calls,
        usage,
        stop_reason: StopReason::Cancelled,
        time_to_first_token_ms: ttft,
    }
}

fn usage_of(value: &Value) -> Option<Usage> {
    let u = value.get("usage")?;
    let prompt = u["prompt_tokens"].as_u64().unwrap_or(0) as u32;
    let cached = (u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0) as u32)
        .min(prompt);
    Some(Usage {
        prompt_tokens: prompt - cached,
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0) as u32,
        cache_read_tokens: cached,
    })
}

/// Maps a finish reason; `content_filter` is a refusal.
fn finish(reason: Option<&str>) -> Result<Option<StopReason>> {
    Ok(match reason {
        None => None,
        Some("length") => Some(StopReason::Length),
        Some("tool_calls" | "function_call") => Some(StopReason::ToolUse),
        Some("content_filter") => {
            return Err(InferenceError::ContentRefused {
                reason: "provider finish_reason content_filter".into(),
            })
        }
        Some(_) => Some(StopReason::Stop),
    })
}

/// The stop reason once the calls are known: a stop sequence wins, then any call.
fn final_reason(reason: StopReason, calls: &[crate::tools::ToolCall]) -> StopReason {
    match reason {
        StopReason::StopSequence | StopReason::Cancelled => reason,
        _ if !calls.is_empty() => StopReason::ToolUse,
        _ => reason,
    }
}

pub(crate) fn read_whole(
    response: Response<Body>,
    assembler: &mut TextAssembler,
    started: Instant,
    key: Option<&str>,
) -> Result<Generated> {
    let value = read_json(response)?;
    check_error_object(&value, key)?;
    let choice = &value["choices"][0];
    if choice.is_null() {
        return Err(malformed("no choices"));
    }
    let message = &choice["message"];
    if let Some(refusal) = message["refusal"].as_str().filter(|s| !s.is_empty()) {
        return Err(InferenceError::ContentRefused {
            reason: refusal.to_owned(),
        });
    }
    let provider_reason = finish(choice["finish_reason"].as_str())?;
    let content = message["content"].as_str().unwrap_or_default();
    let (_, hit) = assembler.push_str(content);
    let tool_calls = if hit {
        Vec::new()
    } else {
        assembler.finish();
        message_tool_calls(message, provider_reason == Some(StopReason::Length))?
    };
    let reason = if hit {
        StopReason::StopSequence
    } else {
        provider_reason.unwrap_or(StopReason::Stop)
    };
    Ok(Generated {
        text: assembler.text().to_owned(),
        stop_reason: final_reason(reason, &tool_calls),
        tool_calls,
        usage: usage_of(&value).unwrap_or_default(),
        time_to_first_token_ms: Some(started.elapsed().as_millis() as u64),
    })
}

/// Reports `out`'s calls to the callback in order; a `Stop` keeps the calls reported so
/// far and makes the result `Cancelled`.
pub(crate) fn report_calls(
    mut out: Generated,
    on_event: &mut dyn FnMut(StreamEvent<'_>) -> StreamControl,
) -> Generated {
    for (i, call) in out.tool_calls.iter().enumerate() {
        if on_event(StreamEvent::ToolCall(call)) == StreamControl::Stop {
            out.tool_calls.truncate(i + 1);
            out.stop_reason = StopReason::Cancelled;
            break;
        }
    }
    out
}

/// Whether the response declares a JSON body (rather than an event stream).
pub(crate) fn answers_json(response: &Response<Body>) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        })
}

pub(crate) fn read_stream(
    response: Response<Body>,
    assembler: &mut TextAssembler,
    cancel: &CancelToken,
    started: Instant,
    key: Option<&str>,
    on_event: &mut dyn FnMut(StreamEvent<'_>) -> StreamControl,
) -> Result<Generated> {
    // The body is read on a helper thread so a stalled provider cannot delay a cancel: this
    // thread waits on the channel in short steps and checks the token in between. After a
    // cancel the helper exits when its next read returns (data, end or read timeout).
    let (tx, rx) = std::sync::mpsc::sync_channel::<std::io::Result<Option<String>>>(64);
    let body = response.into_body();
    std::thread::Builder::new()
        .name("car-sse-reader".into())
        .spawn(move || {
            let mut events = EventReader::new(BufReader::new(body.into_reader()));
            loop {
                let next = events.next_data();
                let end = !matches!(next, Ok(Some(_)));
                if tx.send(next).is_err() || end {
                    break;
                }
            }
        })
        .map_err(|e| InferenceError::Provider(format!("spawning stream reader failed: {e}")))?;
    let mut usage: Option<Usage> = None;
    let mut chunks = 0u32;
    let mut ttft = None;
    let mut reason: Option<StopReason> = None;
    let mut refusal = String::new();
    let mut calls = StreamedToolCalls::default();
    let mut done = false;
    while !done {
        if cancel.is_cancelled() {
            return Ok(cancelled(
                count(usage, chunks),
                assembler.text().into(),
                ttft,
                Vec::new(),
            ));
        }
        let data = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(next) => {
                next.map_err(|e| InferenceError::Provider(format!("reading stream failed: {e}")))?
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => None,
        };
        let Some(data) = data else { break };
        if data.trim() == "[DONE]" {
            break;
        }
        let value: Value = serde_json::from_str(&data)
            .map_err(|e| malformed(&format!("stream chunk is not json: {e}")))?;
        check_error_object(&value, key)?;
        if let Some(u) = usage_of(&value) {
            usage = Some(u);
        }
        let Some(choice) = value["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(r) = delta["refusal"].as_str() {
            refusal.push_str(r);
        }
        if let Some(r) = finish(choice["finish_reason"].as_str())? {
            reason = Some(r);
        }
        let got_calls = calls.push(delta)?;
        let content = delta["content"].as_str().filter(|c| !c.is_empty());
        if got_calls || content.is_some() {
            chunks += 1;
            ttft.get_or_insert_with(|| started.elapsed().as_millis() as u64);
        }
        if let Some(content) = content {
            let (piece, hit) = assembler.push_str(content);
            if !piece.is_empty() && on_event(StreamEvent::Text(&piece)) == StreamControl::Stop {
                return Ok(cancelled(
                    count(usage, chunks),
                    assembler.text().into(),
                    ttft,
                    Vec::new(),
                ));
            }
            if hit {
                reason = Some(StopReason::StopSequence);
                done = true;
            }
        }
    }
    if !refusal.is_empty() {
        return Err(InferenceError::ContentRefused { reason: refusal });
    }
    let Some(reason) = reason else {
        return Err(InferenceError::Provider(
            "stream ended without a finish reason".into(),
        ));
    };
    let mut tool_calls = Vec::new();
    if reason != StopReason::StopSequence {
        let rest = assembler.finish();
        if !rest.is_empty() {
            let _ = on_event(StreamEvent::Text(&rest));
        }
        if !calls.is_empty() {
            tool_calls = calls.finish(reason == StopReason::Length)?;
        }
    }
    let out = Generated {
        text: assembler.text().to_owned(),
        stop_reason: final_reason(reason, &tool_calls),
        tool_calls,
        usage: count(usage, chunks),
        time_to_first_token_ms: ttft,
    };
    Ok(report_calls(out, on_event))
}

fn count(usage: Option<Usage>, chunks: u32) -> Usage {
    usage.unwrap_or(Usage {
        completion_tokens: chunks,
        ..Usage::default()
    })
}
