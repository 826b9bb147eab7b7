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

/// RFC 3339 text (UTC, milliseconds) of a Unix-milliseconds time.
fn rfc3339(ms: i64) -> String {
    car_proto::clock::rfc3339_from_ms(ms)
}

/// `events.query` → its `{count, events}` result, checking `count` is the events' number.
async fn query(ws: &mut Ws, params: Value) -> Vec<Value> {
    let r = ws.call("events.query", params.clone()).await;
    let events = r["result"]["events"]
        .as_array()
        .unwrap_or_else(|| panic!("{params} → {r}"))
        .clone();
    assert_eq!(r["result"]["count"], events.len(), "{params} → {r}");
    events
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
        .as_u64()
        .unwrap();
    assert!(total >= 8, "{total}");
    // No limit (or 0) returns every event, up to 10000.
    let all = query(&mut ws, json!({})).await;
    assert_eq!(all.len() as u64, total);
    assert_eq!(query(&mut ws, json!({"limit": 0})).await, all);
    assert_eq!(query(&mut ws, json!({"limit": 20000})).await, all);
    let ids: Vec<i64> = all.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first");
    let p1 = query(&mut ws, json!({"proposal_id": "p1"})).await;
    assert!(p1.iter().all(|e| e["proposal_id"] == "p1"), "{p1:?}");
    assert!(p1.iter().any(|e| e["kind"] == "proposal.completed"));
    let writes = query(
        &mut ws,
        json!({"kinds": ["state.written"], "action_id": "p2-w"}),
    )
    .await;
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["data"], json!({"key": "k"}));
    // data_matches compares fields of the event's data.
    let by_data = query(
        &mut ws,
        json!({"kinds": ["state.written", "state.deleted"], "data_matches": {"key": "k"}}),
    )
    .await;
    let actions: Vec<&str> = by_data
        .iter()
        .map(|e| e["action_id"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["p2-d", "p2-w", "p1-d", "p1-w"]);
    assert!(query(&mut ws, json!({"data_matches": {"key": "other"}}))
        .await
        .is_empty());
    assert_eq!(query(&mut ws, json!({"limit": 2})).await, all[..2]);
    // Time bounds: Unix milliseconds (both inclusive) or RFC 3339 (until exclusive).
    let newest = all[0]["ts_ms"].as_i64().unwrap();
    let oldest = all.last().unwrap()["ts_ms"].as_i64().unwrap();
    for (params, expected) in [
        (json!({"since": newest + 1}), 0),
        (json!({"until": newest}), all.len()),
        (json!({"until": oldest - 1}), 0),
        (json!({"since": rfc3339(newest + 1)}), 0),
        (json!({"since": rfc3339(oldest)}), all.len()),
        (json!({"until": rfc3339(newest + 1)}), all.len()),
        (json!({"until": rfc3339(oldest)}), 0),
        (
            json!({"since": oldest, "until": rfc3339(newest + 1)}),
            all.len(),
        ),
    ] {
        assert_eq!(
            query(&mut ws, params.clone()).await.len(),
            expected,
            "{params}"
        );
    }
    // An empty kinds list and unknown fields filter nothing.
    assert_eq!(query(&mut ws, json!({"kinds": []})).await, all);
    assert_eq!(query(&mut ws, json!({"bogus": 1})).await, all);
    let stats = ws.call("events.stats", json!({})).await["result"].clone();
    assert_eq!(stats["total"], total);
    assert_eq!(stats["by_kind"]["proposal.submitted"], 2);
    assert_eq!(
        (stats["first_ms"].clone(), stats["last_ms"].clone()),
        (json!(oldest), json!(newest))
    );
    for (params, expected) in [
        (
            json!({"kinds": "x"}),
            "invalid params: kinds: invalid type: string \"x\", expected a sequence",
        ),
        (
            json!({"since": -1}),
            "invalid params: since: data did not match any variant of untagged enum TimeBound",
        ),
        (
            json!({"since": 5, "until": 4}),
            "invalid params: since: (5) is after until (4)",
        ),
        (
            json!({"since": "yesterday"}),
            "invalid params: since: \"yesterday\" is not an RFC 3339 time",
        ),
        (
            json!({"data_matches": 3}),
            "invalid params: data_matches: invalid type: integer `3`, expected a map",
        ),
    ] {
        let r = ws.call("events.query", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{params} → {r}"
        );
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
    let first = ws.call("runs.start", json!({"intent": "ship the release", "idempotency_key": "rel-1", "agent_name": "Shipper", "outcome_description": "the release is out"})).await;
    let run = &first["result"];
    assert_eq!(
        (
            run["run_id"].clone(),
            run["agent_id"].clone(),
            run["agent_name"].clone(),
            run["intent"].clone(),
            run["status"].clone(),
            run["created"].clone()
        ),
        (
            json!("rel-1"),
            json!("name:shipper"),
            json!("Shipper"),
            json!("ship the release"),
            json!("running"),
            json!(true)
        ),
        "{first}"
    );
    let again = ws
        .call(
            "runs.start",
            json!({"intent": "ship the release", "idempotency_key": "rel-1", "agent_name": "Shipper"}),
        )
        .await;
    assert_eq!(
        (run_id(&again), again["result"]["created"].clone()),
        (run_id(&first), json!(false))
    );
    // A run needs an owning agent.
    let r = ws.call("runs.start", json!({"intent": "nobody's"})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: agent_id: a run needs an owning agent: send agent_id or agent_name, or authenticate as an agent"
        )
    );
    let done = ws
        .call(
            "runs.start",
            json!({"intent": "done run", "idempotency_key": "rel-2", "agent_name": "Shipper"}),
        )
        .await;
    // A bare status string, with the summary beside it.
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&done), "outcome": "success", "summary": "all good"}),
        )
        .await;
    assert_eq!(
        (
            r["result"]["run_id"].clone(),
            r["result"]["ok"].clone(),
            r["result"]["status"].clone(),
            r["result"]["outcome"].clone(),
            r["result"]["summary"].clone()
        ),
        (
            json!("rel-2"),
            json!(true),
            json!("completed"),
            json!("success"),
            json!("all good")
        ),
        "{r}"
    );
    // CAR's AgentOutcome object.
    ws.call(
        "runs.start",
        json!({"intent": "half done", "idempotency_key": "rel-3", "agent_name": "Shipper"}),
    )
    .await;
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": "rel-3", "outcome": {"status": "partial_success", "summary": "half", "tools_called": ["t"]}}),
        )
        .await;
    assert_eq!(
        (
            r["result"]["ok"].clone(),
            r["result"]["outcome"].clone(),
            r["result"]["summary"].clone()
        ),
        (json!(true), json!("partial_success"), json!("half")),
        "{r}"
    );
    for (params, expected) in [
        (
            json!({"run_id": "rel-2", "outcome": "failure"}),
            "invalid params: run_id: run \"rel-2\" is already completed (\"success\"); an ended run is never reopened",
        ),
        (
            json!({"run_id": "run-nope", "outcome": "success"}),
            "invalid params: run_id: no run \"run-nope\" visible to this session",
        ),
        (
            json!({"run_id": "rel-1", "outcome": "great"}),
            "invalid params: outcome: must be one of success, partial_success, done, give_up, timeout, failure, cancelled, got \"great\"",
        ),
        (
            json!({"run_id": "rel-1", "outcome": {"summary": "no status"}}),
            "invalid params: outcome: data did not match any variant of untagged enum Outcome",
        ),
    ] {
        let r = ws.call("runs.complete", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{params} → {r}"
        );
    }

    // A subscriber (a host: it may read every run) sees trace records as they happen.
    let mut watcher = Ws::host(&d).await;
    assert_eq!(
        watcher.call("runs.subscribe", json!({})).await["result"],
        json!({"subscribed": true})
    );
    let mut starter = Ws::authed(&d).await;
    let dropped = starter
        .call(
            "runs.start",
            json!({"intent": "abandoned", "agent_name": "Shipper"}),
        )
        .await;
    let event = watcher.recv_json().await;
    assert_eq!(event["method"], "runs.trace.event");
    let params = &event["params"];
    assert_eq!(
        (
            params["run_id"].as_str().unwrap(),
            params["agent_id"].clone(),
            params["cursor"].clone(),
            params["status"].clone(),
            params["record"]["record"].clone(),
            params["record"]["intent"].clone(),
            params["record"]["seq"].clone(),
        ),
        (
            run_id(&dropped).as_str(),
            json!("name:shipper"),
            json!(0),
            json!("in_progress"),
            json!("started"),
            json!("abandoned"),
            json!(1),
        ),
        "{event}"
    );
    drop(starter); // its connection closes: the run is marked incomplete
    let event = watcher.recv_json().await;
    assert_eq!(
        (
            event["params"]["record"]["record"].clone(),
            event["params"]["record"]["termination"].clone(),
            event["params"]["status"].clone()
        ),
        (json!("ended"), json!("incomplete"), json!("incomplete")),
        "{event}"
    );

    // A host sees every run; the same runs survive a restart.
    let home = d.home.clone();
    drop(ws);
    drop(watcher);
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    let mut host = Ws::host(&d).await;
    let listed = host.call("runs.list", json!({})).await["result"].clone();
    assert_eq!(listed["agent_id"], Value::Null, "{listed}");
    let runs = listed["runs"].as_array().unwrap().clone();
    let status = |id: &str| {
        runs.iter()
            .find(|r| r["run_id"] == id)
            .map(|r| r["status"].clone())
    };
    assert_eq!(status(&run_id(&done)), Some(json!("completed")));
    assert_eq!(status("rel-3"), Some(json!("completed")));
    assert_eq!(status(&run_id(&dropped)), Some(json!("incomplete")));
    // The first run was still running when the daemon stopped.
    assert_eq!(status(&run_id(&first)), Some(json!("incomplete")));
    let completed =
        host.call("runs.list", json!({"status": "completed"})).await["result"]["runs"].clone();
    let mut ids: Vec<&str> = completed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    ids.sort();
    assert_eq!(ids, ["rel-2", "rel-3"]);
    let one = host
        .call(
            "runs.list",
            json!({"agent_id": "name:shipper", "status": "incomplete", "limit": 1}),
        )
        .await["result"]
        .clone();
    assert_eq!(one["agent_id"], "name:shipper", "{one}");
    assert_eq!(one["runs"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["runs"][0]["status"], "incomplete", "{one}");
    let trace = host
        .call("runs.get_trace", json!({"run_id": run_id(&done)}))
        .await["result"]
        .clone();
    assert_eq!(
        (
            trace["run_id"].clone(),
            trace["agent_id"].clone(),
            trace["run"]["status"].clone(),
            trace["cursor"].clone()
        ),
        (
            json!("rel-2"),
            json!("name:shipper"),
            json!("completed"),
            json!(0)
        ),
        "{trace}"
    );
    assert_eq!(trace["next_cursor"], 2, "{trace}");
    let kinds: Vec<&str> = trace["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["started", "ended"]);
    assert_eq!(
        (
            trace["records"][1]["termination"].clone(),
            trace["records"][1]["outcome"].clone()
        ),
        (
            json!("outcome"),
            json!({"status": "success", "summary": "all good"})
        ),
        "{trace}"
    );
    let rest = host
        .call("runs.get_trace", json!({"run_id": "rel-2", "cursor": 1}))
        .await["result"]
        .clone();
    assert_eq!(
        (
            rest["records"][0]["record"].clone(),
            rest["records"].as_array().unwrap().len(),
            rest["cursor"].clone(),
            rest["next_cursor"].clone()
        ),
        (json!("ended"), 1, json!(1), json!(2)),
        "{rest}"
    );
    assert_eq!(
        host.call("runs.get_trace", json!({"run_id": "run-nope"}))
            .await["result"],
        json!({"run_id": "run-nope", "not_found": true})
    );

    // An operator session reads no run records: listing needs an agent, and the agent's
    // runs are its own to read (or a host's).
    let mut ws = Ws::authed(&d).await;
    let r = ws.call("runs.list", json!({})).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: agent_id: is required for a session not bound to an agent"
        )
    );
    for (method, params) in [
        ("runs.list", json!({"agent_id": "name:shipper"})),
        ("runs.get_trace", json!({"run_id": "rel-2"})),
    ] {
        let r = ws.call(method, params).await;
        assert_eq!(
            (code(&r), r["error"]["data"].clone()),
            (-32603, json!({"reason": "not_owner"})),
            "{method} → {r}"
        );
    }
    let again = ws
        .call(
            "runs.start",
            json!({"intent": "ship the release", "idempotency_key": "rel-1", "agent_name": "Shipper"}),
        )
        .await;
    assert_eq!(
        (run_id(&again), again["result"]["created"].clone()),
        (run_id(&first), json!(false)),
        "idempotency survives restart"
    );
    // An incomplete run has ended: it is never completed later.
    let r = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id(&first), "outcome": "cancelled"}),
        )
        .await;
    assert_eq!(
        (code(&r), message(&r), r["error"]["data"].clone()),
        (
            -32602,
            "invalid params: run_id: run \"rel-1\" already ended incomplete; an ended run is never reopened".to_string(),
            json!({"reason": "run_terminal"})
        ),
        "{r}"
    );
    for (method, params, expected) in [
        (
            "runs.start",
            json!({}),
            "invalid params: params: missing field `intent`",
        ),
        (
            "runs.start",
            json!({"intent": "   "}),
            "invalid params: intent: must not be blank",
        ),
        (
            "runs.start",
            json!({"intent": 5}),
            "invalid params: intent: invalid type: integer `5`, expected a string",
        ),
        (
            "runs.list",
            json!({"status": "odd"}),
            "invalid params: status: must be in_progress, running, completed, incomplete or cancelled, got \"odd\"",
        ),
        (
            "runs.get_trace",
            json!({"run_id": 1}),
            "invalid params: run_id: invalid type: integer `1`, expected a string",
        ),
    ] {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{method} {params} → {r}"
        );
    }
}
