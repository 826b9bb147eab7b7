//! Issue 4 acceptance 8: bad inputs get a precise `-32602` naming the field (or a reported
//! issue from `verify`), never a crash and never a partial write.

mod common;

use common::*;
use serde_json::{json, Value};

async fn refused(ws: &mut Ws, method: &str, params: Value, needle: &str) {
    let r = ws.call(method, params.clone()).await;
    assert_eq!(code(&r), -32602, "{method} {params} → {r}");
    assert!(message(&r).contains(needle), "{method} {params} → {r}");
}

#[tokio::test]
async fn wrong_param_types_on_every_method() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        ("state.get", json!({}), "key is required"),
        ("state.get", json!({"key": 1}), "key must be a string"),
        (
            "state.get",
            json!({"key": "k", "tenant_id": ""}),
            "tenant_id must not be empty",
        ),
        ("state.set", json!({"key": "k"}), "value is required"),
        (
            "state.set",
            json!({"key": "x".repeat(2000), "value": 1}),
            "key is longer",
        ),
        ("state.set", json!(["k", 1]), "params must be an object"),
        ("state.exists", json!({"key": null}), "key is required"),
        (
            "state.keys",
            json!({"tenant_id": 3}),
            "tenant_id must be a string",
        ),
        (
            "state.snapshot",
            json!({"tenant": "t"}),
            "unknown field tenant",
        ),
        ("tools.register", json!({}), "name is required"),
        ("tools.register", json!({"name": "a b"}), "white space"),
        (
            "tools.register",
            json!({"name": "t", "parameters": "schema"}),
            "parameters must be an object",
        ),
        (
            "tools.register",
            json!([{"name": "ok"}, {"name": 5}]),
            "params[1].name must be a string",
        ),
        ("tools.unregister", json!({}), "name is required"),
        ("tools.list", json!({"x": 1}), "unknown field x"),
        ("policy.register", json!({"name": "p"}), "rule is required"),
        (
            "policy.register",
            json!({"name": "p", "rule": "allow_all"}),
            "rule must be",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "deny_tool"}),
            "target is required",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "deny_tool_param", "target": "t", "key": "k", "pattern": "("}),
            "pattern is not a valid regular expression",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "deny_tool", "target": "t", "pattern": "x"}),
            "pattern does not apply",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "require_state", "key": "k"}),
            "value is required",
        ),
        (
            "policy.unregister",
            json!({"name": []}),
            "name must be a string",
        ),
        (
            "session.init",
            json!({"tools": {}}),
            "tools must be an array",
        ),
        (
            "session.init",
            json!({"tools": [{"name": "ok"}], "policies": [{"name": "p", "rule": "nope"}]}),
            "policies[0].rule must be",
        ),
        ("verify", json!({}), "proposal is required"),
        (
            "verify",
            json!({"proposal": []}),
            "proposal must be an object",
        ),
        (
            "verify",
            json!({"proposal": {"actions": []}, "initial_state": 1}),
            "initial_state must be an object",
        ),
        (
            "proposal.submit",
            json!({"proposal": "{}"}),
            "proposal must be an object",
        ),
        (
            "proposal.submit",
            json!({"proposal": {}}),
            "proposal.actions is required",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "teleport"}]}}),
            "proposal.actions[0].type must be",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "tool_call"}]}}),
            "proposal.actions[0].tool is required",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "timeout_ms": 0}]}}),
            "timeout_ms must be an integer",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "failure_behavior": "panic"}]}}),
            "failure_behavior must be",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "dependencies": "b"}]}}),
            "dependencies must be an array",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [
                {"id": "a", "type": "state_write", "key": "k", "value": 1, "dependencies": ["b"]},
                {"id": "b", "type": "state_write", "key": "k", "value": 2, "dependencies": ["a"]}
            ]}}),
            "dependency cycle",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "tool_call", "tool": "unregistered"}]}}),
            "unknown tool",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_delete", "key": "k"}, {"id": "a", "type": "state_delete", "key": "k"}]}}),
            "duplicate action id",
        ),
        ("events.count", json!({"x": 1}), "unknown field x"),
        (
            "runs.complete",
            json!({"run_id": "r"}),
            "outcome is required",
        ),
        (
            "runs.subscribe",
            json!({"run_id": 7}),
            "run_id must be a string",
        ),
    ];
    for (method, params, needle) in cases {
        refused(&mut ws, method, params, needle).await;
    }
    // Nothing was written by any refused call.
    assert_eq!(ws.call("state.keys", json!({})).await["result"], json!([]));
    assert_eq!(ws.call("tools.list", json!({})).await["result"], json!([]));
    assert_eq!(ws.call("policy.list", json!({})).await["result"], json!([]));
    let events = ws
        .call(
            "events.query",
            json!({"kinds": ["state.written", "proposal.submitted"]}),
        )
        .await;
    assert_eq!(events["result"], json!([]));
}

