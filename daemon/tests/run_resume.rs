//! `runs.resume` against a real daemon (capability `runs.resume.v1`): another connection
//! of the run's agent takes over a run whose producer dropped, within the resume lease; an
//! unclaimed lease, or a producer without the capability, ends the run `incomplete`. Every
//! refusal is precise.

mod common;

use common::runs::*;
use common::*;
use serde_json::json;

#[tokio::test]
async fn resume_takes_over_a_run_whose_producer_dropped() {
    let d = Daemon::builder()
        .args(["--no-auth"])
        .env("CAR_RUN_RESUME_LEASE", "600s")
        .start();
    let resume = ["runs.resume.v1"];
    let (mut a, a_label) = agent(&d, "a1", &resume).await;
    let first = a.call("runs.start", json!({"intent": "one"})).await["result"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = a.call("runs.start", json!({"intent": "two"})).await["result"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    a.call(
        "runs.record_turns",
        json!({"run_id": first, "turns": [{"tool": "before"}]}),
    )
    .await;
    let mut watcher = Ws::tcp(&d.ws_url).await; // auth off: a host session
    watcher
        .call("runs.subscribe", json!({"run_id": first}))
        .await;
    let (mut b, b_label) = agent(&d, "a1", &resume).await;
    let ask = json!({"run_id": first});

    // Refusals while the producer is live, and for sessions that may not resume.
    assert_eq!(
        refusal(&b.call("runs.resume", ask.clone()).await),
        (
            -32602,
            format!("invalid params: run_id: run {first:?} still has a live producer connection; only a run whose producer disconnected can be resumed"),
            json!("producer_live")
        )
    );
    let (mut plain, _) = agent(&d, "a1", &[]).await;
    assert_eq!(code(&plain.call("runs.resume", ask.clone()).await), -32008);
    let mut host = Ws::tcp(&d.ws_url).await;
    negotiate(&mut host, &resume).await;
    let r = host.call("runs.resume", ask.clone()).await;
    assert_eq!(
        (code(&r), r["error"]["data"]["reason"].clone()),
        (-32603, json!("not_owner")),
        "{r}"
    );
    let (mut stranger, _) = agent(&d, "a2", &resume).await;
    assert_eq!(
        refusal(&stranger.call("runs.resume", ask.clone()).await).2,
        json!("run_not_found")
    );
    let r = b.call("runs.resume", json!({"run_id": 3})).await;
    assert_eq!(
        message(&r),
        "invalid params: run_id: invalid type: integer `3`, expected a string"
    );

    // The producer drops; its runs wait for a resume. (Closing is noticed asynchronously:
    // until then the run still has its producer.)
    drop(a);
    let taken = loop {
        let r = b.call("runs.resume", ask.clone()).await;
        if r["error"]["data"]["reason"] != "producer_live" {
            break r;
        }
    };
    assert_eq!(
        taken["result"],
        json!({"run_id": first, "agent_id": "a1", "client_id": b_label, "resumed_from_client_id": a_label}),
        "{taken}"
    );
    // One winner: a second claim finds a live producer.
    assert_eq!(
        refusal(&stranger.call("runs.resume", ask.clone()).await).2,
        json!("run_not_found")
    );
    let (mut c, _) = agent(&d, "a1", &resume).await;
    assert_eq!(
        refusal(&c.call("runs.resume", ask.clone()).await).2,
        json!("producer_live")
    );

    // The new producer writes turns and completes, but submits no new proposal.
    let r = b
        .call(
            "runs.record_turns",
            json!({"run_id": first, "turns": [{"tool": "after"}]}),
        )
        .await;
    assert_eq!(r["result"]["base_index"], 1, "{r}");
    let r = b
        .call(
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "w", "type": "state_write", "key": "k", "value": 1}]}}),
        )
        .await;
    assert_eq!(
        (code(&r), r["error"]["data"]["reason"].clone()),
        (-32603, json!("resumed_run")),
        "{r}"
    );
    let r = b
        .call(
            "runs.complete",
            json!({"run_id": first, "outcome": {"status": "success"}}),
        )
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    // The watcher saw the takeover as nothing but the new turn and the end.
    let turn = trace_event(&mut watcher).await;
    assert_eq!(
        (turn["record"]["tool"].clone(), turn["cursor"].clone()),
        (json!("after"), json!(2))
    );
    let end = trace_event(&mut watcher).await;
    assert_eq!(
        (end["record"]["termination"].clone(), end["status"].clone()),
        (json!("outcome"), json!("completed"))
    );
    assert_eq!(
        kinds(&mut host, &first).await,
        ["started", "turn", "turn", "ended"]
    );
    assert_eq!(
        refusal(&c.call("runs.resume", ask.clone()).await),
        (
            -32602,
            format!("invalid params: run_id: run {first:?} is already completed (\"success\"); an ended run is never reopened"),
            json!("run_terminal")
        )
    );

    // A leased run can be cancelled; it is then never resumed.
    negotiate(&mut host, &["runs.cancel.v1"]).await;
    let receipt = host
        .call(
            "runs.cancel",
            json!({"run_id": second, "idempotency_key": "k", "reason": "abandoned"}),
        )
        .await;
    assert_eq!(
        receipt["result"]["status"], "cancelled_confirmed",
        "{receipt}"
    );
    assert_eq!(
        refusal(&c.call("runs.resume", json!({"run_id": second})).await).2,
        json!("run_terminal")
    );
    let resumed = host
        .call("events.query", json!({"kinds": ["run.resumed"]}))
        .await["result"]["events"]
        .clone();
    assert_eq!(resumed[0]["data"]["resumed_from_client_id"], a_label);
}

