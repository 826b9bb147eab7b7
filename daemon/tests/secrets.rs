//! The secret store against a real daemon: put/get across a restart, owner-only files,
//! and the value never in the daemon's log (at `CAR_LOG=trace`), in a `host.event` or in
//! an error.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{code, message, Daemon, Ws};
use serde_json::{json, Value};

const VALUE: &str = "sk-test-SECRET-4f9a1c";

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn secrets_round_trip_across_a_restart_and_never_leak() {
    let home = tempfile::tempdir().unwrap();
    let car_home = home.path().join("car");
    let mut d = Daemon::builder()
        .home(&car_home)
        .env("CAR_LOG", "trace")
        .start();
    let mut host = Ws::host(&d).await;
    host.call("server.handshake", common::handshake_params())
        .await;
    let snapshot = host.call("host.subscribe", json!({})).await;
    let mut ws = Ws::authed(&d).await;

    let r = ws
        .call(
            "secret.put",
            json!({"key": "OPENAI_API_KEY", "value": VALUE}),
        )
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    assert_eq!(r["result"]["service"], "car");
    let r = ws
        .call("secret.get", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["value"], VALUE, "{r}");
    let status = ws
        .call("secret.status", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(status["result"]["exists"], true, "{status}");
    let list = ws.call("secret.list", json!({})).await;
    assert_eq!(
        list["result"]["secrets"],
        json!([{"service": "car", "key": "OPENAI_API_KEY", "exists": true}])
    );
    let r = ws.call("secret.available", json!({})).await;
    assert_eq!(r["result"], true);

    // Bad input: precise, and no error carries the value.
    let big = "v".repeat(70_000);
    let mut errors: Vec<Value> = Vec::new();
    for (params, field) in [
        (json!({"key": "", "value": VALUE}), "key"),
        (json!({"value": VALUE}), "key"),
        (json!({"key": "k", "value": 5}), "value"),
        (json!({"key": "k", "value": big}), "value"),
        (json!({"key": "bad\u{7}key", "value": VALUE}), "key"),
        (
            json!({"service": "car", "key": "PARSLEE_ACCESS_TOKEN", "value": VALUE}),
            "key",
        ),
    ] {
        let r = ws.call("secret.put", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params}: {r}");
        assert!(
            message(&r).contains(field),
            "{}: should name {field}",
            message(&r)
        );
        errors.push(r);
    }
    let r = ws.call("secret.get", json!({"key": "MISSING_KEY"})).await;
    assert_eq!(r["error"]["data"]["reason"], "not_found", "{r}");
    errors.push(r);
    for e in &errors {
        assert!(
            !e.to_string().contains(VALUE),
            "an error leaked the value: {e}"
        );
    }
    // Operators cannot read the activity counters; hosts can.
    ws.call("server.handshake", common::handshake_params())
        .await;
    let r = ws
        .call("diagnostics.secret_store_activity", json!({}))
        .await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = host
        .call("diagnostics.secret_store_activity", json!({}))
        .await;
    // One stored, three refused by the store (too big, a control character, reserved);
    // the other refusals never reached it (decoding).
    assert_eq!(r["result"]["write_attempts"], 4, "{r}");
    assert_eq!(r["result"].as_object().unwrap().len(), 5, "{r}");

    // Files: 0600 in a 0700 directory.
    let dir = car_home.join("secrets");
    assert_eq!(mode(&dir), 0o700);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(mode(&files[0]), 0o600);

    // No host.event carries it (the events so far are in the ring).
    let events = host.call("host.events", json!({"limit": 1000})).await;
    assert!(!events.to_string().contains(VALUE));
    assert!(!snapshot.to_string().contains(VALUE));

    drop((ws, host));
    d.terminate();
    let log = d.stderr();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log is at trace level"
    );
    let leaks: Vec<&str> = log.lines().filter(|l| l.contains(VALUE)).collect();
    assert!(
        leaks.is_empty(),
        "the daemon's log leaked the value: {leaks:#?}"
    );

    let d = Daemon::builder().home(&car_home).start();
    let mut ws = Ws::authed(&d).await;
    let r = ws
        .call("secret.get", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["value"], VALUE, "survives a restart: {r}");
    let r = ws
        .call("secret.delete", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["deleted"], true, "{r}");
    let r = ws
        .call("secret.status", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["exists"], false, "{r}");
}

