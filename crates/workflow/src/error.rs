//! Engine errors. A run that executes and fails is not an error (it is a
//! [`WorkflowResult`](crate::WorkflowResult) with status `failed`); these are the requests
//! the engine refuses or cannot carry out.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WorkflowError {
    /// A manifest, workflow or resume input that is malformed. `path` is the JSON path of
    /// the problem (`stages[0].step`, `workflows[1]`, `input.approve`).
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// `resume` of a run that has no checkpoint, or whose checkpoint another resume holds.
    #[error("no resumable run '{run_id}' (unknown, or already being resumed)")]
    NotResumable { run_id: String },
    /// The checkpoint or dedup store could not be read or written.
    #[error("workflow store: {0}")]
    Store(String),
}

impl WorkflowError {
    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        WorkflowError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}