#[tokio::test]
async fn an_unclaimed_lease_or_a_producer_without_the_capability_ends_the_run_incomplete() {
    let d = Daemon::builder()
        .args(["--no-auth"])
        .env("CAR_RUN_RESUME_LEASE", "50ms")
        .start();
    let mut watcher = Ws::tcp(&d.ws_url).await;
    let (mut b, _) = agent(&d, "a1", &["runs.resume.v1"]).await;
    for (capabilities, reason) in [
        (
            &["runs.resume.v1"][..],
            "its producer connection closed and no runs.resume claimed it within the lease",
        ),
        (&[][..], "the connection that started it closed"),
    ] {
        let (mut a, _) = agent(&d, "a1", capabilities).await;
        let run_id = a.call("runs.start", json!({"intent": "i"})).await["result"]["run_id"]
            .as_str()
            .unwrap()
            .to_string();
        let snapshot = watcher
            .call("runs.subscribe", json!({"run_id": run_id}))
            .await;
        assert_eq!(snapshot["result"]["status"], "in_progress", "{snapshot}");
        drop(a);
        let end = trace_event(&mut watcher).await;
        assert_eq!(
            (
                end["run_id"].as_str(),
                end["record"]["record"].clone(),
                end["record"]["termination"].clone(),
                end["record"]["reason"].clone(),
                end["status"].clone()
            ),
            (
                Some(run_id.as_str()),
                json!("ended"),
                json!("incomplete"),
                json!(reason),
                json!("incomplete")
            ),
            "{end}"
        );
        let r = b.call("runs.resume", json!({"run_id": run_id})).await;
        assert_eq!(
            refusal(&r),
            (
                -32602,
                format!("invalid params: run_id: run {run_id:?} already ended incomplete; an ended run is never reopened"),
                json!("run_terminal")
            )
        );
    }
    // Subscribing needs a run this session may read.
    let r = watcher
        .call("runs.subscribe", json!({"run_id": "no-such-run"}))
        .await;
    assert_eq!(refusal(&r).2, json!("run_not_found"), "{r}");
    let r = b
        .call("runs.subscribe", json!({"run_id": "no-such-run"}))
        .await;
    assert_eq!(refusal(&r).2, json!("run_not_found"), "{r}");
}
