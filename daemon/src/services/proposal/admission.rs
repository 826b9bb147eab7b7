//! The admission gates `proposal.submit` applies after its structural checks and before
//! any action dispatches, in this order (both must pass; neither is a bypass of the
//! other):
//!
//! 1. **Supervision** ([`crate::state::supervision`]): with no supervisor this is one atomic read.
//!    Otherwise a proposal that matches a supervisor's filter is parked as an intent (action ids,
//!    types, tools, classified reversibility, parameter key names and a parameter digest — never
//!    values) until a supervisor decides: `allow` → go on; `deny` → rejected with the supervisor's
//!    reason; `escalate` → a system host approval (`action: "supervision:<proposal_id>"`, the
//!    intent in `details`) decides within the approval timeout (`--approval-timeout`), deny or
//!    timeout → rejected; no decision within `--supervision-timeout` → rejected (fail-closed).
//! 2. **Permission** ([`crate::state::permission::Gate`], the rule `permission.evaluate` answers):
//!    any action that is not `allow` blocks the **whole** proposal.
//!
//! A rejected proposal is answered like a halted session's: the ordinary result with
//! every action `rejected` (nothing ran, no state written). A blocked action's `error`
//! names its fingerprint, required and granted tier (`permission needs approval: action a
//! (fingerprint …) requires full_access, granted sandbox_edit: …`); the others say which
//! actions blocked the proposal. The result carries, additively, `admission: {gate,
//! reason, …}` — for the permission gate the blocking decisions (`decisions`), for
//! supervision the `intent_id` and the `decision`.

use std::collections::BTreeMap;

use car_proto::errors::RpcError;
use car_proto::methods::permission::{Reversibility, Verdict};
use car_proto::methods::supervision::{IntentAction, SupervisionIntent};
use serde_json::{json, Map, Value};

use car_proto::methods::proposal::{ProposalCost, ProposalResult};

use super::exec::{result_of, ActionResult, Execution, Status};
use crate::handler::Call;
use crate::state::host_state::{ApprovalRequest, HostState};
use crate::state::permission::{self, classify};
use crate::state::proposal::{Action, ActionKind};
use crate::state::supervision::Outcome;

/// Why a proposal was not admitted.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The `error` of every action not named in `per_action`.
    pub reason: String,
    pub per_action: BTreeMap<String, String>,
    /// The result's `admission` field.
    pub admission: Value,
}

fn intent_action(a: &Action) -> IntentAction {
    let (tool, mut keys, digest) = match &a.kind {
        ActionKind::ToolCall { tool, parameters } => (
            Some(tool.clone()),
            parameters.keys().cloned().collect::<Vec<_>>(),
            car_proto::schema::digest(&Value::Object(parameters.clone())),
        ),
        ActionKind::StateWrite { key, value } => (
            None,
            vec!["key".into(), "value".into()],
            car_proto::schema::digest(&json!({"key": key, "value": value})),
        ),
        ActionKind::StateDelete { key } => (
            None,
            vec!["key".into()],
            car_proto::schema::digest(&json!({"key": key})),
        ),
    };
    keys.sort();
    let action_type = match a.kind {
        ActionKind::ToolCall { .. } => "tool_call",
        ActionKind::StateWrite { .. } => "state_write",
        ActionKind::StateDelete { .. } => "state_delete",
    };
    IntentAction {
        id: a.id.clone(),
        action_type: action_type.into(),
        tool,
        reversibility: classify::assess(a.operation()).reversibility,
        parameter_keys: keys,
        parameters_digest: digest,
    }
}

/// The intent a supervisor sees (its id and time are stamped when it is parked).
fn intent(
    call: &Call,
    raw: &Map<String, Value>,
    actions: &[Action],
    execution: &Execution<'_>,
    scope: Option<&Map<String, Value>>,
) -> SupervisionIntent {
    let actions: Vec<IntentAction> = actions.iter().map(intent_action).collect();
    SupervisionIntent {
        id: String::new(),
        proposal_id: execution.proposal_id.clone(),
        source: raw
            .get("source")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| permission::reviewer(&call.session)),
        session_id: Some(execution.session_id.clone()),
        scope: scope.map(|s| Value::Object(s.clone())),
        reversibility: actions
            .iter()
            .map(|a| a.reversibility)
            .max()
            .unwrap_or(Reversibility::Reversible),
        created_at: String::new(),
        actions,
    }
}

fn refusal(gate: &str, reason: String, detail: Value) -> Refusal {
    let mut admission = json!({"gate": gate, "reason": reason});
    if let (Value::Object(a), Value::Object(d)) = (&mut admission, detail) {
        a.extend(d);
    }
    Refusal {
        reason,
        per_action: BTreeMap::new(),
        admission,
    }
}

/// Forgets the escalation's waiter however the wait ends.
struct Waiting<'a>(&'a HostState, String);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.abandon_waiter(&self.1);
    }
}

