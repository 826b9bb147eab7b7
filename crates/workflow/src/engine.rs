//! Traversal, saga compensation, pausing and resuming.
//!
//! A run walks the stage graph from `start`: each stage execution counts one iteration
//! (more than `max_iterations` fails the run with "cycle limit …", without compensation);
//! the stage's step runs (bounded by `timeout_ms`), and `stage.<id>.succeeded` /
//! `stage.<id>.answer` plus the step's own keys are written to the state; then the first
//! edge out of the stage whose conditions hold picks the next stage, and none completes
//! the run. A failed stage ends the run: the compensation step of each stage that had
//! succeeded runs, most recent first and once per stage (status `compensated` if any ran,
//! else `failed`). An approval stage pauses a top-level run into a [`Checkpoint`]; inside a
//! sub-workflow it cannot pause, and fails its stage instead.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::checkpoint::{new_run_id, Checkpoint, CheckpointStore};
use crate::condition::next_edge;
use crate::model::{ApprovalField, Object, Stage, StageStep, Workflow};
use crate::steps::{run_step, StepRun};
use crate::{verify, StepExecutor, WorkflowError};

pub use car_proto::methods::workflow::{
    CompensationResult, RunStatus, StageResult, StageStatus, WorkflowResult,
};

/// What a traversal needs besides the workflow.
pub(crate) struct Ctx<'a> {
    pub exec: &'a dyn StepExecutor,
    pub store: &'a CheckpointStore,
    /// Prefixed onto pattern tasks.
    pub goal: Option<&'a str>,
    /// Inside a sub-workflow, where approvals cannot pause.
    pub nested: bool,
}

pub(crate) enum End {
    Completed,
    Paused(String),
    Failed,
    Compensated,
}

pub(crate) struct Traversal {
    pub end: End,
    pub state: Object,
    pub results: Vec<StageResult>,
    pub compensations: Vec<CompensationResult>,
    pub iterations: u32,
    pub error: Option<String>,
}

pub(crate) fn pin_goal(state: &mut Object, goal: Option<&str>) {
    if let Some(goal) = goal {
        state.insert("goal".into(), Value::String(goal.into()));
    }
}

/// Walk the graph from `next` until the run completes, fails or pauses.
pub(crate) async fn traverse(
    ctx: &Ctx<'_>,
    wf: &Workflow,
    mut next: Option<String>,
    mut state: Object,
    mut results: Vec<StageResult>,
    mut iterations: u32,
) -> Traversal {
    while let Some(id) = next.take() {
        iterations += 1;
        let stop = |end, error, state, results, compensations| Traversal {
            end,
            state,
            results,
            compensations,
            iterations,
            error,
        };
        if iterations > wf.max_iterations {
            let error = format!(
                "cycle limit of {} iterations exceeded at stage '{id}'",
                wf.max_iterations
            );
            tracing::warn!(workflow = %wf.id, %error, "workflow stopped");
            return stop(End::Failed, Some(error), state, results, Vec::new());
        }
        let Some(stage) = wf.stage(&id) else {
            let error = format!("stage '{id}' does not exist");
            return stop(End::Failed, Some(error), state, results, Vec::new());
        };
        if matches!(stage.step, StageStep::Approval(_)) && !ctx.nested {
            tracing::info!(workflow = %wf.id, stage = %id, "workflow paused for approval");
            return stop(End::Paused(id), None, state, results, Vec::new());
        }
        tracing::debug!(workflow = %wf.id, stage = %id, kind = stage.step.kind(), "stage started");
        let started = Instant::now();
        let run = if matches!(stage.step, StageStep::Approval(_)) {
            StepRun::failed(
                "approval",
                "an approval inside a sub_workflow cannot pause the run",
            )
        } else {
            run_timed(ctx, stage, &stage.step, &state).await
        };
        record(&mut state, &id, &run, ctx.goal);
        results.push(StageResult {
            stage_id: id.clone(),
            stage_name: stage.name.clone(),
            status: if run.succeeded {
                StageStatus::Succeeded
            } else {
                StageStatus::Failed
            },
            output: run.output,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            error: run.error.clone(),
        });
        if !run.succeeded {
            tracing::warn!(workflow = %wf.id, stage = %id, error = ?run.error, "stage failed");
            let compensations = compensate(ctx, wf, &results, &mut state).await;
            let status = if compensations.is_empty() {
                End::Failed
            } else {
                End::Compensated
            };
            return stop(status, None, state, results, compensations);
        }
        next = next_edge(wf, &id, &state).map(|e| e.to.clone());
    }
    Traversal {
        end: End::Completed,
        state,
        results,
        compensations: Vec::new(),
        iterations,
        error: None,
    }
}

