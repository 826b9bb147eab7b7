//! Run traces against a real daemon: model turns (`runs.record_model_turn`, as CAR's agent
//! loop sends them), client-narrated turns (`runs.record_turns`) and the tool calls of
//! proposals submitted on the connection that started the run all land in the run's trace
//! in order with daemon-stamped indexes, stream as `runs.trace.event`, and stop streaming
//! after `runs.unsubscribe`; writes that cannot land are drops, not errors.

mod common;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, ToolCall};
use common::*;
use serde_json::{json, Value};

fn client_for(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

#[tokio::test]
async fn model_turns_narrated_turns_and_tool_calls_form_the_trace_in_order() {
    let d = Daemon::start();
    let client = client_for(&d);
    client.register_tool_handler(|call: ToolCall| {
        Ok(json!({"sum": call.params["a"].as_i64().unwrap() + 1}))
    });
    client
        .call("tools.register", json!([{"name": "inc"}]))
        .await
        .unwrap();
    let mut host = Ws::host(&d).await;
    // A second host connection only watches: `Ws::call` skips notifications.
    let mut watcher = Ws::host(&d).await;
    let run = client
        .call(
            "runs.start",
            json!({"intent": "add one", "agent_name": "calc"}),
        )
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let sub = watcher
        .call("runs.subscribe", json!({"run_id": run_id}))
        .await;
    assert_eq!(
        sub["result"],
        json!({"run_id": run_id, "agent_id": "name:calc", "turns_so_far": [], "cursor": 0, "status": "in_progress"})
    );

    // The shape CAR's agent loop sends; its turn_index is ignored, the daemon stamps it.
    let turn = client
        .call(
            "runs.record_model_turn",
            json!({"run_id": run_id, "turn_index": 7, "model_id": "m", "assistant_text": "",
                   "requested_tool_calls": [{"id": "c1", "name": "inc", "arguments": {"a": 1}}],
                   "token_usage": {"input_tokens": 5, "output_tokens": 3}, "duration_ms": 4}),
        )
        .await
        .unwrap();
    assert_eq!(turn, json!({"run_id": run_id, "index": 0, "ok": true}));
    let r = client
        .call(
            "proposal.submit",
            json!({"proposal": {"actions": [
                {"id": "c1", "type": "tool_call", "tool": "inc", "parameters": {"a": 1}}
            ]}}),
        )
        .await
        .unwrap();
    assert_eq!(r["results"][0]["status"], "succeeded", "{r}");
    let narrated = client
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"index": 99, "prompt": "p", "output": "o"}, {"tool": "shell"}]}),
        )
        .await
        .unwrap();
    assert_eq!(
        narrated,
        json!({"run_id": run_id, "base_index": 2, "count": 2, "ok": true})
    );

    // The trace (a host reads it): started, the model turn, the tool call, the narration.
    let trace = host.call("runs.get_trace", json!({"run_id": run_id})).await;
    let records = trace["result"]["records"].as_array().unwrap().clone();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["started", "model_turn", "turn", "turn", "turn"],
        "{trace}"
    );
    let indexes: Vec<i64> = records[1..]
        .iter()
        .map(|r| r["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    assert_eq!(records[1]["requested_tool_calls"][0]["name"], "inc");
    assert_eq!(records[2]["tool"], "inc");
    assert_eq!(records[2]["output"], json!({"sum": 2}));
    assert_eq!(records[2]["verifier_verdict"], "not_run");
    assert_eq!(records[3]["prompt"], "p");
    assert_eq!(records[4]["verifier_verdict"], "not_run");

    // The subscriber saw every turn as a runs.trace.event, in order, each record as
    // runs.get_trace has it, with contiguous cursors.
    let mut streamed = Vec::new();
    while streamed.len() < 4 {
        let msg = watcher.recv_json().await;
        if msg["method"] == "runs.trace.event" {
            streamed.push(msg["params"].clone());
        }
    }
    let cursors: Vec<u64> = streamed
        .iter()
        .map(|p| p["cursor"].as_u64().unwrap())
        .collect();
    assert_eq!(cursors, [1, 2, 3, 4]);
    for (event, record) in streamed.iter().zip(&records[1..]) {
        assert_eq!(&event["record"], record);
        assert_eq!(
            (
                event["run_id"].clone(),
                event["agent_id"].clone(),
                event["status"].clone()
            ),
            (json!(run_id), json!("name:calc"), json!("in_progress"))
        );
    }
    // A fresh subscription's snapshot holds every turn so far.
    let again = host.call("runs.subscribe", json!({"run_id": run_id})).await;
    assert_eq!(again["result"]["cursor"], 4, "{again}");
    assert_eq!(
        again["result"]["turns_so_far"],
        json!(records[1..]),
        "{again}"
    );
    assert_eq!(
        host.call("runs.unsubscribe", json!({"run_id": run_id}))
            .await["result"],
        json!({"run_id": run_id, "removed": true})
    );

    // After unsubscribing, nothing more arrives; a second unsubscribe removes nothing.
    let un = watcher
        .call("runs.unsubscribe", json!({"run_id": run_id}))
        .await;
    assert_eq!(un["result"], json!({"run_id": run_id, "removed": true}));
    let un = watcher
        .call("runs.unsubscribe", json!({"run_id": run_id}))
        .await;
    assert_eq!(un["result"], json!({"run_id": run_id, "removed": false}));
    client
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "late"}]}),
        )
        .await
        .unwrap();
    // The daemon answers in order on a connection: a notification sent before this answer
    // would arrive first.
    let probe = watcher.request("server.schema", json!({})).await;
    loop {
        let msg = watcher.recv_json().await;
        assert_ne!(
            msg["method"], "runs.trace.event",
            "after unsubscribe: {msg}"
        );
        if msg["id"] == json!(probe) {
            break;
        }
    }

    // Drops: an unknown run, another owner's run, a completed run.
    let unknown = client
        .call("runs.record_model_turn", json!({"run_id": "no-such-run"}))
        .await
        .unwrap();
    assert_eq!(
        unknown,
        json!({"run_id": "no-such-run", "ok": false, "dropped": "run_not_found"})
    );
    let as_host = host
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "x"}]}),
        )
        .await;
    assert_eq!(as_host["result"]["dropped"], "run_not_found", "{as_host}");
    client
        .call(
            "runs.complete",
            json!({"run_id": run_id, "outcome": {"status": "success"}}),
        )
        .await
        .unwrap();
    let done = client
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "x"}]}),
        )
        .await
        .unwrap();
    assert_eq!(
        done,
        json!({"run_id": run_id, "base_index": 0, "count": 0, "ok": false, "dropped": "run_terminal"})
    );
}

