//! Agent identities and chat turns against a real daemon: `agents.upsert` mints a token
//! file, `session.auth {token, agent_id}` binds (and only with that agent's own token), a
//! `method_allowlist` miss never reaches its handler, a newer connection replaces an older
//! one, the registry survives a restart; `agents.chat` routes a turn to the attached agent
//! and its `agent.chat.event`s back to the host, with cancel, approve and disconnects.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{code, message, Daemon, Ws};
use serde_json::{json, Value};

async fn upsert(host: &mut Ws, spec: Value) -> Value {
    let r = host.call("agents.upsert", spec).await;
    assert!(r["result"].is_object(), "{r}");
    r["result"].clone()
}

async fn as_agent(d: &Daemon, id: &str, token: &str) -> (Ws, Value) {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call("session.auth", json!({"token": token, "agent_id": id}))
        .await;
    (ws, r)
}

fn token_of(agent: &Value) -> String {
    let path = agent["token_path"].as_str().unwrap();
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

fn mode(path: &str) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn an_agent_binds_with_its_own_token_only_and_its_allowlist_holds() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let a = upsert(
        &mut host,
        json!({"id": "alpha", "name": "Alpha", "command": "/bin/sh"}),
    )
    .await;
    let b = upsert(
        &mut host,
        json!({"id": "beta", "name": "Beta", "interpreter": "sh", "method_allowlist": ["state.get", "state.keys"]}),
    )
    .await;
    assert_eq!(a["attached"], false);
    assert_eq!(a["status"], "stopped");
    assert!(
        b["spec"]["command"].as_str().unwrap().ends_with("/sh"),
        "{b}"
    );
    let token_path = a["token_path"].as_str().unwrap();
    assert_eq!(mode(token_path), 0o600);
    assert_eq!(
        mode(
            std::path::Path::new(token_path)
                .parent()
                .unwrap()
                .to_str()
                .unwrap()
        ),
        0o700
    );
    assert_eq!(mode(a["manifest_path"].as_str().unwrap()), 0o600);
    let (alpha_token, beta_token) = (token_of(&a), token_of(&b));
    assert_eq!(alpha_token.len(), 43);
    assert_ne!(alpha_token, beta_token);

    // Another agent's token, the daemon token, an unknown agent: all refused alike.
    for (id, token) in [
        ("alpha", beta_token.as_str()),
        ("alpha", d.token().as_str()),
        ("ghost", alpha_token.as_str()),
    ] {
        let (_, r) = as_agent(&d, id, token).await;
        assert_eq!(code(&r), -32603, "{id}: {r}");
        assert!(message(&r).contains("token mismatch"), "{r}");
    }

    let (mut alpha, r) = as_agent(&d, "alpha", &alpha_token).await;
    assert_eq!(r["result"]["agent_id"], "alpha", "{r}");
    assert!(r["result"].get("method_allowlist").is_none(), "{r}");
    let r = alpha
        .call("state.set", json!({"key": "k", "value": 1}))
        .await;
    assert!(r["error"].is_null(), "unrestricted: {r}");

    let (mut beta, r) = as_agent(&d, "beta", &beta_token).await;
    assert_eq!(
        r["result"]["method_allowlist"],
        json!(["state.get", "state.keys"])
    );
    let r = beta
        .call("state.set", json!({"key": "k", "value": 2}))
        .await;
    assert_eq!(code(&r), -32601, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "agent_method_not_allowed");
    assert!(message(&r).contains("agent_method_not_allowed"), "{r}");
    // The handler never ran: nothing was written.
    let r = beta.call("state.get", json!({"key": "k"})).await;
    assert_eq!(r["result"], Value::Null, "{r}");
    // The handshake is implicit.
    let r = beta
        .call("server.handshake", common::handshake_params())
        .await;
    assert!(r["result"].is_object(), "{r}");

    let r = host.call("agents.list", json!({})).await;
    let rows = r["result"].as_array().unwrap();
    assert!(rows.iter().all(|row| row["attached"] == true), "{r}");

    // A newer connection with the same credential replaces the older one.
    let (mut alpha2, r) = as_agent(&d, "alpha", &alpha_token).await;
    assert_eq!(r["result"]["agent_id"], "alpha", "{r}");
    assert_eq!(alpha.closed_with().await, Some(1000));
    let r = alpha2.call("state.keys", json!({})).await;
    assert!(r["result"].is_array(), "{r}");

    // Removing the agent revokes the token and closes its connection.
    let r = host.call("agents.remove", json!({"id": "alpha"})).await;
    assert_eq!(r["result"]["removed"], true, "{r}");
    assert_eq!(alpha2.closed_with().await, Some(1000));
    assert!(!std::path::Path::new(token_path).exists());
    let (_, r) = as_agent(&d, "alpha", &alpha_token).await;
    assert_eq!(code(&r), -32603, "{r}");
    let r = host.call("agents.remove", json!({"id": "alpha"})).await;
    assert_eq!(r["result"]["removed"], false, "{r}");
}

