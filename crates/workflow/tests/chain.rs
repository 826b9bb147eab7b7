//! workflow.chain: pre-validation, seeding and stopping.

mod common;

use car_workflow::{chain, RunStatus, WorkflowError};
use common::*;
use serde_json::{json, Value};

fn one(id: &str, step: Value) -> Value {
    json!({"id": id, "name": id, "start": "s", "stages": [stage("s", step)], "edges": []})
}

#[tokio::test]
async fn each_workflow_is_seeded_with_the_previous_final_state() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let flows = vec![
        one("w1", write("p1", "x", json!("from w1"))),
        one("w2", write("p2", "y", json!(2))),
    ];
    let r = chain(
        &fake,
        &store,
        flows,
        Some(obj(json!({"x": "init", "keep": true}))),
    )
    .await
    .unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.results.len(), 2);
    let Call::Proposal { state, .. } = &fake.calls()[1] else {
        panic!()
    };
    assert_eq!(state["x"], "from w1");
    assert_eq!(state["keep"], true);
    let last = &r.results[1].final_state;
    assert_eq!(
        (last["x"].clone(), last["y"].clone()),
        (json!("from w1"), json!(2))
    );
    let shown = serde_json::to_value(&r).unwrap();
    assert_eq!(shown["status"], "completed");
    assert!(shown.get("paused_at_index").is_none() && shown.get("error").is_none());
}

#[tokio::test]
async fn every_workflow_is_checked_before_any_runs() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let bad = json!({"id": "b", "name": "b", "start": "missing", "stages": [stage("s", pattern("t", json!({})))], "edges": []});
    let err = chain(
        &fake,
        &store,
        vec![one("w1", pattern("t", json!({}))), bad],
        None,
    )
    .await
    .unwrap_err();
    let WorkflowError::Invalid { path, message } = &err else {
        panic!("{err}")
    };
    assert_eq!(path, "workflows[1]");
    assert!(
        message.contains("start stage 'missing' does not exist"),
        "{message}"
    );

    let unparsable = json!({"id": "b", "name": "b", "start": "s", "edges": [],
        "stages": [stage("s", json!({"type": "approval", "output_key": "k"}))]});
    let err = chain(
        &fake,
        &store,
        vec![one("w1", pattern("t", json!({}))), unparsable],
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "workflows[1].stages[0].step: missing field `prompt`"
    );
    assert!(fake.calls().is_empty());
}

#[tokio::test]
async fn a_pause_stops_the_chain() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let flows = vec![
        one("w1", pattern("first", json!({}))),
        one(
            "w2",
            json!({"type": "approval", "prompt": "ok?", "output_key": "ok"}),
        ),
        one("w3", pattern("third", json!({}))),
    ];
    let r = chain(&fake, &store, flows, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Paused);
    assert_eq!(r.paused_at_index, Some(1));
    assert_eq!(r.results.len(), 2);
    assert!(r.results[1].paused.is_some());
    assert_eq!(fake.tasks(), ["first"]);
    assert_eq!(store.list_paused().len(), 1);
}

#[tokio::test]
async fn a_failed_run_stops_the_chain() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let flows = vec![
        one("w1", failing("f")),
        one("w2", pattern("never", json!({}))),
    ];
    let r = chain(&fake, &store, flows, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.failed_at_index, Some(0));
    assert!(r.error.is_none());
    assert!(fake.tasks().is_empty());
}
