//! Edges, conditions, cycles, failures, compensation, timeouts, goals and sub-workflows.

mod common;

use car_workflow::{run, RunStatus, StageStatus, WorkflowError};
use common::*;
use serde_json::{json, Value};

fn branching(score: Value) -> car_workflow::Workflow {
    wf(json!({
        "id": "br", "name": "Branch", "start": "a",
        "stages": [
            stage("a", pattern("score", json!({"state": {"score": score, "flag": "true"}}))),
            stage("hi", pattern("high", json!({}))),
            stage("lo", pattern("low", json!({}))),
            stage("never", pattern("never", json!({}))),
        ],
        "edges": [
            {"from": "a", "to": "never", "conditions": [{"key": "stage.a.flag", "value": true}]},
            {"from": "a", "to": "hi", "conditions": [
                {"key": "stage.a.score", "op": "gt", "value": 5},
                {"key": "stage.a.succeeded", "value": true}]},
            {"from": "a", "to": "lo", "label": "otherwise"},
        ],
    }))
}

#[tokio::test]
async fn the_first_edge_whose_conditions_hold_is_taken() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let r = run(&fake, &store, branching(json!(7)), None).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks(), ["score", "high"]);

    let fake = Fake::new();
    let r = run(&fake, &store, branching(json!(3)), None).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks(), ["score", "low"]);
    assert_eq!(r.final_state["stage.a.score"], 3);
    assert_eq!(r.final_state["stage.lo.succeeded"], true);
}

#[tokio::test]
async fn cycles_stop_at_max_iterations() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "loop", "name": "Ping pong", "start": "a", "max_iterations": 5,
        "stages": [stage("a", pattern("ping", json!({}))), stage("b", pattern("pong", json!({})))],
        "edges": [edge("a", "b"), edge("b", "a")],
    }));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stages.len(), 5);
    assert!(r.compensations.is_empty());
    let error = r.error.unwrap();
    assert!(
        error.starts_with("cycle limit of 5 iterations exceeded"),
        "{error}"
    );
}

#[tokio::test]
async fn a_failure_compensates_succeeded_stages_in_reverse() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "saga", "name": "Saga", "start": "s1",
        "stages": [
            {"id": "s1", "name": "one", "step": write("do1", "r1", json!("held")),
             "compensation": write("undo1", "r1", json!("released"))},
            {"id": "s2", "name": "two", "step": pattern("two", json!({})),
             "compensation": write("undo2", "r2", json!("released"))},
            stage("s3", pattern("three", json!({}))),
            {"id": "s4", "name": "four", "step": pattern("four", json!({"fail": true})),
             "compensation": write("undo4", "r4", json!("never"))},
        ],
        "edges": [edge("s1", "s2"), edge("s2", "s3"), edge("s3", "s4")],
    }));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Compensated);
    assert_eq!(fake.proposal_ids(), ["do1", "undo2", "undo1"]);
    let comp: Vec<&str> = r
        .compensations
        .iter()
        .map(|c| c.stage_id.as_str())
        .collect();
    assert_eq!(comp, ["s2", "s1"]);
    assert!(r
        .compensations
        .iter()
        .all(|c| c.status == StageStatus::Succeeded));
    let last = r.stages.last().unwrap();
    assert_eq!(
        (last.stage_id.as_str(), last.status),
        ("s4", StageStatus::Failed)
    );
    assert!(last.error.as_deref().unwrap().contains("did not succeed"));
    assert_eq!(r.final_state["stage.s4.succeeded"], false);
    assert_eq!(r.final_state["r1"], "released");
    let shown = serde_json::to_value(&r).unwrap();
    assert_eq!(shown["status"], "compensated");
    assert_eq!(shown["compensations"][0]["status"], "succeeded");
}

#[tokio::test]
async fn a_failure_without_compensations_is_failed() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "f", "name": "Fails", "start": "a",
        "stages": [stage("a", pattern("a", json!({}))),
                   stage("b", pattern("b", json!({"error": "model unavailable"}))),
                   stage("c", pattern("c", json!({})))],
        "edges": [edge("a", "b"), edge("b", "c")],
    }));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stages[1].error.as_deref(), Some("model unavailable"));
    assert_eq!(fake.tasks(), ["a", "b"]);
}

