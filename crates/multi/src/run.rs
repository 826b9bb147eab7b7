//! One guarded agent call, and parallel batches of them.
//!
//! [`run_agent`] = budget admission → runner call (timed) → error mapping → spend
//! recording. [`run_parallel`] admits the whole batch first (so `max_agents` caps a
//! parallel batch exactly) and then awaits the admitted calls together with `join_all`.

use std::time::Instant;

use car_proto::methods::multi::{AgentOutput, AgentSpec};
use futures_util::future::join_all;

use crate::budget::{budget_refusal, Budget};
use crate::AgentRunner;

/// Run one agent under `budget`: a refused agent yields [`budget_refusal`]'s output, a
/// runner error yields `AgentOutput::failed(name, "agent '{name}' failed: {e}")`.
pub async fn run_agent(
    runner: &dyn AgentRunner,
    budget: &Budget,
    spec: &AgentSpec,
    task: &str,
) -> AgentOutput {
    match budget.admit(&spec.name) {
        Ok(()) => call_admitted(runner, budget, spec, task).await,
        Err(msg) => budget_refusal(&spec.name, msg),
    }
}

/// Run a batch of `(spec, task)` jobs concurrently; outputs are in job order.
pub async fn run_parallel(
    runner: &dyn AgentRunner,
    budget: &Budget,
    jobs: &[(AgentSpec, String)],
) -> Vec<AgentOutput> {
    // Pre-flight: every admission decision is taken before any agent of the batch starts.
    let admissions: Vec<Result<(), String>> = jobs
        .iter()
        .map(|(spec, _)| budget.admit(&spec.name))
        .collect();
    let calls = jobs
        .iter()
        .zip(admissions)
        .map(|((spec, task), admission)| async move {
            match admission {
                Ok(()) => call_admitted(runner, budget, spec, task).await,
                Err(msg) => budget_refusal(&spec.name, msg),
            }
        });
    join_all(calls).await
}

/// The call itself, for an agent already admitted by `budget`.
pub(crate) async fn call_admitted(
    runner: &dyn AgentRunner,
    budget: &Budget,
    spec: &AgentSpec,
    task: &str,
) -> AgentOutput {
    let name = spec.name.as_str();
    tracing::debug!(agent = name, task_bytes = task.len(), "agent starting");
    let started = Instant::now();
    let result = runner.run(spec, task).await;
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    let out = match result {
        Ok(mut out) => {
            if out.name.is_empty() {
                out.name = name.to_owned();
            }
            if out.duration_ms == 0.0 {
                out.duration_ms = elapsed_ms;
            }
            match &out.error {
                None => tracing::debug!(agent = name, elapsed_ms, "agent finished"),
                Some(e) => tracing::warn!(agent = name, error = %e, "agent reported an error"),
            }
            out
        }
        Err(e) => {
            tracing::warn!(agent = name, error = %e, "agent runner failed");
            let mut out = AgentOutput::failed(name, format!("agent '{name}' failed: {e}"));
            out.duration_ms = elapsed_ms;
            out
        }
    };
    budget.record(out.tokens.as_ref());
    out
}

/// The `(name, answer)` pairs of the agents that succeeded, names taken from the specs.
pub(crate) fn successes<'a>(
    specs: &'a [AgentSpec],
    outputs: &'a [AgentOutput],
) -> Vec<(&'a str, &'a str)> {
    specs
        .iter()
        .zip(outputs)
        .filter(|(_, out)| out.succeeded())
        .map(|(spec, out)| (spec.name.as_str(), out.answer.as_str()))
        .collect()
}

/// `jobs` giving every spec the same task.
pub(crate) fn same_task(specs: &[AgentSpec], task: &str) -> Vec<(AgentSpec, String)> {
    specs
        .iter()
        .map(|spec| (spec.clone(), task.to_owned()))
        .collect()
}
