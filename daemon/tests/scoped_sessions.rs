//! Scoped sessions against a real daemon: inference-consumer grants (issue, infer and
//! nothing else, cut off at TTL and on revoke), policy-scoping sessions, bind_context.

mod common;

use car_test_harness::http_script::{Reply, Server};
use common::{code, message, Daemon, Ws};
use serde_json::{json, Value};

async fn agent_socket(d: &Daemon, host: &mut Ws, id: &str, allowlist: Option<Value>) -> Ws {
    let mut spec = json!({"id": id, "name": id, "command": "/bin/sh"});
    if let Some(list) = allowlist {
        spec["method_allowlist"] = list;
    }
    let r = host.call("agents.upsert", spec).await;
    let path = r["result"]["token_path"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    let token = std::fs::read_to_string(path).unwrap();
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call(
            "session.auth",
            json!({"token": token.trim(), "agent_id": id}),
        )
        .await;
    assert_eq!(r["result"]["agent_id"], id, "{r}");
    ws
}

async fn consumer(d: &Daemon, grant: &Value) -> (Ws, Value) {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call(
            "session.auth",
            json!({"consumer_id": grant["consumer_id"], "token": grant["token"]}),
        )
        .await;
    (ws, r)
}

fn answer(text: &str) -> Reply {
    Reply::json(
        200,
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
    )
}

#[tokio::test]
async fn a_consumer_grant_infers_and_nothing_else_and_ends_at_its_ttl() {
    let server = Server::start(vec![answer("pong"), answer("pong again")]);
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let r = host
        .call(
            "models.register",
            json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
        )
        .await;
    assert_eq!(r["result"]["registered"], true, "{r}");
    let mut agent = agent_socket(&d, &mut host, "worker", None).await;

    let r = agent
        .call(
            "session.consumer.issue",
            json!({"methods": ["infer"], "ttl_secs": 2}),
        )
        .await;
    let grant = r["result"].clone();
    assert_eq!(grant["role"], "inference_consumer", "{r}");
    assert_eq!(grant["parent_agent_id"], "worker");
    assert_eq!(grant["methods"], json!(["infer"]));
    assert_eq!(
        grant["expires_at_ms"].as_u64().unwrap() - grant["issued_at_ms"].as_u64().unwrap(),
        2000
    );
    let (mut c, r) = consumer(&d, &grant).await;
    assert_eq!(r["result"]["role"], "inference_consumer", "{r}");
    assert!(
        r["result"]["consumer"]["token"].is_null(),
        "the token is not echoed: {r}"
    );

    let r = c
        .call("infer", json!({"model": "remote", "prompt": "ping"}))
        .await;
    assert_eq!(r["result"]["text"], "pong", "{r}");
    for (method, params) in [
        ("state.set", json!({"key": "k", "value": 1})),
        (
            "memory.add_fact",
            json!({"subject": "s", "body": "b", "kind": "fact"}),
        ),
        ("agents.list", json!({})),
    ] {
        let r = c.call(method, params).await;
        assert_eq!(code(&r), -32601, "{method}: {r}");
        assert_eq!(r["error"]["data"]["reason"], "agent_method_not_allowed");
    }
    // A wrong token for the grant is refused like any credential.
    let mut bad = Ws::tcp(&d.ws_url).await;
    let r = bad
        .call(
            "session.auth",
            json!({"consumer_id": grant["consumer_id"], "token": "x".repeat(43)}),
        )
        .await;
    assert!(message(&r).contains("token mismatch"), "{r}");

    // At its TTL the consumer socket is closed.
    assert_eq!(c.closed_with().await, Some(1000));
    let (_, r) = consumer(&d, &grant).await;
    assert!(
        message(&r).contains("token mismatch"),
        "an ended grant authenticates nothing: {r}"
    );

    // Revoke cuts a live grant off at once; only the issuing socket may revoke.
    let r = agent
        .call(
            "session.consumer.issue",
            json!({"methods": ["infer", "infer.cancel"]}),
        )
        .await;
    let grant = r["result"].clone();
    assert_eq!(
        grant["expires_at_ms"].as_u64().unwrap() - grant["issued_at_ms"].as_u64().unwrap(),
        300_000,
        "the default TTL"
    );
    let (mut c, _) = consumer(&d, &grant).await;
    let mut other = Ws::authed(&d).await;
    let r = other
        .call(
            "session.consumer.revoke",
            json!({"consumer_id": grant["consumer_id"]}),
        )
        .await;
    assert_eq!(r["result"]["revoked"], false, "{r}");
    let r = agent
        .call(
            "session.consumer.revoke",
            json!({"consumer_id": grant["consumer_id"]}),
        )
        .await;
    assert_eq!(r["result"]["revoked"], true, "{r}");
    assert_eq!(c.closed_with().await, Some(1000));
}

#[tokio::test]
async fn grants_are_checked_against_the_parent_and_bad_input_names_the_field() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let mut op = Ws::authed(&d).await;
    let r = op
        .call("session.consumer.issue", json!({"methods": ["infer"]}))
        .await;
    assert_eq!(r["error"]["data"]["reason"], "agent_required", "{r}");
    let mut agent = agent_socket(&d, &mut host, "a1", None).await;
    for (params, field) in [
        (json!({}), "methods"),
        (json!({"methods": []}), "methods"),
        (json!({"methods": ["state.set"]}), "methods[0]"),
        (json!({"methods": ["infer"], "ttl_secs": 901}), "ttl_secs"),
        (json!({"methods": ["infer"], "ttl_secs": 0}), "ttl_secs"),
    ] {
        let r = agent.call("session.consumer.issue", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params}: {r}");
        assert!(message(&r).contains(field), "{params}: {}", message(&r));
    }
    // An allowlisted agent grants only what it may call itself.
    let mut narrow = agent_socket(
        &d,
        &mut host,
        "a2",
        Some(json!(["session.consumer.issue", "infer"])),
    )
    .await;
    let r = narrow
        .call(
            "session.consumer.issue",
            json!({"methods": ["infer", "classify"]}),
        )
        .await;
    assert!(message(&r).contains("methods[1]"), "{r}");
    let r = narrow
        .call("session.consumer.issue", json!({"methods": ["infer"]}))
        .await;
    assert!(r["result"]["consumer_id"].is_string(), "{r}");
    // consumer_id with other selectors is refused.
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call(
            "session.auth",
            json!({"consumer_id": "c", "token": "t", "agent_id": "a1"}),
        )
        .await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).contains("agent_id"), "{r}");
    // The parent going away ends its grants.
    let r = agent
        .call("session.consumer.issue", json!({"methods": ["infer"]}))
        .await;
    let (mut c, _) = consumer(&d, &r["result"]).await;
    drop(agent);
    assert_eq!(c.closed_with().await, Some(1000));
}

