//! for_each, loop_until, deliver and dedup.

mod common;

use car_workflow::{run, CheckpointStore, RunStatus, StageStatus};
use common::*;
use serde_json::{json, Value};

fn single(step: Value) -> car_workflow::Workflow {
    wf(json!({"id": "w", "name": "W", "start": "s", "stages": [stage("s", step)], "edges": []}))
}

#[tokio::test]
async fn for_each_templates_the_body_and_writes_per_item_keys() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = single(
        json!({"type": "for_each", "items_from": "todo", "max_concurrent": 2,
        "body": pattern("do {{item}} #{{index}} ({{other}})", json!({"state": {"tag": "{{item}}"}}))}),
    );
    let init = obj(json!({"todo": ["x", "y", {"k": 1}]}));
    let r = run(&fake, &store, w, Some(init)).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    let mut tasks = fake.tasks();
    tasks.sort();
    assert_eq!(
        tasks,
        [
            "do x #0 ({{other}})",
            "do y #1 ({{other}})",
            "do {\"k\":1} #2 ({{other}})"
        ]
    );
    let s = &r.final_state;
    assert_eq!(s["foreach.s.count"], 3);
    assert_eq!(s["foreach.s.0.item"], "x");
    assert_eq!(s["foreach.s.2.item"], json!({"k": 1}));
    assert_eq!(s["foreach.s.1.answer"], "ans");
    assert_eq!(s["foreach.s.1.state.tag"], "y");
    assert_eq!(s["stage.s.count"], 3);
    assert_eq!(s["stage.s.answer"], "[\"ans\",\"ans\",\"ans\"]");
    assert_eq!(r.stages[0].output["results"][2]["item"], json!({"k": 1}));
}

#[tokio::test]
async fn for_each_over_nothing_is_a_no_op_and_a_failed_item_fails_the_stage() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let body = json!({"type": "for_each", "items_from": "missing", "body": pattern("t {{item}}", json!({}))});
    let r = run(
        &fake,
        &store,
        single(body),
        Some(obj(json!({"missing": "not a list"}))),
    )
    .await
    .unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.final_state["foreach.s.count"], 0);
    assert!(fake.calls().is_empty());

    let body = json!({"type": "for_each", "items_from": "xs", "body": {"type": "proposal",
        "proposal": {"actions": [{"id": "t", "type": "tool_call", "tool": "{{item}}"}]}}});
    let r = run(
        &fake,
        &store,
        single(body),
        Some(obj(json!({"xs": ["ok", "fail"]}))),
    )
    .await
    .unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.final_state["stage.s.failed_count"], 1);
    assert!(r.stages[0]
        .error
        .as_deref()
        .unwrap()
        .starts_with("1 of 2 items failed: item 1"));
}

#[tokio::test]
async fn loop_until_repeats_until_its_conditions_hold() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = single(json!({"type": "loop_until", "max_iterations": 10,
        "until": [{"key": "stage.s.calls", "op": "gte", "value": 3}],
        "body": pattern("refine", json!({"count": true}))}));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks().len(), 3);
    assert_eq!(r.final_state["stage.s.iterations"], 3);
    assert_eq!(r.final_state["stage.s.converged"], true);
    assert_eq!(r.final_state["stage.s.calls"], 3);

    let fake = Fake::new();
    let w = single(json!({"type": "loop_until", "max_iterations": 2,
        "until": [{"key": "never_set"}], "body": pattern("again", json!({}))}));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks().len(), 2);
    assert_eq!(r.final_state["stage.s.converged"], false);
    assert_eq!(r.stages[0].output["iterations"], 2);
}

fn sink(id: &str, tool: &str) -> Value {
    json!({"id": id, "actions": [{"id": "t", "type": "tool_call", "tool": tool,
        "parameters": {"text": "Report: {{payload}}"}}]})
}

#[tokio::test]
async fn deliver_is_best_effort_across_sinks() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let w = single(json!({"type": "deliver", "payload_key": "report",
        "sinks": [sink("email", "fail"), sink("slack", "post"), {"actions": [{"id": "t", "type": "tool_call", "tool": "error"}]}]}));
    let r = run(&fake, &store, w, Some(obj(json!({"report": "all green"}))))
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(r.final_state["stage.s.delivered_count"], 1);
    assert_eq!(r.final_state["stage.s.failed_count"], 2);
    let out = &r.stages[0].output;
    assert_eq!(out["type"], "deliver");
    let results = out["results"].as_array().unwrap();
    assert_eq!(results[0]["sink_id"], "email");
    assert_eq!(
        (results[0]["ok"].clone(), results[0]["error"].clone()),
        (json!(false), json!("tool failed"))
    );
    assert_eq!(
        (results[1]["sink_id"].clone(), results[1]["ok"].clone()),
        (json!("slack"), json!(true))
    );
    assert_eq!(
        (results[2]["sink_id"].clone(), results[2]["error"].clone()),
        (json!("sink-2"), json!("executor error"))
    );
    let Call::Proposal { proposal, .. } = &fake.calls()[1] else {
        panic!()
    };
    assert_eq!(
        proposal["actions"][0]["parameters"]["text"],
        "Report: all green"
    );

    let w = single(json!({"type": "deliver", "sinks": [sink("a", "fail"), sink("b", "fail")]}));
    let r = run(&fake, &store, w, None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stages[0].status, StageStatus::Failed);
    assert_eq!(r.stages[0].error.as_deref(), Some("all 2 sinks failed"));
}

