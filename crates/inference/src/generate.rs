//! Engine-neutral generation types and the streamed-text assembler.
//!
//! Owns: `GenerateRequest`, `Message`, `GenerateResult`, `Usage`, `StopReason`,
//! `StreamControl`, `StreamEvent`, `CancelToken`, and `TextAssembler`, which turns decoded
//! bytes into UTF-8 pieces while holding back anything that might be the start of a stop
//! sequence, so the streamed pieces always concatenate to exactly the final text.
//! Must not touch: any engine. The tool-calling IR lives in `tools`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{InferenceError, Result};
use crate::identity::ModelIdentity;
use crate::tools::{ToolCall, ToolChoice, ToolSpec};

/// Largest `max_tokens` accepted; the context window usually bounds it further.
pub const MAX_TOKENS_LIMIT: u32 = 32_768;
/// Most stop sequences accepted, and the longest one in bytes.
pub const MAX_STOP_SEQUENCES: usize = 16;
const MAX_STOP_LEN: usize = 256;

/// One chat message. `Message::new(role, content)` (or a literal with
/// `..Default::default()`) builds a plain turn; JSON with only `role` and `content` still
/// reads, and a message without tool fields still writes as `{role, content}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, or `tool_result` / `tool` for a tool result (others
    /// are passed through to the template).
    pub role: String,
    /// The text (absent or `null` reads as empty, as on an assistant turn that only calls
    /// tools).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// The calls an assistant turn made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// On a tool result: the id of the call it answers.
    #[serde(
        default,
        alias = "tool_call_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub tool_use_id: Option<String>,
}

impl Message {
    /// A plain turn.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Self::default()
        }
    }

    /// An assistant turn that made `calls` (with optional accompanying text).
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        Self {
            role: "assistant".into(),
            content: content.into(),
            tool_calls: calls,
            tool_use_id: None,
        }
    }

    /// A `tool_result` turn answering call `tool_use_id`.
    pub fn tool_result(tool_use_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: crate::tools::TOOL_RESULT_ROLE.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_use_id: Some(tool_use_id.into()),
        }
    }
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A generation request. Exactly one of `prompt` and `messages` must be given; a `prompt`
/// becomes a single user message, and `system` (if any) is prepended as a system message.
/// Both are rendered with the model's chat template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// A single user turn.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A conversation.
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
    /// A system instruction prepended to the conversation.
    #[serde(default)]
    pub system: Option<String>,
    /// Most tokens to generate (default: the engine's `default_max_tokens`).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature; `0` is greedy (default 0.8).
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Nucleus sampling mass in (0, 1] (default 0.95).
    #[serde(default)]
    pub top_p: Option<f32>,
    /// Sampling seed; the same seed, prompt and parameters give the same text. Random when
    /// absent.
    #[serde(default)]
    pub seed: Option<u32>,
    /// Generation ends before the first occurrence of any of these strings.
    #[serde(default)]
    pub stop: Vec<String>,
    /// Tools the model may call (local GGUF models get them through their own chat
    /// template when it supports tools in a recognised format, else a generic tool prompt;
    /// decoding is grammar-constrained either way).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Whether and which tool to call (provider default: `Auto`). Only sent with tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn (provider default). Only sent
    /// with tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Constrains a text answer to one JSON value (`response_format`): a local model
    /// decodes under the format's grammar (the tools' grammar wins when the request uses
    /// tools), a remote provider receives it in its own shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<car_proto::methods::inference::ResponseFormat>,
    /// How the local prefix cache is used (`cache_control` / `cache_ttl`).
    #[serde(skip)]
    pub cache: crate::prefix_cache::CacheHint,
}

/// The default temperature when a request gives none (llama.cpp's default).
pub const DEFAULT_TEMPERATURE: f32 = 0.8;
/// The default nucleus mass when a request gives none (llama.cpp's default).
pub const DEFAULT_TOP_P: f32 = 0.95;

