//! `workflow.chain`: several workflows in sequence, each seeded with the one before.
//!
//! Every workflow is parsed and verified before any runs; one that fails is an
//! [`WorkflowError::Invalid`] naming `workflows[<i>]` and nothing runs. Workflow `i` starts
//! from `initial_state` with workflow `i-1`'s final state merged over it (the previous
//! run's keys win). The chain stops at the first run that does not complete: a pause sets
//! `paused_at_index` (resuming that run with `workflow.resume` finishes only that
//! workflow, not the rest of the chain), a failed or compensated run sets
//! `failed_at_index`. An engine error (a checkpoint that cannot be written, …) keeps the
//! results so far and sets `error` and `failed_at_index`.

use serde_json::Value;

use crate::model::{parse, Object, Workflow};
use crate::{run, verify, CheckpointStore, RunStatus, StepExecutor, WorkflowError};

pub use car_proto::methods::workflow::ChainResult;

/// Run `workflows` (manifests) in order.
pub async fn chain(
    exec: &dyn StepExecutor,
    store: &CheckpointStore,
    workflows: Vec<Value>,
    initial_state: Option<Object>,
) -> Result<ChainResult, WorkflowError> {
    let mut parsed: Vec<Workflow> = Vec::with_capacity(workflows.len());
    for (i, manifest) in workflows.iter().enumerate() {
        let wf = parse(manifest).map_err(|e| match e {
            WorkflowError::Invalid { path, message } => {
                let path = match path.as_str() {
                    "workflow" => format!("workflows[{i}]"),
                    p => format!("workflows[{i}].{p}"),
                };
                WorkflowError::Invalid { path, message }
            }
            other => other,
        })?;
        let report = verify(&wf);
        if !report.valid {
            let issues: Vec<&str> = crate::verify::errors(&report).collect();
            return Err(WorkflowError::invalid(
                format!("workflows[{i}]"),
                format!(
                    "workflow '{}' does not verify: {}",
                    wf.id,
                    issues.join("; ")
                ),
            ));
        }
        parsed.push(wf);
    }

    let base = initial_state.unwrap_or_default();
    let mut out = ChainResult {
        results: Vec::new(),
        status: RunStatus::Completed,
        paused_at_index: None,
        error: None,
        failed_at_index: None,
    };
    for (i, wf) in parsed.into_iter().enumerate() {
        let mut seed = base.clone();
        if let Some(prev) = out.results.last() {
            seed.extend(prev.final_state.clone());
        }
        tracing::debug!(index = i, workflow = %wf.id, "chain step");
        match run(exec, store, wf, Some(seed)).await {
            Ok(result) => {
                let status = result.status;
                out.results.push(result);
                match status {
                    RunStatus::Completed => continue,
                    RunStatus::Paused => out.paused_at_index = Some(i),
                    RunStatus::Failed | RunStatus::Compensated => out.failed_at_index = Some(i),
                }
                out.status = status;
                break;
            }
            Err(e) => {
                tracing::warn!(index = i, error = %e, "chain stopped by an engine error");
                out.status = RunStatus::Failed;
                out.error = Some(e.to_string());
                out.failed_at_index = Some(i);
                break;
            }
        }
    }
    Ok(out)
}
