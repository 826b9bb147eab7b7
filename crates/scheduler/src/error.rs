//! The crate's one error type and the params decoder that gives serde errors a field path.
//!
//! Every validation failure is [`SchedulerError::Invalid`] with `field` set to the JSON path
//! of the offending value in the request, dotted for nesting and indexed for arrays:
//! `trigger`, `schedule`, `cadence`, `cadence.cron`, `cadence.interval_secs`, `program`,
//! `args[2]`, `env`, `working_dir`, `id`, `max_iterations`. The daemon can map it straight
//! to a JSON-RPC "invalid params" error carrying `field`.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// What can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    /// A request value is unacceptable; `field` is its JSON path (see the module docs).
    #[error("invalid `{field}`: {message}")]
    Invalid {
        /// JSON path of the offending value, e.g. `cadence.interval_secs`.
        field: String,
        /// Why it was refused, for a person.
        message: String,
    },
    /// File-system or process I/O failed; `context` names the operation and path.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, with the path involved.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A stored task file exists but cannot be decoded.
    #[error("corrupt task file {}: {message}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The decoder's complaint.
        message: String,
    },
}

impl SchedulerError {
    /// An [`SchedulerError::Invalid`] for `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The JSON field path of a validation error, `None` for other errors.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            context: format!("{} {}", context.into(), path.display()),
            source,
        }
    }
}

/// Decodes JSON-RPC params (or a posted task) into `T`, turning a serde failure into
/// [`SchedulerError::Invalid`] whose `field` is the path of the bad value (a missing field
/// is reported at its own path, e.g. `name`; a failure at the root has field `params`).
pub fn decode<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, SchedulerError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let message = err.inner().to_string();
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split('`').next())
            .map(str::to_owned);
        let field = match (path.as_str(), missing) {
            (".", Some(name)) => name,
            (".", None) => "params".to_owned(),
            (parent, Some(name)) => format!("{parent}.{name}"),
            (parent, None) => parent.to_owned(),
        };
        SchedulerError::Invalid { field, message }
    })
}

impl SchedulerError {
    /// The same error with its field path under `prefix` (`task` + `cadence.cron` →
    /// `task.cadence.cron`), for a value the caller sent nested in a larger request.
    pub fn within(self, prefix: &str) -> Self {
        match self {
            Self::Invalid { field, message } => Self::Invalid {
                field: format!("{prefix}.{field}"),
                message,
            },
            other => other,
        }
    }
}

/// The JSON-RPC form: a validation error is `-32602` as `field: message`, anything else
/// `-32603`.
impl From<SchedulerError> for car_proto::errors::RpcError {
    fn from(e: SchedulerError) -> Self {
        use car_proto::errors::RpcError;
        match e {
            SchedulerError::Invalid { field, message } => {
                RpcError::invalid_params(format!("{field}: {message}"))
            }
            other => RpcError::internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod rpc_tests {
    use super::*;

    #[test]
    fn validation_errors_name_their_nested_field() {
        let e: car_proto::errors::RpcError = SchedulerError::invalid("cadence.cron", "bad")
            .within("task")
            .into();
        assert_eq!(e.code, car_proto::errors::INVALID_PARAMS);
        assert!(
            e.message.ends_with("task.cadence.cron: bad"),
            "{}",
            e.message
        );
    }
}
