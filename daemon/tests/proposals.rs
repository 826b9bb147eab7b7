//! Issue 4 acceptance 1–6: proposals run against a real daemon, with tools executed by a
//! real client (`car-daemon-client`) over real sockets.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, HandlerError, ToolCall};
use common::*;
use serde_json::{json, Value};

fn client_for(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

async fn register_tools(client: &Client, names: &[&str]) {
    let tools: Vec<Value> = names.iter().map(|n| json!({"name": n})).collect();
    client
        .call("tools.register", Value::Array(tools))
        .await
        .unwrap();
}

fn status_of(result: &Value, id: &str) -> Value {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no result for {id} in {result}"))
}

#[tokio::test]
async fn chains_and_diamonds_run_in_dependency_order_with_overlap() {
    let d = Daemon::start();
    let client = client_for(&d);
    let spans: Arc<Mutex<Vec<(String, Instant, Instant)>>> = Arc::default();
    let log = spans.clone();
    client.register_tool_handler(move |call: ToolCall| {
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(300));
        log.lock()
            .unwrap()
            .push((call.action_id.clone(), start, Instant::now()));
        Ok(json!({"tool": call.tool, "n": call.params["n"]}))
    });
    register_tools(&client, &["work"]).await;
    let chain = json!({"proposal": {"actions": [
        {"id": "c", "type": "tool_call", "tool": "work", "parameters": {"n": 3}, "dependencies": ["b"]},
        {"id": "b", "type": "tool_call", "tool": "work", "parameters": {"n": 2}, "dependencies": ["a"]},
        {"id": "a", "type": "tool_call", "tool": "work", "parameters": {"n": 1}},
        {"id": "w", "type": "state_write", "key": "done", "value": true, "dependencies": ["c"]}
    ]}});
    let r = client.call("proposal.submit", chain).await.unwrap();
    let order: Vec<String> = spans.lock().unwrap().iter().map(|s| s.0.clone()).collect();
    assert_eq!(order, ["a", "b", "c"]);
    assert_eq!(r["outputs"]["c"], json!({"tool": "work", "n": 3}));
    assert_eq!(r["final_state"], json!({"done": true}));
    assert!(r["errors"].as_array().unwrap().is_empty(), "{r}");

    spans.lock().unwrap().clear();
    let diamond = json!({"proposal": {"actions": [
        {"id": "top", "type": "tool_call", "tool": "work", "parameters": {"n": 1}},
        {"id": "left", "type": "tool_call", "tool": "work", "parameters": {"n": 2}, "dependencies": ["top"]},
        {"id": "right", "type": "tool_call", "tool": "work", "parameters": {"n": 3}, "dependencies": ["top"]},
        {"id": "bottom", "type": "tool_call", "tool": "work", "parameters": {"n": 4}, "dependencies": ["left", "right"]}
    ]}});
    let r = client.call("proposal.submit", diamond).await.unwrap();
    assert_eq!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["status"] == "succeeded")
            .count(),
        4,
        "{r}"
    );
    let spans = spans.lock().unwrap().clone();
    let span = |id: &str| {
        spans
            .iter()
            .find(|s| s.0 == id)
            .map(|s| (s.1, s.2))
            .unwrap()
    };
    let (top, left, right, bottom) = (span("top"), span("left"), span("right"), span("bottom"));
    assert!(
        top.1 <= left.0 && top.1 <= right.0,
        "top finishes before its dependents start"
    );
    assert!(
        left.1 <= bottom.0 && right.1 <= bottom.0,
        "bottom starts after both branches"
    );
    assert!(
        left.0 < right.1 && right.0 < left.1,
        "independent branches overlap in time"
    );
    let v = client
        .call(
            "verify",
            json!({"proposal": {"actions": [
                {"id": "b", "type": "tool_call", "tool": "work", "dependencies": ["a"]},
                {"id": "a", "type": "tool_call", "tool": "work"}
            ]}}),
        )
        .await
        .unwrap();
    assert_eq!(v["execution_levels"], json!([["a"], ["b"]]));
    assert_eq!(v["valid"], true);
}

