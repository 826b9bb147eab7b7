//! The approval gate (reference "High-risk method approval gate"; the gated set is ours:
//! docs/protocol-choices.md, "Approvals").
//!
//! A call of a gated method, or a gated built-in tool inside a proposal, creates a system
//! approval (`client_id: null`, `action: "ws.method:<method>"` or `"tool:<name>"`, the
//! params preview in `details`), which publishes `approval.requested` on the host stream,
//! and parks until a host session resolves it with `host.resolve_approval` (only the host
//! token, and never a connection with the parked call's credential: `crate::state::host_state`)
//! or the gate's timeout passes. A host session's own gated call is not parked: no one
//! could approve it, and the host is the approver (so a gated method declared host-only,
//! such as `agents.upsert`, is never held). Approve → the call runs. Deny or timeout → `-32003`
//! with `data.reason` `approval_denied` / `approval_timeout` and the approval id; the
//! connection stays open and the approval row stays (pending after a timeout) for
//! forensics. A call whose connection goes away while parked is dropped and its waiter
//! forgotten.
//!
//! The preview is the params' JSON cut to [`PREVIEW_BYTES`], with the values of fields
//! whose names look secret (`env`, `*token*`, `*key*`, `*secret*`, `*password*`) replaced
//! by `"[redacted]"`: approvals are broadcast to every host subscriber.
//!
//! Because a cut preview can hide what matters (150 padding `args` once pushed the
//! `program` past the cut), `details.decisive` always carries, whatever the params' size,
//! the fields that decide what runs: `program`, `command`, `cwd` (each cut to
//! [`DECISIVE_TEXT_BYTES`]), the first [`DECISIVE_ARGS`] `args`, how many `args` there are,
//! and the *names* of `env` (never the values: a host sees `LD_PRELOAD` is set). They are
//! taken from the params' top level and from any object one level down (an `agents.upsert`
//! spec, a tool call's `parameters`).

use std::time::Duration;

use car_proto::errors::{RpcError, APPROVAL_DENIED};
use serde_json::{json, Value};

use crate::state::host_state::{ApprovalRequest, HostState};
use crate::state::session::Session;
use crate::state::ServerState;

/// Longest params preview (bytes of JSON).
pub const PREVIEW_BYTES: usize = 1024;
/// Longest `program` / `command` / `cwd` / arg shown in `details.decisive`.
pub const DECISIVE_TEXT_BYTES: usize = 512;
/// Leading `args` shown in `details.decisive`.
pub const DECISIVE_ARGS: usize = 16;
/// Most `env` names shown in `details.decisive`.
pub const DECISIVE_ENV_NAMES: usize = 64;

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn shown(value: &Value) -> Value {
    match value {
        Value::String(s) => json!(cut(s, DECISIVE_TEXT_BYTES)),
        other => json!(cut(&other.to_string(), DECISIVE_TEXT_BYTES)),
    }
}

/// The fields that decide what a gated call runs (see the module docs).
fn decisive(params: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let mut scopes = vec![params];
    if let Value::Object(map) = params {
        scopes.extend(map.values().filter(|v| v.is_object()));
    }
    for scope in scopes {
        let Value::Object(map) = scope else { continue };
        for key in ["program", "command", "cwd"] {
            if let Some(v) = map.get(key) {
                out.entry(key).or_insert_with(|| shown(v));
            }
        }
        if let Some(args) = map.get("args") {
            if !out.contains_key("args") {
                let items = args.as_array().map(Vec::as_slice).unwrap_or_default();
                out.insert(
                    "args".into(),
                    items.iter().take(DECISIVE_ARGS).map(shown).collect(),
                );
                out.insert("args_count".into(), json!(items.len()));
            }
        }
        if let Some(Value::Object(env)) = map.get("env") {
            if !out.contains_key("env_names") {
                let names: Vec<Value> = env
                    .keys()
                    .take(DECISIVE_ENV_NAMES)
                    .map(|k| json!(cut(k, DECISIVE_TEXT_BYTES)))
                    .collect();
                out.insert("env_names".into(), Value::Array(names));
                out.insert("env_count".into(), json!(env.len()));
            }
        }
    }
    Value::Object(out)
}

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
    json!(cut(&text, PREVIEW_BYTES))
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
    if !state.daemon.config.approvals.holds(name) {
        return Ok(());
    }
    let parked = session.principal();
    if parked.is_host {
        // Only a host session with another credential may approve (`crate::state::host_state`),
        // so a host's call would wait for no one: the host's own call is its approval.
        tracing::debug!(session = session.id, %name, "a host session's gated call runs without an approval");
        return Ok(());
    }
    let identity = session.identity();
    let (approval, decision) = state.agents.host.request_approval(ApprovalRequest {
        agent_id: identity.agent_id.clone(),
        action: action.clone(),
        description: Some(format!(
            "{} wants to run {name}",
            identity.agent_id.clone().unwrap_or_else(|| session.label())
        )),
        details: json!({
            "method": name,
            "decisive": decisive(params),
            "params": preview(params),
            "session_id": session.label(),
        }),
        required_approvals: 1,
        client_id: None,
        parked: Some(parked),
    });
    let _waiting = Waiting {
        host: &state.agents.host,
        id: approval.id.clone(),
    };
    tracing::info!(session = session.id, %name, approval = %approval.id, "waiting for a host's approval");
    let timeout: Duration = state.daemon.config.approvals.timeout;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisive_fields_survive_padding_and_show_env_names_only() {
        let padding: Vec<Value> = (0..150).map(|i| json!(format!("pad-{i:04}"))).collect();
        let params = json!({"spec": {"id": "x", "args": padding, "command": "/tmp/evil",
                                     "env": {"LD_PRELOAD": "/tmp/evil.so"}, "cwd": "/tmp"}});
        let cut_preview = preview(&params);
        let cut_preview = cut_preview.as_str().unwrap();
        assert!(cut_preview.len() <= PREVIEW_BYTES + 3, "{cut_preview}");
        assert!(
            !cut_preview.contains("/tmp/evil"),
            "the padding hides it here"
        );
        let d = decisive(&params);
        assert_eq!(d["command"], "/tmp/evil");
        assert_eq!(d["cwd"], "/tmp");
        assert_eq!(d["args_count"], 150);
        assert_eq!(d["args"].as_array().unwrap().len(), DECISIVE_ARGS);
        assert_eq!(d["env_names"], json!(["LD_PRELOAD"]));
        assert!(!d.to_string().contains("evil.so"));
        let long = "x".repeat(10_000);
        let d = decisive(&json!({"program": long}));
        assert!(d["program"].as_str().unwrap().len() <= DECISIVE_TEXT_BYTES + 3);
    }
}
