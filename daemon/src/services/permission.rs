//! `permission.*`: tiers, classification, evaluation and the approval ledger over
//! [`crate::state::permission`] (its module docs state the decision rule; `classify` states the
//! tables and the fingerprint).
//!
//! - `get_tier` / `set_tier` read and set this connection's standing tier (`set_tier` is
//!   host-labelled: dispatch refuses it to other sessions; with auth off every session is a host
//!   session).
//! - `classify`, `evaluate` and `pending` parse the proposal as `proposal.submit` does (a malformed
//!   action is `-32602` naming its path) and run nothing.
//! - `approve` / `reject` take `{fingerprint, required_tier}` (the fingerprint must be 64 hex
//!   characters) or `{action}` (parsed and classified here: its true tier is recorded, or the given
//!   `required_tier` when higher; a `fingerprint` given beside it must be the action's). The
//!   reviewer is stamped from the session; `reason` is at most [`MAX_REASON_BYTES`] and `evidence`
//!   at most [`MAX_EVIDENCE_BYTES`] of JSON. The record is appended (and synced) to the ledger
//!   before the method answers, and an `permission.recorded` event is logged (fingerprint,
//!   decision, tier, reviewer).

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::permission::{
    self as m, ApprovalRecord, Classification, ClassifyParams, ClassifyReply, EvaluateParams,
    EvaluateReply, PendingReply, RecordParams, RecordedDecision, Reversibility, SetTierParams,
    Tier, TierReply, Verdict,
};
use serde_json::{json, Map, Value};

use crate::handler::{Call, Routes};
use crate::state::permission::{self, classify};
use crate::state::proposal::{self as model, Action};
use crate::state::store::NewEvent;

/// Longest `reason` (bytes).
pub const MAX_REASON_BYTES: usize = 4096;
/// Longest `evidence` (bytes of JSON).
pub const MAX_EVIDENCE_BYTES: usize = 16 * 1024;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::GetTier, _, _>(get_tier)
        .add::<m::SetTier, _, _>(set_tier)
        .add::<m::Classify, _, _>(classify_proposal)
        .add::<m::Evaluate, _, _>(evaluate)
        .add::<m::Pending, _, _>(pending)
        .add::<m::Approve, _, _>(|call, p| record(call, p, RecordedDecision::Approved))
        .add::<m::Reject, _, _>(|call, p| record(call, p, RecordedDecision::Rejected));
}

async fn get_tier(call: Call, _: NoParams) -> Result<TierReply, RpcError> {
    Ok(TierReply {
        granted_tier: call.session.permission_tier(),
    })
}

async fn set_tier(call: Call, p: SetTierParams) -> Result<TierReply, RpcError> {
    let before = call.session.permission_tier();
    call.session.set_permission_tier(p.tier);
    tracing::info!(
        session = call.session.id,
        from = before.as_str(),
        to = p.tier.as_str(),
        "standing permission tier set"
    );
    Ok(TierReply {
        granted_tier: p.tier,
    })
}

fn actions_of(proposal: Map<String, Value>) -> Result<Vec<Action>, RpcError> {
    let (_, actions) = model::parse_whole(proposal)?.strict()?;
    Ok(actions)
}

/// A declared `reversibility` label (absent or not a string: `irreversible`).
fn declared(action: Option<&Value>) -> Reversibility {
    action
        .and_then(|a| a.get("reversibility"))
        .and_then(Value::as_str)
        .map(Reversibility::from_label)
        .unwrap_or(Reversibility::Irreversible)
}

async fn classify_proposal(_call: Call, p: ClassifyParams) -> Result<ClassifyReply, RpcError> {
    let raw: Vec<Value> = p
        .proposal
        .get("actions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let actions = actions_of(p.proposal)?;
    let mut contract = Reversibility::Reversible;
    let classifications = actions
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let op = a.operation();
            let assessment = classify::assess(op);
            let declared_here = declared(raw.get(i));
            contract = contract.max(declared_here);
            let compensation = raw
                .get(i)
                .and_then(|r| r.get("compensation"))
                .is_some_and(|c| !c.is_null());
            Classification {
                action_id: a.id.clone(),
                tool: match op {
                    classify::Operation::Tool { tool, .. } => Some(tool.to_string()),
                    classify::Operation::State { .. } => None,
                },
                required_tier: assessment.tier,
                reversibility: assessment.reversibility,
                missing_compensation: declared_here == Reversibility::Compensable && !compensation,
            }
        })
        .collect();
    Ok(ClassifyReply {
        classifications,
        declared_rollback_contract: contract,
    })
}