#[tokio::test]
async fn a_stage_timeout_fails_the_stage() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "t", "name": "Slow", "start": "a",
        "stages": [{"id": "a", "name": "slow", "timeout_ms": 20,
                    "step": pattern("slow", json!({"sleep_ms": 2000}))}],
        "edges": [],
    }));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.stages[0].error.as_deref(),
        Some("stage timed out after 20 ms")
    );
}

#[tokio::test]
async fn the_goal_is_pinned_and_prefixes_pattern_tasks() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "g", "name": "Goal", "start": "a", "goal": "ship v2",
        "stages": [stage("a", pattern("write notes", json!({}))), stage("b", write("w", "goal", json!("hijack")))],
        "edges": [edge("a", "b")],
    }));
    let r = run(
        &fake,
        &store,
        w,
        Some(obj(json!({"goal": "other", "seed": 1}))),
    )
    .await
    .unwrap();
    assert_eq!(
        fake.tasks(),
        ["Overall goal: ship v2\nCurrent step: write notes"]
    );
    assert_eq!(r.final_state["goal"], "ship v2");
    assert_eq!(r.final_state["seed"], 1);
}

#[tokio::test]
async fn proposals_merge_their_writes_and_see_the_state() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({
        "id": "p", "name": "Proposal", "start": "a",
        "stages": [stage("a", write("p1", "ticket", json!({"n": 7}))),
                   stage("b", write("p2", "done", json!(true)))],
        "edges": [{"from": "a", "to": "b", "conditions": [{"key": "ticket.n", "operator": "gte", "value": 7}]}],
    }));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.final_state["ticket"], json!({"n": 7}));
    assert_eq!(r.final_state["done"], true);
    assert_eq!(r.stages[0].output["type"], "proposal");
    assert_eq!(
        r.final_state["stage.a.answer"],
        "{\"applied\":1,\"id\":\"p1\"}"
    );
    let Call::Proposal { state, .. } = &fake.calls()[1] else {
        panic!()
    };
    assert_eq!(state["ticket"], json!({"n": 7}));
}

#[tokio::test]
async fn sub_workflows_run_inline_and_merge_their_state() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let inner = json!({
        "id": "inner", "name": "Inner", "start": "x",
        "stages": [stage("x", write("ix", "from_inner", json!(1))), stage("y", pattern("inner y", json!({"answer": "Y"})))],
        "edges": [edge("x", "y")],
    });
    let w = wf(json!({
        "id": "outer", "name": "Outer", "start": "s",
        "stages": [stage("s", json!({"type": "sub_workflow", "workflow": inner})),
                   stage("after", pattern("after", json!({})))],
        "edges": [{"from": "s", "to": "after", "conditions": [{"key": "from_inner", "value": 1}]}],
    }));
    let r = run(&fake, &store, w, Some(obj(json!({"outer_seed": true}))))
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks(), ["inner y", "after"]);
    assert_eq!(r.final_state["stage.y.answer"], "Y");
    assert_eq!(r.final_state["stage.s.answer"], "Y");
    assert_eq!(r.stages[0].output["status"], "completed");
    assert_eq!(r.stages[0].output["stages"].as_array().unwrap().len(), 2);
    let Call::Proposal { state, .. } = &fake.calls()[0] else {
        panic!()
    };
    assert_eq!(state["outer_seed"], true);
}

#[tokio::test]
async fn invalid_workflows_are_refused_before_running() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = wf(json!({"id": "x", "name": "x", "start": "nope",
        "stages": [stage("a", pattern("a", json!({})))], "edges": []}));
    let err = run(&fake, &store, w, None).await.unwrap_err();
    assert_eq!(
        err,
        WorkflowError::Invalid {
            path: "workflow".into(),
            message: "start stage 'nope' does not exist".into()
        }
    );
    assert!(fake.calls().is_empty());
}

#[test]
fn run_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = branching(json!(1));
    let fut = run(&fake, &store, w, None);
    assert_send(&fut);
    let res = car_workflow::resume(&fake, &store, "x", Default::default());
    assert_send(&res);
    let ch = car_workflow::chain(&fake, &store, vec![], None);
    assert_send(&ch);
}
