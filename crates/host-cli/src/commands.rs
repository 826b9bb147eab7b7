//! `list`, `approve` and `deny`: the host connection, a few calls, one answer.
//!
//! - `list`: `host.agents`, `agents.list` and `host.approvals`; pending approvals only unless
//!   `--all`. Human: one line per host agent, registry agent and approval (or a `no …` line per
//!   empty section). `--json`: one object `{agents, registry, approvals, started_server?}` with the
//!   daemon's rows as received.
//! - `approve` / `deny`: `host.resolve_approval {approval_id, approved, notes?}`; prints the
//!   resolved approval (`--json`: the daemon's object as received). The daemon's refusals (unknown
//!   id, already resolved) are reported with its message and exit 1.

use car_proto::methods::agents::{AgentListEntry, ManagedAgent};
use car_proto::methods::host::{ApprovalStatus, ApprovalsReply, HostAgent, HostApproval};
use serde_json::{json, Value};

use crate::output::{agent_line, approval_line, registry_line, resolved_line};
use crate::session::{Ctx, Failure};

pub async fn list(ctx: &Ctx, all: bool) -> Result<(), Failure> {
    ctx.connect(true).await?;
    let (agents, agents_raw): (Vec<HostAgent>, Value) =
        ctx.call_decoded("host.agents", json!({})).await?;
    let (listed, registry_raw): (Vec<AgentListEntry>, Value) =
        ctx.call_decoded("agents.list", json!({})).await?;
    // Declarative agents are listed too; the registry lines are the supervised ones.
    let registry: Vec<ManagedAgent> = listed
        .into_iter()
        .filter_map(|e| match e {
            AgentListEntry::Managed(a) => Some(*a),
            AgentListEntry::Declarative(_) => None,
        })
        .collect();
    let (approvals, approvals_raw): (ApprovalsReply, Value) =
        ctx.call_decoded("host.approvals", json!({})).await?;
    let shown: Vec<(usize, &HostApproval)> = approvals
        .approvals
        .iter()
        .enumerate()
        .filter(|(_, a)| all || a.status == ApprovalStatus::Pending)
        .collect();
    let out = ctx.out;
    if out.json {
        let raw_rows = approvals_raw["approvals"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let rows: Vec<Value> = shown
            .iter()
            .filter_map(|(i, _)| raw_rows.get(*i).cloned())
            .collect();
        let mut obj = json!({
            "agents": agents_raw,
            "registry": registry_raw,
            "approvals": rows,
        });
        if let Some(started) = ctx.started() {
            obj["started_server"] = serde_json::to_value(started).unwrap_or(Value::Null);
        }
        return Ok(out.json(&obj)?);
    }
    if agents.is_empty() {
        out.line("no host agents")?;
    }
    for a in &agents {
        out.line(&agent_line(a))?;
    }
    if registry.is_empty() {
        out.line("no registry agents")?;
    }
    for a in &registry {
        out.line(&registry_line(a))?;
    }
    if shown.is_empty() {
        out.line(if all {
            "no approvals"
        } else {
            "no pending approvals"
        })?;
    }
    for (_, a) in &shown {
        out.line(&approval_line(a))?;
    }
    Ok(())
}

pub async fn resolve(
    ctx: &Ctx,
    approval_id: &str,
    approved: bool,
    notes: Option<&str>,
) -> Result<(), Failure> {
    ctx.connect(true).await?;
    let mut params = json!({"approval_id": approval_id, "approved": approved});
    if let Some(notes) = notes {
        params["notes"] = json!(notes);
    }
    let (approval, raw): (HostApproval, Value) =
        ctx.call_decoded("host.resolve_approval", params).await?;
    if ctx.out.json {
        ctx.out.json(&raw)?;
    } else {
        ctx.out.line(&resolved_line(&approval))?;
    }
    Ok(())
}