impl GenerateRequest {
    /// The conversation to render: `system` + (`messages` or `prompt` as a user turn).
    pub fn conversation(&self) -> Result<Vec<Message>> {
        let mut out = Vec::new();
        if let Some(system) = &self.system {
            out.push(Message::new("system", system.clone()));
        }
        match (&self.prompt, &self.messages) {
            (Some(_), Some(_)) => {
                return Err(InferenceError::invalid(
                    "prompt",
                    "give either prompt or messages, not both",
                ))
            }
            (None, None) => {
                return Err(InferenceError::invalid(
                    "prompt",
                    "one of prompt or messages is required",
                ))
            }
            (Some(p), None) => out.push(Message::new("user", p.clone())),
            (None, Some(m)) if m.is_empty() => {
                return Err(InferenceError::invalid("messages", "must not be empty"))
            }
            (None, Some(m)) => {
                for (i, msg) in m.iter().enumerate() {
                    if msg.role.trim().is_empty() {
                        return Err(InferenceError::invalid(
                            "messages",
                            format!("message {i} has an empty role"),
                        ));
                    }
                }
                out.extend(m.iter().cloned());
            }
        }
        Ok(out)
    }

    /// Checks the numeric fields, the stop list and the tools (see
    /// [`GenerateRequest::validate_tools`]); returns `max_tokens` with the default applied.
    pub fn validate(&self, default_max_tokens: u32) -> Result<u32> {
        let max_tokens = self.max_tokens.unwrap_or(default_max_tokens);
        if max_tokens == 0 || max_tokens > MAX_TOKENS_LIMIT {
            return Err(InferenceError::invalid(
                "max_tokens",
                format!("{max_tokens} is outside 1..={MAX_TOKENS_LIMIT}"),
            ));
        }
        if let Some(t) = self.temperature {
            if !t.is_finite() || !(0.0..=10.0).contains(&t) {
                return Err(InferenceError::invalid(
                    "temperature",
                    format!("{t} is outside 0..=10"),
                ));
            }
        }
        if let Some(p) = self.top_p {
            if !p.is_finite() || p <= 0.0 || p > 1.0 {
                return Err(InferenceError::invalid(
                    "top_p",
                    format!("{p} is outside (0, 1]"),
                ));
            }
        }
        if self.stop.len() > MAX_STOP_SEQUENCES {
            return Err(InferenceError::invalid(
                "stop",
                format!(
                    "{} sequences given, at most {MAX_STOP_SEQUENCES} allowed",
                    self.stop.len()
                ),
            ));
        }
        for s in &self.stop {
            if s.is_empty() || s.len() > MAX_STOP_LEN {
                return Err(InferenceError::invalid(
                    "stop",
                    format!("{s:?} must be 1..={MAX_STOP_LEN} bytes"),
                ));
            }
        }
        self.validate_tools()?;
        Ok(max_tokens)
    }
}

/// Token counts of one generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens evaluated for this request: the rendered prompt less the part read
    /// from a cache (CAR's normalisation: the whole input is `prompt_tokens +
    /// cache_read_tokens`).
    pub prompt_tokens: u32,
    /// Tokens generated (including any that formed a stop sequence).
    pub completion_tokens: u32,
    /// Prompt tokens read from a cache: a reused KV prefix on a local model, the
    /// provider's `prompt_tokens_details.cached_tokens` on an OpenAI-compatible one.
    #[serde(default)]
    pub cache_read_tokens: u32,
}

pub use car_proto::methods::inference::StopReason;

/// What a streaming generation reports to its callback
/// ([`crate::InferenceEngine::generate_with_events`]). Non-exhaustive: ignore kinds you do
/// not handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEvent<'a> {
    /// A piece of final text; the pieces concatenate to `GenerateResult::text`.
    Text(&'a str),
    /// A complete tool call, with its arguments parsed. Calls are reported in order once
    /// the provider's stream has ended (a stream does not mark the end of a single call),
    /// after the last text piece; together they equal `GenerateResult::tool_calls`.
    ToolCall(&'a ToolCall),
}

/// What a stream callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamControl {
    /// Keep generating.
    Continue,
    /// End generation now; the result's stop reason is `Cancelled`.
    Stop,
}

