//! Remote OpenAI-compatible providers: `/v1/chat/completions` (streaming and not) and
//! `/v1/embeddings`.
//!
//! Owns: request bodies, bounded retries, and mapping provider error answers to
//! `InferenceError` (reading successful answers is `remote::read`'s). Must not touch: the
//! registry, API key storage or the rules on which key may be used (`keys`; it receives
//! the key, inside `Redacted`, and the key's *name*, and only the name ever appears in
//! errors or logs), or local engines.
//!
//! Provider text in errors: a provider's error body is never passed on whole. Only a short
//! sanitized reason is (its JSON `error.message`, at most 200 characters; a non-JSON body
//! only by its size; see `remote::provider_error`), a 401/403 carries nothing of the body, and
//! every error a call returns has the API key replaced by `[redacted]`, wherever the
//! provider echoed it.
//!
//! Retries: HTTP 429 and 5xx, and transport failures (connection refused, reset, timeout),
//! are retried up to `RemoteConfig::max_retries` times. The delay is the response's
//! `Retry-After` (whole seconds) capped at `max_retry_after`, else exponential backoff from
//! `base_backoff` capped at `max_backoff`. Waiting checks the cancel token. Nothing is
//! retried once a streamed body has started to arrive.
//!
//! A content refusal becomes `InferenceError::ContentRefused` (JSON-RPC `-32007`) when:
//! - a choice's `finish_reason` is `content_filter` (streamed or not);
//! - a message or delta carries a non-empty `refusal` string (OpenAI's refusal field);
//! - an error body (any status, or a streamed `{"error": …}` event) has `error.code` or
//!   `error.type` equal to `content_filter`, `content_policy_violation` or `moderation_blocked`, or
//!   `error.innererror.code` equal to `ResponsibleAIPolicyViolation` (Azure OpenAI); the reason is
//!   its sanitized `error.message`.
//!
//! Cancellation: checked between retries (in 50 ms steps while backing off) and every
//! 50 ms while a stream is open, so a stalled provider cannot hold a cancelled call.
//!
//! Usage: taken from the provider (`stream_options.include_usage` is requested when
//! streaming); when a stream carries none, `completion_tokens` counts content chunks and
//! `prompt_tokens` is 0.
//!
//! A provider that ignores `stream: true` and answers a streamed request with one
//! `application/json` body is read whole; its text reaches the stream callback as one piece,
//! then its tool calls one event each.
//!
//! Tool calling: tools, `tool_choice`, `parallel_tool_calls` and tool turns are sent in
//! OpenAI's shape (`openai`); calls come back as `ToolCall`s with `StopReason::ToolUse`,
//! from a whole message or assembled from streamed fragments (`remote::read`). Response
//! reading lives in `remote::read`.

pub(crate) mod openai;
mod provider_error;
mod read;
pub mod sse;

use std::io::Read;
use std::time::{Duration, Instant};

use car_proto::redact::Redacted;
use serde_json::{json, Value};
use ureq::http::Response;
use ureq::Body;

use crate::error::{InferenceError, Result};
use crate::generate::{
    CancelToken, GenerateRequest, StreamControl, StreamEvent, TextAssembler, Usage,
};
use crate::keys::KeySource;
use crate::llama::Generated;
use crate::remote::provider_error::{check_error_object, ErrorBody};
use crate::remote::read::{answers_json, cancelled, read_stream, read_whole, report_calls};

/// Most stop sequences forwarded to a provider (OpenAI's limit); all of them are also
/// enforced locally.
const PROVIDER_STOP_LIMIT: usize = 4;
/// Largest non-streamed response body read.
const MAX_BODY: u64 = 16 * 1024 * 1024;
/// Largest error body read (only a message is wanted from it).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// Retry and timeout policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff delay; doubled per retry.
    pub base_backoff: Duration,
    /// Cap on the backoff delay.
    pub max_backoff: Duration,
    /// Cap on a provider's `Retry-After`.
    pub max_retry_after: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Longest silence tolerated while reading a response.
    pub read_timeout: Duration,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
        }
    }
}

/// Where to send a request and with which credentials. `Debug` shows the key as
/// `[redacted]`.
#[derive(Debug, Clone)]
pub struct RemoteEndpoint {
    /// Base URL without `/v1`.
    pub base_url: String,
    /// Provider model name.
    pub model: String,
    /// The key, if one is configured.
    pub api_key: Option<Redacted<String>>,
    /// Where the key came from, by name, for error messages.
    pub key_source: KeySource,
}

impl RemoteEndpoint {
    fn key(&self) -> Option<&str> {
        self.api_key.as_ref().map(|k| k.expose().as_str())
    }
}

