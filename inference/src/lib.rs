//! `car-inference`: the inference engines and model registry behind `car-server`'s
//! `infer`, `infer_stream`, `embed`, `classify`, `tokenize`, `detokenize` and `models.*`.
//!
//! Owns: the model registry (`CAR_HOME/models/registry.json`), GGUF validation, local
//! generation with llama.cpp (prompts through the model's own Jinja chat template when it
//! supports tools, tool calls constrained by [`grammar`]), local embeddings with candle
//! BERT, zero-shot classification,
//! remote OpenAI-compatible providers (with tool calling, see [`tools`]) and the
//! loaded-model cache. Must not touch: JSON-RPC,
//! sockets, sessions, admission control or progress heartbeats: the daemon owns those and
//! calls [`InferenceEngine`] from blocking threads.
//!
//! Errors are [`InferenceError`]; [`InferenceError::kind`] says which JSON-RPC class
//! (invalid params, not found, content refused, internal) each one belongs to.

pub mod cache;
mod chat_template;
pub mod classify;
pub mod embed;
pub mod engine;
pub mod error;
pub mod generate;
pub mod gguf;
pub mod grammar;
pub mod identity;
pub mod keys;
pub mod llama;
mod llama_classify;
mod llama_sched;
mod llama_seq;
mod llama_tools;
mod openai;
pub mod prefix_cache;
mod provider_error;
pub mod registry;
pub mod remote;
mod remote_read;
pub mod sse;
mod tool_formats;
pub mod tools;

pub use classify::LabelScore;
pub use engine::{ClassifyResult, EmbedResult, EngineConfig, InferenceEngine, SecretLookup};
pub use error::{ErrorKind, InferenceError, Result};
pub use generate::{
    CancelToken, GenerateRequest, GenerateResult, Message, StopReason, StreamControl, StreamEvent,
    Usage,
};
pub use identity::ModelIdentity;
pub use keys::KeySource;
pub use llama::LlamaConfig;
pub use prefix_cache::CacheHint;
pub use registry::{ModelEntry, ModelRegistry, ModelSource, RegisterRequest};
pub use remote::RemoteConfig;
pub use tools::{ToolCall, ToolChoice, ToolSpec};

#[cfg(test)]
mod native_tools_tests;
