//! Executing one step. Patterns and proposals go to the [`StepExecutor`]; the rest are
//! interpreted here:
//!
//! * `loop_until` runs its body on a working copy of the state (each pass sees the last one's
//!   writes, and `stage.<id>.answer`/`.iteration`) until every `until` condition holds or
//!   `max_iterations` passes ran; running out is not a failure (`stage.<id>.converged` is false). A
//!   failed pass fails the stage.
//! * `for_each` runs the body once per element of the array at `items_from` (absent or not an
//!   array: nothing to do), at most `max_concurrent` at a time (default [`DEFAULT_CONCURRENCY`]),
//!   each against the state as the stage began, with `{{item}}`/`{{index}}` substituted into every
//!   string of the body. Each item's keys go under `foreach.<id>.<i>.` so parallel items never
//!   collide; any failed item fails the stage.
//! * `sub_workflow` runs inline on a copy of the state; its final state is merged back.
//! * `dedup` and `deliver`: see [`crate::dedup`] and [`deliver`].
//!
//! [`StepExecutor`]: crate::StepExecutor

use futures_util::future;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::engine::{pin_goal, traverse, Ctx, End, StageStatus};
use crate::model::{
    DeliverStep, ForEachStep, LoopUntilStep, Object, PatternStep, StageStep, SubWorkflowStep,
};
use crate::template::{render, substitute};
use crate::{condition, dedup, BoxFuture};

/// `for_each` items in flight when the manifest sets no `max_concurrent`.
pub const DEFAULT_CONCURRENCY: u32 = 4;

/// What a step produced.
#[derive(Debug, Clone)]
pub(crate) struct StepRun {
    pub output: Value,
    pub answer: String,
    pub succeeded: bool,
    pub error: Option<String>,
    /// Keys stored as `stage.<id>.<key>`.
    pub scoped: Object,
    /// Keys stored as they are.
    pub global: Object,
}

impl StepRun {
    pub(crate) fn ok(output: Value, answer: String) -> Self {
        StepRun {
            output,
            answer,
            succeeded: true,
            error: None,
            scoped: Object::new(),
            global: Object::new(),
        }
    }

    pub(crate) fn failed(kind: &str, error: impl Into<String>) -> Self {
        let error = error.into();
        StepRun {
            output: json!({"type": kind, "error": error}),
            answer: String::new(),
            succeeded: false,
            error: Some(error),
            scoped: Object::new(),
            global: Object::new(),
        }
    }
}

/// Run `step` for stage `stage_id` against `state`.
pub(crate) fn run_step<'a>(
    ctx: &'a Ctx<'a>,
    stage_id: &'a str,
    step: &'a StageStep,
    state: &'a Object,
) -> BoxFuture<'a, StepRun> {
    Box::pin(async move {
        match step {
            StageStep::Pattern(p) => pattern(ctx, p, state).await,
            StageStep::Proposal(p) => proposal(ctx, p.proposal.as_value(), state).await,
            StageStep::SubWorkflow(s) => sub_workflow(ctx, s, state).await,
            StageStep::Approval(_) => {
                StepRun::failed("approval", "an approval gate cannot run as a nested step")
            }
            StageStep::LoopUntil(l) => loop_until(ctx, stage_id, l, state).await,
            StageStep::ForEach(f) => for_each(ctx, stage_id, f, state).await,
            StageStep::Dedup(d) => match dedup::run(ctx.store.dedup_dir(), d, state) {
                Ok(run) => run,
                Err(e) => StepRun::failed("dedup", e),
            },
            StageStep::Deliver(d) => deliver(ctx, d, state).await,
        }
    })
}

async fn pattern(ctx: &Ctx<'_>, p: &PatternStep, state: &Object) -> StepRun {
    let mut task = match ctx.goal {
        Some(goal) => format!("Overall goal: {goal}\nCurrent step: {}", p.task),
        None => p.task.clone(),
    };
    // `adversarial_review` reviews the work held at `config.review_key`; with no work there
    // it fails closed (CAR's rule): a FAIL verdict, no reviewer run.
    if p.pattern == crate::model::PatternKind::AdversarialReview {
        if let Some(key) = p.config.get("review_key").and_then(Value::as_str) {
            match state.get(key).filter(|v| !v.is_null()) {
                Some(work) => task = format!("{task}\n\n## Work to review\n{}", render(work)),
                None => {
                    let mut run = StepRun::ok(
                        json!({"type": "pattern", "outputs": [], "final_answer": "FAIL"}),
                        "FAIL".to_string(),
                    );
                    run.scoped.insert("review_passed".into(), json!(false));
                    run.scoped.insert(
                        "review_error".into(),
                        json!(format!("no work to review at state key '{key}'")),
                    );
                    return run;
                }
            }
        }
    }
    match ctx
        .exec
        .run_pattern(p.pattern, &task, &p.agents, &p.config)
        .await
    {
        Ok(o) => {
            let error = (!o.succeeded).then(|| {
                let agent_errors: Vec<String> = o
                    .outputs
                    .iter()
                    .filter_map(|a| a.error.as_ref().map(|e| format!("{}: {e}", a.name)))
                    .collect();
                if agent_errors.is_empty() {
                    "pattern did not succeed".to_string()
                } else {
                    format!("pattern did not succeed ({})", agent_errors.join("; "))
                }
            });
            StepRun {
                output: json!({"type": "pattern", "outputs": o.outputs, "final_answer": o.final_answer}),
                answer: o.final_answer,
                succeeded: o.succeeded,
                error,
                scoped: o.state,
                global: Object::new(),
            }
        }
        Err(e) => StepRun::failed("pattern", e),
    }
}

