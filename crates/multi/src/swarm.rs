//! `multi.swarm` (parallel, sequential, hybrid/debate) and `multi.pipeline`.
//!
//! - parallel: every agent on the task at once;
//! - sequential / pipeline: one after another, each agent reading the successful earlier agents'
//!   answers ([`prompts::with_findings`]);
//! - hybrid (CAR's `debate`): round 1 in parallel on the task, round 2 in parallel with the other
//!   agents' round-1 answers; an agent whose round-2 call failed (or was refused) keeps its round-1
//!   output.
//!
//! A swarm's `final_summary` is its synthesizer's answer; with no synthesizer, or when it
//! fails or is refused, the `## name` concatenation of the successful answers. The
//! synthesizer is not called when no agent succeeded (there is nothing to synthesize).

use car_proto::methods::multi::{
    AgentOutput, AgentSpec, PipelineParams, PipelineResult, SwarmMode, SwarmParams, SwarmResult,
};

use crate::budget::Budget;
use crate::prompts;
use crate::run::{run_agent, run_parallel, same_task, successes};
use crate::AgentRunner;

/// Run a swarm.
pub async fn swarm(runner: &dyn AgentRunner, p: SwarmParams) -> SwarmResult {
    let budget = Budget::new(p.budget);
    tracing::info!(mode = ?p.mode, agents = p.agents.len(), "multi.swarm starting");
    let outputs = match p.mode {
        SwarmMode::Parallel => run_parallel(runner, &budget, &same_task(&p.agents, &p.task)).await,
        SwarmMode::Sequential => sequential(runner, &budget, &p.agents, &p.task).await,
        SwarmMode::Hybrid => debate(runner, &budget, &p.agents, &p.task).await,
    };
    let answers = successes(&p.agents, &outputs);
    let mut final_summary = None;
    if let (Some(synth), false) = (&p.synthesizer, answers.is_empty()) {
        let out = run_agent(
            runner,
            &budget,
            synth,
            &prompts::synthesize(&p.task, &answers),
        )
        .await;
        if out.succeeded() {
            final_summary = Some(out.answer);
        } else {
            tracing::warn!(
                synthesizer = synth.name.as_str(),
                error = out.error.as_deref().unwrap_or(""),
                "synthesizer produced nothing; concatenating the agents' answers"
            );
        }
    }
    let final_summary = final_summary.unwrap_or_else(|| prompts::concatenate(&answers));
    tracing::info!(succeeded = answers.len(), "multi.swarm finished");
    SwarmResult {
        task: p.task,
        outputs,
        final_summary,
    }
}

/// Run a pipeline: stages in order, each reading the earlier stages' findings.
pub async fn pipeline(runner: &dyn AgentRunner, p: PipelineParams) -> PipelineResult {
    let budget = Budget::new(p.budget);
    tracing::info!(stages = p.stages.len(), "multi.pipeline starting");
    let stages = sequential(runner, &budget, &p.stages, &p.task).await;
    let final_answer = stages
        .last()
        .filter(|out| out.succeeded())
        .map(|out| out.answer.clone())
        .unwrap_or_default();
    tracing::info!("multi.pipeline finished");
    PipelineResult {
        task: p.task,
        stages,
        final_answer,
    }
}

async fn sequential(
    runner: &dyn AgentRunner,
    budget: &Budget,
    specs: &[AgentSpec],
    task: &str,
) -> Vec<AgentOutput> {
    let mut outputs: Vec<AgentOutput> = Vec::with_capacity(specs.len());
    for spec in specs {
        let prompt = prompts::with_findings(task, &successes(specs, &outputs));
        outputs.push(run_agent(runner, budget, spec, &prompt).await);
    }
    outputs
}

async fn debate(
    runner: &dyn AgentRunner,
    budget: &Budget,
    specs: &[AgentSpec],
    task: &str,
) -> Vec<AgentOutput> {
    let first = run_parallel(runner, budget, &same_task(specs, task)).await;
    let jobs: Vec<(AgentSpec, String)> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let others: Vec<(&str, &str)> = specs
                .iter()
                .zip(&first)
                .enumerate()
                .filter(|(j, (_, out))| *j != i && out.succeeded())
                .map(|(_, (other, out))| (other.name.as_str(), out.answer.as_str()))
                .collect();
            (spec.clone(), prompts::debate_revision(task, &others))
        })
        .collect();
    let second = run_parallel(runner, budget, &jobs).await;
    first
        .into_iter()
        .zip(second)
        .map(|(r1, r2)| if r2.succeeded() { r2 } else { r1 })
        .collect()
}