/// Run a stage's step (or its compensation) under the stage's timeout.
async fn run_timed(ctx: &Ctx<'_>, stage: &Stage, step: &StageStep, state: &Object) -> StepRun {
    let fut = run_step(ctx, &stage.id, step, state);
    match stage.timeout_ms {
        Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
            Ok(run) => run,
            Err(_) => StepRun::failed(step.kind(), format!("stage timed out after {ms} ms")),
        },
        None => fut.await,
    }
}

/// Write a stage's keys: the step's global writes, then `stage.<id>.*`.
pub(crate) fn record(state: &mut Object, id: &str, run: &StepRun, goal: Option<&str>) {
    state.extend(run.global.clone());
    state.insert(format!("stage.{id}.succeeded"), Value::Bool(run.succeeded));
    state.insert(
        format!("stage.{id}.answer"),
        Value::String(run.answer.clone()),
    );
    for (k, v) in &run.scoped {
        state.insert(format!("stage.{id}.{k}"), v.clone());
    }
    pin_goal(state, goal);
}

/// The saga: compensate succeeded stages, most recent first, each stage once.
async fn compensate(
    ctx: &Ctx<'_>,
    wf: &Workflow,
    results: &[StageResult],
    state: &mut Object,
) -> Vec<CompensationResult> {
    let mut done = HashSet::new();
    let mut out = Vec::new();
    for r in results.iter().rev() {
        if r.status != StageStatus::Succeeded || !done.insert(r.stage_id.as_str()) {
            continue;
        }
        let Some((stage, step)) = wf
            .stage(&r.stage_id)
            .and_then(|s| s.compensation.as_ref().map(|c| (s, c)))
        else {
            continue;
        };
        tracing::info!(workflow = %wf.id, stage = %stage.id, "compensating");
        let run = run_timed(ctx, stage, step, state).await;
        state.extend(run.global);
        pin_goal(state, ctx.goal);
        out.push(CompensationResult {
            stage_id: stage.id.clone(),
            status: if run.succeeded {
                StageStatus::Succeeded
            } else {
                StageStatus::Failed
            },
            output: Some(run.output),
            error: run.error,
        });
    }
    out
}

fn refuse_invalid(wf: &Workflow, path: &str) -> Result<(), WorkflowError> {
    let report = verify(wf);
    if report.valid {
        return Ok(());
    }
    Err(WorkflowError::invalid(
        path,
        crate::verify::errors(&report)
            .collect::<Vec<_>>()
            .join("; "),
    ))
}

/// Run a workflow from its `start` stage. `initial_state` seeds the state (`goal` is
/// pinned over it). A workflow that does not verify is refused.
pub async fn run(
    exec: &dyn StepExecutor,
    store: &CheckpointStore,
    wf: Workflow,
    initial_state: Option<Object>,
) -> Result<WorkflowResult, WorkflowError> {
    refuse_invalid(&wf, "workflow")?;
    let started = Instant::now();
    tracing::info!(workflow = %wf.id, "workflow run started");
    let mut state = initial_state.unwrap_or_default();
    pin_goal(&mut state, wf.goal.as_deref());
    let ctx = Ctx {
        exec,
        store,
        goal: wf.goal.as_deref(),
        nested: false,
    };
    let t = traverse(&ctx, &wf, Some(wf.start.clone()), state, Vec::new(), 0).await;
    finish(store, &wf, None, t, started)
}