/// A blocking HTTP client for OpenAI-compatible endpoints. `Send + Sync`.
#[derive(Debug)]
pub struct RemoteClient {
    agent: ureq::Agent,
    config: RemoteConfig,
}

impl RemoteClient {
    /// A client with the given policy.
    pub fn new(config: RemoteConfig) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(config.connect_timeout))
            .timeout_recv_response(Some(config.read_timeout))
            .timeout_per_read(Some(config.read_timeout))
            .build()
            .into();
        Self { agent, config }
    }

    /// Chat completion. With `on_event` the request streams (SSE) and text pieces and
    /// tool calls are delivered as they arrive (see [`StreamEvent`]); without it the
    /// provider answers in one body. Tools, `tool_choice` and tool turns are sent in
    /// OpenAI's shape (see `openai`).
    pub fn chat(
        &self,
        endpoint: &RemoteEndpoint,
        request: &GenerateRequest,
        max_tokens: u32,
        cancel: &CancelToken,
        started: Instant,
        on_event: Option<&mut dyn FnMut(StreamEvent<'_>) -> StreamControl>,
    ) -> Result<Generated> {
        self.chat_unredacted(endpoint, request, max_tokens, cancel, started, on_event)
            .map_err(|e| redact(e, endpoint))
    }

    fn chat_unredacted(
        &self,
        endpoint: &RemoteEndpoint,
        request: &GenerateRequest,
        max_tokens: u32,
        cancel: &CancelToken,
        started: Instant,
        on_event: Option<&mut dyn FnMut(StreamEvent<'_>) -> StreamControl>,
    ) -> Result<Generated> {
        let key = endpoint.key();
        let body = chat_body(endpoint, request, max_tokens, on_event.is_some())?;
        let url = format!("{}/v1/chat/completions", endpoint.base_url);
        let Some(response) = self.post(endpoint, &url, &body, cancel)? else {
            return Ok(cancelled(Usage::default(), String::new(), None, Vec::new()));
        };
        let mut assembler = TextAssembler::new(&request.stop);
        match on_event {
            Some(cb) if !answers_json(&response) => {
                read_stream(response, &mut assembler, cancel, started, key, cb)
            }
            // Some OpenAI-compatible servers ignore `stream: true` and answer in one JSON
            // body: take it whole and deliver its text as a single piece, then its calls.
            Some(cb) => {
                let out = read_whole(response, &mut assembler, started, key)?;
                if !out.text.is_empty() {
                    let _ = cb(StreamEvent::Text(&out.text));
                }
                Ok(report_calls(out, cb))
            }
            None => read_whole(response, &mut assembler, started, key),
        }
    }

    /// Embeddings via `/v1/embeddings`, in input order.
    pub fn embed(&self, endpoint: &RemoteEndpoint, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        self.embed_unredacted(endpoint, texts)
            .map_err(|e| redact(e, endpoint))
    }

    fn embed_unredacted(
        &self,
        endpoint: &RemoteEndpoint,
        texts: &[String],
    ) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Err(InferenceError::invalid("texts", "must not be empty"));
        }
        let body = json!({"model": endpoint.model, "input": texts});
        let url = format!("{}/v1/embeddings", endpoint.base_url);
        let response = self
            .post(endpoint, &url, &body, &CancelToken::new())?
            .ok_or_else(|| InferenceError::Provider("embedding request cancelled".into()))?;
        let value = read_json(response)?;
        check_error_object(&value, endpoint.key())?;
        let data = value["data"]
            .as_array()
            .ok_or_else(|| malformed("embeddings response has no data array"))?;
        let mut rows: Vec<(u64, Vec<f32>)> = Vec::with_capacity(data.len());
        for (i, item) in data.iter().enumerate() {
            let index = item["index"].as_u64().unwrap_or(i as u64);
            let vector = item["embedding"]
                .as_array()
                .ok_or_else(|| malformed("embedding item has no embedding array"))?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| malformed("embedding holds a non-number"))?;
            rows.push((index, vector));
        }
        rows.sort_by_key(|(i, _)| *i);
        if rows.len() != texts.len() {
            return Err(malformed(&format!(
                "{} embeddings returned for {} texts",
                rows.len(),
                texts.len()
            )));
        }
        Ok(rows.into_iter().map(|(_, v)| v).collect())
    }

    /// POSTs `body` with retries; `Ok(None)` means the cancel token fired while waiting.
    fn post(
        &self,
        endpoint: &RemoteEndpoint,
        url: &str,
        body: &Value,
        cancel: &CancelToken,
    ) -> Result<Option<Response<Body>>> {
        let payload = body.to_string();
        let mut attempt = 0u32;
        loop {
            if cancel.is_cancelled() {
                return Ok(None);
            }
            let mut req = self
                .agent
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream");
            if let Some(key) = endpoint.key() {
                req = req.header("authorization", format!("Bearer {key}"));
            }
            let retry_after = match req.send(payload.as_str()) {
                Err(e) => {
                    let msg = format!("request to {url} failed: {e}");
                    if attempt >= self.config.max_retries {
                        return Err(InferenceError::Provider(format!(
                            "{msg} (after {} attempts)",
                            attempt + 1
                        )));
                    }
                    tracing::warn!(url, attempt, error = %e, "provider unreachable, retrying");
                    None
                }
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    if (200..300).contains(&status) {
                        return Ok(Some(resp));
                    }
                    let retry_after = parse_retry_after(&resp);
                    let body = read_error_body(resp);
                    if let Some(reason) = body.refusal(endpoint.key()) {
                        return Err(InferenceError::ContentRefused { reason });
                    }
                    if status == 401 || status == 403 {
                        return Err(InferenceError::Unauthorized {
                            credentials: endpoint.key_source.clone(),
                            status,
                        });
                    }
                    let retryable = status == 429 || status >= 500;
                    if !retryable || attempt >= self.config.max_retries {
                        let message = body.reason(endpoint.key());
                        return Err(InferenceError::ProviderStatus {
                            status,
                            message: if retryable {
                                format!("gave up after {} attempts: {message}", attempt + 1)
                            } else {
                                message
                            },
                        });
                    }
                    tracing::warn!(url, attempt, status, "provider busy, retrying");
                    retry_after
                }
            };
            let delay = match retry_after {
                Some(d) => d.min(self.config.max_retry_after),
                None => self
                    .config
                    .base_backoff
                    .saturating_mul(1u32 << attempt.min(16))
                    .min(self.config.max_backoff),
            };
            if !sleep_unless_cancelled(delay, cancel) {
                return Ok(None);
            }
            attempt += 1;
        }
    }
}