async fn proposal(ctx: &Ctx<'_>, proposal: &Value, state: &Object) -> StepRun {
    match ctx.exec.run_proposal(proposal, state).await {
        Ok(o) => StepRun {
            answer: render(&o.result),
            output: json!({"type": "proposal", "result": o.result}),
            error: if o.succeeded {
                None
            } else {
                Some(o.error.unwrap_or_else(|| "proposal did not succeed".into()))
            },
            succeeded: o.succeeded,
            scoped: Object::new(),
            global: o.state_writes,
        },
        Err(e) => StepRun::failed("proposal", e),
    }
}

async fn sub_workflow(ctx: &Ctx<'_>, s: &SubWorkflowStep, state: &Object) -> StepRun {
    let wf = &*s.workflow;
    let sub = Ctx {
        exec: ctx.exec,
        store: ctx.store,
        goal: wf.goal.as_deref().or(ctx.goal),
        nested: true,
    };
    let mut seed = state.clone();
    pin_goal(&mut seed, wf.goal.as_deref());
    let t = traverse(&sub, wf, Some(wf.start.clone()), seed, Vec::new(), 0).await;
    let (status, succeeded) = match t.end {
        End::Completed => ("completed", true),
        End::Compensated => ("compensated", false),
        End::Failed | End::Paused(_) => ("failed", false),
    };
    let answer = t
        .results
        .last()
        .and_then(|r| t.state.get(&format!("stage.{}.answer", r.stage_id)))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let error = (!succeeded).then(|| {
        t.error.clone().unwrap_or_else(|| {
            let failed = t
                .results
                .iter()
                .rev()
                .find(|r| r.status == StageStatus::Failed);
            match failed {
                Some(r) => format!(
                    "sub_workflow '{}' {status} at stage '{}': {}",
                    wf.id,
                    r.stage_id,
                    r.error.as_deref().unwrap_or("failed")
                ),
                None => format!("sub_workflow '{}' {status}", wf.id),
            }
        })
    });
    StepRun {
        output: json!({
            "type": "sub_workflow", "workflow_id": wf.id, "status": status,
            "stages": t.results, "compensations": t.compensations,
        }),
        answer,
        succeeded,
        error,
        scoped: Object::new(),
        global: t.state,
    }
}

async fn loop_until(ctx: &Ctx<'_>, stage_id: &str, l: &LoopUntilStep, state: &Object) -> StepRun {
    let mut work = state.clone();
    let mut scoped = Object::new();
    let mut global = Object::new();
    let mut last = Value::Null;
    let mut answer = String::new();
    let mut passes = 0;
    let mut converged = false;
    while passes < l.max_iterations {
        passes += 1;
        let run = run_step(ctx, stage_id, &l.body, &work).await;
        for (k, v) in run.global {
            work.insert(k.clone(), v.clone());
            global.insert(k, v);
        }
        for (k, v) in run.scoped {
            work.insert(format!("stage.{stage_id}.{k}"), v.clone());
            scoped.insert(k, v);
        }
        work.insert(
            format!("stage.{stage_id}.answer"),
            Value::String(run.answer.clone()),
        );
        work.insert(format!("stage.{stage_id}.iteration"), json!(passes));
        pin_goal(&mut work, ctx.goal);
        last = run.output;
        answer = run.answer;
        if !run.succeeded {
            let error = format!(
                "loop pass {passes} failed: {}",
                run.error.as_deref().unwrap_or("failed")
            );
            let mut out = StepRun::failed("loop_until", error);
            out.output = json!({"type": "loop_until", "iterations": passes, "converged": false, "last": last});
            out.scoped = scoped;
            out.global = global;
            return out;
        }
        if condition::all_hold(&l.until, &work) {
            converged = true;
            break;
        }
    }
    scoped.insert("iterations".into(), json!(passes));
    scoped.insert("converged".into(), Value::Bool(converged));
    let mut out = StepRun::ok(
        json!({"type": "loop_until", "iterations": passes, "converged": converged, "last": last}),
        answer,
    );
    out.scoped = scoped;
    out.global = global;
    out
}

