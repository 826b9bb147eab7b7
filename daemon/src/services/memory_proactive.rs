//! Proactive memory: `memory.update_status`, `memory.save_knowledge`,
//! `memory.save_procedural`, `memory.intervene` and `memory.evaluate`, on the connection's
//! memory scope (the same graph as `memory.*`, see `Identity::memory_scope`).
//!
//! The engine (`car_memory::proactive`, `car_memory::evaluate`) owns the rules: status slots,
//! additive ids, the selector's scoring and threshold, the evaluation counts. This module only
//! turns the typed params into engine inputs and engine results into the declared replies:
//! the caller's mistakes are `-32602` naming the field (`cases[i].request.<field>` inside an
//! evaluation), engine I/O failures `-32603`. `memory.delete` stays in [`super::memory`]; the
//! engine's delete clears status slots itself.

use car_memory::{
    Candidate, Decision, EvalCase, Intervention, ModeScore, RequestInput, SaveInput, SaveReport,
    Trigger,
};
use car_proto::errors::RpcError;
use car_proto::methods::memory_proactive::{
    self as mp, Bank, EvaluateParams, EvaluateReply, InterveneParams, InterveneReply, SaveParams,
    SaveReply, Selected, StatusReply, UpdateStatusParams,
};

use crate::handler::{Call, Routes};

/// Registers the five proactive-memory routes.
pub fn register(routes: &mut Routes) {
    routes
        .add::<mp::UpdateStatus, _, _>(update_status)
        .add::<mp::SaveKnowledge, _, _>(save_knowledge)
        .add::<mp::SaveProcedural, _, _>(save_procedural)
        .add::<mp::Intervene, _, _>(intervene)
        .add::<mp::Evaluate, _, _>(evaluate);
}

/// `memory.update_status` → the private status slot.
async fn update_status(call: Call, p: UpdateStatusParams) -> Result<StatusReply, RpcError> {
    let status = call
        .state
        .data
        .memory
        .update_status(&call.session.identity().memory_scope(), p.body, p.tenant_id)
        .await
        .map_err(RpcError::from)?;
    Ok(StatusReply {
        id: status.id,
        body: status.body,
        tenant_id: status.tenant_id,
    })
}

fn save_input(p: SaveParams) -> SaveInput {
    SaveInput {
        id: p.id,
        subject: p.subject,
        body: p.body,
        tags: p.tags.unwrap_or_default(),
        confidence: p.confidence,
        tenant_id: p.tenant_id,
        is_constraint: p.is_constraint.unwrap_or(false),
    }
}

fn save_reply(r: SaveReport) -> SaveReply {
    SaveReply {
        id: r.id,
        kind: r.kind.as_str().to_string(),
        fact_count: r.fact_count as u64,
    }
}

/// `memory.save_knowledge` → `{id, kind: "knowledge", fact_count}`.
async fn save_knowledge(call: Call, p: SaveParams) -> Result<SaveReply, RpcError> {
    let input = save_input(p).validate().map_err(RpcError::invalid_params)?;
    let report = call
        .state
        .data
        .memory
        .save_knowledge(&call.session.identity().memory_scope(), input)
        .await
        .map_err(RpcError::from)?;
    Ok(save_reply(report))
}

/// `memory.save_procedural` → `{id, kind: "procedural", fact_count}`.
async fn save_procedural(call: Call, p: SaveParams) -> Result<SaveReply, RpcError> {
    let input = save_input(p).validate().map_err(RpcError::invalid_params)?;
    let report = call
        .state
        .data
        .memory
        .save_procedural(&call.session.identity().memory_scope(), input)
        .await
        .map_err(RpcError::from)?;
    Ok(save_reply(report))
}

