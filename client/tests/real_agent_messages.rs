//! `agents.message`, `agents.message.pending` / `approve` and `agents.peers` against the real
//! `car-server`: agents bound with their own tokens message each other through the daemon;
//! the first message of a pair waits for the operator; the guards refuse floods and repeats.

mod support;

use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use tokio::sync::mpsc;

fn host(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

async fn agent(d: &Daemon, host: &Client, id: &str) -> (Client, mpsc::UnboundedReceiver<Value>) {
    let c = support::agent_client(&d.home, host, id).await;
    let (tx, rx) = mpsc::unbounded_channel();
    c.register_notification_handler("agents.message.event", move |p| {
        let _ = tx.send(p);
    });
    (c, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    support::within("the next agents.message.event", rx.recv())
        .await
        .expect("channel open")
}

fn refused(r: Result<Value, Error>) -> (i64, String, Value) {
    match r {
        Err(Error::Rpc {
            code,
            message,
            data,
        }) => (code, message, data.unwrap_or(Value::Null)),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn the_first_message_between_two_agents_waits_for_the_operator() {
    // Approvals on (messages are held) without gating `agents.upsert`.
    let d = Daemon::builder()
        .args(["--approval-methods", "write_file"])
        .start();
    let h = host(&d);
    let (alice, _) = agent(&d, &h, "alice").await;
    let (bob, mut bob_inbox) = agent(&d, &h, "bob").await;
    bob.call("state.keys", json!({})).await.unwrap();

    let sent = alice
        .call(
            "agents.message",
            json!({"to": "bob", "body": "hi bob", "from": "mallory"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (sent["from"].as_str(), sent["status"].as_str()),
        (Some("alice"), Some("held")),
        "{sent}"
    );
    let pending = h
        .call_as_host("agents.message.pending", json!({}))
        .await
        .unwrap();
    assert_eq!(pending[0]["body"], "hi bob", "{pending}");
    let id = pending[0]["id"].as_str().unwrap().to_string();
    // An agent is not the operator.
    let (code, _, _) = refused(
        alice
            .call(
                "agents.message.approve",
                json!({"id": id, "decision": "approved"}),
            )
            .await,
    );
    assert_ne!(code, 0);
    let released = h
        .call_as_host(
            "agents.message.approve",
            json!({"id": id, "decision": "approve"}),
        )
        .await
        .unwrap();
    assert_eq!(released["status"], "delivered", "{released}");
    let got = next(&mut bob_inbox).await;
    assert_eq!(
        (got["from"].as_str(), got["body"].as_str()),
        (Some("alice"), Some("hi bob"))
    );
    // The pair is allowed from now on.
    let again = alice
        .call(
            "agents.message",
            json!({"to": "bob", "body": "second", "summary": "s"}),
        )
        .await
        .unwrap();
    assert_eq!(again["status"], "delivered");
    assert_eq!(next(&mut bob_inbox).await["summary"], "s");
    // A denied message is dropped.
    let (carol, _) = agent(&d, &h, "carol").await;
    let held = carol
        .call("agents.message", json!({"to": "bob", "body": "spam"}))
        .await
        .unwrap();
    assert_eq!(held["status"], "held");
    let denied = h
        .call_as_host(
            "agents.message.approve",
            json!({"id": held["id"], "decision": "deny"}),
        )
        .await
        .unwrap();
    assert!(denied["status"].is_null(), "{denied}");
    assert_eq!(
        h.call_as_host("agents.message.pending", json!({}))
            .await
            .unwrap(),
        json!([])
    );
    let (code, message, _) = refused(
        h.call_as_host(
            "agents.message.approve",
            json!({"id": held["id"], "decision": "approve"}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("no held message"), "{message}");
}

#[tokio::test]
async fn messages_queue_for_an_absent_agent_and_the_guards_refuse_floods() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let h = host(&d);
    let (alice, _) = agent(&d, &h, "alice").await;
    let (bob, mut bob_inbox) = agent(&d, &h, "bob").await;
    // Bob is not attached yet: queued, delivered when he attaches.
    let queued = alice
        .call(
            "agents.message",
            json!({"to": "bob", "body": "while you were out"}),
        )
        .await
        .unwrap();
    assert_eq!(queued["status"], "queued");
    let peers = alice.call("agents.peers", json!({})).await.unwrap();
    let bob_row = peers
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "bob")
        .cloned()
        .unwrap();
    assert_eq!(
        (
            bob_row["can_receive"].as_bool(),
            bob_row["reachable"].as_bool()
        ),
        (Some(true), Some(false))
    );
    assert!(
        peers.as_array().unwrap().iter().all(|p| p["id"] != "alice"),
        "a peer list leaves out the caller"
    );
    bob.call("state.keys", json!({})).await.unwrap();
    assert_eq!(next(&mut bob_inbox).await["body"], "while you were out");

    // An operator session messages an agent directly.
    let direct = h
        .call(
            "agents.message",
            json!({"to": "bob", "body": "from the host"}),
        )
        .await
        .unwrap();
    assert_eq!(direct["status"], "delivered");
    assert!(
        direct["from"].as_str().unwrap().starts_with("session:"),
        "{direct}"
    );
    assert_eq!(next(&mut bob_inbox).await["body"], "from the host");

    // Identical repeats and floods.
    let (code, _, data) = refused(
        h.call(
            "agents.message",
            json!({"to": "bob", "body": "from the host"}),
        )
        .await,
    );
    assert_eq!((code, data["reason"].as_str()), (-32602, Some("duplicate")));
    for i in 0..19 {
        alice
            .call(
                "agents.message",
                json!({"to": "bob", "body": format!("n{i}")}),
            )
            .await
            .unwrap();
    }
    let (code, message, data) = refused(
        alice
            .call(
                "agents.message",
                json!({"to": "bob", "body": "one too many"}),
            )
            .await,
    );
    assert_eq!(
        (code, data["reason"].as_str()),
        (-32602, Some("rate_limited")),
        "{message}"
    );

    for (params, field) in [
        (json!({"to": "nobody", "body": "x"}), "to"),
        (json!({"to": "bob"}), "body"),
        (json!({"to": "", "body": "x"}), "to"),
        (json!({"to": "bob", "body": "x".repeat(70 * 1024)}), "body"),
    ] {
        let (code, message, _) = refused(h.call("agents.message", params).await);
        assert_eq!(code, -32602, "{message}");
        assert!(message.contains(field), "{message:?} should name {field}");
    }
    let (code, message, _) = refused(
        bob.call("agents.message", json!({"to": "bob", "body": "me"}))
            .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("itself"), "{message}");
    tokio::time::sleep(Duration::from_millis(10)).await;
}
