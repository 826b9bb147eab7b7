//! `runs.cancel` against a real daemon (capability `runs.cancel.v1`): it stops a run's work
//! and ends it `cancelled` once, with CAR's idempotent receipt; every refusal is precise.

mod common;

use common::runs::*;
use common::*;
use serde_json::json;
use sha2::{Digest, Sha256};

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test]
async fn cancel_ends_a_run_once_with_an_idempotent_receipt() {
    let d = Daemon::start();
    let mut starter = Ws::authed(&d).await;
    let run = starter
        .call(
            "runs.start",
            json!({"intent": "ship", "agent_name": "Shipper"}),
        )
        .await;
    let run_id = run["result"]["run_id"].as_str().unwrap().to_string();
    starter
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "build"}]}),
        )
        .await;
    let cancel = json!({"run_id": run_id, "idempotency_key": "k1", "reason": "user asked"});

    // The capability gate: without a handshake, and with one that did not ask for it.
    let mut host = Ws::host(&d).await;
    let r = host.call("runs.cancel", cancel.clone()).await;
    assert_eq!(
        (code(&r), message(&r)),
        (
            -32008,
            "protocol capability mismatch: runs.cancel needs runs.cancel.v1, which this session did not negotiate".to_string()
        )
    );
    assert_eq!(
        negotiate(&mut host, &["runs.cancel.v1", "runs.resume.v1"]).await,
        json!(["runs.cancel.v1", "runs.resume.v1"]),
        "both capabilities are served"
    );
    let mut host = Ws::host(&d).await;
    negotiate(&mut host, &["infer.cancel.v1"]).await;
    assert_eq!(
        code(&host.call("runs.cancel", cancel.clone()).await),
        -32008
    );

    // A session that may not act on the run — the operator that started it is not its agent
    // — is told what an unknown id is told.
    let mut operator = Ws::authed(&d).await;
    negotiate(&mut operator, &["runs.cancel.v1"]).await;
    let not_found = |id: &str| {
        (
            -32602,
            format!("invalid params: run_id: no run {id:?} visible to this session"),
            json!("run_not_found"),
        )
    };
    assert_eq!(
        refusal(&operator.call("runs.cancel", cancel.clone()).await),
        not_found(&run_id)
    );
    let r = operator
        .call("runs.subscribe", json!({"run_id": run_id}))
        .await;
    assert_eq!(
        (code(&r), r["error"]["data"]["reason"].clone()),
        (-32603, json!("not_owner")),
        "{r}"
    );
    let mut host = canceller(&d).await;
    let mut unknown = cancel.clone();
    unknown["run_id"] = json!("no-such-run");
    assert_eq!(
        refusal(&host.call("runs.cancel", unknown).await),
        not_found("no-such-run")
    );
    // Bad input names the field.
    let long_key = "k".repeat(129);
    let long_reason = "r".repeat(1025);
    for (params, expected) in [
        (
            json!({"run_id": run_id, "idempotency_key": "k"}),
            "invalid params: params: missing field `reason`",
        ),
        (
            json!({"run_id": run_id, "idempotency_key": "", "reason": "r"}),
            "invalid params: idempotency_key: must not be empty",
        ),
        (
            json!({"run_id": run_id, "idempotency_key": long_key, "reason": "r"}),
            "invalid params: idempotency_key: is longer than 128 bytes",
        ),
        (
            json!({"run_id": run_id, "idempotency_key": "k", "reason": long_reason}),
            "invalid params: reason: is longer than 1024 bytes",
        ),
        (
            json!({"run_id": run_id, "idempotency_key": "k", "reason": 5}),
            "invalid params: reason: invalid type: integer `5`, expected a string",
        ),
        (
            json!({"run_id": "", "idempotency_key": "k", "reason": "r"}),
            "invalid params: run_id: must not be empty",
        ),
    ] {
        let r = host.call("runs.cancel", params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{params} → {r}"
        );
    }
    assert_eq!(kinds(&mut host, &run_id).await, ["started", "turn"]);

    // A subscriber sees the request and the end.
    let mut watcher = Ws::host(&d).await;
    let snapshot = watcher
        .call("runs.subscribe", json!({"run_id": run_id}))
        .await;
    assert_eq!(
        (
            snapshot["result"]["cursor"].clone(),
            snapshot["result"]["status"].clone()
        ),
        (json!(1), json!("in_progress")),
        "{snapshot}"
    );
    let receipt = host.call("runs.cancel", cancel.clone()).await["result"].clone();
    let trace = host.call("runs.get_trace", json!({"run_id": run_id})).await["result"].clone();
    let records = trace["records"].as_array().unwrap();
    let kinds_now: Vec<&str> = records
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds_now,
        ["started", "turn", "cancellation_requested", "ended"]
    );
    let ended = &records[3];
    assert_eq!(
        (ended["termination"].clone(), trace["run"]["status"].clone()),
        (json!("cancelled"), json!("cancelled")),
        "{trace}"
    );
    let reason_digest = sha256_hex(b"user asked");
    assert_eq!(records[2]["reason_digest"], reason_digest);
    assert!(
        !trace.to_string().contains("user asked"),
        "the reason is kept only as its digest"
    );
    let mut body = receipt.clone();
    let digest = body.as_object_mut().unwrap().remove("receipt_digest");
    assert_eq!(
        body,
        json!({
            "receipt_version": 1, "run_id": run_id, "idempotency_key": "k1",
            "reason_digest": reason_digest, "principal": "host", "status": "cancelled_confirmed",
            "terminal_digest": car_proto::schema::digest(ended),
            "action_id": null, "request_id": null,
        })
    );
    assert_eq!(digest, Some(json!(car_proto::schema::digest(&body))));
    for (record, status) in [
        ("cancellation_requested", "in_progress"),
        ("ended", "cancelled"),
    ] {
        let event = trace_event(&mut watcher).await;
        assert_eq!(
            (
                event["record"]["record"].as_str(),
                event["status"].as_str(),
                event["cursor"].clone()
            ),
            (Some(record), Some(status), json!(1)),
            "{event}"
        );
    }

    // The same request answers the same receipt; the key with another reason is refused;
    // another key answers already_terminal and appends nothing.
    assert_eq!(
        host.call("runs.cancel", cancel.clone()).await["result"],
        receipt
    );
    let mut other_reason = cancel.clone();
    other_reason["reason"] = json!("changed my mind");
    assert_eq!(
        refusal(&host.call("runs.cancel", other_reason).await),
        (
            -32602,
            format!("invalid params: idempotency_key: \"k1\" already cancelled run {run_id:?} with another reason or caller"),
            json!("idempotency_conflict")
        )
    );
    let mut other_key = cancel.clone();
    other_key["idempotency_key"] = json!("k2");
    let late = host.call("runs.cancel", other_key.clone()).await["result"].clone();
    assert_eq!(
        (
            late["status"].clone(),
            late["terminal_digest"].clone(),
            late["idempotency_key"].clone()
        ),
        (
            json!("already_terminal"),
            receipt["terminal_digest"].clone(),
            json!("k2")
        ),
        "{late}"
    );
    assert_eq!(host.call("runs.cancel", other_key).await["result"], late);
    assert_eq!(kinds(&mut host, &run_id).await.len(), 4, "nothing appended");

    // A cancelled run is ended for everyone: no completion, no more turns.
    let r = starter
        .call(
            "runs.complete",
            json!({"run_id": run_id, "outcome": "success"}),
        )
        .await;
    assert_eq!(
        refusal(&r),
        (
            -32602,
            format!(
                "invalid params: run_id: run {run_id:?} was cancelled; an ended run is never reopened"
            ),
            json!("run_terminal")
        )
    );
    let r = starter
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "late"}]}),
        )
        .await;
    assert_eq!(r["result"]["dropped"], "run_terminal", "{r}");
    let listed = host
        .call("runs.list", json!({"agent_id": "name:shipper"}))
        .await;
    assert_eq!(
        listed["result"]["runs"][0]["status"], "cancelled",
        "{listed}"
    );
    let cancelled = host
        .call(
            "runs.list",
            json!({"agent_id": "name:shipper", "status": "cancelled"}),
        )
        .await;
    assert_eq!(
        cancelled["result"]["runs"][0]["run_id"],
        json!(run_id),
        "{cancelled}"
    );
    // The journal has the cancellation.
    let events = host
        .call("events.query", json!({"kinds": ["run.cancelled"]}))
        .await["result"]["events"]
        .clone();
    assert_eq!(events.as_array().unwrap().len(), 1, "{events}");
    assert_eq!(
        events[0]["data"]["receipt_digest"],
        receipt["receipt_digest"]
    );
}