async fn escalate(
    call: &Call,
    intent: &SupervisionIntent,
    intent_id: &str,
    reason: &str,
) -> Option<Refusal> {
    let state = &call.state;
    if call.session.principal().is_host {
        // The host is who an escalation asks, and only a host with another credential may
        // resolve a system approval (`crate::state::host_state`): a host's own proposal goes on.
        tracing::info!(intent = %intent_id, %reason, "a supervisor escalated the host's own proposal: the host's submission is its approval");
        return None;
    }
    let mut shown = intent.clone();
    shown.id = intent_id.to_string();
    let (approval, decision) = state.agents.host.request_approval(ApprovalRequest {
        agent_id: call.session.identity().agent_id,
        action: format!("supervision:{}", intent.proposal_id),
        description: Some(format!("a supervisor escalated this proposal: {reason}")),
        details: json!({"intent": shown, "session_id": call.session.label()}),
        required_approvals: 1,
        client_id: None,
        parked: Some(call.session.principal()),
    });
    let _waiting = Waiting(&state.agents.host, approval.id.clone());
    tracing::info!(intent = %intent_id, approval = %approval.id, "supervisor escalated a proposal to the host");
    let timeout = state.daemon.config.approvals.timeout;
    let detail = |decision: &str| json!({"intent_id": intent_id, "decision": "escalate", "approval_id": approval.id, "approval": decision});
    match tokio::time::timeout(timeout, decision).await {
        Ok(Ok(true)) => None,
        Ok(Ok(false)) | Ok(Err(_)) => Some(refusal(
            "supervision",
            format!("escalated by a supervisor ({reason}) and denied by the host"),
            detail("denied"),
        )),
        Err(_) => Some(refusal(
            "supervision",
            format!(
                "escalated by a supervisor ({reason}) and not approved within {}",
                humantime::format_duration(timeout)
            ),
            detail("timeout"),
        )),
    }
}

async fn supervise(
    call: &Call,
    raw: &Map<String, Value>,
    actions: &[Action],
    execution: &Execution<'_>,
    scope: Option<&Map<String, Value>>,
) -> Result<Option<Refusal>, RpcError> {
    let supervision = &call.state.agents.supervision;
    if supervision.supervisors() == 0 {
        return Ok(None);
    }
    let intent = intent(call, raw, actions, execution, scope);
    let timeout = call.state.daemon.config.supervision_timeout;
    let submitter = crate::state::supervision::Submitter {
        session_id: call.session.id,
        agent_id: call.session.identity().agent_id,
    };
    Ok(
        match supervision
            .admit(intent.clone(), submitter, timeout)
            .await?
        {
            Outcome::Unsupervised | Outcome::Allowed(_) => None,
            Outcome::Denied { intent_id, reason } => Some(refusal(
                "supervision",
                format!("denied by a supervisor: {reason}"),
                json!({"intent_id": intent_id, "decision": "deny"}),
            )),
            Outcome::Escalated { intent_id, reason } => {
                escalate(call, &intent, &intent_id, &reason).await
            }
            Outcome::TimedOut(intent_id) => Some(refusal(
                "supervision",
                format!(
                    "no supervisor decided within {} (fail-closed)",
                    humantime::format_duration(timeout)
                ),
                json!({"intent_id": intent_id, "decision": "timeout"}),
            )),
        },
    )
}

fn permission_gate(call: &Call, actions: &[Action]) -> Option<Refusal> {
    let blocked: Vec<_> = crate::state::permission::decisions(&call.session, &call.state, actions)
        .into_iter()
        .filter(|d| d.decision != Verdict::Allow)
        .collect();
    if blocked.is_empty() {
        return None;
    }
    let ids: Vec<&str> = blocked.iter().map(|d| d.action_id.as_str()).collect();
    let reason = format!(
        "proposal blocked by the permission gate: {} (approve with permission.approve {{fingerprint, required_tier}})",
        blocked
            .iter()
            .map(permission::blocked_message)
            .collect::<Vec<_>>()
            .join("; ")
    );
    tracing::info!(session = call.session.id, actions = ?ids, "proposal blocked by the permission gate");
    let mut r = refusal("permission", reason, json!({"decisions": blocked}));
    r.reason = format!(
        "not run: the proposal was blocked by the permission gate (actions {})",
        ids.join(", ")
    );
    for d in &blocked {
        r.per_action
            .insert(d.action_id.clone(), permission::blocked_message(d));
    }
    Some(r)
}

/// Runs the gates (see the module docs); `Some` when the proposal must not run.
pub async fn admit(
    call: &Call,
    raw: &Map<String, Value>,
    actions: &[Action],
    execution: &Execution<'_>,
    scope: Option<&Map<String, Value>>,
) -> Result<Option<Refusal>, RpcError> {
    if let Some(refused) = supervise(call, raw, actions, execution, scope).await? {
        tracing::info!(session = call.session.id, proposal = %execution.proposal_id, "proposal rejected by supervision");
        return Ok(Some(refused));
    }
    Ok(permission_gate(call, actions))
}

impl Execution<'_> {
    /// The answer for a proposal the gates refused: every action `rejected`, nothing run.
    pub fn refused(&self, actions: &[Action], refusal: Refusal) -> ProposalResult {
        let gate = refusal.admission["gate"].clone();
        self.event(
            "proposal.rejected",
            None,
            None,
            json!({"gate": gate, "reason": refusal.admission["reason"]}),
        );
        let results: Vec<ActionResult> = actions
            .iter()
            .map(|a| {
                let why = refusal
                    .per_action
                    .get(&a.id)
                    .cloned()
                    .unwrap_or_else(|| refusal.reason.clone());
                let r = result_of(a, Status::Rejected, Some(why.clone()));
                self.record_outcome(a, &r);
                self.event(
                    "action.rejected",
                    Some(&a.id),
                    None,
                    json!({"gate": gate, "reason": why}),
                );
                r
            })
            .collect();
        let errors: Vec<String> = results
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.action_id)))
            .collect();
        ProposalResult {
            proposal_id: self.proposal_id.clone(),
            outputs: Map::new(),
            final_state: self.final_state(),
            errors,
            cost: ProposalCost {
                actions_rejected: results.len() as u32,
                ..ProposalCost::default()
            },
            results,
            admission: Some(refusal.admission),
            replans: 0,
        }
    }
}
