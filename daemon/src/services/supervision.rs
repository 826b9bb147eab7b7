//! `supervision.*`: subscribe, unsubscribe, poll and decide, over
//! [`crate::state::supervision::Supervision`] (its module docs state who sees and may decide
//! which intent; the gate on `proposal.submit` is `proposal::admission`).
//!
//! A filter's `tools` and `sessions` lists hold at most [`MAX_FILTER_ENTRIES`] names.
//! `decide` needs a non-empty `reason` for `deny` and `escalate` (`-32602` naming
//! `decision.reason`); an intent this connection may not decide, one already decided and
//! one that timed out are all `-32602` naming `intent_id` with `data.reason:
//! "unknown_intent"`.

use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::supervision::{
    self as m, DecideParams, DecideReply, DecisionKind, PendingReply, SubscribeParams,
    SubscribeReply, UnsubscribeReply,
};

use crate::handler::{Call, Routes};

/// Longest `filter.tools` / `filter.sessions` list.
pub const MAX_FILTER_ENTRIES: usize = 1000;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Subscribe, _, _>(subscribe)
        .add::<m::Unsubscribe, _, _>(unsubscribe)
        .add::<m::Pending, _, _>(pending)
        .add::<m::Decide, _, _>(decide);
}

async fn subscribe(call: Call, p: SubscribeParams) -> Result<SubscribeReply, RpcError> {
    let filter = p.filter.unwrap_or_default();
    for (field, list) in [("tools", &filter.tools), ("sessions", &filter.sessions)] {
        if list.as_ref().is_some_and(|l| l.len() > MAX_FILTER_ENTRIES) {
            return Err(RpcError::invalid_params(format!(
                "filter.{field}: at most {MAX_FILTER_ENTRIES} entries"
            )));
        }
    }
    let supervisors = call
        .state
        .agents
        .supervision
        .subscribe(&call.session, filter);
    Ok(SubscribeReply {
        subscribed: true,
        decision_timeout_ms: call.state.daemon.config.supervision_timeout.as_millis() as u64,
        supervisors,
    })
}

async fn unsubscribe(call: Call, _: NoParams) -> Result<UnsubscribeReply, RpcError> {
    Ok(UnsubscribeReply {
        subscribed: false,
        was_subscribed: call.state.agents.supervision.unsubscribe(call.session.id),
    })
}

async fn pending(call: Call, _: NoParams) -> Result<PendingReply, RpcError> {
    Ok(PendingReply {
        intents: call.state.agents.supervision.pending(call.session.id),
    })
}

async fn decide(call: Call, p: DecideParams) -> Result<DecideReply, RpcError> {
    let needs_reason = matches!(p.decision.kind, DecisionKind::Deny | DecisionKind::Escalate);
    let has_reason = p
        .decision
        .reason
        .as_ref()
        .is_some_and(|r| !r.trim().is_empty());
    if needs_reason && !has_reason {
        return Err(RpcError::invalid_params(format!(
            "decision.reason: is required for {}",
            if p.decision.kind == DecisionKind::Deny {
                "deny"
            } else {
                "escalate"
            }
        )));
    }
    if p.decision.reason.as_ref().is_some_and(|r| r.len() > 4096) {
        return Err(RpcError::invalid_params(
            "decision.reason: is longer than 4096 bytes",
        ));
    }
    call.state
        .agents
        .supervision
        .decide(call.session.id, &p.intent_id, p.decision)?;
    Ok(DecideReply { decided: true })
}
