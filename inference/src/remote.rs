//! Remote OpenAI-compatible providers: `/v1/chat/completions` (streaming and not) and
//! `/v1/embeddings`.
//!
//! Owns: request bodies, bounded retries, and mapping provider error answers to
//! `InferenceError` (reading successful answers is `remote_read`'s). Must not touch: the
//! registry, API key storage (it receives the key and the *name* of its env var, and only
//! the name ever appears in errors or logs), or local engines.
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
//!   `error.type` equal to `content_filter`, `content_policy_violation` or
//!   `moderation_blocked`, or `error.innererror.code` equal to
//!   `ResponsibleAIPolicyViolation` (Azure OpenAI).
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
//! from a whole message or assembled from streamed fragments (`remote_read`). Response
//! reading lives in `remote_read`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ureq::http::Response;
use ureq::Body;

use crate::error::{InferenceError, Result};
use crate::generate::{
    CancelToken, GenerateRequest, StreamControl, StreamEvent, TextAssembler, Usage,
};
use crate::llama::Generated;
use crate::openai;
use crate::remote_read::{answers_json, cancelled, read_stream, read_whole, report_calls};

/// Most stop sequences forwarded to a provider (OpenAI's limit); all of them are also
/// enforced locally.
const PROVIDER_STOP_LIMIT: usize = 4;
/// Largest non-streamed response body read.
const MAX_BODY: u64 = 16 * 1024 * 1024;
/// Largest error body read (only a message is wanted from it).
const MAX_ERROR_BODY: u64 = 64 * 1024;
const REFUSAL_CODES: [&str; 3] = [
    "content_filter",
    "content_policy_violation",
    "moderation_blocked",
];

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

/// Where to send a request and with which credentials.
#[derive(Clone)]
pub struct RemoteEndpoint {
    /// Base URL without `/v1`.
    pub base_url: String,
    /// Provider model name.
    pub model: String,
    /// The key, if one is configured.
    pub api_key: Option<String>,
    /// Name of the env var the key came from, for error messages.
    pub api_key_env: Option<String>,
}

impl std::fmt::Debug for RemoteEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is deliberately left out.
        f.debug_struct("RemoteEndpoint")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .finish()
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
        let body = chat_body(endpoint, request, max_tokens, on_event.is_some())?;
        let url = format!("{}/v1/chat/completions", endpoint.base_url);
        let Some(response) = self.post(endpoint, &url, &body, cancel)? else {
            return Ok(cancelled(Usage::default(), String::new(), None, Vec::new()));
        };
        let mut assembler = TextAssembler::new(&request.stop);
        match on_event {
            Some(cb) if !answers_json(&response) => {
                read_stream(response, &mut assembler, cancel, started, cb)
            }
            // Some OpenAI-compatible servers ignore `stream: true` and answer in one JSON
            // body: take it whole and deliver its text as a single piece, then its calls.
            Some(cb) => {
                let out = read_whole(response, &mut assembler, started)?;
                if !out.text.is_empty() {
                    let _ = cb(StreamEvent::Text(&out.text));
                }
                Ok(report_calls(out, cb))
            }
            None => read_whole(response, &mut assembler, started),
        }
    }

    /// Embeddings via `/v1/embeddings`, in input order.
    pub fn embed(&self, endpoint: &RemoteEndpoint, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Err(InferenceError::invalid("texts", "must not be empty"));
        }
        let body = json!({"model": endpoint.model, "input": texts});
        let url = format!("{}/v1/embeddings", endpoint.base_url);
        let response = self
            .post(endpoint, &url, &body, &CancelToken::new())?
            .ok_or_else(|| InferenceError::Provider("embedding request cancelled".into()))?;
        let value = read_json(response)?;
        check_error_object(&value)?;
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
            if let Some(key) = &endpoint.api_key {
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
                    let text = read_error_body(resp);
                    if let Some(reason) = refusal_in_error_text(&text) {
                        return Err(InferenceError::ContentRefused { reason });
                    }
                    if status == 401 || status == 403 {
                        return Err(InferenceError::Unauthorized {
                            env_var: endpoint
                                .api_key_env
                                .clone()
                                .unwrap_or_else(|| "(none registered)".into()),
                            status,
                        });
                    }
                    let retryable = status == 429 || status >= 500;
                    if !retryable || attempt >= self.config.max_retries {
                        let message = error_message(&text);
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

fn read_error_body(resp: Response<Body>) -> String {
    resp.into_body()
        .into_with_config()
        .limit(MAX_ERROR_BODY)
        .lossy_utf8(true)
        .read_to_string()
        .unwrap_or_default()
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

/// The provider's error message, shortened; the raw text when it is not JSON.
fn error_message(text: &str) -> String {
    let msg = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.trim().to_owned());
    let mut msg: String = msg.chars().take(500).collect();
    if msg.is_empty() {
        msg = "empty response body".into();
    }
    msg
}

fn refusal_in_error_text(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| refusal_in_error(&v))
}

/// Detects a refusal in an `{"error": {...}}` object (see the module docs).
fn refusal_in_error(value: &Value) -> Option<String> {
    let err = value.get("error")?;
    let is_refusal = |v: &Value| v.as_str().is_some_and(|s| REFUSAL_CODES.contains(&s));
    if is_refusal(&err["code"])
        || is_refusal(&err["type"])
        || err["innererror"]["code"].as_str() == Some("ResponsibleAIPolicyViolation")
    {
        let msg = err["message"].as_str().unwrap_or("provider content filter");
        return Some(msg.chars().take(500).collect());
    }
    None
}

/// Turns a 2xx body's `error` object into an error.
pub(crate) fn check_error_object(value: &Value) -> Result<()> {
    if let Some(reason) = refusal_in_error(value) {
        return Err(InferenceError::ContentRefused { reason });
    }
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(InferenceError::Provider(error_message(&value.to_string())));
    }
    Ok(())
}