#[tokio::test]
async fn the_registry_and_tokens_survive_a_restart() {
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::builder()
        .home(home.path().join("car"))
        .args(["--no-approvals"])
        .start();
    let mut host = Ws::host(&d).await;
    let a = upsert(
        &mut host,
        json!({"id": "keeper", "name": "Keeper", "command": "/bin/sh", "capabilities": ["chat"]}),
    )
    .await;
    let token = token_of(&a);
    // Upserting again keeps the token.
    let again = upsert(
        &mut host,
        json!({"id": "keeper", "name": "Keeper v2", "command": "/bin/sh"}),
    )
    .await;
    assert_eq!(token_of(&again), token);
    drop(host);
    d.terminate();

    let d = Daemon::builder()
        .home(home.path().join("car"))
        .args(["--no-approvals"])
        .start();
    let mut host = Ws::host(&d).await;
    let r = host.call("agents.list", json!({})).await;
    assert_eq!(r["result"][0]["spec"]["name"], "Keeper v2", "{r}");
    let (_, r) = as_agent(&d, "keeper", &token).await;
    assert_eq!(r["result"]["agent_id"], "keeper", "{r}");
}

#[tokio::test]
async fn agents_upsert_refuses_bad_specs_naming_the_field() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let cases = [
        (json!({"name": "n", "command": "/bin/sh"}), "id"),
        (
            json!({"id": "../x", "name": "n", "command": "/bin/sh"}),
            "id",
        ),
        (
            json!({"id": "a b", "name": "n", "command": "/bin/sh"}),
            "id",
        ),
        (json!({"id": "a", "name": "n"}), "command"),
        (json!({"id": "a", "name": "n", "command": "sh"}), "command"),
        (
            json!({"id": "a", "name": "n", "command": "/nonexistent/x"}),
            "command",
        ),
        (
            json!({"id": "a", "name": "n", "interpreter": "no-such-program-xyz"}),
            "interpreter",
        ),
        (
            json!({"id": "a", "name": "n", "command": "/bin/sh", "cwd": "rel"}),
            "cwd",
        ),
        (
            json!({"id": "a", "name": "n", "command": "/bin/sh", "restart": "sometimes"}),
            "restart",
        ),
        (
            json!({"id": "a", "name": "n", "command": "/bin/sh", "method_allowlist": ["state.get", "nope.x"]}),
            "method_allowlist[1]",
        ),
    ];
    for (spec, field) in cases {
        let r = host.call("agents.upsert", spec.clone()).await;
        assert_eq!(code(&r), -32602, "{spec}: {r}");
        assert!(
            message(&r).contains(field),
            "{spec}: {} should name {field}",
            message(&r)
        );
    }
    let r = host.call("agents.list", json!({})).await;
    assert_eq!(r["result"], json!([]), "nothing was registered: {r}");
    // Operators cannot upsert (host role).
    let mut op = Ws::authed(&d).await;
    let r = op
        .call(
            "agents.upsert",
            json!({"id": "a", "name": "n", "command": "/bin/sh"}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
}

/// The next message on `ws` that is a request for `method`: `(id, params)`.
async fn reverse_call(ws: &mut Ws, method: &str) -> (Value, Value) {
    loop {
        let v = ws.recv_json().await;
        if v["method"] == method && v.get("id").is_some() {
            return (v["id"].clone(), v["params"].clone());
        }
    }
}

async fn notification(ws: &mut Ws, method: &str) -> Value {
    loop {
        let v = ws.recv_json().await;
        if v["method"] == method && v.get("id").is_none() {
            return v["params"].clone();
        }
    }
}

async fn reply(ws: &mut Ws, id: &Value, result: Value) {
    ws.send_text(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
        .await;
}

async fn event(ws: &mut Ws, params: Value) {
    ws.send_text(
        json!({"jsonrpc": "2.0", "method": "agent.chat.event", "params": params}).to_string(),
    )
    .await;
}

async fn response(ws: &mut Ws, id: u64) -> Value {
    loop {
        let v = ws.recv_json().await;
        if v["id"] == json!(id) {
            return v;
        }
    }
}

#[tokio::test]
async fn a_chat_turn_reaches_the_attached_agent_and_streams_back_to_the_host() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let spec = upsert(
        &mut host,
        json!({"id": "milo", "name": "Milo", "command": "/bin/sh"}),
    )
    .await;
    let mut caller = Ws::authed(&d).await;
    // Not attached yet.
    let r = caller
        .call("agents.chat", json!({"agent_id": "milo", "prompt": "hi"}))
        .await;
    assert_eq!(r["error"]["data"]["reason"], "agent_not_attached", "{r}");
    let (mut agent, _) = as_agent(&d, "milo", &token_of(&spec)).await;

    let id = caller
        .request(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "what is 2+2?", "session_id": "chat-1", "model": "m1"}),
        )
        .await;
    let (call_id, params) = reverse_call(&mut agent, "agent.chat").await;
    assert_eq!(params["session_id"], "chat-1");
    assert_eq!(params["prompt"], "what is 2+2?");
    assert_eq!(params["model"], "m1");
    assert_eq!(params["stream"], true);
    assert!(params["context"]["host_client_id"].is_string(), "{params}");
    reply(
        &mut agent,
        &call_id,
        json!({"accepted": true, "session_id": "chat-1"}),
    )
    .await;
    let r = response(&mut caller, id).await;
    assert_eq!(
        r["result"],
        json!({"accepted": true, "session_id": "chat-1"})
    );

    // A second turn on a busy session is refused.
    let r = caller
        .call(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "again", "session_id": "chat-1"}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "turn_in_flight", "{r}");

    event(
        &mut agent,
        json!({"session_id": "chat-1", "kind": "token", "delta": "It is "}),
    )
    .await;
    event(&mut agent, json!({"session_id": "chat-1", "kind": "tool_call", "tool": "calculate", "params": {"expression": "2+2"}})).await;
    event(
        &mut agent,
        json!({"session_id": "chat-1", "kind": "token", "delta": "4"}),
    )
    .await;
    event(
        &mut agent,
        json!({"session_id": "chat-1", "kind": "done", "finish_reason": "stop", "text": "It is 4"}),
    )
    .await;
    // After done, the route is gone: this one is dropped.
    event(
        &mut agent,
        json!({"session_id": "chat-1", "kind": "token", "delta": "late"}),
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let e = notification(&mut caller, "agents.chat.event").await;
        assert_eq!(e["agent_id"], "milo");
        assert_eq!(e["session_id"], "chat-1");
        got.push(e);
    }
    let kinds: Vec<&str> = got.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["token", "tool_call", "token", "done"]);
    assert_eq!(got[1]["tool"], "calculate");
    assert_eq!(got[3]["text"], "It is 4");
    // The late token never arrives: the next frame is this call's answer.
    let r = caller.call("host.agents", json!({})).await;
    assert!(r["result"].is_array(), "{r}");

    // Approve: relayed to the agent, its answer relayed back.
    let id = caller
        .request(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "book it", "session_id": "chat-2"}),
        )
        .await;
    let (call_id, _) = reverse_call(&mut agent, "agent.chat").await;
    reply(&mut agent, &call_id, json!({"accepted": true})).await;
    response(&mut caller, id).await;
    event(&mut agent, json!({"session_id": "chat-2", "kind": "approval_pending", "approval_id": "ap-1", "action": "calendar.write"})).await;
    let e = notification(&mut caller, "agents.chat.event").await;
    assert_eq!(e["kind"], "approval_pending");
    assert_eq!(e["approval_id"], "ap-1");
    // Another operator session may not approve it.
    let mut stranger = Ws::authed(&d).await;
    let r = stranger
        .call(
            "agents.chat.approve",
            json!({"session_id": "chat-2", "approval_id": "ap-1", "decision": true}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "not_owner", "{r}");
    let id = caller
        .request(
            "agents.chat.approve",
            json!({"session_id": "chat-2", "approval_id": "ap-1", "decision": "approve"}),
        )
        .await;
    let (call_id, params) = reverse_call(&mut agent, "agent.chat.approve").await;
    assert_eq!(
        params,
        json!({"session_id": "chat-2", "approval_id": "ap-1", "decision": "approve"})
    );
    reply(&mut agent, &call_id, json!({"resolved": true})).await;
    let r = response(&mut caller, id).await;
    assert_eq!(
        r["result"],
        json!({"resolved": true, "session_id": "chat-2"})
    );

    // Cancel: the agent is told, the route is gone.
    let r = caller
        .call("agents.chat.cancel", json!({"session_id": "chat-2"}))
        .await;
    assert_eq!(r["result"]["cancelled"], true, "{r}");
    let n = notification(&mut agent, "agent.chat.cancel").await;
    assert_eq!(n["session_id"], "chat-2");
    let r = caller
        .call("agents.chat.cancel", json!({"session_id": "chat-2"}))
        .await;
    assert_eq!(r["result"]["cancelled"], false, "{r}");

    // The agent refusing a turn is the host's error, and the route is dropped.
    let id = caller
        .request(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "no", "session_id": "chat-3"}),
        )
        .await;
    let (call_id, _) = reverse_call(&mut agent, "agent.chat").await;
    agent
        .send_text(json!({"jsonrpc": "2.0", "id": call_id, "error": {"code": -32602, "message": "prompt: too rude"}}).to_string())
        .await;
    let r = response(&mut caller, id).await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).contains("too rude"), "{r}");

    // The agent disconnecting mid-turn ends the turn with an error event.
    let id = caller
        .request(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "long", "session_id": "chat-4"}),
        )
        .await;
    let (call_id, _) = reverse_call(&mut agent, "agent.chat").await;
    reply(&mut agent, &call_id, json!({"accepted": true})).await;
    response(&mut caller, id).await;
    drop(agent);
    let e = notification(&mut caller, "agents.chat.event").await;
    assert_eq!(e["kind"], "error");
    assert_eq!(e["session_id"], "chat-4");
    assert!(e["error"].as_str().unwrap().contains("disconnected"), "{e}");
}

