//! The crate's one error type and its coarse classification.
//!
//! Owns: `InferenceError` and `ErrorKind`, the mapping the daemon turns into JSON-RPC codes
//! (invalid params, not found, content refused, internal). Must not touch: the JSON-RPC
//! codes themselves, which live in `car-proto`.

use std::path::PathBuf;

use crate::gguf::GgufError;

/// What the daemon should answer for an error, independent of its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller sent something unusable: a bad model id, a corrupt file, an empty input.
    InvalidParams,
    /// The named model is not registered, or its files vanished.
    NotFound,
    /// A provider's moderation layer declined the content (JSON-RPC `-32007`).
    ContentRefused,
    /// The engine or the provider failed for reasons the caller cannot fix by rewording.
    Internal,
}

/// Every failure the inference crate reports. Messages are lower-case, name the offending
/// field or value and never contain an API key.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// A request field is missing, malformed or out of range.
    #[error("invalid {field}: {reason}")]
    InvalidRequest {
        /// The request field at fault, e.g. `max_tokens`.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// No model with this id is registered.
    #[error("model not found: {id}")]
    ModelNotFound {
        /// The id the caller asked for.
        id: String,
    },
    /// A model id that is not acceptable as a registry key.
    #[error("invalid model id {id:?}: {reason}")]
    InvalidModelId {
        /// The rejected id.
        id: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A registered (or to-be-registered) weights file or directory does not exist.
    #[error("model file not found: {}", path.display())]
    WeightsMissing {
        /// The path that was expected to exist.
        path: PathBuf,
    },
    /// The weights changed on disk since registration, so the recorded identity would lie.
    #[error("model {id} weights changed since registration: {} was {expected} bytes, is {actual} bytes", path.display())]
    WeightsChanged {
        /// The model id.
        id: String,
        /// The weights file.
        path: PathBuf,
        /// Size recorded at registration.
        expected: u64,
        /// Size found now.
        actual: u64,
    },
    /// A GGUF file failed header validation before llama.cpp saw it.
    #[error("invalid gguf file {}: {source}", path.display())]
    InvalidGguf {
        /// The offending file.
        path: PathBuf,
        /// The precise defect.
        #[source]
        source: GgufError,
    },
    /// An embedding model directory is incomplete or its files are unreadable.
    #[error("invalid embedding model {}: {reason}", path.display())]
    InvalidEmbeddingModel {
        /// The model directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The model exists but cannot serve this kind of call (e.g. `embed` on a GGUF model).
    #[error("model {id} is of kind {kind} and cannot {operation}")]
    WrongModelKind {
        /// The model id.
        id: String,
        /// Its kind: `gguf`, `embedding` or `remote`.
        kind: &'static str,
        /// What the caller tried, e.g. `embed`.
        operation: &'static str,
    },
    /// llama.cpp or candle failed while loading or running a model.
    #[error("engine error: {0}")]
    Engine(String),
    /// The provider has no usable API key.
    #[error("api key missing: set env var {env_var} (or add it to CAR_HOME/env)")]
    ApiKeyMissing {
        /// The variable named in the registration.
        env_var: String,
    },
    /// The provider rejected the credentials (HTTP 401/403).
    #[error("provider rejected the api key from env var {env_var} (http {status})")]
    Unauthorized {
        /// The variable the key came from (never the key itself).
        env_var: String,
        /// 401 or 403.
        status: u16,
    },
    /// The provider declined the content; see `remote` for what is detected.
    #[error("content refused: {reason}")]
    ContentRefused {
        /// The provider's stated reason, or the finish reason that signalled it.
        reason: String,
    },
    /// The provider answered with an error status that is not retried, or retries ran out.
    #[error("provider error: http {status}: {message}")]
    ProviderStatus {
        /// The last HTTP status.
        status: u16,
        /// The provider's message (truncated), or a summary.
        message: String,
    },
    /// The provider could not be reached, or its answer could not be parsed.
    #[error("provider error: {0}")]
    Provider(String),
    /// Registry persistence or another file operation failed.
    #[error("io error on {}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The registry file exists but does not parse.
    #[error("corrupt model registry {}: {reason}", path.display())]
    CorruptRegistry {
        /// The registry file.
        path: PathBuf,
        /// The parse error.
        reason: String,
    },
}

impl InferenceError {
    /// How the daemon should classify this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidRequest { .. }
            | Self::InvalidModelId { .. }
            | Self::InvalidGguf { .. }
            | Self::InvalidEmbeddingModel { .. }
            | Self::WrongModelKind { .. } => ErrorKind::InvalidParams,
            Self::ModelNotFound { .. } | Self::WeightsMissing { .. } => ErrorKind::NotFound,
            Self::ContentRefused { .. } => ErrorKind::ContentRefused,
            Self::WeightsChanged { .. }
            | Self::Engine(_)
            | Self::ApiKeyMissing { .. }
            | Self::Unauthorized { .. }
            | Self::ProviderStatus { .. }
            | Self::Provider(_)
            | Self::Io { .. }
            | Self::CorruptRegistry { .. } => ErrorKind::Internal,
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidRequest {
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// The crate's result alias.
pub type Result<T, E = InferenceError> = std::result::Result<T, E>;
