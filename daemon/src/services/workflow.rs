//! `workflow.*` on `car-workflow`: the daemon's [`StepExecutor`] runs pattern stages with
//! `car-multi` (agents through the caller's runner or the daemon's, see
//! [`crate::handler::agent_runner`]) and proposal stages with the proposal engine (tools called
//! back on the calling connection, against the workflow's own state). Checkpoints:
//! `CAR_HOME/workflow-runs/`; dedup seen-sets: `CAR_HOME/workflow-dedup/`.
//!
//! Pattern kinds map onto the multi patterns: `swarm_*` → `multi.swarm` (parallel,
//! sequential, hybrid), `pipeline`, `vote`, `supervisor` (the last agent supervises, or
//! `config.supervisor_index`; `config.max_rounds`), `map_reduce` (`agents[0]` maps
//! `config.items`, `agents[1]` reduces), `tournament` (the last agent judges, or
//! `config.judge_index`), `delegator` and `fleet` → a parallel swarm, and
//! `adversarial_review` → `agents[0]` reviews the task (to which the engine appends the work
//! held at `config.review_key`, failing closed when there is none) against
//! `config.criteria` and must answer PASS or FAIL (`stage.<id>.review_passed`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use car_multi::AgentRunner;
use car_proto::errors::RpcError;
use car_proto::methods::fields::NoParams;
use car_proto::methods::multi::{self as mm, AgentSpec, SwarmMode};
use car_proto::methods::proposal::SubmitParams;
use car_proto::methods::workflow::{self as m, PausedRow, VerifyReply};
use car_workflow::{BoxFuture, Object, PatternKind, PatternOutcome, ProposalOutcome, StepExecutor};
use serde_json::{json, Value};

use crate::handler::agent_runner::SessionRunner;
use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Run, _, _>(run)
        .add::<m::Chain, _, _>(chain)
        .add::<m::Resume, _, _>(resume)
        .add::<m::ListPaused, _, _>(list_paused)
        .add::<m::Verify, _, _>(verify);
}

struct Executor {
    call: Call,
    runner: SessionRunner,
}

fn index(config: &Object, key: &str, len: usize) -> usize {
    config
        .get(key)
        .and_then(Value::as_u64)
        .map(|i| i as usize)
        .filter(|&i| i < len)
        .unwrap_or(len.saturating_sub(1))
}

fn split(agents: &[AgentSpec], at: usize) -> (Vec<AgentSpec>, AgentSpec) {
    let mut rest = agents.to_vec();
    let picked = rest.remove(at);
    (rest, picked)
}