#[tokio::test]
async fn a_remote_model_reads_its_key_from_the_secret_store() {
    use car_test_harness::http_script::{Reply, Server};
    let server = Server::start(vec![Reply::json(
        200,
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
    )]);
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let r = host
        .call(
            "secret.put",
            json!({"service": "providers", "key": "SCRIPTED_API_KEY", "value": VALUE}),
        )
        .await;
    assert_eq!(r["result"]["ok"], true, "{r}");
    let r = host
        .call(
            "models.register",
            json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "m",
                   "api_key_secret": "providers/SCRIPTED_API_KEY"}),
        )
        .await;
    assert_eq!(r["result"]["registered"], true, "{r}");
    assert!(!r.to_string().contains(VALUE), "{r}");
    let r = host
        .call("infer", json!({"model": "remote", "prompt": "hi"}))
        .await;
    assert_eq!(r["result"]["text"], "ok", "{r}");
    let seen = server.requests();
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {VALUE}").as_str()),
        "the provider got the secret as its key"
    );
    // Deleting the secret stops the key being sent: the next call fails naming the secret.
    host.call(
        "secret.delete",
        json!({"service": "providers", "key": "SCRIPTED_API_KEY"}),
    )
    .await;
    let r = host
        .call("infer", json!({"model": "remote", "prompt": "hi"}))
        .await;
    assert!(message(&r).contains("providers/SCRIPTED_API_KEY"), "{r}");
    assert!(!r.to_string().contains(VALUE), "{r}");
}

async fn agent_session(d: &Daemon, host: &mut Ws, id: &str) -> Ws {
    let r = host
        .call(
            "agents.upsert",
            json!({"id": id, "name": id, "command": "/bin/sh"}),
        )
        .await;
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

/// Issue 24: an agent reads only the secrets a host granted it, and writes none.
#[tokio::test]
async fn an_agent_reads_only_granted_secrets_and_writes_none() {
    let home = tempfile::tempdir().unwrap();
    let mut d = Daemon::builder()
        .home(home.path())
        .args(["--no-approvals"])
        .start();
    let mut host = Ws::host(&d).await;
    let mut op = Ws::authed(&d).await;
    for key in ["OPENAI_API_KEY", "OTHER"] {
        let r = op
            .call("secret.put", json!({"key": key, "value": VALUE}))
            .await;
        assert_eq!(r["result"]["ok"], true, "{r}");
    }
    let mut agent = agent_session(&d, &mut host, "reader").await;

    // Nothing is granted yet: refused before the store is read, value never echoed.
    for method in ["secret.get", "secret.status"] {
        let r = agent.call(method, json!({"key": "OPENAI_API_KEY"})).await;
        assert_eq!(code(&r), -32603, "{r}");
        assert_eq!(r["error"]["data"]["reason"], "not_granted", "{r}");
        assert!(!r.to_string().contains(VALUE));
    }
    let r = agent.call("secret.list", json!({})).await;
    assert_eq!(r["result"]["secrets"], json!([]), "{r}");

    // Only a host grants; to a registered agent only.
    let r = op
        .call(
            "secret.grant",
            json!({"agent_id": "reader", "key": "OPENAI_API_KEY"}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = agent
        .call(
            "secret.grant",
            json!({"agent_id": "reader", "key": "OTHER"}),
        )
        .await;
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = host
        .call(
            "secret.grant",
            json!({"agent_id": "nobody", "key": "OTHER"}),
        )
        .await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).starts_with("invalid params: agent_id"), "{r}");
    let r = host
        .call(
            "secret.grant",
            json!({"agent_id": "reader", "key": "OPENAI_API_KEY"}),
        )
        .await;
    assert_eq!(r["result"]["changed"], true, "{r}");
    assert_eq!(r["result"]["service"], "car", "{r}");

    let r = agent
        .call("secret.get", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["value"], VALUE, "{r}");
    let r = agent.call("secret.get", json!({"key": "OTHER"})).await;
    assert_eq!(r["error"]["data"]["reason"], "not_granted", "{r}");
    let r = agent.call("secret.list", json!({})).await;
    let names: Vec<_> = r["result"]["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].clone())
        .collect();
    assert_eq!(names, vec![json!("OPENAI_API_KEY")], "{r}");
    // Writes stay the operator's: an agent cannot replace or delete even a granted secret.
    for (method, params) in [
        (
            "secret.put",
            json!({"key": "OPENAI_API_KEY", "value": "attacker"}),
        ),
        ("secret.delete", json!({"key": "OPENAI_API_KEY"})),
    ] {
        let r = agent.call(method, params).await;
        assert_eq!(r["error"]["data"]["reason"], "not_granted", "{method}: {r}");
    }
    let r = op
        .call("secret.get", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["result"]["value"], VALUE, "{r}");

    // Grants survive a restart, are listed, and are revocable.
    drop((agent, host, op));
    d.terminate();
    let d = Daemon::builder()
        .home(home.path())
        .args(["--no-approvals"])
        .start();
    let mut host = Ws::host(&d).await;
    let r = host.call("secret.grants", json!({})).await;
    assert_eq!(
        r["result"]["grants"],
        json!([{"agent_id": "reader", "service": "car", "key": "OPENAI_API_KEY"}]),
        "{r}"
    );
    let r = host
        .call(
            "secret.revoke",
            json!({"agent_id": "reader", "key": "OPENAI_API_KEY"}),
        )
        .await;
    assert_eq!(r["result"]["changed"], true, "{r}");
    let mut agent = agent_session(&d, &mut host, "reader").await;
    let r = agent
        .call("secret.get", json!({"key": "OPENAI_API_KEY"}))
        .await;
    assert_eq!(r["error"]["data"]["reason"], "not_granted", "{r}");
}