#[tokio::test]
async fn agents_chat_refuses_bad_input_naming_the_field() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    upsert(
        &mut host,
        json!({"id": "milo", "name": "Milo", "command": "/bin/sh"}),
    )
    .await;
    let cases = [
        (json!({"prompt": "hi"}), "agent_id"),
        (json!({"agent_id": "milo"}), "prompt"),
        (json!({"agent_id": "milo", "prompt": "  "}), "prompt"),
        (json!({"agent_id": "ghost", "prompt": "hi"}), "agent_id"),
        (
            json!({"agent_id": "milo", "prompt": "hi", "attachments": [{"type": "image_base64", "data": "", "media_type": "image/png"}]}),
            "attachments[0].data",
        ),
        (
            json!({"agent_id": "milo", "prompt": "hi", "attachments": [{"type": "image_base64", "data": "AA", "media_type": "image/tiff"}]}),
            "attachments[0]",
        ),
        (
            json!({"agent_id": "milo", "prompt": "hi", "attachments": [{"type": "image_url", "url": "file:///etc/passwd"}]}),
            "attachments[0].url",
        ),
        (
            json!({"agent_id": "milo", "prompt": "hi", "goal": {"check": "true"}, "attachments": [{"type": "image_url", "url": "https://x/y.png"}]}),
            "goal",
        ),
        (
            json!({"agent_id": "milo", "prompt": "hi", "goal": {}}),
            "goal: missing field `check`",
        ),
    ];
    for (params, field) in cases {
        let r = host.call("agents.chat", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params}: {r}");
        assert!(
            message(&r).contains(field),
            "{params}: {} should name {field}",
            message(&r)
        );
    }
    for method in ["agents.chat.cancel", "agents.chat.approve"] {
        let r = host.call(method, json!({})).await;
        assert_eq!(code(&r), -32602, "{method}: {r}");
        assert!(message(&r).contains("session_id"), "{r}");
    }
}

#[tokio::test]
async fn a_bound_agent_remembers_in_its_own_durable_graph() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let mut host = Ws::host(&d).await;
    let a = upsert(
        &mut host,
        json!({"id": "scribe", "name": "Scribe", "command": "/bin/sh"}),
    )
    .await;
    let (mut agent, _) = as_agent(&d, "scribe", &token_of(&a)).await;
    let r = agent
        .call(
            "memory.add_fact",
            json!({"subject": "user", "body": "prefers tea", "kind": "preference"}),
        )
        .await;
    assert!(r["error"].is_null(), "{r}");
    // The agent's graph, not the shared one: an unbound session does not see the fact.
    let mut other = Ws::authed(&d).await;
    let r = other.call("memory.fact_count", json!({})).await;
    assert_eq!(r["result"], 0, "{r}");
    let r = agent.call("memory.fact_count", json!({})).await;
    assert_eq!(r["result"], 1, "{r}");
    let file = d.home.join("memory").join("agents").join("scribe.json");
    let deadline = std::time::Instant::now() + common::WAIT;
    while !file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never written",
            file.display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("prefers tea"));
}
