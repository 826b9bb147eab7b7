//! The crate's error taxonomy.
//!
//! Owns the typed errors every public operation returns and the split the daemon needs:
//! [`MemoryError::is_invalid_params`] says which errors are the caller's fault (`-32602`)
//! and which are the daemon's (`-32603`). It must not know about JSON-RPC codes themselves;
//! that mapping belongs to the daemon.

use std::fmt;
use std::path::PathBuf;

/// A caller-supplied value broke a rule. `Display` names the field first, lower-case and
/// without a trailing period (`subject must not be empty`), so the daemon can forward it
/// as `invalid params: …` unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    field: &'static str,
    problem: String,
}

impl ValidationError {
    /// Builds an error for `field`; `problem` completes the sentence (`must not be empty`).
    pub fn new(field: &'static str, problem: impl Into<String>) -> Self {
        Self {
            field,
            problem: problem.into(),
        }
    }

    /// The offending field's wire name (`subject`, `k`, `tags[2]` is reported as `tags`).
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for ValidationError {}

/// A caller path for `memory.persist` / `memory.load` that is refused because it could
/// reach outside the memory directory or onto a file the store manages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path: {path:?} {reason}")]
pub struct ConfineError {
    /// The path exactly as the caller sent it.
    pub path: String,
    /// Why it was refused, completing the sentence (`must not contain '..'`).
    pub reason: String,
}

/// Every error the memory engine returns.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A parameter broke a validation rule (caller's fault).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// A persist/load path was refused (caller's fault).
    #[error(transparent)]
    Path(#[from] ConfineError),
    /// The named skill does not exist; `field` is the parameter that named it
    /// (`name` for `skill.report`, `supersedes` for `skill.ingest`).
    #[error("{field}: names an unknown skill {name:?}")]
    SkillNotFound {
        /// The parameter that named the skill.
        field: &'static str,
        /// The skill name as sent.
        name: String,
    },
    /// A caller-named file for `memory.persist` / `memory.load` could not be written or
    /// read, or is not a valid snapshot (caller's fault: the path is theirs to choose).
    #[error("path: cannot {op} {path:?}: {reason}")]
    CallerFile {
        /// `persist to` or `load from`.
        op: &'static str,
        /// The caller's path as sent.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// `model_context_window` is too small to hold every constraint, which `build_context`
    /// must always include (caller's fault: ask with a larger window).
    #[error(
        "model_context_window: {window} is too small for the {needed} tokens every constraint needs"
    )]
    WindowTooSmall {
        /// The window the caller sent.
        window: usize,
        /// Estimated tokens of the constraint layer alone.
        needed: usize,
    },
    /// Reading or writing a snapshot failed (daemon's fault).
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`write snapshot`, `read snapshot`, …).
        op: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A background task died (daemon's fault; only on panic or runtime shutdown).
    #[error("memory task failed: {0}")]
    Task(String),
}

impl MemoryError {
    /// True when the error is the caller's fault and maps to `-32602 invalid params`;
    /// false for internal failures (`-32603`).
    pub fn is_invalid_params(&self) -> bool {
        !matches!(self, MemoryError::Io { .. } | MemoryError::Task(_))
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        MemoryError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// The JSON-RPC form of an engine error: a validation error is `-32602` naming its field,
/// anything else `-32603` (logged).
impl From<MemoryError> for car_proto::errors::RpcError {
    fn from(e: MemoryError) -> Self {
        use car_proto::errors::RpcError;
        if e.is_invalid_params() {
            RpcError::invalid_params(e)
        } else {
            tracing::error!(error = %e, "memory engine failure");
            RpcError::internal(format!("memory: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_and_have_no_trailing_period() {
        let cases: Vec<MemoryError> = vec![
            ValidationError::new("subject", "must not be empty").into(),
            MemoryError::SkillNotFound {
                field: "supersedes",
                name: "old".into(),
            },
            ConfineError {
                path: "../x".into(),
                reason: "must not contain '..'".into(),
            }
            .into(),
            MemoryError::WindowTooSmall {
                window: 100,
                needed: 300,
            },
        ];
        let texts: Vec<String> = cases.iter().map(ToString::to_string).collect();
        assert_eq!(texts[0], "subject: must not be empty");
        assert_eq!(texts[1], "supersedes: names an unknown skill \"old\"");
        assert_eq!(texts[2], "path: \"../x\" must not contain '..'");
        for (error, text) in cases.iter().zip(&texts) {
            assert!(error.is_invalid_params(), "{text}");
            assert!(!text.ends_with('.'), "{text}");
            assert!(text.chars().next().is_some_and(|c| !c.is_uppercase()));
        }
        let io = MemoryError::io("write snapshot", "/x", std::io::ErrorKind::Other.into());
        assert!(!io.is_invalid_params());
    }
}
