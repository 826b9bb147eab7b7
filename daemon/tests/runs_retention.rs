//! Issue 24: runs used to be kept forever (one caller starting runs in a loop grew the
//! database without bound). `runs.delete` removes an ended run for its starter or a host,
//! and each owner keeps at most `MAX_ENDED_RUNS_PER_OWNER` ended runs. Drives a real daemon.

mod common;

use common::runs::refusal;
use common::*;
use serde_json::{json, Value};

/// Must match `car_server::services::run_retention::MAX_ENDED_RUNS_PER_OWNER`.
const KEEP: usize = 1000;

async fn start(ws: &mut Ws, key: &str) -> String {
    let r = ws
        .call(
            "runs.start",
            json!({"agent_name": "retention", "intent": "i", "idempotency_key": key}),
        )
        .await;
    r["result"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string()
}

async fn complete(ws: &mut Ws, run_id: &str) {
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id, "outcome": "success"}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
}

async fn exists(ws: &mut Ws, run_id: &str) -> bool {
    let r = ws.call("runs.get_trace", json!({"run_id": run_id})).await;
    assert!(r["result"].is_object(), "{r}");
    r["result"]["not_found"] != json!(true)
}

/// A daemon, a host session, a session of registered agent `agent`, and an operator session.
async fn setup(agent: &str) -> (Daemon, Ws, Ws, Ws) {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let agent = registered_agent(&d, &mut host, agent).await;
    let op = Ws::authed(&d).await;
    (d, host, agent, op)
}

#[tokio::test]
async fn a_run_is_deleted_only_when_ended_and_only_by_its_starter_or_a_host() {
    let (_daemon, mut host, mut agent, mut op) = setup("deleter").await;

    let run = start(&mut op, "to-delete").await;
    let r = op.call("runs.delete", json!({"run_id": run})).await;
    let (code, message, reason) = refusal(&r);
    assert_eq!((code, reason), (-32602, json!("run_running")), "{r}");
    assert!(message.contains("run_id"), "{message}");
    complete(&mut op, &run).await;

    // Another principal cannot delete it, and cannot tell it exists.
    let r = agent.call("runs.delete", json!({"run_id": run})).await;
    assert_eq!(r["result"], json!({"run_id": run, "deleted": false}), "{r}");
    assert!(exists(&mut host, &run).await);

    let r = op.call("runs.delete", json!({"run_id": run})).await;
    assert_eq!(r["result"], json!({"run_id": run, "deleted": true}), "{r}");
    assert!(!exists(&mut host, &run).await);
    let r = op.call("runs.delete", json!({"run_id": run})).await;
    assert_eq!(r["result"]["deleted"], false, "{r}");

    // A host deletes an agent's ended run.
    let theirs = start(&mut agent, "agents-run").await;
    complete(&mut agent, &theirs).await;
    let r = host.call("runs.delete", json!({"run_id": theirs})).await;
    assert_eq!(r["result"]["deleted"], true, "{r}");

    // Bad input names the field.
    for params in [json!({}), json!({"run_id": 5}), json!({"run_id": ""})] {
        let r = op.call("runs.delete", params.clone()).await;
        assert_eq!(code_of(&r), -32602, "{params}: {r}");
        assert!(message_of(&r).contains("run_id"), "{params}: {r}");
    }
}

fn code_of(r: &Value) -> i64 {
    r["error"]["code"].as_i64().unwrap_or_default()
}

fn message_of(r: &Value) -> String {
    r["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn each_owner_keeps_its_newest_ended_runs_and_no_more() {
    let (_daemon, mut host, mut agent, mut op) = setup("keeper").await;

    // The agent's one ended run is not pushed out by the user's many.
    let agents_run = start(&mut agent, "agent-old").await;
    complete(&mut agent, &agents_run).await;
    let mut runs = Vec::new();
    for i in 0..=KEEP {
        let run = start(&mut op, &format!("user-{i:04}")).await;
        complete(&mut op, &run).await;
        runs.push(run);
    }
    // KEEP + 1 ended runs: the next start prunes the oldest; a running one is never pruned.
    let running = start(&mut op, "user-running").await;
    assert!(
        !exists(&mut host, &runs[0]).await,
        "the oldest ended run is gone"
    );
    assert!(exists(&mut host, &runs[1]).await);
    assert!(exists(&mut host, &runs[KEEP]).await);
    assert!(exists(&mut host, &running).await);
    assert!(
        exists(&mut host, &agents_run).await,
        "another owner's run stays"
    );
}
