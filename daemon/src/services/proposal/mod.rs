//! `verify` and `proposal.submit`: checking a plan and running it.
//!
//! Both parse with [`model`] and analyse with [`plan`] against this connection's tools,
//! policies and state. `verify` reports; `proposal.submit` refuses a proposal with any
//! structural error (`-32602`, the first problem in the message and every issue in
//! `error.data.issues`), then applies the [`admission`] gates (supervision, then the
//! permission tier: a proposal they refuse is answered with every action `rejected`), and
//! otherwise hands the plan to [`exec`] — policy violations surface there as `rejected`
//! actions. Nothing is executed or written for a refused proposal. [`replan`] wraps the run
//! in the connection's replan loop (`replan.set_config`).

pub mod admission;
mod builtin;
mod callback;
pub mod checks;
mod connector;
pub mod exec;
pub mod plan;
mod replan;
mod tool_hints;

use std::collections::BTreeMap;

use car_proto::errors::RpcError;
use serde_json::{json, Value};

use car_proto::methods::proposal::{
    self as m, CheckRecord, Evidence, ProposalResult, SubmitParams, VerifyParams, VerifyReport,
};

use crate::handler::{Call, Routes};
use crate::state::proposal as model;
use plan::{Context, Plan};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Verify, _, _>(verify)
        .add::<m::Submit, _, _>(submit);
    checks::register(routes);
}

fn analyse(
    call: &Call,
    proposal: &model::Proposal,
    initial_state: Option<BTreeMap<String, Value>>,
    session_id: &str,
    tenant: Option<&str>,
) -> Plan {
    call.session.runtime(|rt| {
        let state =
            initial_state.unwrap_or_else(|| rt.partition(tenant).cloned().unwrap_or_default());
        plan::analyze(
            proposal,
            Context {
                tools: &rt.tools,
                policies: &rt.policies,
                state,
                session_id,
            },
        )
    })
}

fn levels_by_id(plan: &Plan, proposal: &model::Proposal) -> Vec<Vec<String>> {
    let id = |i: usize| {
        proposal.actions[i]
            .as_ref()
            .map(|a| a.id.clone())
            .unwrap_or_default()
    };
    plan.levels
        .iter()
        .map(|l| l.iter().map(|&i| id(i)).collect())
        .collect()
}

/// CAR's `evidence`: the checks `verify` ran, what each establishes and what it cannot.
fn evidence(plan: &Plan) -> Evidence {
    let findings = |category: plan::Category| {
        plan.issues
            .iter()
            .filter(|i| i.category == category)
            .count() as u64
    };
    let check = |name: &str, ran: bool, verifies: &str, cannot: &str, findings: u64| CheckRecord {
        name: name.into(),
        ran,
        verifies: vec![verifies.into()],
        cannot_verify: vec![cannot.into()],
        findings,
        tier: "decision_procedure".into(),
    };
    let checks = vec![
        check(
            "structure",
            true,
            "action shapes, unique ids, dependencies that exist, no cycles",
            "that the plan achieves its goal",
            findings(plan::Category::Structure),
        ),
        check(
            "tool_registry",
            true,
            "every tool call names a tool registered on this connection",
            "that the tool is available when the plan runs",
            findings(plan::Category::Tool),
        ),
        check(
            "param_schema",
            plan.schemas_checked,
            "parameters have the declared types and required fields",
            "that parameter values are meaningful",
            0,
        ),
        check(
            "policy",
            true,
            "no registered policy denies a call, simulated in execution order",
            "policies registered after verification",
            findings(plan::Category::Policy),
        ),
        check(
            "state_conflicts",
            true,
            "no two actions of one level write the same state key",
            "writes a tool makes that it does not declare in expected_effects",
            findings(plan::Category::Conflict),
        ),
    ];
    let ran = checks.iter().filter(|c| c.ran).count();
    Evidence {
        confidence: ran as f64 / checks.len() as f64,
        checks,
        assumptions: vec!["tools change state only as their expected_effects declare".into()],
        untested_regions: if plan.schemas_checked {
            Vec::new()
        } else {
            vec!["tool parameters (no parameters schema registered)".into()]
        },
        residual_risks: vec!["tool failures and timeouts at run time".into()],
    }
}