fn dedup_wf(extra: Value) -> car_workflow::Workflow {
    let mut step =
        json!({"type": "dedup", "items_from": "items", "into": "fresh", "store": "news"});
    step.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    single(step)
}

#[tokio::test]
async fn dedup_remembers_items_across_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let store = CheckpointStore::new(tmp.path().join("workflow-runs"));
    assert_eq!(store.dedup_dir(), tmp.path().join("workflow-dedup"));
    let items = |v: Value| Some(obj(json!({"items": v})));

    let r = run(
        &fake,
        &store,
        dedup_wf(json!({})),
        items(json!([{"id": 1}, {"id": 2}])),
    )
    .await
    .unwrap();
    assert_eq!(r.final_state["fresh"], json!([{"id": 1}, {"id": 2}]));
    assert_eq!(r.final_state["stage.s.unseen_count"], 2);

    // A new store on the same dir (a daemon restart) still remembers.
    let store = CheckpointStore::new(tmp.path().join("workflow-runs"));
    let r = run(
        &fake,
        &store,
        dedup_wf(json!({})),
        items(json!([{"id": 2}, {"id": 3}, {"id": 3}])),
    )
    .await
    .unwrap();
    assert_eq!(r.final_state["fresh"], json!([{"id": 3}]));
    assert_eq!(r.final_state["stage.s.unseen_count"], 1);
    assert_eq!(r.final_state["stage.s.total_count"], 3);

    // hash_fields: only `id` counts.
    let w = dedup_wf(json!({"store": "by_id", "hash_fields": ["id"]}));
    run(&fake, &store, w.clone(), items(json!([{"id": 1, "at": 1}])))
        .await
        .unwrap();
    let r = run(
        &fake,
        &store,
        w,
        items(json!([{"id": 1, "at": 2}, {"id": 4, "at": 2}])),
    )
    .await
    .unwrap();
    assert_eq!(r.final_state["fresh"], json!([{"id": 4, "at": 2}]));
}

#[tokio::test]
async fn dedup_evicts_entries_older_than_the_ttl() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let store =
        CheckpointStore::new(tmp.path().join("runs")).with_dedup_dir(tmp.path().join("seen"));
    let items = Some(obj(json!({"items": ["a", "b"]})));
    run(
        &fake,
        &store,
        dedup_wf(json!({"ttl_secs": 3600})),
        items.clone(),
    )
    .await
    .unwrap();
    // Age the entry for "a" to 1970.
    let path = tmp.path().join("seen/news.json");
    let mut seen: serde_json::Map<String, Value> =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(seen.len(), 2);
    let first = seen.keys().next().unwrap().clone();
    seen.insert(first, json!(0));
    std::fs::write(&path, serde_json::to_vec(&seen).unwrap()).unwrap();

    let r = run(&fake, &store, dedup_wf(json!({"ttl_secs": 3600})), items)
        .await
        .unwrap();
    assert_eq!(r.final_state["stage.s.unseen_count"], 1);
    let bad = run(&fake, &store, dedup_wf(json!({"store": "../x"})), None)
        .await
        .unwrap();
    assert_eq!(bad.status, RunStatus::Failed);
}

#[tokio::test]
async fn adversarial_review_reads_its_work_from_state_and_fails_closed_without_it() {
    let (_tmp, store) = store();
    let fake = Fake::new();
    let review = |key: &str| {
        json!({"type": "pattern", "pattern": "adversarial_review", "task": "check it",
               "agents": [{"name": "reviewer"}], "config": {"review_key": key, "criteria": ["correct"]}})
    };
    let r = run(
        &fake,
        &store,
        single(review("draft")),
        Some(obj(json!({"draft": "the work"}))),
    )
    .await
    .unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    assert_eq!(fake.tasks(), ["check it\n\n## Work to review\nthe work"]);

    let fake = Fake::new();
    let r = run(&fake, &store, single(review("absent")), None)
        .await
        .unwrap();
    assert!(fake.calls().is_empty(), "no reviewer runs without work");
    assert_eq!(r.final_state["stage.s.review_passed"], false);
    assert_eq!(r.final_state["stage.s.answer"], "FAIL");
    assert_eq!(r.stages[0].status, StageStatus::Succeeded);
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_in_place_of_a_dedup_store_fails_the_step_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = Fake::new();
    let store =
        CheckpointStore::new(tmp.path().join("runs")).with_dedup_dir(tmp.path().join("seen"));
    std::fs::create_dir(tmp.path().join("seen")).unwrap();
    let fifo = tmp.path().join("seen/news.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // A blocking open would wait for a writer forever.
    let r = run(&fake, &store, dedup_wf(json!({})), None).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.stages[0].error.as_deref(),
        Some("cannot read dedup store \"news\": is a FIFO, not a regular file")
    );
}
