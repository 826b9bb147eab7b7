//! Issue 4 acceptance 7: the event log and run records are durable and queryable.

mod common;

use common::*;
use serde_json::{json, Value};

async fn run_proposal(d: &Daemon, id: &str) {
    let mut ws = Ws::authed(d).await;
    let r = ws
        .call("proposal.submit", json!({"proposal": {"id": id, "actions": [
            {"id": format!("{id}-w"), "type": "state_write", "key": "k", "value": 1},
            {"id": format!("{id}-d"), "type": "state_delete", "key": "k", "dependencies": [format!("{id}-w")]}
        ]}}))
        .await;
    assert_eq!(r["result"]["proposal_id"], id, "{r}");
}

#[tokio::test]
async fn events_survive_a_restart_and_filters_work() {
    let mut d = Daemon::start();
    run_proposal(&d, "p1").await;
    run_proposal(&d, "p2").await;
    let home = d.home.clone();
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    let mut ws = Ws::authed(&d).await;
    let total = ws.call("events.count", json!({})).await["result"]
        .as_i64()
        .unwrap();
    assert!(total >= 8, "{total}");
    let all = ws.call("events.query", json!({"limit": 1000})).await["result"].clone();
    let ids: Vec<i64> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
    let p1 = ws.call("events.query", json!({"proposal_id": "p1"})).await["result"].clone();
    assert!(p1
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["proposal_id"] == "p1"));
    assert!(p1
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "proposal.completed"));
    let writes = ws
        .call(
            "events.query",
            json!({"kinds": ["state.written"], "action_id": "p2-w"}),
        )
        .await["result"]
        .clone();
    assert_eq!(writes.as_array().unwrap().len(), 1);
    assert_eq!(writes[0]["data"], json!({"key": "k"}));
    let limited = ws.call("events.query", json!({"limit": 2})).await["result"].clone();
    assert_eq!(limited.as_array().unwrap().len(), 2);
    let newest = all[0]["ts_ms"].as_i64().unwrap();
    let none = ws.call("events.query", json!({"since": newest + 1})).await["result"].clone();
    assert_eq!(none, json!([]));
    let upto = ws
        .call("events.query", json!({"until": newest, "limit": 1000}))
        .await["result"]
        .clone();
    assert_eq!(
        upto.as_array().unwrap().len(),
        all.as_array().unwrap().len()
    );
    let stats = ws.call("events.stats", json!({})).await["result"].clone();
    assert_eq!(stats["total"], total);
    assert_eq!(stats["by_kind"]["proposal.submitted"], 2);
    for (params, field) in [
        (json!({"limit": 0}), "limit"),
        (json!({"limit": 20000}), "limit"),
        (json!({"kinds": "x"}), "kinds"),
        (json!({"kinds": []}), "kinds"),
        (json!({"since": -1}), "since"),
        (json!({"since": 5, "until": 4}), "since"),
        (json!({"bogus": 1}), "bogus"),
    ] {
        let r = ws.call("events.query", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params}");
        assert!(message(&r).contains(field), "{params} → {r}");
    }
}

fn run_id(v: &Value) -> String {
    v["result"]["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run_id in {v}"))
        .to_string()
}

#[tokio::test]
async fn runs_are_durable_idempotent_and_owned() {
    let mut d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let first = ws.call("runs.start", json!({"intent": "ship the release", "idempotency_key": "rel-1", "agent_name": "shipper"})).await;
    assert_eq!(first["result"]["created"], true);
    assert_eq!(first["result"]["status"], "running");
    let again = ws
        .call(
            "runs.start",
            json!({"intent": "ship the release", "idempotency_key": "rel-1"}),
        )
        .await;
    assert_eq!(
        (run_id(&again), again["result"]["created"].clone()),
        (run_id(&first), json!(false))
    );
    let done = ws
        .call(
            "runs.start",
            json!({"intent": "done run", "idempotency_key": "rel-2"}),
        )
        .await;
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&done), "outcome": "success", "summary": "all good"}),
        )
        .await;
    assert_eq!(
        (
            r["result"]["status"].clone(),
            r["result"]["outcome"].clone()
        ),
        (json!("completed"), json!("success"))
    );
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&done), "outcome": "failure"}),
        )
        .await;
    assert_eq!(code(&r), -32602);
    assert!(message(&r).contains("already completed"), "{r}");
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": "run-nope", "outcome": "success"}),
        )
        .await;
    assert!(message(&r).contains("no run"), "{r}");
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&first), "outcome": "great"}),
        )
        .await;
    assert!(message(&r).contains("outcome must be"), "{r}");

    // A subscriber sees trace records as they happen.
    let mut watcher = Ws::authed(&d).await;
    watcher.call("runs.subscribe", json!({})).await;
    let mut starter = Ws::authed(&d).await;
    let dropped = starter
        .call("runs.start", json!({"intent": "abandoned"}))
        .await;
    let event = watcher.recv_json().await;
    assert_eq!(event["method"], "runs.trace.event");
    assert_eq!(
        (
            event["params"]["run_id"].as_str().unwrap(),
            event["params"]["record"]["kind"].clone()
        ),
        (run_id(&dropped).as_str(), json!("started"))
    );
    drop(starter); // its connection closes: the run is marked incomplete
    let event = watcher.recv_json().await;
    assert_eq!(event["params"]["record"]["kind"], "incomplete");

    // A host sees every run; the same runs survive a restart.
    let home = d.home.clone();
    drop(ws);
    drop(watcher);
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    let mut host = Ws::host(&d).await;
    let runs = host.call("runs.list", json!({})).await["result"].clone();
    let status = |id: &str| {
        runs.as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == id)
            .map(|r| r["status"].clone())
    };
    assert_eq!(status(&run_id(&done)), Some(json!("completed")));
    assert_eq!(status(&run_id(&dropped)), Some(json!("incomplete")));
    // The first run was still running when the daemon stopped.
    assert_eq!(status(&run_id(&first)), Some(json!("incomplete")));
    let mut ws = Ws::authed(&d).await;
    let again = ws
        .call(
            "runs.start",
            json!({"intent": "ship the release", "idempotency_key": "rel-1"}),
        )
        .await;
    assert_eq!(
        run_id(&again),
        run_id(&first),
        "idempotency survives restart"
    );
    let trace = ws
        .call("runs.get_trace", json!({"run_id": run_id(&done)}))
        .await["result"]
        .clone();
    let kinds: Vec<&str> = trace["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["started", "completed"]);
    assert_eq!(
        ws.call("runs.list", json!({"status": "completed"})).await["result"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // An incomplete run may still be completed.
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&first), "outcome": "cancelled"}),
        )
        .await;
    assert_eq!(r["result"]["outcome"], "cancelled");
    for (method, params, field) in [
        ("runs.start", json!({}), "intent"),
        ("runs.start", json!({"intent": "   "}), "intent"),
        ("runs.start", json!({"intent": 5}), "intent"),
        ("runs.list", json!({"status": "odd"}), "status"),
        ("runs.get_trace", json!({"run_id": 1}), "run_id"),
    ] {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(code(&r), -32602, "{method} {params}");
        assert!(message(&r).contains(field), "{method} {params} → {r}");
    }
}