async fn for_each(ctx: &Ctx<'_>, stage_id: &str, f: &ForEachStep, state: &Object) -> StepRun {
    let items = match state.get(&f.items_from) {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    let bodies: Vec<Result<StageStep, String>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut body = serde_json::to_value(&*f.body).map_err(|e| e.to_string())?;
            substitute(
                &mut body,
                &[("item", render(item)), ("index", i.to_string())],
            );
            serde_json::from_value(body).map_err(|e| format!("templated body is invalid: {e}"))
        })
        .collect();
    let limit = f.max_concurrent.unwrap_or(DEFAULT_CONCURRENCY).max(1) as usize;
    // Boxed up front (not an `async` closure) so the stream's futures are plainly `Send`.
    let futures: Vec<BoxFuture<'_, StepRun>> = bodies
        .iter()
        .map(|body| match body {
            Ok(step) => run_step(ctx, stage_id, step, state),
            Err(e) => Box::pin(future::ready(StepRun::failed(f.body.kind(), e.clone()))),
        })
        .collect();
    let runs: Vec<StepRun> = stream::iter(futures).buffered(limit).collect().await;

    let mut global = Object::new();
    let mut results = Vec::with_capacity(runs.len());
    let mut answers = Vec::with_capacity(runs.len());
    let mut failures = Vec::new();
    for (i, (item, run)) in items.iter().zip(runs).enumerate() {
        let prefix = format!("foreach.{stage_id}.{i}");
        global.insert(format!("{prefix}.item"), item.clone());
        global.insert(
            format!("{prefix}.answer"),
            Value::String(run.answer.clone()),
        );
        for (k, v) in run.scoped.into_iter().chain(run.global) {
            global.insert(format!("{prefix}.state.{k}"), v);
        }
        if let Some(e) = &run.error {
            failures.push(format!("item {i}: {e}"));
        }
        answers.push(Value::String(run.answer.clone()));
        results.push(json!({
            "index": i, "item": item, "succeeded": run.succeeded,
            "answer": run.answer, "output": run.output, "error": run.error,
        }));
    }
    global.insert(format!("foreach.{stage_id}.count"), json!(items.len()));
    let failed = results.iter().filter(|r| r["succeeded"] == false).count();
    let mut out = StepRun::ok(
        json!({"type": "for_each", "count": items.len(), "results": results}),
        Value::Array(answers).to_string(),
    );
    out.scoped.insert("count".into(), json!(items.len()));
    out.scoped.insert("failed_count".into(), json!(failed));
    out.global = global;
    if failed > 0 {
        out.succeeded = false;
        out.error = Some(format!(
            "{failed} of {} items failed: {}",
            items.len(),
            failures.join("; ")
        ));
    }
    out
}

/// Each sink is a proposal, run in order; a failed sink does not stop the others, and the
/// stage fails only when every sink failed. With `payload_key`, `{{payload}}` in a sink
/// becomes that state entry (missing: `null`). Sinks are named by their proposal `id`,
/// else `sink-<index>`.
async fn deliver(ctx: &Ctx<'_>, d: &DeliverStep, state: &Object) -> StepRun {
    let payload = d
        .payload_key
        .as_ref()
        .map(|k| render(state.get(k).unwrap_or(&Value::Null)));
    let mut results = Vec::with_capacity(d.sinks.len());
    let mut global = Object::new();
    let (mut delivered, mut failed) = (0usize, 0usize);
    for (i, sink) in d.sinks.iter().enumerate() {
        let mut proposal = sink.as_value().clone();
        if let Some(payload) = &payload {
            substitute(&mut proposal, &[("payload", payload.clone())]);
        }
        let sink_id = proposal
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("sink-{i}"), str::to_string);
        let outcome = ctx.exec.run_proposal(&proposal, state).await;
        let entry = match outcome {
            Ok(o) if o.succeeded => {
                global.extend(o.state_writes);
                json!({"sink_id": sink_id, "ok": true, "result": o.result})
            }
            Ok(o) => {
                global.extend(o.state_writes);
                let error = o.error.unwrap_or_else(|| "sink did not succeed".into());
                json!({"sink_id": sink_id, "ok": false, "result": o.result, "error": error})
            }
            Err(e) => json!({"sink_id": sink_id, "ok": false, "error": e}),
        };
        if entry["ok"] == true {
            delivered += 1;
        } else {
            tracing::warn!(%sink_id, error = %entry["error"], "workflow delivery sink failed");
            failed += 1;
        }
        results.push(entry);
    }
    let mut out = StepRun::ok(
        json!({"type": "deliver", "results": results}),
        format!("delivered to {delivered} of {} sinks", d.sinks.len()),
    );
    out.scoped
        .insert("delivered_count".into(), json!(delivered));
    out.scoped.insert("failed_count".into(), json!(failed));
    out.global = global;
    if delivered == 0 && failed > 0 {
        out.succeeded = false;
        out.error = Some(format!("all {failed} sinks failed"));
    }
    out
}