/// `verify {proposal, initial_state?, session_id?}` → `{valid, issues, execution_levels, conflicts,
/// simulated_state, evidence}`.
async fn verify(call: Call, p: VerifyParams) -> Result<VerifyReport, RpcError> {
    let proposal = model::parse_whole(p.proposal)?;
    let initial = p.initial_state.map(|m| m.into_iter().collect());
    let session_id = p
        .session_id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| call.session.label());
    let plan = analyse(&call, &proposal, initial, &session_id, None);
    Ok(VerifyReport {
        valid: plan.valid(),
        execution_levels: levels_by_id(&plan, &proposal),
        evidence: evidence(&plan),
        issues: plan.issues,
        conflicts: plan.conflicts,
        simulated_state: plan.simulated_state,
    })
}

fn run_cancelled(run_id: &str) -> RpcError {
    RpcError::internal(format!(
        "run cancelled: run {run_id:?} was cancelled while this proposal ran; the tool calls it was waiting on were sent tools.cancel"
    ))
    .with_data(json!({"reason": "run_cancelled", "run_id": run_id}))
}

/// `proposal.submit {proposal, session_id?}` → `{proposal_id, results, outputs, final_state,
/// errors}`.
///
/// The proposal is recorded under the connection's current run, and stops when that run is
/// cancelled. A connection that took its run over with `runs.resume` submits no new
/// proposal under it (CAR: a resumed run is recovery only).
/// The state partition `scope.tenantId` names (`None`: the default one; empty is the
/// default too, as `state.*`'s `tenant_id`).
fn tenant_of(scope: Option<&serde_json::Map<String, Value>>) -> Result<Option<String>, RpcError> {
    match scope.and_then(|s| s.get("tenantId")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) if t.is_empty() => Ok(None),
        Some(Value::String(t)) if t.len() <= car_proto::methods::fields::MAX_NAME_BYTES => {
            Ok(Some(t.clone()))
        }
        Some(other) => Err(RpcError::invalid_params(format!(
            "scope.tenantId: must be a string of at most {} bytes, got {other}",
            car_proto::methods::fields::MAX_NAME_BYTES
        ))),
    }
}

pub(crate) async fn submit(call: Call, p: SubmitParams) -> Result<ProposalResult, RpcError> {
    let run_id = call.session.current_run();
    if let Some(run) = &run_id {
        if call.state.runs.live.resumed_by(run, &call.session) {
            return Err(RpcError::internal(format!(
                "run recovery only: run {run:?} was resumed on this connection, and a resumed run dispatches no new proposal (this daemon keeps no completed proposal response to replay)"
            ))
            .with_data(json!({"reason": "resumed_run", "run_id": run})));
        }
    }
    let work = run_id.as_ref().and_then(|r| call.state.runs.live.work(r));
    let session_id = p
        .session_id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| call.session.label());
    let tenant = tenant_of(p.scope.as_ref())?;
    let dirs = crate::state::policy_files::dirs(
        &call.state.daemon.state_root,
        std::env::current_dir().ok().as_deref(),
    );
    let file_rules =
        tokio::task::spawn_blocking(move || crate::state::policy_files::load_all(&dirs))
            .await
            .map_err(|e| RpcError::internal(format!("reading policy files: {e}")))?;
    let submission = replan::Submission {
        call: &call,
        session_id,
        tenant,
        run_id: run_id.clone(),
        file_rules: std::sync::Arc::new(file_rules),
        scope: p.scope,
    };
    let config = call.session.runtime(|rt| rt.replan.clone());
    let go = submission.run_with_replans(p.proposal, &config);
    let (raw, result) = match work {
        // `runs.cancel` stops the proposal: dropping it sends `tools.cancel` for every
        // callback still waiting (those the cancel did not withdraw itself).
        Some(work) => tokio::select! {
            biased;
            _ = work.cancelled() => return Err(run_cancelled(run_id.as_deref().unwrap_or_default())),
            result = go => result?,
        },
        None => go.await?,
    };
    let recorded = serde_json::to_value(&result).map_err(RpcError::internal)?;
    crate::state::run_records::record_proposal(&call.state, run_id, &raw, &recorded).await;
    Ok(result)
}