/// Continue a paused run with the approver's `input`.
pub async fn resume(
    exec: &dyn StepExecutor,
    store: &CheckpointStore,
    run_id: &str,
    input: Object,
) -> Result<WorkflowResult, WorkflowError> {
    let cp = store.claim(run_id)?;
    let checked = validate_input(&cp.fields, &input).and_then(|()| {
        let wf = crate::checkpoint::workflow_of(&cp)?;
        refuse_invalid(&wf, "checkpoint.workflow")?;
        wf.stage(&cp.paused_stage_id)
            .map(|s| (s.id.clone(), s.name.clone(), wf.clone()))
            .ok_or_else(|| {
                WorkflowError::Store(format!("checkpoint {run_id} names an unknown stage"))
            })
    });
    let (stage_id, stage_name, wf) = match checked {
        Ok(stage) => stage,
        Err(e) => {
            store.restore(run_id);
            return Err(e);
        }
    };
    let started = Instant::now();
    tracing::info!(run_id, workflow = %wf.id, stage = %stage_id, "workflow resumed");
    let mut state = cp.wf_state;
    let response = Value::Object(input.clone());
    state.insert(cp.output_key.clone(), response.clone());
    for (k, v) in input {
        state.insert(format!("{}.{k}", cp.output_key), v);
    }
    let approved = StepRun {
        output: json!({"type": "approval", "response": response}),
        answer: response.to_string(),
        succeeded: true,
        error: None,
        scoped: Object::new(),
        global: Object::new(),
    };
    record(&mut state, &stage_id, &approved, wf.goal.as_deref());
    let mut results = cp.stage_results;
    results.push(StageResult {
        stage_id: stage_id.clone(),
        stage_name,
        status: StageStatus::Succeeded,
        output: approved.output,
        duration_ms: 0.0,
        error: None,
    });
    let next = next_edge(&wf, &stage_id, &state).map(|e| e.to.clone());
    let ctx = Ctx {
        exec,
        store,
        goal: wf.goal.as_deref(),
        nested: false,
    };
    let t = traverse(&ctx, &wf, next, state, results, cp.iterations).await;
    let result = finish(store, &wf, Some(run_id.to_string()), t, started)?;
    store.release(run_id);
    Ok(result)
}

/// Check resume input against the gate's fields: required ones present and not null,
/// values of fields with `options` among them (a list value: every element).
fn validate_input(fields: &[ApprovalField], input: &Object) -> Result<(), WorkflowError> {
    for f in fields {
        let path = format!("input.{}", f.name);
        let value = input.get(&f.name).filter(|v| !v.is_null());
        match (value, &f.options) {
            (None, _) if f.required => {
                return Err(WorkflowError::invalid(path, "required field is missing"));
            }
            (Some(v), Some(options)) => {
                let ok = |v: &Value| v.as_str().is_some_and(|s| options.iter().any(|o| o == s));
                let valid = match v {
                    Value::Array(items) => items.iter().all(ok),
                    other => ok(other),
                };
                if !valid {
                    return Err(WorkflowError::invalid(
                        path,
                        format!("must be one of {options:?}, got {v}"),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Turn a traversal into the result, writing a checkpoint if it paused.
fn finish(
    store: &CheckpointStore,
    wf: &Workflow,
    run_id: Option<String>,
    t: Traversal,
    started: Instant,
) -> Result<WorkflowResult, WorkflowError> {
    let (status, paused) = match t.end {
        End::Completed => (RunStatus::Completed, None),
        End::Failed => (RunStatus::Failed, None),
        End::Compensated => (RunStatus::Compensated, None),
        End::Paused(stage_id) => {
            let Some(StageStep::Approval(gate)) = wf.stage(&stage_id).map(|s| &s.step) else {
                return Err(WorkflowError::Store(format!(
                    "paused at a non-approval stage '{stage_id}'"
                )));
            };
            let cp = Checkpoint {
                run_id: match run_id {
                    Some(id) => id,
                    None => new_run_id(),
                },
                workflow: crate::checkpoint::manifest_of(wf)?,
                paused_stage_id: stage_id,
                prompt: gate.prompt.clone(),
                fields: gate.fields.clone(),
                output_key: gate.output_key.clone(),
                wf_state: t.state.clone(),
                stage_results: t.results.clone(),
                created_at: car_proto::clock::now_rfc3339(),
                iterations: t.iterations,
            };
            store.save(&cp)?;
            tracing::info!(run_id = %cp.run_id, stage = %cp.paused_stage_id, "workflow checkpoint written");
            (RunStatus::Paused, Some(cp))
        }
    };
    tracing::info!(workflow = %wf.id, ?status, "workflow run ended");
    Ok(WorkflowResult {
        workflow_id: wf.id.clone(),
        workflow_name: wf.name.clone(),
        status,
        stages: t.results,
        compensations: t.compensations,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        timestamp: car_proto::clock::now_rfc3339(),
        final_state: t.state,
        paused,
        error: t.error,
    })
}