#[tokio::test]
async fn deny_tool_param_blocks_the_call_and_verify_reports_it_first() {
    let d = Daemon::start();
    let client = client_for(&d);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    client.register_tool_handler(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
        Ok(json!("ran"))
    });
    register_tools(&client, &["shell"]).await;
    client
        .call("policy.register", json!({"name": "no-rm", "rule": "deny_tool_param", "target": "shell", "key": "cmd", "pattern": "^rm\\b"}))
        .await
        .unwrap();
    let proposal = json!({"actions": [
        {"id": "ok", "type": "tool_call", "tool": "shell", "parameters": {"cmd": "ls"}, "failure_behavior": "skip"},
        // (`sudo` or `rm -rf` would make the action full_access: the permission gate would
        // block the whole proposal before the policy is consulted.)
        {"id": "bad", "type": "tool_call", "tool": "shell", "parameters": {"cmd": "rm notes.txt"}, "failure_behavior": "skip"}
    ]});
    let v = client
        .call("verify", json!({"proposal": proposal}))
        .await
        .unwrap();
    assert_eq!(v["valid"], false);
    let issue = &v["issues"][0];
    assert_eq!(
        (issue["action_id"].clone(), issue["category"].clone()),
        (json!("bad"), json!("policy")),
        "{v}"
    );
    assert!(issue["message"].as_str().unwrap().contains("no-rm"));
    let r = client
        .call("proposal.submit", json!({"proposal": proposal}))
        .await
        .unwrap();
    let bad = status_of(&r, "bad");
    assert_eq!(bad["status"], "rejected");
    assert!(bad["error"].as_str().unwrap().contains("no-rm"), "{bad}");
    assert_eq!(status_of(&r, "ok")["status"], "succeeded");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the allowed call reached the tool"
    );
    // deny_tool: the tool is never called at all.
    client
        .call(
            "policy.register",
            json!({"name": "no-shell", "rule": "deny_tool", "target": "shell"}),
        )
        .await
        .unwrap();
    let r = client.call("proposal.submit", json!({"proposal": {"actions": [{"id": "x", "type": "tool_call", "tool": "shell", "parameters": {"cmd": "ls"}}]}})).await.unwrap();
    assert_eq!(status_of(&r, "x")["status"], "rejected");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let events = client
        .call("events.query", json!({"kinds": ["policy.denied"]}))
        .await
        .unwrap();
    assert_eq!(events["count"], 2, "{events}");
    assert_eq!(events["events"].as_array().unwrap().len(), 2, "{events}");
}

#[tokio::test]
async fn retries_count_attempts_from_one() {
    let d = Daemon::start();
    let client = client_for(&d);
    let attempts: Arc<Mutex<Vec<u64>>> = Arc::default();
    let seen = attempts.clone();
    client.register_tool_handler(move |call: ToolCall| {
        seen.lock().unwrap().push(call.attempt);
        if call.attempt < 3 {
            Err(HandlerError::new(format!("flaky failure {}", call.attempt)))
        } else {
            Ok(json!({"ok": call.attempt}))
        }
    });
    register_tools(&client, &["flaky"]).await;
    let r = client
        .call("proposal.submit", json!({"proposal": {"actions": [
            {"id": "f", "type": "tool_call", "tool": "flaky", "failure_behavior": "retry", "max_retries": 2}
        ]}}))
        .await
        .unwrap();
    let f = status_of(&r, "f");
    assert_eq!(
        (
            f["status"].clone(),
            f["attempts"].clone(),
            f["output"].clone()
        ),
        (json!("succeeded"), json!(3), json!({"ok": 3}))
    );
    assert_eq!(*attempts.lock().unwrap(), [1, 2, 3]);
    // One retry fewer: it fails after two attempts and aborts what depends on it.
    attempts.lock().unwrap().clear();
    let r = client
        .call("proposal.submit", json!({"proposal": {"actions": [
            {"id": "f", "type": "tool_call", "tool": "flaky", "failure_behavior": "retry", "max_retries": 1},
            {"id": "after", "type": "state_write", "key": "k", "value": 1, "dependencies": ["f"]}
        ]}}))
        .await
        .unwrap();
    let f = status_of(&r, "f");
    assert_eq!(
        (f["status"].clone(), f["attempts"].clone()),
        (json!("failed"), json!(2))
    );
    assert!(f["error"].as_str().unwrap().contains("flaky failure 2"));
    // CAR reports an action stopped by an earlier failure as skipped, with the reason.
    assert_eq!(status_of(&r, "after")["status"], "skipped");
    let retries = client
        .call("events.query", json!({"kinds": ["action.retry"]}))
        .await
        .unwrap();
    assert_eq!(retries["count"], 3, "{retries}");
}

