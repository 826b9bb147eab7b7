//! `infer`, `infer_stream`, `infer.cancel`, `infer.deadline`, `embed`, `classify`,
//! `tokenize`, `detokenize`: generation and embeddings on registered models.
//!
//! The request is CAR's `GenerateRequest`: `prompt` and/or `messages` (an empty `prompt`
//! beside `messages` means "use the messages"), `system`, `context`, `model`, the sampling
//! knobs under `params` (the same knobs at top level are accepted too; `params` wins), and
//! `tools`, `tool_choice`, `intent`, `images`, `cache_control`, which are accepted and, where
//! an engine cannot honour them, refused with `-32602` naming the field.

pub mod routing;
pub mod runner;

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name};
use super::member::{field, json, member, opt, opt_at, req, whole, ArgKind::*, ReturnKind};

const fn text_at(name: &'static str) -> super::Returns {
    field(name, ReturnKind::Text)
}
use super::{agent, op, DeadlineClass, Declaration};
use crate::capabilities;

/// `stop`: one sequence or several.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// The sampling knobs (CAR's `params` object).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct Knobs {
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u32>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub tool_choice: Option<Json>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub strict_model: Option<bool>,
    #[serde(default)]
    pub cache_ttl: Option<Json>,
}

/// One conversation message: `{role, content}` plus tool-call linkage
/// (`tool_calls` on assistant turns; `tool_use_id` / `tool_call_id` on tool results).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Message {
    pub role: String,
    /// Text, or an array of content parts.
    #[serde(default)]
    pub content: Json,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// CAR's `GenerateRequest`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct GenerateParams {
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub messages: Option<Vec<Message>>,
    #[serde(default)]
    pub system: Option<String>,
    /// Appended to the system instruction as `Context:`.
    #[serde(default)]
    pub context: Option<String>,
    /// Build a memory context for this query (as `memory.build_context` does) and append
    /// it to the system instruction (CAR's `infer_with_context`).
    #[serde(default)]
    pub context_query: Option<String>,
    #[serde(default)]
    pub model: Option<Name>,
    #[serde(default)]
    pub params: Option<Knobs>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub seed: Option<u32>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub tools: Option<Vec<Json>>,
    #[serde(default)]
    pub tool_choice: Option<Json>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Routing hints ([`routing::IntentHint`]): without `model`, the router filters and
    /// ranks by them; beside `model` they are recorded only (the pin wins).
    #[serde(default)]
    pub intent: Option<routing::IntentHint>,
    /// Constrains the answer to JSON ([`ResponseFormat`]).
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// Opaque to the daemon: echoed to a delegated model's runner inside
    /// `inference.runner.invoke`'s `request`, so it can find its own request state.
    #[serde(default)]
    pub client_ref: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<Json>>,
    /// Prompt-cache hint; accepted.
    #[serde(default)]
    pub cache_control: Option<Json>,
}

/// CAR's `ResponseFormat`: the answer is one JSON value. `json_object` asks for any JSON
/// object; `json_schema` for a value valid against `schema` (CAR's flat form; OpenAI's
/// nested `json_schema: {name, schema, strict}` is accepted too). A local model is
/// grammar-constrained to it, a remote provider receives it in its own format, and the
/// daemon validates the answer before returning it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    JsonObject,
    JsonSchema {
        #[serde(default)]
        schema: Option<Json>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        strict: Option<bool>,
        /// OpenAI's nesting of the three fields above.
        #[serde(default)]
        json_schema: Option<Json>,
    },
}

impl ResponseFormat {
    /// The schema an answer must match: `{"type": "object"}` for `json_object`; `None` when
    /// a `json_schema` format names none.
    pub fn schema(&self) -> Option<Json> {
        match self {
            ResponseFormat::JsonObject => Some(serde_json::json!({"type": "object"})),
            ResponseFormat::JsonSchema {
                schema,
                json_schema,
                ..
            } => schema
                .clone()
                .or_else(|| json_schema.as_ref().and_then(|j| j.get("schema").cloned()))
                .filter(Json::is_object),
        }
    }

    /// The format's name (`response` when it names none).
    pub fn name(&self) -> String {
        match self {
            ResponseFormat::JsonObject => "response".into(),
            ResponseFormat::JsonSchema {
                name, json_schema, ..
            } => name
                .clone()
                .or_else(|| {
                    json_schema
                        .as_ref()
                        .and_then(|j| j.get("name")?.as_str().map(str::to_string))
                })
                .unwrap_or_else(|| "response".into()),
        }
    }

