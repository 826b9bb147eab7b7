//! Against the real `car-server`: an outbound notification the daemon does not know is
//! dropped without harm (the connection stays, the next call works) and `notify` fails
//! once the client is closed or the daemon cannot be reached; `agent.chat` reverse calls
//! (driven with `debug.call_client`) are acked and run, or refused with `-32602` for bad
//! params; an approval nobody parked resolves nothing. The daemon drops the turn's
//! `agent.chat.event` notifications (no host asked for this turn through `agents.chat`),
//! which is harmless too.

mod support;

use car_daemon_client::{ChatTurnContext, Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::json;
use support::within;
use tokio::sync::mpsc;

fn daemon() -> Daemon {
    Daemon::builder().args(["--debug-methods"]).start()
}

fn local_client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

#[tokio::test]
async fn unknown_notifications_are_harmless_and_notify_fails_once_closed() {
    let d = daemon();
    let client = local_client(&d);
    // `notify` connects lazily, like a call.
    client
        .notify("no.such.notification", json!({"x": 1}))
        .await
        .unwrap();
    assert!(client.is_connected());
    let epoch = client.connection_epoch().await.unwrap();
    for i in 0..20 {
        client
            .notify(
                "agent.chat.event",
                json!({"session_id": "s", "kind": "token", "i": i}),
            )
            .await
            .unwrap();
    }
    assert_eq!(
        client
            .call("debug.echo", json!({"after": true}))
            .await
            .unwrap(),
        json!({"after": true})
    );
    assert_eq!(
        client.connection_epoch().await.unwrap(),
        epoch,
        "the daemon kept the connection"
    );
    client.close();
    assert!(matches!(
        client.notify("no.such.notification", json!({})).await,
        Err(Error::Closed)
    ));
}

#[tokio::test]
async fn notify_fails_when_no_daemon_can_be_reached() {
    let home = tempfile::tempdir().unwrap();
    // A port nobody listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = Client::new(support::config_for(
        &format!("ws://127.0.0.1:{port}"),
        home.path(),
    ));
    let err = client.notify("anything", json!({})).await.unwrap_err();
    assert!(err.is_connection_failure(), "{err:?}");
}

#[tokio::test]
async fn agent_chat_reverse_calls_are_acked_and_refused_through_the_real_daemon() {
    let d = daemon();
    let client = local_client(&d);
    let (ended_tx, mut ended) = mpsc::unbounded_channel();
    client.serve_chat(move |turn: &ChatTurnContext| {
        turn.emit_token("hello");
        let _ = ended_tx.send(turn.session_id().to_string());
        Ok("hello".into())
    });
    let call_client = |method: &str, params: serde_json::Value| {
        let client = client.clone();
        let method = method.to_string();
        async move {
            client
                .call(
                    "debug.call_client",
                    json!({"method": method, "params": params}),
                )
                .await
                .unwrap()
        }
    };
    let ack = call_client("agent.chat", json!({"session_id": "s1", "prompt": "hi"})).await;
    assert_eq!(
        ack,
        json!({"result": {"accepted": true, "session_id": "s1"}})
    );
    assert_eq!(within("the turn", ended.recv()).await.unwrap(), "s1");

    let refused = call_client("agent.chat", json!({"session_id": "s1"})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prompt"),
        "{refused}"
    );
    let unknown = call_client(
        "agent.chat.approve",
        json!({"session_id": "s1", "approval_id": "a1", "decision": true}),
    )
    .await;
    assert_eq!(unknown, json!({"result": {"resolved": false}}));

    // A second session runs too, and the connection still answers calls.
    let ack = call_client("agent.chat", json!({"session_id": "s2", "prompt": "hi"})).await;
    assert_eq!(ack["result"]["accepted"], true, "{ack}");
    assert_eq!(within("the second turn", ended.recv()).await.unwrap(), "s2");
    assert_eq!(
        client.call("debug.echo", json!([1])).await.unwrap(),
        json!([1])
    );
}