#[tokio::test]
async fn an_overrunning_tool_gets_tools_cancel_and_the_action_times_out() {
    let d = Daemon::start();
    let client = client_for(&d);
    let executed: Arc<Mutex<Vec<Value>>> = Arc::default();
    let cancelled: Arc<Mutex<Vec<Value>>> = Arc::default();
    let (e, c) = (executed.clone(), cancelled.clone());
    client.register_tool_handler(move |call: ToolCall| {
        e.lock().unwrap().push(call.request_id.clone());
        std::thread::sleep(Duration::from_millis(1500));
        Ok(json!("too late"))
    });
    client.register_tool_cancel_handler(move |cancel| {
        c.lock()
            .unwrap()
            .push(json!({"request_id": cancel.request_id, "reason": cancel.reason}));
    });
    register_tools(&client, &["slow"]).await;
    let r = client
        .call("proposal.submit", json!({"proposal": {"actions": [{"id": "s", "type": "tool_call", "tool": "slow", "timeout_ms": 200}]}}))
        .await
        .unwrap();
    let s = status_of(&r, "s");
    assert_eq!(s["status"], "failed");
    assert!(
        s["error"]
            .as_str()
            .unwrap()
            .contains("exceeded its timeout_ms (200ms)"),
        "{s}"
    );
    // The cancel notification names the request the tool was given.
    let deadline = Instant::now() + WAIT;
    while cancelled.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cancel = cancelled.lock().unwrap()[0].clone();
    assert_eq!(cancel["request_id"], executed.lock().unwrap()[0]);
    assert!(cancel["reason"].as_str().unwrap().contains("timeout_ms"));
}

/// A host session driving reverse calls by hand (the halt latch is per connection, and a
/// host connection may clear its own).
async fn answer_next_tool_call(ws: &mut Ws, answer: Value) -> Value {
    loop {
        let frame = ws.recv_json().await;
        if frame["method"] == "tools.execute" {
            let mut reply = json!({"jsonrpc": "2.0", "id": frame["id"]});
            for (k, v) in answer.as_object().unwrap() {
                reply[k] = v.clone();
            }
            ws.send_text(reply.to_string()).await;
            return frame;
        }
    }
}