#[tokio::test]
async fn policy_sessions_scope_policies_and_close_drops_them() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let r = ws.call("session.policy.open", json!({})).await;
    let scope = r["result"]["session_id"].as_str().unwrap().to_string();
    assert!(scope.starts_with("pol-"), "{r}");
    let r = ws
        .call(
            "policy.register",
            json!({"name": "no-rm", "rule": "deny_tool", "target": "rm", "session_id": scope}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let r = ws.call("policy.list", json!({})).await;
    assert_eq!(
        r["result"]["policies"].as_array().map(Vec::len),
        Some(1),
        "{r}"
    );
    let r = ws
        .call("session.policy.close", json!({"session_id": scope}))
        .await;
    assert_eq!(r["result"]["closed"], true, "{r}");
    let r = ws.call("policy.list", json!({})).await;
    assert_eq!(r["result"]["policies"], json!([]), "{r}");
    let r = ws
        .call("session.policy.close", json!({"session_id": scope}))
        .await;
    assert_eq!(r["result"]["closed"], false, "{r}");
    let r = ws.call("session.policy.close", json!({})).await;
    assert_eq!(code(&r), -32602, "{r}");
}

#[tokio::test]
async fn bind_context_is_personal_and_checks_its_input() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let dir = d.home.display().to_string();
    let r = ws
        .call(
            "session.bind_context",
            json!({"working_dir": dir, "personal": true}),
        )
        .await;
    assert_eq!(
        r["result"],
        json!({"work_context": null, "from_default": false}),
        "{r}"
    );
    for (params, field) in [
        (json!({"working_dir": "relative"}), "working_dir"),
        (json!({"working_dir": "/no/such/dir/xyz"}), "working_dir"),
        (
            json!({"working_dir": dir, "organization_id": "org1", "personal": true}),
            "personal",
        ),
        (
            json!({"working_dir": dir, "organization_id": "org1"}),
            "organization_id",
        ),
    ] {
        let r = ws.call("session.bind_context", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params}: {r}");
        assert!(message(&r).contains(field), "{params}: {}", message(&r));
    }
}
