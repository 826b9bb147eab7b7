//! The approval gate (reference "High-risk method approval gate"; the gated set is ours:
//! docs/protocol-choices.md, "Approvals").
//!
//! A call of a gated method, or a gated built-in tool inside a proposal, creates a system
//! approval (`client_id: null`, `action: "ws.method:<method>"` or `"tool:<name>"`, the
//! params preview in `details`), which publishes `approval.requested` on the host stream,
//! and parks until another session resolves it with `host.resolve_approval` (not the
//! parked session itself, nor one bound to an agent: `crate::host_state`) or the gate's
//! timeout passes. Approve → the call runs. Deny or timeout → `-32003` with
//! `data.reason` `approval_denied` / `approval_timeout` and the approval id; the
//! connection stays open and the approval row stays (pending after a timeout) for
//! forensics. A call whose connection goes away while parked is dropped and its waiter
//! forgotten.
//!
//! The preview is the params' JSON cut to [`PREVIEW_BYTES`], with the values of fields
//! whose names look secret (`env`, `*token*`, `*key*`, `*secret*`, `*password*`) replaced
//! by `"[redacted]"`: approvals are broadcast to every host subscriber.

use std::time::Duration;

use car_proto::errors::{RpcError, APPROVAL_DENIED};
use serde_json::{json, Value};

use crate::host_state::{ApprovalRequest, HostState};
use crate::session::Session;
use crate::state::ServerState;

/// Longest params preview (bytes of JSON).
pub const PREVIEW_BYTES: usize = 1024;

fn secret_looking(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "env"
        || ["token", "key", "secret", "password", "credential"]
            .iter()
            .any(|s| key.contains(s))
}

/// The params with secret-looking values replaced (see the module docs).
pub fn redact(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = if secret_looking(k) {
                        json!("[redacted]")
                    } else {
                        redact(v)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        other => other.clone(),
    }
}

fn preview(params: &Value) -> Value {
    let text = redact(params).to_string();
    if text.len() <= PREVIEW_BYTES {
        return serde_json::from_str(&text).unwrap_or(Value::Null);
    }
    let mut cut = PREVIEW_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    json!(format!("{}…", &text[..cut]))
}

/// Forgets the parked waiter however the wait ends.
struct Waiting<'a> {
    host: &'a HostState,
    id: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.host.abandon_waiter(&self.id);
    }
}

/// Parks until `action` is approved when `name` is gated (see the module docs).
pub async fn admit(
    state: &ServerState,
    session: &Session,
    name: &str,
    action: String,
    params: &Value,
) -> Result<(), RpcError> {
    if !state.config.approvals.holds(name) {
        return Ok(());
    }
    let identity = session.identity();
    let (approval, decision) = state.host.request_approval(ApprovalRequest {
        agent_id: identity.agent_id.clone(),
        action: action.clone(),
        description: Some(format!(
            "{} wants to run {name}",
            identity.agent_id.clone().unwrap_or_else(|| session.label())
        )),
        details: json!({
            "method": name,
            "params": preview(params),
            "session_id": session.label(),
        }),
        required_approvals: 1,
        client_id: None,
        parked_session: Some(session.label()),
    });
    let _waiting = Waiting {
        host: &state.host,
        id: approval.id.clone(),
    };
    tracing::info!(session = session.id, %name, approval = %approval.id, "waiting for a host's approval");
    let timeout: Duration = state.config.approvals.timeout;
    let refused = |reason: &str, what: String| {
        RpcError::new(APPROVAL_DENIED, what)
            .with_data(json!({"reason": reason, "approval_id": approval.id}))
    };
    match tokio::time::timeout(timeout, decision).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) | Ok(Err(_)) => Err(refused(
            "approval_denied",
            format!("approval denied: {action} was denied by the host"),
        )),
        Err(_) => Err(refused(
            "approval_timeout",
            format!(
                "approval denied: no host approved {action} within {}",
                humantime::format_duration(timeout)
            ),
        )),
    }
}