    /// Whether the provider should enforce the schema strictly (default true).
    pub fn strict(&self) -> bool {
        match self {
            ResponseFormat::JsonObject => false,
            ResponseFormat::JsonSchema {
                strict,
                json_schema,
                ..
            } => strict
                .or_else(|| {
                    json_schema
                        .as_ref()
                        .and_then(|j| j.get("strict")?.as_bool())
                })
                .unwrap_or(true),
        }
    }
}

impl GenerateParams {
    /// The knobs with `params` taking precedence over the same fields at top level.
    pub fn knobs(&self) -> Knobs {
        let p = self.params.clone().unwrap_or_default();
        Knobs {
            max_tokens: p.max_tokens.or(self.max_tokens),
            temperature: p.temperature.or(self.temperature),
            top_p: p.top_p.or(self.top_p),
            seed: p.seed.or(self.seed),
            stop: p.stop.or_else(|| self.stop.clone()),
            tool_choice: p.tool_choice.or_else(|| self.tool_choice.clone()),
            parallel_tool_calls: p.parallel_tool_calls.or(self.parallel_tool_calls),
            strict_model: p.strict_model,
            cache_ttl: p.cache_ttl,
        }
    }
}

/// `{id}` of a running `infer` / `infer_stream` call of this connection.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CancelParams {
    /// The JSON-RPC id of the call (same JSON type).
    pub id: Json,
}

/// `infer.deadline` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeadlineParams {
    pub id: Json,
    /// Milliseconds from now.
    pub deadline_ms: u64,
}

/// `embed` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EmbedParams {
    pub texts: Vec<String>,
    #[serde(default)]
    pub model: Option<Name>,
}

/// `classify` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ClassifyParams {
    pub text: String,
    pub labels: Vec<String>,
    #[serde(default)]
    pub model: Option<Name>,
}

/// `tokenize` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TokenizeParams {
    pub text: String,
    #[serde(default)]
    pub model: Option<Name>,
}

/// `detokenize` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DetokenizeParams {
    pub tokens: Vec<i32>,
    #[serde(default)]
    pub model: Option<Name>,
}

const INFER: super::MethodSpec = agent(
    "infer",
    "generate text; infer.progress heartbeats while it runs",
)
.deadline(DeadlineClass::Inference);

crate::method!(
    /// `infer` → `{text, tool_calls, usage, model_used, model_identity, latency_ms, …}`.
    Infer = INFER;
    access: Access::daemon().grantable();
    GenerateParams => InferReply;
    member("infer", &[req("prompt", Str), opt("model", Str), opt_at("max_tokens", "params.max_tokens", Int), opt_at("intent_json", "intent", Json)], field("text", ReturnKind::Text)),
    member("infer_tracked", &[req("prompt", Str), opt("model", Str), opt_at("max_tokens", "params.max_tokens", Int), opt("context", Str), opt_at("tools_json", "tools", Json), opt_at("messages_json", "messages", Json), opt_at("tool_choice", "params.tool_choice", Str), opt_at("parallel_tool_calls", "params.parallel_tool_calls", Bool), opt_at("intent_json", "intent", Json), opt_at("images_json", "images", Json)], json()),
    member("infer_tracked_with_request", &[whole("request_json")], json()),
    member("infer_with_context", &[req("prompt", Str).also(&["context_query"]), opt("model", Str), opt_at("max_tokens", "params.max_tokens", Int), opt_at("intent_json", "intent", Json)], field("text", ReturnKind::Text)),
    member("infer_with_context_tracked", &[req("prompt", Str).also(&["context_query"]), opt("model", Str), opt_at("max_tokens", "params.max_tokens", Int), opt_at("intent_json", "intent", Json)], json())
);
crate::method!(
    /// `infer_stream` → the final result, after `inference.stream.event` notifications.
    /// Its typed member takes an event callback and is written by hand in each binding.
    InferStream = agent("infer_stream", "generate text with inference.stream.event notifications")
        .deadline(DeadlineClass::Inference);
    access: Access::daemon().grantable();
    GenerateParams => InferReply
);
/// The immutable identity of a registered model, returned with every result and by `list`.
///
/// For local models `sha256` is the lower-case hex SHA-256 of the weights file (the GGUF
/// file, or `model.safetensors` of an embedding model) and `size` its length in bytes, both
/// computed once at registration. Remote models have no weights here, so both are `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelIdentity {
    /// The registry id.
    pub id: String,
    /// SHA-256 of the weights file; `None` for remote models.
    pub sha256: Option<String>,
    /// Size of the weights file in bytes; `None` for remote models.
    pub size: Option<u64>,
}

/// `embed` result: one vector per text, in order, and the model used.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct EmbedReply {
    pub embeddings: Vec<Vec<f32>>,
    pub model_identity: ModelIdentity,
}