impl Executor {
    async fn pattern(
        &self,
        kind: PatternKind,
        task: &str,
        agents: &[AgentSpec],
        config: &Object,
    ) -> Result<PatternOutcome, String> {
        if agents.is_empty() {
            return Err("the pattern names no agents".into());
        }
        let runner: &dyn AgentRunner = &self.runner;
        let task = task.to_string();
        let swarm = |mode| mm::SwarmParams {
            mode,
            agents: agents.to_vec(),
            task: task.clone(),
            synthesizer: None,
            budget: None,
            runner: None,
        };
        let (outputs, final_answer, state) = match kind {
            PatternKind::SwarmParallel | PatternKind::Delegator | PatternKind::Fleet => {
                let r = car_multi::swarm(runner, swarm(SwarmMode::Parallel)).await;
                (r.outputs, r.final_summary, Object::new())
            }
            PatternKind::SwarmSequential => {
                let r = car_multi::swarm(runner, swarm(SwarmMode::Sequential)).await;
                (r.outputs, r.final_summary, Object::new())
            }
            PatternKind::SwarmDebate => {
                let r = car_multi::swarm(runner, swarm(SwarmMode::Hybrid)).await;
                (r.outputs, r.final_summary, Object::new())
            }
            PatternKind::Pipeline => {
                let r = car_multi::pipeline(
                    runner,
                    mm::PipelineParams {
                        stages: agents.to_vec(),
                        task,
                        budget: None,
                        runner: None,
                    },
                )
                .await;
                (r.stages, r.final_answer, Object::new())
            }
            PatternKind::Vote => {
                let r = car_multi::vote(
                    runner,
                    mm::VoteParams {
                        agents: agents.to_vec(),
                        task,
                        synthesizer: None,
                        budget: None,
                        runner: None,
                    },
                )
                .await;
                (r.votes, r.winner, Object::new())
            }
            PatternKind::Supervisor => {
                if agents.len() < 2 {
                    return Err("supervisor: needs at least one worker and a supervisor".into());
                }
                let (workers, supervisor) =
                    split(agents, index(config, "supervisor_index", agents.len()));
                let max_rounds = config
                    .get("max_rounds")
                    .and_then(Value::as_u64)
                    .map(|n| n.max(1) as u32);
                let r = car_multi::supervisor(
                    runner,
                    mm::SupervisorParams {
                        workers,
                        supervisor,
                        task,
                        max_rounds,
                        budget: None,
                        runner: None,
                    },
                )
                .await
                .map_err(|e| e.to_string())?;
                let mut state = Object::new();
                state.insert("approved".into(), json!(r.approved));
                (
                    r.rounds.into_iter().flatten().collect(),
                    r.final_answer,
                    state,
                )
            }
            PatternKind::MapReduce => {
                if agents.len() < 2 {
                    return Err("map_reduce: needs a mapper and a reducer agent".into());
                }
                let items: Vec<String> = config
                    .get("items")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let r = car_multi::map_reduce(
                    runner,
                    mm::MapReduceParams {
                        mapper: agents[0].clone(),
                        reducer: agents[1].clone(),
                        items,
                        task,
                        budget: None,
                        runner: None,
                    },
                )
                .await;
                (r.map_outputs, r.reduced_answer, Object::new())
            }
            PatternKind::Tournament => {
                if agents.len() < 2 {
                    return Err("tournament: needs at least one competitor and a judge".into());
                }
                let (competitors, judge) =
                    split(agents, index(config, "judge_index", agents.len()));
                let r = car_multi::tournament(
                    runner,
                    mm::TournamentParams {
                        competitors,
                        judge,
                        task,
                        budget: None,
                        runner: None,
                    },
                )
                .await;
                let mut state = Object::new();
                state.insert("winner".into(), json!(r.winner_name));
                (r.candidates, r.winner_answer, state)
            }
            PatternKind::AdversarialReview => {
                let criteria: Vec<String> = config
                    .get("criteria")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|c| c.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let prompt = format!(
                    "Review the following work critically.\n\n{task}\n\nCriteria:\n{}\n\nAnswer PASS if it meets every criterion, else FAIL, then say why.",
                    if criteria.is_empty() { "- it accomplishes the task".to_string() } else { criteria.iter().map(|c| format!("- {c}")).collect::<Vec<_>>().join("\n") }
                );
                let budget = car_multi::Budget::new(None);
                let out = car_multi::run_agent(runner, &budget, &agents[0], &prompt).await;
                let upper = out.answer.to_uppercase();
                let passed =
                    out.error.is_none() && upper.contains("PASS") && !upper.contains("FAIL");
                let mut state = Object::new();
                state.insert("review_passed".into(), json!(passed));
                let summary = if passed { "PASS" } else { "FAIL" }.to_string();
                (vec![out], summary, state)
            }
        };
        let succeeded = outputs.iter().any(|o| o.error.is_none());
        Ok(PatternOutcome {
            outputs,
            final_answer,
            state,
            succeeded,
        })
    }