#[tokio::test]
async fn verify_reports_every_problem_and_runs_nothing() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    ws.call("tools.register", json!([{"name": "t"}])).await;
    let r = ws
        .call("verify", json!({"proposal": {"actions": [
            {"id": "a", "type": "teleport"},
            {"id": "b", "type": "tool_call", "tool": "ghost"},
            {"id": "c", "type": "state_write", "key": "k", "value": 1, "dependencies": ["d"]},
            {"id": "d", "type": "state_write", "key": "k", "value": 1, "dependencies": ["c"]},
            {"id": "e", "type": "state_write", "key": "z", "value": 1, "dependencies": ["missing"]}
        ]}}))
        .await["result"]
        .clone();
    assert_eq!(r["valid"], false);
    let messages: Vec<String> = r["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["message"].as_str().unwrap().to_string())
        .collect();
    for needle in [
        "type must be",
        "unknown tool \"ghost\"",
        "dependency cycle",
        "missing action \"missing\"",
    ] {
        assert!(
            messages.iter().any(|m| m.contains(needle)),
            "{needle} not in {messages:#?}"
        );
    }
    assert_eq!(ws.call("state.keys", json!({})).await["result"], json!([]));
}

#[tokio::test]
async fn huge_proposals_are_refused_whole() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let actions: Vec<Value> = (0..10_000).map(|i| json!({"id": format!("a{i}"), "type": "state_write", "key": format!("k{i}"), "value": i})).collect();
    for method in ["proposal.submit", "verify"] {
        let r = ws
            .call(method, json!({"proposal": {"actions": actions}}))
            .await;
        assert_eq!(code(&r), -32602);
        assert!(message(&r).contains("10000 actions, at most 1000"), "{r}");
    }
    assert_eq!(ws.call("state.keys", json!({})).await["result"], json!([]));
    // A proposal at the limit runs.
    let actions: Vec<Value> = (0..1000).map(|i| json!({"id": format!("a{i}"), "type": "state_write", "key": format!("k{i}"), "value": i})).collect();
    let r = ws
        .call("proposal.submit", json!({"proposal": {"actions": actions}}))
        .await;
    assert_eq!(r["result"]["final_state"].as_object().unwrap().len(), 1000);
}

#[tokio::test]
async fn registrations_are_all_or_nothing() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    refused(
        &mut ws,
        "tools.register",
        json!([{"name": "a"}, {"name": "b"}, {"name": ""}]),
        "params[2].name",
    )
    .await;
    assert_eq!(ws.call("tools.list", json!({})).await["result"], json!([]));
    refused(
        &mut ws,
        "session.init",
        json!({"tools": [{"name": "a"}], "policies": [{"name": "p", "rule": "deny_tool"}]}),
        "policies[0].target",
    )
    .await;
    assert_eq!(ws.call("tools.list", json!({})).await["result"], json!([]));
    let r = ws.call("session.init", json!({"tools": [{"name": "a", "description": "does a"}], "policies": [{"name": "p", "rule": "require_state", "key": "mode", "value": "live"}]})).await;
    assert_eq!(r["result"], json!({"tools": 1, "policies": 1}));
    assert_eq!(
        ws.call("tools.list", json!({})).await["result"],
        json!([{"name": "a", "description": "does a"}])
    );
    assert_eq!(
        ws.call("policy.list", json!({})).await["result"][0]["rule"],
        "require_state"
    );
    assert_eq!(
        ws.call("tools.unregister", json!({"name": "a"})).await["result"],
        1
    );
    assert_eq!(
        ws.call("tools.unregister", json!({"name": "a"})).await["result"],
        0
    );
    // State is per connection and per tenant.
    ws.call("state.set", json!({"key": "k", "value": {"deep": [1, 2]}}))
        .await;
    ws.call(
        "state.set",
        json!({"key": "k", "value": "tenant", "tenant_id": "t1"}),
    )
    .await;
    assert_eq!(
        ws.call("state.get", json!({"key": "k"})).await["result"],
        json!({"deep": [1, 2]})
    );
    assert_eq!(
        ws.call("state.get", json!({"key": "k", "tenant_id": "t1"}))
            .await["result"],
        "tenant"
    );
    assert_eq!(
        ws.call("state.get", json!({"key": "absent"})).await["result"],
        Value::Null
    );
    assert_eq!(
        ws.call("state.exists", json!({"key": "k", "tenant_id": "t2"}))
            .await["result"],
        false
    );
    assert_eq!(
        ws.call("state.snapshot", json!({"tenant_id": "t1"})).await["result"],
        json!({"k": "tenant"})
    );
    let mut other = Ws::authed(&d).await;
    assert_eq!(
        other.call("state.keys", json!({})).await["result"],
        json!([])
    );
}