/// An operator connection and the id of a run it started.
async fn started_run(d: &Daemon) -> (Ws, Value) {
    let mut ws = Ws::authed(d).await;
    let run = ws
        .call("runs.start", json!({"intent": "i", "agent_name": "a"}))
        .await;
    let run_id = run["result"]["run_id"].clone();
    (ws, run_id)
}

#[tokio::test]
async fn bad_turn_batches_are_precise_errors() {
    let d = Daemon::start();
    let (mut ws, run_id) = started_run(&d).await;
    let empty = ws
        .call("runs.record_turns", json!({"run_id": run_id, "turns": []}))
        .await;
    assert_eq!(
        (code(&empty), message(&empty).as_str()),
        (-32602, "invalid params: turns: must not be empty")
    );
    let many: Vec<Value> = (0..257).map(|_| json!({})).collect();
    let big = ws
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": many}),
        )
        .await;
    assert_eq!(
        (code(&big), message(&big).as_str()),
        (
            -32602,
            "invalid params: turns: has 257 turns, at most 256 a call"
        )
    );
    let typed = ws
        .call("runs.record_turns", json!({"run_id": run_id, "turns": [5]}))
        .await;
    assert_eq!(code(&typed), -32602, "{typed}");
    assert!(
        message(&typed).starts_with("invalid params: turns[0]: "),
        "{typed}"
    );
    // CAR's loop completes with an empty summary when the model gave none.
    let done = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id, "outcome": {"status": "done", "summary": ""}}),
        )
        .await;
    assert_eq!(done["result"]["ok"], true, "{done}");
    // CAR's loop starts with an empty outcome_description when it has none.
    let run = ws
        .call(
            "runs.start",
            json!({"intent": "i", "agent_name": "a", "outcome_description": ""}),
        )
        .await;
    let run_id = run["result"]["run_id"].clone();
    assert!(run_id.is_string(), "{run}");
    // A long field is truncated, not refused.
    let long = "x".repeat(20_000);
    let ok = ws
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"output": long}]}),
        )
        .await;
    assert_eq!(ok["result"]["ok"], true, "{ok}");
}

#[tokio::test]
async fn a_runs_turns_stop_at_32_mib_in_all() {
    let d = Daemon::start();
    let (mut ws, run_id) = started_run(&d).await;
    // Each turn: 15 string fields of 16,000 bytes (under the 16 KiB truncation), ~240 KB.
    let turn: serde_json::Map<String, Value> = (0..15)
        .map(|i| (format!("f{i}"), json!("x".repeat(16_000))))
        .collect();
    let batch: Vec<Value> = (0..32).map(|_| Value::Object(turn.clone())).collect();
    let mut landed = 0;
    let dropped = loop {
        let r = ws
            .call(
                "runs.record_turns",
                json!({"run_id": run_id, "turns": batch}),
            )
            .await;
        if r["result"]["ok"] == true {
            landed += r["result"]["count"].as_u64().unwrap();
            assert!(landed < 200, "32 MiB holds about 139 such turns");
            continue;
        }
        break r;
    };
    assert_eq!(dropped["result"]["dropped"], "run_bytes_limit", "{dropped}");
    // 4 batches (128 turns, ~30.7 MB) land; the fifth would pass 32 MiB.
    assert_eq!(landed, 128);
    // The run still takes a small turn that fits, and still ends normally.
    let small = ws
        .call(
            "runs.record_turns",
            json!({"run_id": run_id, "turns": [{"tool": "small"}]}),
        )
        .await;
    assert_eq!(small["result"]["ok"], true, "{small}");
    let done = ws
        .call(
            "runs.complete",
            json!({"run_id": run_id, "outcome": {"status": "success"}}),
        )
        .await;
    assert!(done.get("result").is_some(), "{done}");
}
