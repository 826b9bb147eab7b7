//! [`SecretError`]: every way a secret-store operation can fail, with a stable
//! machine-readable [`SecretError::reason`] and, for bad input, the [`SecretError::field`]
//! it concerns.
//!
//! No variant holds a secret value, or anything derived from one other than its length:
//! `Display`, `Debug` and the `source()` chain are safe to log and to send to a client.
//! File contents never reach an error either — a corrupt file is described by its path
//! and the kind of damage, not by its bytes.

use std::io;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = SecretError> = std::result::Result<T, E>;

/// Why a secret-store operation failed. Never contains a secret value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// A parameter is malformed: empty, too long, holding a control character, or (for
    /// `value`) over the size cap. `field` is the parameter's name (`service`, `key`,
    /// `value` or `name`); `problem` says what is wrong with it and never quotes a value.
    #[error("invalid {field}: {problem}")]
    InvalidField {
        field: &'static str,
        problem: String,
    },

    /// The slot belongs to the daemon (Parslee sign-in state, the OpenRouter OAuth key);
    /// the generic `secret.put` / `get` / `delete` surface may not touch it.
    #[error(
        "{service}/{key} is a daemon-private secret slot: the generic secret methods \
         cannot read, replace or delete it"
    )]
    ReservedPrivateSecret { service: String, key: String },

    /// No secret is stored under this (canonical) service and key.
    #[error("no secret named {key:?} in service {service:?}")]
    NotFound { service: String, key: String },

    /// The store directory cannot be used: it is a symbolic link, not a directory, owned
    /// by another user, or could not be created or tightened.
    #[error("secret store {path} is unavailable: {problem}")]
    StoreUnavailable { path: PathBuf, problem: String },

    /// A secret's file exists but is not safe to trust: a symbolic link, not a regular
    /// file, owned by another user, or accessible to group or others.
    #[error("refusing secret file {path}: {problem}")]
    InsecureFile { path: PathBuf, problem: String },

    /// A secret's file is safe but its contents cannot be a value this store wrote (not
    /// UTF-8, or over the size cap). The contents are not quoted.
    #[error("secret file {path} is corrupt: {problem}")]
    Corrupt { path: PathBuf, problem: String },

    /// An operating-system call failed. `op` names the step (`write`, `rename`, ...).
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl SecretError {
    /// Every value [`SecretError::reason`] can return.
    pub const REASONS: &'static [&'static str] = &[
        "invalid_field",
        "reserved_private_secret",
        "not_found",
        "store_unavailable",
        "insecure_file",
        "corrupt",
        "io",
    ];

    /// A stable, machine-readable name for the kind of failure, for JSON-RPC error data
    /// and for mapping to error codes: `invalid_field`, `reserved_private_secret`,
    /// `not_found`, `store_unavailable`, `insecure_file`, `corrupt` or `io`.
    pub fn reason(&self) -> &'static str {
        match self {
            SecretError::InvalidField { .. } => "invalid_field",
            SecretError::ReservedPrivateSecret { .. } => "reserved_private_secret",
            SecretError::NotFound { .. } => "not_found",
            SecretError::StoreUnavailable { .. } => "store_unavailable",
            SecretError::InsecureFile { .. } => "insecure_file",
            SecretError::Corrupt { .. } => "corrupt",
            SecretError::Io { .. } => "io",
        }
    }

    /// The request field the error is about, when there is one: the invalid field for
    /// [`SecretError::InvalidField`], `key` for [`SecretError::ReservedPrivateSecret`].
    pub fn field(&self) -> Option<&'static str> {
        match self {
            SecretError::InvalidField { field, .. } => Some(field),
            SecretError::ReservedPrivateSecret { .. } => Some("key"),
            _ => None,
        }
    }

    /// True when the caller's input is at fault (map to JSON-RPC `-32602`): an invalid
    /// field. A reserved slot is a refusal rather than malformed input; the daemon picks
    /// its code.
    pub fn is_invalid_params(&self) -> bool {
        matches!(self, SecretError::InvalidField { .. })
    }

    pub(crate) fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        SecretError::InvalidField {
            field,
            problem: problem.into(),
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        SecretError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn unavailable(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        SecretError::StoreUnavailable {
            path: path.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn insecure(path: impl Into<PathBuf>, problem: impl Into<String>) -> Self {
        SecretError::InsecureFile {
            path: path.into(),
            problem: problem.into(),
        }
    }
}

/// The JSON-RPC form of a store error: malformed fields, a missing secret and a reserved
/// slot are `-32602`, store problems `-32603`; the message names the field and
/// `data.reason` is [`SecretError::reason`]. No value is ever in either.
impl From<SecretError> for car_proto::errors::RpcError {
    fn from(e: SecretError) -> Self {
        use car_proto::errors::RpcError;
        let reason = e.reason();
        let invalid = e.is_invalid_params()
            || matches!(
                e,
                SecretError::NotFound { .. } | SecretError::ReservedPrivateSecret { .. }
            );
        let message = match e.field() {
            Some(field) => format!("{field}: {e}"),
            None if matches!(e, SecretError::NotFound { .. }) => format!("key: {e}"),
            None => e.to_string(),
        };
        let error = if invalid {
            RpcError::invalid_params(message)
        } else {
            RpcError::internal(message)
        };
        error.with_data(serde_json::json!({"reason": reason}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_fields_are_stable() {
        let cases: Vec<(SecretError, &str, Option<&str>)> = vec![
            (
                SecretError::invalid("value", "too big"),
                "invalid_field",
                Some("value"),
            ),
            (
                SecretError::ReservedPrivateSecret {
                    service: "car".into(),
                    key: "PARSLEE_ACCOUNTS".into(),
                },
                "reserved_private_secret",
                Some("key"),
            ),
            (
                SecretError::NotFound {
                    service: "car".into(),
                    key: "K".into(),
                },
                "not_found",
                None,
            ),
            (
                SecretError::unavailable("/x", "is a symbolic link"),
                "store_unavailable",
                None,
            ),
            (SecretError::insecure("/x/f", "mode"), "insecure_file", None),
            (
                SecretError::Corrupt {
                    path: "/x/f".into(),
                    problem: "not UTF-8".into(),
                },
                "corrupt",
                None,
            ),
            (
                SecretError::io("rename", "/x/f", io::Error::other("boom")),
                "io",
                None,
            ),
        ];
        let mut seen: Vec<&str> = Vec::new();
        for (err, reason, field) in &cases {
            assert_eq!(err.reason(), *reason, "{err}");
            assert_eq!(err.field(), *field, "{err}");
            assert_eq!(err.is_invalid_params(), *reason == "invalid_field");
            seen.push(err.reason());
        }
        assert_eq!(
            seen,
            SecretError::REASONS,
            "REASONS lists every variant in order"
        );
        assert_eq!(
            cases[0].0.to_string(),
            "invalid value: too big",
            "the message names the field"
        );
    }
}
