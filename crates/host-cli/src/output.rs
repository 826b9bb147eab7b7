//! Everything car-host writes to stdout: the line writer and the human-readable formats.
//!
//! Rules: stdout carries data only (one line per agent, approval or event; with `--json`
//! one JSON object per line), each line flushed at once so a watcher behind a pipe
//! streams; diagnostics and errors go to stderr (`crate::session`). A closed stdout (the
//! reader of a pipe went away) surfaces as [`std::io::ErrorKind::BrokenPipe`], which the
//! caller treats as a normal end.
//!
//! Human formats (fields separated by two spaces, absent values as `-`):
//! - `agent  <id>  <status>  name=<name> kind=<kind> [project=…] [pid=…] [task="…"]`
//! - `registry-agent  <id>  <status>  name=<name> attached=yes|no [pid=…]`
//! - `approval  <id>  <status>  <action>  agent=<id|->  created=<time>  [<description>]`
//! - events: `<time>  <kind>  …`: for `approval.requested` the approval's id, action, agent and
//!   description; for `approval.resolved` its id, action, agent and new status; otherwise
//!   `agent=<id|->  <message>`.

use std::io::Write;

use car_proto::methods::agents::ManagedAgent;
use car_proto::methods::host::{HostAgent, HostApproval, HostEvent};
use serde_json::Value;

/// Writes whole lines to stdout, flushing each.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    pub json: bool,
}

impl Out {
    pub fn line(&self, text: &str) -> std::io::Result<()> {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.write_all(b"\n")?;
        stdout.flush()
    }

    /// One JSON object on one line.
    pub fn json(&self, value: &Value) -> std::io::Result<()> {
        self.line(&value.to_string())
    }
}

fn or_dash(value: Option<&str>) -> &str {
    value.filter(|v| !v.is_empty()).unwrap_or("-")
}

pub fn agent_line(a: &HostAgent) -> String {
    let mut line = format!(
        "agent  {}  {}  name={} kind={}",
        a.id,
        a.status.as_str(),
        a.name,
        a.kind
    );
    if let Some(project) = &a.project {
        line.push_str(&format!(" project={project}"));
    }
    if let Some(pid) = a.pid {
        line.push_str(&format!(" pid={pid}"));
    }
    if let Some(task) = &a.current_task {
        line.push_str(&format!(" task={task:?}"));
    }
    line
}

pub fn registry_line(a: &ManagedAgent) -> String {
    let mut line = format!(
        "registry-agent  {}  {}  name={} attached={}",
        a.spec.id.as_str(),
        a.status,
        a.spec.name.as_str(),
        if a.attached { "yes" } else { "no" }
    );
    if let Some(pid) = a.pid {
        line.push_str(&format!(" pid={pid}"));
    }
    line
}

fn status(a: &HostApproval) -> &'static str {
    use car_proto::methods::host::ApprovalStatus;
    match a.status {
        ApprovalStatus::Pending => "pending",
        ApprovalStatus::Approved => "approved",
        ApprovalStatus::Denied => "denied",
    }
}

pub fn approval_line(a: &HostApproval) -> String {
    let mut line = format!(
        "approval  {}  {}  {}  agent={}  created={}",
        a.id,
        status(a),
        a.action,
        or_dash(a.agent_id.as_deref()),
        a.created_at
    );
    if let Some(d) = a.description.as_deref().filter(|d| !d.is_empty()) {
        line.push_str("  ");
        line.push_str(d);
    }
    line
}

/// What `approve` / `deny` print for the resolved approval.
pub fn resolved_line(a: &HostApproval) -> String {
    format!("{} {}  {}", status(a), a.id, a.action)
}

pub fn event_line(e: &HostEvent) -> String {
    let approval = || serde_json::from_value::<HostApproval>(e.payload.clone()).ok();
    match e.kind.as_str() {
        "approval.requested" => {
            if let Some(a) = approval() {
                let mut line = format!(
                    "{}  approval.requested  {}  {}  agent={}",
                    e.timestamp,
                    a.id,
                    a.action,
                    or_dash(a.agent_id.as_deref())
                );
                if let Some(d) = a.description.as_deref().filter(|d| !d.is_empty()) {
                    line.push_str("  ");
                    line.push_str(d);
                }
                return line;
            }
        }
        "approval.resolved" => {
            if let Some(a) = approval() {
                return format!(
                    "{}  approval.resolved  {}  {}  agent={}  {}",
                    e.timestamp,
                    a.id,
                    a.action,
                    or_dash(a.agent_id.as_deref()),
                    status(&a)
                );
            }
        }
        _ => {}
    }
    format!(
        "{}  {}  agent={}  {}",
        e.timestamp,
        e.kind,
        or_dash(e.agent_id.as_deref()),
        or_dash(e.message.as_deref())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn approval(status: &str) -> Value {
        json!({
            "id": "approval-3", "agent_id": null, "action": "ws.method:agents.upsert",
            "description": "sess-2 wants to run agents.upsert", "details": {},
            "options": ["approve", "deny"], "status": status,
            "created_at": "2026-01-01T00:00:00Z", "required_approvals": 1, "client_id": null
        })
    }

    fn event(kind: &str, payload: Value) -> HostEvent {
        serde_json::from_value(json!({
            "id": "event-7", "sequence": 7, "seq": 7, "epoch": "e1",
            "timestamp": "2026-01-01T00:00:01Z", "kind": kind, "agent_id": null,
            "message": "ws.method:agents.upsert", "payload": payload
        }))
        .unwrap()
    }

    #[test]
    fn approval_events_name_the_id_and_action() {
        let line = event_line(&event("approval.requested", approval("pending")));
        assert_eq!(
            line,
            "2026-01-01T00:00:01Z  approval.requested  approval-3  ws.method:agents.upsert  agent=-  sess-2 wants to run agents.upsert"
        );
        let line = event_line(&event("approval.resolved", approval("denied")));
        assert_eq!(
            line,
            "2026-01-01T00:00:01Z  approval.resolved  approval-3  ws.method:agents.upsert  agent=-  denied"
        );
    }

    #[test]
    fn other_events_show_agent_and_message() {
        let mut e = event("agent.registered", json!({}));
        e.agent_id = Some("agent-1".into());
        e.message = Some("Claude registered".into());
        assert_eq!(
            event_line(&e),
            "2026-01-01T00:00:01Z  agent.registered  agent=agent-1  Claude registered"
        );
        // An approval event whose payload does not decode still prints.
        let e = event("approval.requested", json!({"odd": true}));
        assert!(event_line(&e).ends_with("agent=-  ws.method:agents.upsert"));
    }

    #[test]
    fn list_lines() {
        let a: HostApproval = serde_json::from_value(approval("pending")).unwrap();
        assert_eq!(
            approval_line(&a),
            "approval  approval-3  pending  ws.method:agents.upsert  agent=-  created=2026-01-01T00:00:00Z  sess-2 wants to run agents.upsert"
        );
        assert_eq!(
            resolved_line(&a),
            "pending approval-3  ws.method:agents.upsert"
        );
        let agent: HostAgent = serde_json::from_value(json!({
            "id": "agent-1", "name": "Claude", "kind": "claude-code", "capabilities": [],
            "project": "/src", "status": "running", "current_task": "fix it", "pid": 42,
            "metadata": {}, "session_id": "sess-1", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(
            agent_line(&agent),
            "agent  agent-1  running  name=Claude kind=claude-code project=/src pid=42 task=\"fix it\""
        );
    }
}