/// The `/v1/chat/completions` body for `request`.
pub(crate) fn chat_body(
    endpoint: &RemoteEndpoint,
    request: &GenerateRequest,
    max_tokens: u32,
    stream: bool,
) -> Result<Value> {
    let mut body = json!({
        "model": endpoint.model,
        "messages": openai::chat_messages(&request.conversation()?),
        "max_tokens": max_tokens,
        "stream": stream,
    });
    for (k, v) in [
        ("temperature", request.temperature.map(Value::from)),
        ("top_p", request.top_p.map(Value::from)),
        ("seed", request.seed.map(Value::from)),
    ] {
        if let Some(v) = v {
            body[k] = v;
        }
    }
    if !request.stop.is_empty() {
        let stops: Vec<&String> = request.stop.iter().take(PROVIDER_STOP_LIMIT).collect();
        body["stop"] = json!(stops);
    }
    openai::add_tools(&mut body, request);
    openai::add_response_format(&mut body, request);
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    Ok(body)
}

pub(crate) fn malformed(what: &str) -> InferenceError {
    InferenceError::Provider(format!("malformed response: {what}"))
}

/// Sleeps in short steps so a cancel lands quickly; returns `false` if cancelled.
fn sleep_unless_cancelled(total: Duration, cancel: &CancelToken) -> bool {
    let deadline = Instant::now() + total;
    loop {
        if cancel.is_cancelled() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

fn parse_retry_after(resp: &Response<Body>) -> Option<Duration> {
    let v = resp.headers().get("retry-after")?.to_str().ok()?.trim();
    // Only the delta-seconds form; an HTTP date falls back to backoff.
    v.parse::<u64>().ok().map(Duration::from_secs)
}

/// Up to `MAX_ERROR_BODY` bytes of an error body (what arrived, if reading fails).
fn read_error_body(resp: Response<Body>) -> ErrorBody {
    let mut bytes = Vec::new();
    let mut reader = resp.into_body().into_reader().take(MAX_ERROR_BODY + 1);
    let _ = reader.read_to_end(&mut bytes);
    let cut = bytes.len() as u64 > MAX_ERROR_BODY;
    bytes.truncate(MAX_ERROR_BODY as usize);
    ErrorBody::new(&bytes, cut)
}

/// `e` with the endpoint's key, wherever provider text put it, replaced by `[redacted]`.
fn redact(e: InferenceError, endpoint: &RemoteEndpoint) -> InferenceError {
    match endpoint.key() {
        Some(key) => e.redact(key),
        None => e,
    }
}

pub(crate) fn read_json(resp: Response<Body>) -> Result<Value> {
    let text = resp
        .into_body()
        .into_with_config()
        .limit(MAX_BODY)
        .read_to_string()
        .map_err(|e| InferenceError::Provider(format!("reading response failed: {e}")))?;
    serde_json::from_str(&text).map_err(|e| malformed(&format!("invalid json: {e}")))
}