fn request_input(p: InterveneParams) -> RequestInput {
    let t = p.trigger.unwrap_or_default();
    RequestInput {
        query: p.query,
        recent: p.recent.unwrap_or_default(),
        trigger: Trigger {
            repeated_failures: t.repeated_failures.unwrap_or(0),
            tool_error: t.tool_error.unwrap_or(false),
            explicit_uncertainty: t.explicit_uncertainty.unwrap_or(false),
            high_risk_action: t.high_risk_action.unwrap_or(false),
            context_shift: t.context_shift.unwrap_or(false),
        },
        force: p.force.unwrap_or(false),
        max_candidates: p.max_candidates,
        tenant_id: p.tenant_id,
    }
}

fn selected(c: Candidate) -> Selected {
    Selected {
        id: c.fact_id,
        subject: c.subject,
        body: c.body,
        kind: c.kind.as_str().to_string(),
        score: c.score,
    }
}

fn intervene_reply(i: Intervention) -> InterveneReply {
    let bank = Bank {
        facts: i.bank.facts as u64,
        knowledge: i.bank.knowledge as u64,
        procedural: i.bank.procedural as u64,
    };
    let candidates = i.candidates.len() as u64;
    match i.decision {
        Decision::Inject {
            reminder,
            selected: c,
        } => InterveneReply {
            decision: "inject".into(),
            reminder: Some(reminder),
            selected: Some(selected(c)),
            reason: None,
            candidates,
            bank,
        },
        Decision::Silent(reason) => InterveneReply {
            decision: "silent".into(),
            reminder: None,
            selected: None,
            reason: Some(reason.as_str().to_string()),
            candidates,
            bank,
        },
    }
}

/// `memory.intervene` → an inject or silent decision (an injection is counted durably).
async fn intervene(call: Call, p: InterveneParams) -> Result<InterveneReply, RpcError> {
    let request = request_input(p)
        .validate()
        .map_err(RpcError::invalid_params)?;
    let outcome = call
        .state
        .data
        .memory
        .intervene(&call.session.identity().memory_scope(), &request)
        .await
        .map_err(RpcError::from)?;
    let reply = intervene_reply(outcome);
    // CAR's `ProactiveMemoryIntervention`: the decision and counts, never a memory body.
    call.state.data.store.record(crate::state::store::NewEvent {
        kind: "memory.intervention",
        session_id: Some(call.session.label()),
        agent_id: call.session.agent_id(),
        data: serde_json::json!({
            "decision": reply.decision,
            "selected": reply.selected.as_ref().map(|s| s.id.clone()),
            "reason": reply.reason,
            "candidates": reply.candidates,
            "bank": reply.bank,
        }),
        ..Default::default()
    });
    Ok(reply)
}

fn mode(m: ModeScore) -> mp::ModeScore {
    mp::ModeScore {
        interventions: m.interventions as u64,
        true_positives: m.true_positives as u64,
        false_positives: m.false_positives as u64,
        false_negatives: m.false_negatives as u64,
        precision: m.precision,
        recall: m.recall,
        interruption_rate: m.interruption_rate,
        avg_candidates_exposed: m.avg_candidates_exposed,
    }
}

/// `memory.evaluate` → every mode's scores; read-only.
async fn evaluate(call: Call, p: EvaluateParams) -> Result<EvaluateReply, RpcError> {
    car_memory::evaluate::validate_case_count(p.cases.len()).map_err(RpcError::invalid_params)?;
    let cases = p
        .cases
        .into_iter()
        .enumerate()
        .map(|(i, case)| {
            let request = request_input(case.request)
                .validate()
                .map_err(|e| RpcError::invalid_params(format!("cases[{i}].request.{e}")))?;
            Ok(EvalCase {
                id: case.id,
                request,
                relevant_fact_ids: case.relevant_fact_ids.unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, RpcError>>()?;
    let e = call
        .state
        .data
        .memory
        .evaluate(&call.session.identity().memory_scope(), &cases)
        .await
        .map_err(RpcError::from)?;
    Ok(EvaluateReply {
        cases: e.cases as u64,
        selective: mode(e.selective),
        always_inject: mode(e.always_inject),
        passive_retrieval: mode(e.passive_retrieval),
        no_memory: mode(e.no_memory),
    })
}
