//! Issue 4 acceptance 8: bad inputs get a precise `-32602` naming the field (or a reported
//! issue from `verify`), never a crash and never a partial write.

mod common;

use common::*;
use serde_json::{json, Value};

async fn refused(ws: &mut Ws, method: &str, params: Value, expected: &str) {
    let r = ws.call(method, params.clone()).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (-32602, expected),
        "{method} {params} → {r}"
    );
}

#[tokio::test]
async fn wrong_param_types_on_every_method() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "state.get",
            json!({}),
            "invalid params: params: missing field `key`",
        ),
        (
            "state.get",
            json!({"key": 1}),
            "invalid params: key: invalid type: integer `1`, expected a string",
        ),
        (
            "state.get",
            json!({"key": ""}),
            "invalid params: key: must not be empty",
        ),
        (
            "state.set",
            json!({"value": 1}),
            "invalid params: params: missing field `key`",
        ),
        (
            "state.set",
            json!({"key": "x".repeat(2000), "value": 1}),
            "invalid params: key: is longer than 1024 bytes",
        ),
        (
            "state.exists",
            json!({"key": null}),
            "invalid params: key: invalid type: null, expected a string",
        ),
        (
            "state.keys",
            json!({"tenant_id": 3}),
            "invalid params: tenant_id: invalid type: integer `3`, expected a string",
        ),
        (
            "tools.register",
            json!({}),
            "invalid params: params: missing field `name`",
        ),
        (
            "tools.register",
            json!({"name": "a b"}),
            "invalid params: [0].name: must not contain white space, got \"a b\"",
        ),
        (
            "tools.register",
            json!({"name": "t", "parameters": "schema"}),
            "invalid params: parameters: invalid type: string \"schema\", expected a map",
        ),
        (
            "tools.register",
            json!([{"name": "ok"}, {"name": 5}]),
            "invalid params: [1].name: invalid type: integer `5`, expected a string",
        ),
        (
            "tools.unregister",
            json!({}),
            "invalid params: params: missing field `name`",
        ),
        (
            "policy.register",
            json!({"name": "p"}),
            "invalid params: params: missing field `rule`",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "allow_all"}),
            "invalid params: rule: must be deny_tool, deny_tool_param, require_state or deny_connector, got \"allow_all\"",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "deny_tool"}),
            "invalid params: target: is required for rule deny_tool",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "deny_tool", "target": "t", "pattern": "x"}),
            "invalid params: pattern: does not apply to rule deny_tool",
        ),
        (
            "policy.register",
            json!({"name": "p", "rule": "require_state", "key": "k"}),
            "invalid params: value: is required for rule require_state",
        ),
        (
            "policy.unregister",
            json!({"name": []}),
            "invalid params: name: invalid type: sequence, expected a string",
        ),
        (
            "session.init",
            json!({"tools": {}}),
            "invalid params: tools: invalid type: map, expected a sequence",
        ),
        (
            "session.init",
            json!({"tools": [{"name": "ok"}], "policies": [{"name": "p", "rule": "nope"}]}),
            "invalid params: policies[0].rule: must be deny_tool, deny_tool_param, require_state or deny_connector, got \"nope\"",
        ),
        (
            "verify",
            json!({}),
            "invalid params: params: missing field `proposal`",
        ),
        (
            "verify",
            json!({"proposal": []}),
            "invalid params: proposal: invalid type: sequence, expected a map",
        ),
        (
            "verify",
            json!({"proposal": {"actions": []}, "initial_state": 1}),
            "invalid params: initial_state: invalid type: integer `1`, expected a map",
        ),
        (
            "proposal.submit",
            json!({"proposal": "{}"}),
            "invalid params: proposal: invalid type: string \"{}\", expected a map",
        ),
        (
            "proposal.submit",
            json!({"proposal": {}}),
            "invalid params: proposal: missing field `actions`",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "teleport"}]}}),
            "invalid params: proposal.actions[0].type: unknown variant `teleport`, expected one of `tool_call`, `state_write`, `state_delete`",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "tool_call"}]}}),
            "invalid params: proposal.actions[0].tool: required for a tool_call action",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "timeout_ms": 0}]}}),
            "invalid params: proposal.actions[0].timeout_ms: must be an integer from 1 to 86400000, got 0",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "failure_behavior": "panic"}]}}),
            "invalid params: proposal.actions[0].failure_behavior: unknown variant `panic`, expected one of `abort`, `skip`, `retry`",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_write", "key": "k", "value": 1, "dependencies": "b"}]}}),
            "invalid params: proposal.actions[0].dependencies: invalid type: string \"b\", expected a sequence",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [
                {"id": "a", "type": "state_write", "key": "k", "value": 1, "dependencies": ["b"]},
                {"id": "b", "type": "state_write", "key": "k", "value": 2, "dependencies": ["a"]}
            ]}}),
            "invalid params: proposal is not runnable: action \"a\" is in, or depends on, a dependency cycle among: a, b",
        ),
        (
            "proposal.submit",
            json!({"proposal": {"actions": [{"id": "a", "type": "state_delete", "key": "k"}, {"id": "a", "type": "state_delete", "key": "k"}]}}),
            "invalid params: proposal is not runnable: duplicate action id \"a\" (proposal.actions[1])",
        ),
        (
            "runs.complete",
            json!({"run_id": "r"}),
            "invalid params: params: missing field `outcome`",
        ),
        (
            "runs.subscribe",
            json!({"run_id": 7}),
            "invalid params: run_id: invalid type: integer `7`, expected a string",
        ),
    ];
    for (method, params, expected) in cases {
        refused(&mut ws, method, params, expected).await;
    }
    // A regular expression that does not compile is refused naming `pattern` (the rest of
    // the message is the regex crate's diagnosis).
    let r = ws
        .call(
            "policy.register",
            json!({"name": "p", "rule": "deny_tool_param", "target": "t", "key": "k", "pattern": "("}),
        )
        .await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(
        message(&r).starts_with("invalid params: pattern: is not a valid regular expression: "),
        "{r}"
    );
    // Params that are not a structure are refused by the JSON-RPC layer.
    let r = ws.call("state.set", json!("k")).await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32600,
            "invalid request: params must be an object or array, got a string"
        )
    );
    // Unknown fields are ignored and an empty tenant_id is the unscoped partition: these
    // read-only calls answer as if the extra field were absent.
    for (method, params, expected) in [
        ("state.snapshot", json!({"tenant": "t"}), json!({})),
        (
            "state.get",
            json!({"key": "k", "tenant_id": ""}),
            Value::Null,
        ),
        (
            "tools.list",
            json!({"x": 1}),
            json!({"tools": [], "count": 0}),
        ),
        ("events.count", json!({"x": 1}), json!(0)),
    ] {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(r["result"], expected, "{method} {params} → {r}");
    }
    // Nothing was written by any refused call.
    assert_eq!(ws.call("state.keys", json!({})).await["result"], json!([]));
    assert_eq!(
        ws.call("tools.list", json!({})).await["result"],
        json!({"tools": [], "count": 0})
    );
    assert_eq!(
        ws.call("policy.list", json!({})).await["result"],
        json!({"policies": [], "scope": "global"})
    );
    let events = ws
        .call(
            "events.query",
            json!({"kinds": ["state.written", "proposal.submitted"]}),
        )
        .await;
    assert_eq!(events["result"], json!({"count": 0, "events": []}));
}