#[tokio::test]
async fn cancel_stops_the_runs_proposal_and_withdraws_its_tool_call() {
    let d = Daemon::start();
    let mut producer = Ws::authed(&d).await;
    producer
        .call("tools.register", json!({"name": "slow"}))
        .await;
    let run = producer
        .call("runs.start", json!({"intent": "wait", "agent_name": "p"}))
        .await;
    let run_id = run["result"]["run_id"].as_str().unwrap().to_string();
    let submit = producer
        .request(
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a1", "type": "tool_call", "tool": "slow", "parameters": {}}]}}),
        )
        .await;
    let call = loop {
        let frame = producer.recv_json().await;
        if frame["method"] == "tools.execute" {
            break frame;
        }
    };
    let request_id = call["params"]["request_id"].clone();

    let mut host = canceller(&d).await;
    let receipt = host
        .call(
            "runs.cancel",
            json!({"run_id": run_id, "idempotency_key": "stop", "reason": "too slow"}),
        )
        .await["result"]
        .clone();
    assert_eq!(
        (
            receipt["status"].clone(),
            receipt["action_id"].clone(),
            receipt["request_id"].clone()
        ),
        (
            json!("cancelled_confirmed"),
            json!("a1"),
            request_id.clone()
        ),
        "{receipt}"
    );
    // The client is told to stop the tool, and the proposal answers that its run was
    // cancelled (in either order).
    let (mut told, mut answered) = (None, None);
    while told.is_none() || answered.is_none() {
        let frame = producer.recv_json().await;
        if frame["method"] == "tools.cancel" {
            told = Some(frame["params"].clone());
        } else if frame["id"] == json!(submit) {
            answered = Some(frame);
        }
    }
    let told = told.unwrap();
    assert_eq!(
        (told["request_id"].clone(), told["action_id"].clone()),
        (request_id.clone(), json!("a1"))
    );
    let answered = answered.unwrap();
    assert_eq!(
        (
            code(&answered),
            answered["error"]["data"]["reason"].clone(),
            answered["error"]["data"]["run_id"].clone()
        ),
        (-32603, json!("run_cancelled"), json!(run_id)),
        "{answered}"
    );
    // A late answer to the withdrawn call is dropped; nothing of the proposal lands.
    producer
        .send_text(json!({"jsonrpc": "2.0", "id": call["id"], "result": {"ok": true}}).to_string())
        .await;
    assert_eq!(
        kinds(&mut host, &run_id).await,
        ["started", "cancellation_requested", "ended"]
    );
    let cancelled = host
        .call(
            "events.query",
            json!({"kinds": ["tool.cancelled"], "action_id": "a1"}),
        )
        .await["result"]["events"]
        .clone();
    assert_eq!(cancelled[0]["request_id"], request_id, "{cancelled}");
    // The connection works on: a later proposal runs (recorded under no run).
    let r = producer
        .call(
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "w", "type": "state_write", "key": "k", "value": 1}]}}),
        )
        .await;
    assert_eq!(r["result"]["results"][0]["status"], "succeeded", "{r}");
}
