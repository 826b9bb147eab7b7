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

#[cfg(feature = "engines")]
pub mod cache;
pub mod chat_template;
#[cfg(feature = "engines")]
pub mod classify;
#[cfg(feature = "engines")]
pub mod embed;
#[cfg(feature = "engines")]
pub mod engine;
pub mod error;
pub mod generate;
pub mod gguf;
#[cfg(feature = "engines")]
pub mod grammar;
pub mod identity;
pub mod keys;
#[cfg(feature = "engines")]
pub mod llama;
pub mod outcomes;
pub mod prefix_cache;
#[cfg(feature = "engines")]
pub mod registry;
#[cfg(feature = "engines")]
pub mod remote;
pub mod route;
#[cfg(feature = "engines")]
mod tool_formats;
pub mod tools;

#[cfg(feature = "engines")]
pub use classify::LabelScore;
#[cfg(feature = "engines")]
pub use engine::{ClassifyResult, EmbedResult, EngineConfig, InferenceEngine, SecretLookup};
pub use error::{ErrorKind, InferenceError, Result};
pub use generate::{
    CancelToken, GenerateRequest, GenerateResult, Message, StopReason, StreamControl, StreamEvent,
    Usage,
};
pub use identity::ModelIdentity;
pub use keys::KeySource;
#[cfg(feature = "engines")]
pub use llama::LlamaConfig;
pub use prefix_cache::CacheHint;
#[cfg(feature = "engines")]
pub use registry::{ModelEntry, ModelMeta, ModelRegistry, ModelSource, RegisterRequest};
#[cfg(feature = "engines")]
pub use remote::RemoteConfig;
pub use tools::{ToolCall, ToolChoice, ToolSpec};
