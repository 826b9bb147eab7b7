//! The one error type every built-in tool returns.
//!
//! Three kinds, so the daemon can map them without parsing text:
//!
//! - [`ToolError::InvalidParams`]: the call itself is malformed — a required field is missing, a
//!   field has the wrong JSON type, or a value cannot be used (an empty path, a regex that does not
//!   compile, an expression that does not parse). `field` names the offending parameter (`path`,
//!   `max_results`, `pattern`, …). The daemon answers these with JSON-RPC `-32602`.
//! - [`ToolError::Refused`]: the call is well formed but policy forbids it — the path leaves the
//!   workspace, a symlink points out of it, or the read-before-edit guard is not met. `reason` is a
//!   stable machine-readable code ([`RefusalReason`]).
//! - [`ToolError::Failed`]: the operation was allowed and attempted but did not succeed (file not
//!   found, not UTF-8, I/O error, division by zero, `old_text` not found, …).
//!
//! [`ToolError::UnknownTool`] is returned by [`crate::Workspace::execute`] for a name that is
//! not built in (see [`crate::is_builtin`]).
//!
//! Messages are written for a model to act on and name paths relative to the workspace root;
//! they never contain the absolute root path.

use serde_json::{json, Value};

/// Why a call was refused by policy. [`RefusalReason::as_str`] gives the stable wire code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// The path names something outside the workspace root (`..`, or an absolute path
    /// elsewhere).
    PathEscape,
    /// A symlink on the path resolves outside the workspace root.
    SymlinkEscape,
    /// The path is a symlink whose target does not exist (writing through it is refused).
    DanglingSymlink,
    /// Modifying an existing file that this session has not read.
    NotRead,
    /// Only part of the file was read, but the operation needs every line read
    /// (overwrite, append, `replace_all`).
    PartialRead,
    /// The file changed on disk since this session read it.
    Stale,
}

impl RefusalReason {
    /// The stable snake_case code sent on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::PathEscape => "path_escape",
            RefusalReason::SymlinkEscape => "symlink_escape",
            RefusalReason::DanglingSymlink => "dangling_symlink",
            RefusalReason::NotRead => "not_read",
            RefusalReason::PartialRead => "partial_read",
            RefusalReason::Stale => "stale",
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of a built-in tool call. See the module docs for the meaning of each kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// A parameter is missing, mistyped or unusable; `field` names it.
    #[error("invalid params: `{field}` {message}")]
    InvalidParams {
        /// The parameter's name (a path such as `path` or `max_results`).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A policy refusal; `reason` is the stable code.
    #[error("refused ({reason}): {message}")]
    Refused {
        /// The machine-readable reason.
        reason: RefusalReason,
        /// A model-oriented explanation.
        message: String,
    },
    /// The operation was attempted and failed.
    #[error("{message}")]
    Failed {
        /// A model-oriented explanation.
        message: String,
    },
    /// The tool name is not a built-in tool.
    #[error("unknown built-in tool `{name}`")]
    UnknownTool {
        /// The name that was asked for.
        name: String,
    },
}

impl ToolError {
    /// Shorthand for [`ToolError::InvalidParams`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError::InvalidParams {
            field: field.into(),
            message: message.into(),
        }
    }

    /// Shorthand for [`ToolError::Refused`].
    pub fn refused(reason: RefusalReason, message: impl Into<String>) -> Self {
        ToolError::Refused {
            reason,
            message: message.into(),
        }
    }

    /// Shorthand for [`ToolError::Failed`].
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed {
            message: message.into(),
        }
    }

    /// An I/O failure on `rel` (a workspace-relative display path). `io::Error`'s own text
    /// never carries the path, so nothing absolute leaks.
    pub(crate) fn io(action: &str, rel: &str, err: &std::io::Error) -> Self {
        let what = match err.kind() {
            std::io::ErrorKind::NotFound => "not found".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => err.to_string(),
        };
        ToolError::failed(format!("cannot {action} `{rel}`: {what}"))
    }

    /// The kind as a stable code: `invalid_params`, `refused`, `failed` or `unknown_tool`.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidParams { .. } => "invalid_params",
            ToolError::Refused { .. } => "refused",
            ToolError::Failed { .. } => "failed",
            ToolError::UnknownTool { .. } => "unknown_tool",
        }
    }

    /// The refusal reason, if this is a refusal.
    pub fn reason(&self) -> Option<RefusalReason> {
        match self {
            ToolError::Refused { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// A JSON rendering for error `data`: `{kind, message, field?, reason?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "kind": self.kind(), "message": self.to_string() });
        match self {
            ToolError::InvalidParams { field, .. } => v["field"] = json!(field),
            ToolError::Refused { reason, .. } => v["reason"] = json!(reason.as_str()),
            _ => {}
        }
        v
    }
}