#[tokio::test]
async fn a_terminal_error_rolls_back_halts_and_clear_halt_or_reconnect_lifts_it() {
    let d = Daemon::start();
    let mut ws = Ws::host(&d).await;
    ws.call("tools.register", json!({"name": "journal"})).await;
    ws.call("state.set", json!({"key": "kept", "value": "before"}))
        .await;
    let submit = json!({"proposal": {"actions": [
        {"id": "w", "type": "state_write", "key": "draft", "value": 1},
        {"id": "o", "type": "state_write", "key": "kept", "value": "overwritten"},
        {"id": "t", "type": "tool_call", "tool": "journal", "dependencies": ["w", "o"], "failure_behavior": "retry", "max_retries": 5},
        {"id": "later", "type": "state_write", "key": "never", "value": 1, "dependencies": ["t"]}
    ]}});
    let id = ws.request("proposal.submit", submit.clone()).await;
    let call = answer_next_tool_call(&mut ws, json!({"error": {"code": -32000, "message": "receipt journal unavailable", "data": {"terminal": true}}})).await;
    assert_eq!(call["params"]["attempt"], 1);
    let r = loop {
        let f = ws.recv_json().await;
        if f["id"] == json!(id) {
            break f["result"].clone();
        }
    };
    let t = status_of(&r, "t");
    assert_eq!(
        (t["terminal"].clone(), t["attempts"].clone()),
        (json!(true), json!(1)),
        "no retry after a terminal error: {t}"
    );
    assert_eq!(status_of(&r, "w")["rolled_back"], true);
    assert_eq!(status_of(&r, "later")["status"], "skipped");
    assert_eq!(
        r["final_state"],
        json!({"kept": "before"}),
        "writes rolled back, earlier state restored"
    );

    // Halted: the next proposal calls no tool.
    let r = ws
        .call(
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "x", "type": "tool_call", "tool": "journal"}]}}),
        )
        .await;
    let x = status_of(&r["result"], "x");
    assert_eq!(x["status"], "rejected");
    assert!(x["error"].as_str().unwrap().contains("halted"), "{x}");
    // An operator session cannot clear a halt; this host session clears its own.
    let mut op = Ws::authed(&d).await;
    assert_eq!(
        op.call("session.clear_halt", json!({})).await["error"],
        json!({
            "code": -32603,
            "message": "permission denied: session.clear_halt needs a host session, this session is operator",
            "data": {"reason": "host_required"},
        })
    );
    assert_eq!(
        ws.call("session.clear_halt", json!({})).await["result"],
        json!({"cleared": true})
    );
    let id = ws
        .request(
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "x", "type": "tool_call", "tool": "journal"}]}}),
        )
        .await;
    answer_next_tool_call(&mut ws, json!({"result": {"written": true}})).await;
    let r = loop {
        let f = ws.recv_json().await;
        if f["id"] == json!(id) {
            break f;
        }
    };
    assert_eq!(status_of(&r["result"], "x")["status"], "succeeded");

    // A reconnect also starts unhalted: halt a client connection, reconnect, run again.
    let client = client_for(&d);
    client.register_tool_handler(|call: ToolCall| {
        if call.params["fail"] == true {
            Err(HandlerError::terminal("stop"))
        } else {
            Ok(json!("fine"))
        }
    });
    register_tools(&client, &["journal"]).await;
    let halt = client.call("proposal.submit", json!({"proposal": {"actions": [{"id": "h", "type": "tool_call", "tool": "journal", "parameters": {"fail": true}}]}})).await.unwrap();
    assert_eq!(status_of(&halt, "h")["terminal"], true);
    let still = client.call("proposal.submit", json!({"proposal": {"actions": [{"id": "h2", "type": "tool_call", "tool": "journal"}]}})).await.unwrap();
    assert_eq!(status_of(&still, "h2")["status"], "rejected");
    client.disconnect();
    register_tools(&client, &["journal"]).await;
    let fresh = client.call("proposal.submit", json!({"proposal": {"actions": [{"id": "h3", "type": "tool_call", "tool": "journal"}]}})).await.unwrap();
    assert_eq!(status_of(&fresh, "h3")["status"], "succeeded");
    let halts = client
        .call(
            "events.query",
            json!({"kinds": ["session.halted", "session.halt_cleared"]}),
        )
        .await
        .unwrap();
    assert_eq!(halts["count"], 3, "{halts}");
}

#[tokio::test]
async fn killing_the_client_mid_proposal_fails_its_callbacks_and_the_daemon_keeps_serving() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    ws.call("tools.register", json!({"name": "hang"})).await;
    ws.request(
        "proposal.submit",
        json!({"proposal": {"actions": [{"id": "h", "type": "tool_call", "tool": "hang"}]}}),
    )
    .await;
    let call = loop {
        let f = ws.recv_json().await;
        if f["method"] == "tools.execute" {
            break f;
        }
    };
    let request_id = call["params"]["request_id"].as_str().unwrap().to_string();
    drop(ws); // the client dies without answering
    let mut other = Ws::authed(&d).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let cancelled = loop {
        let r = other
            .call(
                "events.query",
                json!({"kinds": ["tool.cancelled"], "action_id": "h"}),
            )
            .await;
        if let Some(e) = r["result"]["events"]
            .as_array()
            .and_then(|a| a.first())
            .cloned()
        {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned callback was never cancelled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(cancelled["request_id"], request_id.as_str());
    assert!(other.call("server.schema", json!({})).await["result"].is_object());
}
