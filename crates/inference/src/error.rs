//! The crate's one error type and its coarse classification.
//!
//! Owns: `InferenceError` and `ErrorKind`, the mapping the daemon turns into JSON-RPC codes
//! (invalid params, not found, content refused, internal). Must not touch: the JSON-RPC
//! codes themselves, which live in `car-proto`.

use std::path::PathBuf;

use crate::gguf::GgufError;
use crate::keys::{KeySource, REDACTED};

/// What the daemon should answer for an error, independent of its wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller sent something unusable: a bad model id, a corrupt file, an empty input.
    InvalidParams,
    /// The named model is not registered, or its files vanished.
    NotFound,
    /// A provider's moderation layer declined the content (JSON-RPC `-32007`).
    ContentRefused,
    /// The caller is an agent and the entry is not its own (permission denied).
    NotOwner,
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
    /// An agent tried to replace or remove a model it did not register.
    #[error("model {id} was not registered by agent '{agent}'; an agent replaces or removes only its own models")]
    NotOwner {
        /// The model id.
        id: String,
        /// The calling agent.
        agent: String,
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
    /// The registration names a secret-store entry (`api_key_secret`) that cannot be read.
    #[error("api key missing: secret {secret} {reason}")]
    ApiSecretMissing {
        /// The secret's name (never its value).
        secret: String,
        /// Why: not in the store, or no store is configured.
        reason: &'static str,
    },
    /// A registry entry from before the `api_key_env` rule names a variable the rule
    /// refuses; the key is not sent (see `keys`).
    #[error(
        "api key env var {env_var} is refused: api_key_env must name a variable ending in \
         _API_KEY (^[A-Z][A-Z0-9_]*_API_KEY$); register the model again with such a \
         variable or with api_key_secret"
    )]
    ApiKeyEnvRefused {
        /// The variable named in the old registration.
        env_var: String,
    },
    /// The provider rejected the credentials (HTTP 401/403). Nothing of the provider's
    /// body is included.
    #[error("provider rejected {credentials} (http {status})")]
    Unauthorized {
        /// Where the key came from, by name (never the key itself).
        credentials: KeySource,
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
            Self::NotOwner { .. } => ErrorKind::NotOwner,
            Self::WeightsChanged { .. }
            | Self::Engine(_)
            | Self::ApiKeyMissing { .. }
            | Self::ApiSecretMissing { .. }
            | Self::ApiKeyEnvRefused { .. }
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

    /// The same error with every occurrence of `secret` in its text replaced by
    /// `[redacted]`: applied to every error a remote call returns, with its API key, so a
    /// provider echoing the key (in a message, a tool name, a refusal) cannot leak it.
    #[cfg_attr(not(feature = "engines"), allow(dead_code))]
    pub(crate) fn redact(self, secret: &str) -> Self {
        if secret.is_empty() {
            return self;
        }
        let r = |s: String| {
            if s.contains(secret) {
                s.replace(secret, REDACTED)
            } else {
                s
            }
        };
        match self {
            Self::InvalidRequest { field, reason } => Self::InvalidRequest {
                field,
                reason: r(reason),
            },
            Self::ModelNotFound { id } => Self::ModelNotFound { id: r(id) },
            Self::InvalidModelId { id, reason } => Self::InvalidModelId { id: r(id), reason },
            Self::InvalidEmbeddingModel { path, reason } => Self::InvalidEmbeddingModel {
                path,
                reason: r(reason),
            },
            Self::WrongModelKind {
                id,
                kind,
                operation,
            } => Self::WrongModelKind {
                id: r(id),
                kind,
                operation,
            },
            Self::Engine(m) => Self::Engine(r(m)),
            Self::ContentRefused { reason } => Self::ContentRefused { reason: r(reason) },
            Self::ProviderStatus { status, message } => Self::ProviderStatus {
                status,
                message: r(message),
            },
            Self::Provider(m) => Self::Provider(r(m)),
            Self::CorruptRegistry { path, reason } => Self::CorruptRegistry {
                path,
                reason: r(reason),
            },
            // Names and paths from the registry, not provider text.
            other @ (Self::WeightsMissing { .. }
            | Self::NotOwner { .. }
            | Self::WeightsChanged { .. }
            | Self::InvalidGguf { .. }
            | Self::ApiKeyMissing { .. }
            | Self::ApiSecretMissing { .. }
            | Self::ApiKeyEnvRefused { .. }
            | Self::Unauthorized { .. }
            | Self::Io { .. }) => other,
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

/// The JSON-RPC form of an engine error: bad input and unknown models are `-32602`, refused
/// content `-32007`, another owner's model `-32603` with `data.reason: "not_owner"`, and
/// everything else `-32603` (logged: it is the daemon's fault, not the caller's).
impl From<InferenceError> for car_proto::errors::RpcError {
    fn from(e: InferenceError) -> Self {
        use car_proto::errors::{RpcError, CONTENT_REFUSED};
        match e.kind() {
            ErrorKind::InvalidParams | ErrorKind::NotFound => RpcError::invalid_params(e),
            ErrorKind::ContentRefused => {
                RpcError::new(CONTENT_REFUSED, format!("content refused: {e}"))
            }
            ErrorKind::NotOwner => RpcError::internal(format!("permission denied: {e}"))
                .with_data(serde_json::json!({"reason": "not_owner"})),
            ErrorKind::Internal => {
                tracing::error!(error = %e, "inference failure");
                RpcError::internal(format!("inference: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_replaces_the_secret_in_every_text_field() {
        let s = "sk-42";
        let errors = [
            InferenceError::invalid("tools", format!("bad {s}")),
            InferenceError::ModelNotFound { id: s.into() },
            InferenceError::Engine(format!("{s} {s}")),
            InferenceError::ContentRefused { reason: s.into() },
            InferenceError::ProviderStatus {
                status: 400,
                message: s.into(),
            },
            InferenceError::Provider(format!("x{s}y")),
        ];
        for e in errors {
            let e = e.redact(s);
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(s) && shown.contains(REDACTED), "{shown}");
        }
        let e = InferenceError::Provider("keep".into()).redact("");
        assert_eq!(e.to_string(), "provider error: keep");
    }
}