async fn evaluate(call: Call, p: EvaluateParams) -> Result<EvaluateReply, RpcError> {
    let actions = actions_of(p.proposal)?;
    Ok(EvaluateReply {
        decisions: permission::decisions(&call.session, &call.state, &actions),
    })
}

async fn pending(call: Call, p: EvaluateParams) -> Result<PendingReply, RpcError> {
    let actions = actions_of(p.proposal)?;
    Ok(PendingReply {
        pending: permission::decisions(&call.session, &call.state, &actions)
            .into_iter()
            .filter(|d| d.decision == Verdict::NeedsApproval)
            .collect(),
    })
}

fn is_fingerprint(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the record is about: `(fingerprint, required_tier)` (see the module docs).
fn subject(p: &RecordParams) -> Result<(String, Tier), RpcError> {
    match (&p.action, &p.fingerprint) {
        (Some(action), given) => {
            let action = model::parse_single(&Value::Object(action.clone()), "action")?;
            let op = action.operation();
            let fingerprint = classify::fingerprint(op);
            if let Some(given) = given {
                if given.as_str() != fingerprint {
                    return Err(RpcError::invalid_params(format!(
                        "fingerprint: {given:?} is not the fingerprint of action (it is {fingerprint:?})"
                    )));
                }
            }
            let tier = classify::assess(op).tier;
            Ok((fingerprint, p.required_tier.map_or(tier, |t| t.max(tier))))
        }
        (None, Some(fingerprint)) => {
            if !is_fingerprint(fingerprint) {
                return Err(RpcError::invalid_params(
                    "fingerprint: must be 64 lower-case hex characters (a permission.evaluate fingerprint)",
                ));
            }
            let tier = p.required_tier.ok_or_else(|| {
                RpcError::invalid_params("required_tier: is required with fingerprint")
            })?;
            Ok((fingerprint.to_string(), tier))
        }
        (None, None) => Err(RpcError::invalid_params(
            "fingerprint: is required (or give action)",
        )),
    }
}

async fn record(
    call: Call,
    p: RecordParams,
    decision: RecordedDecision,
) -> Result<ApprovalRecord, RpcError> {
    let (fingerprint, required_tier) = subject(&p)?;
    if p.reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_REASON_BYTES)
    {
        return Err(RpcError::invalid_params(format!(
            "reason: is longer than {MAX_REASON_BYTES} bytes"
        )));
    }
    if p.evidence
        .as_ref()
        .is_some_and(|e| e.to_string().len() > MAX_EVIDENCE_BYTES)
    {
        return Err(RpcError::invalid_params(format!(
            "evidence: is larger than {MAX_EVIDENCE_BYTES} bytes"
        )));
    }
    let record = ApprovalRecord {
        fingerprint,
        decision,
        required_tier,
        reviewer: permission::reviewer(&call.session),
        reason: p.reason,
        evidence: p.evidence,
        recorded_at: car_proto::clock::now_rfc3339(),
    };
    let state = call.state.clone();
    let stored = tokio::task::spawn_blocking(move || state.access.approvals.record(record))
        .await
        .map_err(|e| RpcError::internal(format!("cannot record the decision: {e}")))??;
    tracing::info!(fingerprint = %stored.fingerprint, decision = ?stored.decision, tier = stored.required_tier.as_str(), reviewer = %stored.reviewer, "permission decision recorded");
    call.state.data.store.record(NewEvent {
        kind: "permission.recorded",
        session_id: Some(call.session.label()),
        agent_id: call.session.agent_id(),
        proposal_id: None,
        action_id: None,
        request_id: None,
        data: json!({
            "fingerprint": stored.fingerprint,
            "decision": stored.decision,
            "required_tier": stored.required_tier,
            "reviewer": stored.reviewer,
        }),
    });
    Ok(stored)
}
