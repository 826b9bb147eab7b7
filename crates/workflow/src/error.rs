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

/// The JSON-RPC form: a malformed request or an unresumable run is `-32602` (the message
/// starts with the JSON path), a store failure `-32603`.
impl From<WorkflowError> for car_proto::errors::RpcError {
    fn from(e: WorkflowError) -> Self {
        use car_proto::errors::RpcError;
        match e {
            WorkflowError::Invalid { .. } | WorkflowError::NotResumable { .. } => {
                RpcError::invalid_params(e.to_string())
            }
            WorkflowError::Store(_) => RpcError::internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod rpc_tests {
    use super::*;

    #[test]
    fn invalid_requests_are_invalid_params_and_store_failures_internal() {
        let e = car_proto::errors::RpcError::from(WorkflowError::invalid("stages[0]", "bad"));
        assert_eq!(e.code, car_proto::errors::INVALID_PARAMS);
        assert!(e.message.contains("stages[0]: bad"), "{}", e.message);
        let e = car_proto::errors::RpcError::from(WorkflowError::Store("disk".into()));
        assert_eq!(e.code, car_proto::errors::INTERNAL_ERROR);
    }
}