/// One `classify` score (CAR's shape; a call's scores sum to 1, best first).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct LabelScore {
    pub label: String,
    pub score: f32,
}

/// `tokenize` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct TokenizeReply {
    pub tokens: Vec<i32>,
}

/// `detokenize` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct DetokenizeReply {
    pub text: String,
}

/// One call the model made: which tool, with which arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The provider's call id; a tool result's `tool_use_id` refers to it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, a JSON object.
    #[serde(default = "empty_object")]
    pub arguments: Json,
}

impl ToolCall {
    /// A call with these parts.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Json) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

fn empty_object() -> Json {
    Json::Object(Default::default())
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model emitted an end-of-generation token.
    Stop,
    /// `max_tokens` (or the context window) was reached.
    Length,
    /// The call was cancelled (`infer.cancel`, a deadline, or a stopped stream).
    Cancelled,
    /// A requested stop sequence appeared (it is not included in the text).
    StopSequence,
    /// The model called tools (`tool_calls`).
    ToolUse,
}

/// CAR's usage object. `prompt_tokens` is the uncached part of the input and
/// `cache_read_input_tokens` the part read from a cache (a reused KV prefix locally);
/// nothing is charged for writing the local cache, so `cache_creation_input_tokens` is 0.
/// `input_tokens` / `output_tokens` are CAR's `TokenUsage` names for the same counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct InferUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// `prompt_tokens + cache_read_input_tokens + completion_tokens`.
    pub total_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub cache_creation_input_tokens: u64,
}

/// `infer` / `infer_stream` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InferReply {
    pub text: String,
    /// The tools the model called, in order.
    pub tool_calls: Vec<ToolCall>,
    pub usage: InferUsage,
    /// `<session>-<request id>`: names this call in the event log.
    pub trace_id: String,
    /// The registry id of the model that answered.
    pub model_used: String,
    pub model_identity: ModelIdentity,
    /// Wall time of the whole call, including a cold model load.
    pub latency_ms: u64,
    /// `null` when nothing was generated.
    pub time_to_first_token_ms: Option<u64>,
    pub stop_reason: StopReason,
    /// What this call cost in USD at the model's registered prices (`models.register`'s
    /// `cost`, see `crate::pricing`); `null` when the model is unpriced (a local model
    /// registered without prices), never a fabricated 0.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// `infer.cancel` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct CancelReply {
    pub cancelled: bool,
}

/// `infer.deadline` result: the deadline set, in milliseconds from the call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct DeadlineReply {
    pub deadline_ms: u64,
}

crate::method!(
    /// `infer.cancel` → `{cancelled}`.
    Cancel = op("infer.cancel", "stop a running infer call of this connection")
        .capability(capabilities::INFER_CANCEL_V1);
    access: Access::daemon().grantable();
    CancelParams => CancelReply
);
crate::method!(
    /// `infer.deadline` → `{deadline_ms}`.
    Deadline = op("infer.deadline", "stop a running infer call once a deadline passes")
        .capability(capabilities::INFER_DEADLINE_V1);
    access: Access::daemon().grantable();
    DeadlineParams => DeadlineReply
);
crate::method!(
    /// `embed` → `{embeddings}`.
    Embed = op("embed", "embedding vectors for texts from a local or remote embedding model");
    access: Access::daemon();
    EmbedParams => EmbedReply;
    member("embed", &[req("texts", StrList), opt("model", Str)], json())
);
crate::method!(
    /// `classify` → `[{label, score}]`, best first (CAR's shape).
    Classify = op("classify", "zero-shot classification of text against labels by embedding similarity");
    access: Access::daemon().grantable();
    ClassifyParams => Vec<LabelScore>;
    member("classify", &[req("text", Str), req("labels", StrList), opt("model", Str)], json())
);
crate::method!(
    /// `tokenize` → token ids.
    Tokenize = op("tokenize", "token ids of text under a local model's vocabulary");
    access: Access::daemon();
    TokenizeParams => TokenizeReply;
    member("tokenize", &[req("model", Str), req("text", Str)], field("tokens", ReturnKind::Json))
);
crate::method!(
    /// `detokenize` → text.
    Detokenize = op("detokenize", "text of token ids under a local model's vocabulary");
    access: Access::daemon();
    DetokenizeParams => DetokenizeReply;
    member("detokenize", &[req("model", Str), req("tokens", IntList)], text_at("text"))
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Infer>(),
    Declaration::of::<InferStream>(),
    Declaration::of::<Cancel>(),
    Declaration::of::<Deadline>(),
    Declaration::of::<Embed>(),
    Declaration::of::<Classify>(),
    Declaration::of::<Tokenize>(),
    Declaration::of::<Detokenize>(),
];