#[tokio::test]
async fn verify_reports_every_problem_and_runs_nothing() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    ws.call("tools.register", json!([{"name": "t"}])).await;
    // Malformed actions are refused whole, naming the first; every one is listed.
    let r = ws
        .call(
            "verify",
            json!({"proposal": {"actions": [
                {"id": "a", "type": "teleport"},
                {"id": "x", "type": "state_write"}
            ]}}),
        )
        .await;
    let first = "invalid params: proposal.actions[0].type: unknown variant `teleport`, expected one of `tool_call`, `state_write`, `state_delete`";
    assert_eq!(
        r["error"],
        json!({"code": -32602, "message": first, "data": {"issues": [
            {"action_id": "a", "message": first},
            {"action_id": "x", "message": "invalid params: proposal.actions[1].key: required for a state_write action"}
        ]}}),
        "{r}"
    );
    // A well-formed proposal with problems gets every one reported as an issue.
    let r = ws
        .call("verify", json!({"proposal": {"actions": [
            {"id": "b", "type": "tool_call", "tool": "ghost"},
            {"id": "c", "type": "state_write", "key": "k", "value": 1, "dependencies": ["d"]},
            {"id": "d", "type": "state_write", "key": "k", "value": 1, "dependencies": ["c"]},
            {"id": "e", "type": "state_write", "key": "z", "value": 1, "dependencies": ["missing"]}
        ]}}))
        .await["result"]
        .clone();
    assert_eq!(r["valid"], false, "{r}");
    let issues: Vec<(String, String)> = r["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["action_id"].as_str().unwrap().to_string(),
                i["category"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let messages: Vec<String> = r["issues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["message"].as_str().unwrap().to_string())
        .collect();
    for (id, category, needle) in [
        ("b", "tool", "unknown tool \"ghost\""),
        ("c", "structure", "dependency cycle"),
        ("e", "structure", "missing action \"missing\""),
    ] {
        assert!(
            issues.contains(&(id.to_string(), category.to_string()))
                && messages.iter().any(|m| m.contains(needle)),
            "{id} {category} {needle} not in {r}"
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
    let empty = json!({"tools": [], "count": 0});
    refused(
        &mut ws,
        "tools.register",
        json!([{"name": "a"}, {"name": "b"}, {"name": ""}]),
        "invalid params: [2].name: must not be empty",
    )
    .await;
    assert_eq!(ws.call("tools.list", json!({})).await["result"], empty);
    refused(
        &mut ws,
        "session.init",
        json!({"tools": [{"name": "a"}], "policies": [{"name": "p", "rule": "deny_tool"}]}),
        "invalid params: policies[0].target: is required for rule deny_tool",
    )
    .await;
    assert_eq!(ws.call("tools.list", json!({})).await["result"], empty);
    let r = ws.call("session.init", json!({"tools": [{"name": "a", "description": "does a"}], "policies": [{"name": "p", "rule": "require_state", "key": "mode", "value": "live"}]})).await;
    assert_eq!(
        r["result"],
        json!({"session_id": "sess-1", "tools_registered": 1, "policies_registered": 1})
    );
    assert_eq!(
        ws.call("tools.list", json!({})).await["result"],
        json!({"tools": [{
            "name": "a",
            "description": "does a",
            "parameters": {"type": "object"},
            "idempotent": false,
            "source": "user_defined",
        }], "count": 1})
    );
    assert_eq!(
        ws.call("policy.list", json!({})).await["result"],
        json!({"policies": [{"name": "p", "description": "require state mode = \"live\""}], "scope": "global"})
    );
    // tools.register answers how many it registered: one object or an array.
    assert_eq!(
        ws.call("tools.register", json!({"name": "b", "idempotent": true}))
            .await["result"],
        1
    );
    assert_eq!(
        ws.call("tools.register", json!([{"name": "c"}, {"name": "d"}]))
            .await["result"],
        2
    );
    for name in ["b", "c", "d"] {
        assert_eq!(
            ws.call("tools.unregister", json!({"name": name})).await["result"],
            json!({"unregistered": name, "removed": 1})
        );
    }
    assert_eq!(
        ws.call("tools.unregister", json!({"name": "a"})).await["result"],
        json!({"unregistered": "a", "removed": 1})
    );
    assert_eq!(
        ws.call("tools.unregister", json!({"name": "a"})).await["result"],
        json!({"unregistered": "a", "removed": 0})
    );
    assert_eq!(
        ws.call("policy.unregister", json!({"name": "p"})).await["result"],
        json!({"unregistered": "p", "removed": 1, "scope": "global"})
    );
    assert_eq!(
        ws.call("policy.unregister", json!({"name": "p"})).await["result"],
        json!({"unregistered": "p", "removed": 0, "scope": "global"})
    );
    // A session-scoped policy reports its scope.
    assert_eq!(
        ws.call(
            "policy.register",
            json!({"name": "q", "rule": "deny_tool", "target": "t", "session_id": "s1"})
        )
        .await["result"],
        json!({"registered": "q", "scope": {"session_id": "s1"}})
    );
    assert_eq!(
        ws.call("policy.list", json!({"session_id": "s1"})).await["result"],
        json!({"policies": [{"name": "q", "description": "deny tool t (session s1)"}], "scope": {"session_id": "s1"}})
    );
    // State is per connection and per tenant; state.set answers "ok".
    assert_eq!(
        ws.call("state.set", json!({"key": "k", "value": {"deep": [1, 2]}}))
            .await["result"],
        "ok"
    );
    assert_eq!(
        ws.call(
            "state.set",
            json!({"key": "k", "value": "tenant", "tenant_id": "t1"}),
        )
        .await["result"],
        "ok"
    );
    // An absent value stores null: the key exists and reads null.
    assert_eq!(
        ws.call("state.set", json!({"key": "n", "tenant_id": "t3"}))
            .await["result"],
        "ok"
    );
    assert_eq!(
        ws.call("state.exists", json!({"key": "n", "tenant_id": "t3"}))
            .await["result"],
        true
    );
    assert_eq!(
        ws.call("state.snapshot", json!({"tenant_id": "t3"})).await["result"],
        json!({"n": null})
    );
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

/// Params are an object unless a method's params schema has an array form (`tools.register`
/// takes one definition or an array): a positional array is refused, not read by position.
#[tokio::test]
async fn arrays_are_refused_where_params_are_an_object() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    for (method, params) in [
        ("state.set", json!(["k", 1])),
        ("memory.add_fact", json!(["s", "b"])),
        ("policy.list", json!([])),
    ] {
        refused(
            &mut ws,
            method,
            params,
            "invalid params: params: must be an object, got an array",
        )
        .await;
    }
    assert_eq!(ws.call("state.keys", json!({})).await["result"], json!([]));
    let r = ws
        .call("tools.register", json!([{"name": "a"}, {"name": "b"}]))
        .await;
    assert_eq!(r["result"], json!(2), "{r}");
}
