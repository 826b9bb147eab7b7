//! Handshake capability names (docs/protocol-choices.md, "Handshake").
//!
//! A capability is an opt-in wire feature negotiated per connection by
//! `server.handshake`. Methods gated by a capability name it in the method table.

/// Immutable model identity in inference results. Required by bundled v3 clients.
pub const INFER_MODEL_IDENTITY_V1: &str = "infer.model-identity.v1";
/// Immutable catalog identity in model listings. Required by bundled v3 clients.
pub const MODELS_CATALOG_IDENTITY_V1: &str = "models.catalog-identity.v1";
/// Gates `infer.cancel`.
pub const INFER_CANCEL_V1: &str = "infer.cancel.v1";
/// Gates `infer.deadline`.
pub const INFER_DEADLINE_V1: &str = "infer.deadline.v1";
/// Gates `runs.cancel`.
pub const RUNS_CANCEL_V1: &str = "runs.cancel.v1";
/// Gates `runs.resume`; a producer that negotiated it gets a resume lease when its
/// connection drops instead of its runs being marked incomplete at once.
pub const RUNS_RESUME_V1: &str = "runs.resume.v1";
/// The per-tool `agent_permissions.*` surface (`set_tool`, `reset_tool`, `evaluate_tool`,
/// grants). CAR's client requires it in the handshake before calling those; this daemon
/// serves them to every session, so it gates nothing.
pub const PERMISSIONS_AGENT_TOOL_OVERRIDES_V1: &str = "permissions.agent-tool-overrides.v1";
/// Gates `feedback.*`; not supported by this daemon in v1.
pub const FEEDBACK_V1: &str = "feedback.v1";

/// Every capability this daemon can negotiate, sorted.
pub const SUPPORTED: &[&str] = &[
    INFER_CANCEL_V1,
    INFER_DEADLINE_V1,
    INFER_MODEL_IDENTITY_V1,
    MODELS_CATALOG_IDENTITY_V1,
    PERMISSIONS_AGENT_TOOL_OVERRIDES_V1,
    RUNS_CANCEL_V1,
    RUNS_RESUME_V1,
];

/// What the bundled client requires; it fails closed when a reply omits either.
pub const CLIENT_REQUIRED: &[&str] = &[INFER_MODEL_IDENTITY_V1, MODELS_CATALOG_IDENTITY_V1];

/// What the bundled client requests when the daemon has it.
pub const CLIENT_OPTIONAL: &[&str] = &[INFER_CANCEL_V1, INFER_DEADLINE_V1];

/// True when the daemon can negotiate `name`.
pub fn is_supported(name: &str) -> bool {
    SUPPORTED.binary_search(&name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_is_sorted_and_covers_the_client_sets() {
        let mut sorted = SUPPORTED.to_vec();
        sorted.sort();
        assert_eq!(sorted, SUPPORTED);
        for c in CLIENT_REQUIRED.iter().chain(CLIENT_OPTIONAL) {
            assert!(is_supported(c), "{c}");
        }
        assert!(!is_supported(FEEDBACK_V1));
    }
}