    /// A proposal stage: run against the workflow's state, in a private state partition of
    /// the connection seeded with it (so `require_state` policies and the actions read the
    /// workflow's state, not the connection's), reporting only the keys the proposal
    /// changed (a deleted key as `null`). The partition is removed afterwards, whatever
    /// happened.
    async fn proposal(&self, proposal: &Value, state: &Object) -> Result<ProposalOutcome, String> {
        static NEXT_STAGE: AtomicU64 = AtomicU64::new(1);
        let Value::Object(map) = proposal.clone() else {
            return Err("the proposal is not an object".into());
        };
        let tenant = format!(
            "\u{0}workflow-stage-{}",
            NEXT_STAGE.fetch_add(1, Ordering::Relaxed)
        );
        let before: BTreeMap<String, Value> = state.clone().into_iter().collect();
        let session = &self.call.session;
        session.runtime(|rt| rt.seed_partition(&tenant, before.clone()));
        struct Drop<'a>(&'a crate::state::session::Session, &'a str);
        impl std::ops::Drop for Drop<'_> {
            fn drop(&mut self) {
                self.0.runtime(|rt| rt.take_partition(self.1));
            }
        }
        let _cleanup = Drop(session, &tenant);
        let mut scope = serde_json::Map::new();
        scope.insert("tenantId".into(), Value::String(tenant.clone()));
        let result = self
            .call
            .invoke::<car_proto::methods::proposal::Submit>(SubmitParams {
                proposal: map,
                session_id: None,
                scope: Some(scope),
            })
            .await
            .map_err(|e| e.message)?;
        let after = session.runtime(|rt| rt.take_partition(&tenant));
        let mut state_writes: serde_json::Map<String, Value> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for key in before.keys().filter(|k| !after.contains_key(*k)) {
            state_writes.insert(key.clone(), Value::Null);
        }
        let error = result.errors.first().cloned();
        let succeeded = result.errors.is_empty();
        let mut result = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        // The stage's view: its writes, not the private partition's name.
        result["final_state"] = Value::Object(after.into_iter().collect());
        Ok(ProposalOutcome {
            result,
            state_writes,
            succeeded,
            error,
        })
    }
}

impl StepExecutor for Executor {
    fn run_pattern<'a>(
        &'a self,
        kind: PatternKind,
        task: &'a str,
        agents: &'a [AgentSpec],
        config: &'a Object,
    ) -> BoxFuture<'a, Result<PatternOutcome, String>> {
        Box::pin(self.pattern(kind, task, agents, config))
    }

    fn run_proposal<'a>(
        &'a self,
        proposal: &'a Value,
        state: &'a Object,
    ) -> BoxFuture<'a, Result<ProposalOutcome, String>> {
        Box::pin(self.proposal(proposal, state))
    }
}

fn executor(call: &Call, runner: Option<mm::RunnerChoice>) -> Executor {
    Executor {
        call: call.clone(),
        runner: SessionRunner::new(call, runner),
    }
}

async fn run(call: Call, p: m::RunParams) -> Result<m::WorkflowResult, RpcError> {
    let wf = car_workflow::parse(&Value::Object(p.workflow)).map_err(RpcError::from)?;
    let exec = executor(&call, p.runner);
    car_workflow::run(&exec, &call.state.data.workflows, wf, p.initial_state)
        .await
        .map_err(RpcError::from)
}

async fn chain(call: Call, p: m::ChainParams) -> Result<m::ChainResult, RpcError> {
    let exec = executor(&call, p.runner);
    let workflows = p.workflows.into_iter().map(Value::Object).collect();
    car_workflow::chain(
        &exec,
        &call.state.data.workflows,
        workflows,
        p.initial_state,
    )
    .await
    .map_err(RpcError::from)
}

async fn resume(call: Call, p: m::ResumeParams) -> Result<m::WorkflowResult, RpcError> {
    let run_id = match (&p.run_id, &p.paused) {
        (Some(id), _) => id.to_string(),
        (None, Some(paused)) => paused
            .get("run_id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| RpcError::invalid_params("paused.run_id: is required"))?
            .to_string(),
        (None, None) => {
            return Err(RpcError::invalid_params(
                "run_id: is required (or the paused checkpoint)",
            ))
        }
    };
    let exec = executor(&call, p.runner);
    car_workflow::resume(
        &exec,
        &call.state.data.workflows,
        &run_id,
        p.input.unwrap_or_default(),
    )
    .await
    .map_err(RpcError::from)
}

async fn list_paused(call: Call, _: NoParams) -> Result<Vec<PausedRow>, RpcError> {
    let store = call.state.data.workflows.clone();
    tokio::task::spawn_blocking(move || store.list_paused())
        .await
        .map_err(|e| RpcError::internal(format!("workflow.list_paused failed: {e}")))
}

async fn verify(_call: Call, p: m::VerifyParams) -> Result<VerifyReply, RpcError> {
    let wf = car_workflow::parse(&Value::Object(p.workflow)).map_err(RpcError::from)?;
    Ok(car_workflow::verify(&wf))
}