/// The outcome of one generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateResult {
    /// The generated text (without any stop sequence).
    pub text: String,
    /// The tools the model called, in order (empty unless `stop_reason` is `ToolUse`, or
    /// `Cancelled` after some were reported).
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Token counts.
    pub usage: Usage,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// Time from the call to the first generated piece (`None` if nothing was generated).
    pub time_to_first_token_ms: Option<u64>,
    /// Wall time of the whole call, including a cold model load.
    pub latency_ms: u64,
    /// The model that produced it.
    pub model_identity: ModelIdentity,
}

/// A cheap, clonable cancellation flag checked by the engines between tokens.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every holder to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether `cancel` was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Assembles decoded bytes into UTF-8 text pieces, withholding possible stop-sequence
/// prefixes so that what has been emitted never has to be taken back.
#[derive(Debug)]
pub struct TextAssembler {
    stops: Vec<String>,
    /// Bytes that do not yet form complete UTF-8 characters.
    pending_bytes: Vec<u8>,
    text: String,
    emitted: usize,
    stopped: bool,
}

impl TextAssembler {
    /// An assembler that ends at the first of `stops`.
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.to_vec(),
            pending_bytes: Vec::new(),
            text: String::new(),
            emitted: 0,
            stopped: false,
        }
    }

    /// Adds decoded bytes. Returns the newly safe text to stream (possibly empty) and whether
    /// a stop sequence was hit (after which further input is ignored).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.pending_bytes.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.pending_bytes) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_some() => {
                // Invalid (not merely incomplete) bytes: replace them rather than stall.
                let lossy = String::from_utf8_lossy(&self.pending_bytes).into_owned();
                self.pending_bytes.clear();
                return self.push_str(&lossy);
            }
            Err(e) => e.valid_up_to(),
        };
        let complete: Vec<u8> = self.pending_bytes.drain(..valid).collect();
        // `complete` is valid UTF-8 by construction.
        let s = String::from_utf8_lossy(&complete).into_owned();
        self.push_str(&s)
    }

    /// Adds already-decoded text (remote providers stream strings).
    pub fn push_str(&mut self, s: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        let search_from = self.emitted;
        self.text.push_str(s);
        if let Some(pos) = self.first_stop(search_from) {
            self.text.truncate(pos);
            self.stopped = true;
            return (self.take_until(pos), true);
        }
        let hold = self.held_back_from();
        (self.take_until(hold), false)
    }

    /// Emits everything still held back (end of generation without a stop sequence).
    pub fn finish(&mut self) -> String {
        if !self.pending_bytes.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending_bytes).into_owned();
            self.pending_bytes.clear();
            self.text.push_str(&rest);
        }
        let end = self.text.len();
        self.take_until(end)
    }

    /// The final text so far (everything accepted, emitted or not).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The part of the text already handed out by `push_*`/`finish`.
    pub fn emitted_text(&self) -> &str {
        &self.text[..self.emitted]
    }

    /// Whether a stop sequence ended the text.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    fn take_until(&mut self, end: usize) -> String {
        if end <= self.emitted {
            return String::new();
        }
        let piece = self.text[self.emitted..end].to_owned();
        self.emitted = end;
        piece
    }

    /// Earliest stop-sequence match that ends in unemitted text.
    fn first_stop(&self, emitted: usize) -> Option<usize> {
        self.stops
            .iter()
            .filter_map(|stop| {
                // A match may begin inside already-emitted text only if that text was held
                // back, which never happens, so searching from `emitted` is enough.
                self.text[emitted..]
                    .find(stop.as_str())
                    .map(|p| p + emitted)
            })
            .min()
    }

    /// Start of the shortest suffix that is a proper prefix of some stop sequence.
    fn held_back_from(&self) -> usize {
        let len = self.text.len();
        let mut hold = len;
        for stop in &self.stops {
            let max = stop.len().saturating_sub(1).min(len - self.emitted);
            for k in (1..=max).rev() {
                let start = len - k;
                if self.text.is_char_boundary(start) && stop.starts_with(&self.text[start..]) {
                    hold = hold.min(start);
                    break;
                }
            }
        }
        hold
    }
}

#[cfg(test)]
mod tests;
