//! Chat turns end to end against the real `car-server`: a host registers an agent
//! (`agents.upsert`, host token), an agent client authenticates with that agent's own
//! token (`ClientConfig::agent`) and serves `agent.chat` with `Client::serve_chat`; a host
//! sends `agents.chat` and receives the turn's `agents.chat.event`s in order — tokens, a
//! tool call, an approval it answers with `agents.chat.approve`, then `done`; a cancelled
//! turn ends `done {finish_reason: "cancelled"}`; the agent going away mid-turn ends the
//! host's turn with `error`.

mod support;

use std::time::Duration;

use car_daemon_client::{ChatTurnContext, Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;
use tokio::sync::mpsc;

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

async fn agent_client(d: &Daemon, host: &Client, id: &str) -> Client {
    support::agent_client(&d.home, host, id).await
}

/// A host client whose `agents.chat.event`s arrive on the returned channel.
fn host_with_events(d: &Daemon) -> (Client, mpsc::UnboundedReceiver<Value>) {
    let host = client(d);
    let (tx, rx) = mpsc::unbounded_channel();
    host.register_notification_handler("agents.chat.event", move |params| {
        let _ = tx.send(params);
    });
    (host, rx)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    within("the next agents.chat.event", rx.recv())
        .await
        .expect("event channel open")
}

#[tokio::test]
async fn a_host_chats_with_an_attached_agent_through_the_daemon() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let (host, mut events) = host_with_events(&d);
    let agent = agent_client(&d, &host, "milo").await;
    agent.serve_chat(|turn: &ChatTurnContext| {
        let prompt = turn.params().prompt.clone();
        if prompt == "wait" {
            // Runs until the host cancels.
            while !turn.abort_signal().wait(Duration::from_millis(50)) {}
            return Ok("never seen".into());
        }
        turn.emit_token("You said: ");
        turn.emit_token(&prompt);
        turn.emit_tool_call("calendar.write", Some(json!({"day": "mon"})));
        let approved = turn.request_approval("ap-1", "calendar.write", None);
        Ok(format!("approved={approved}"))
    });
    // Attach: the agent's first call authenticates it with its own token.
    agent.call("state.keys", json!({})).await.unwrap();

    let ack = host
        .call(
            "agents.chat",
            json!({"agent_id": "milo", "prompt": "book it", "session_id": "s1"}),
        )
        .await
        .unwrap();
    assert_eq!(ack, json!({"accepted": true, "session_id": "s1"}));
    let mut kinds = Vec::new();
    let mut deltas = String::new();
    loop {
        let e = next(&mut events).await;
        assert_eq!(e["agent_id"], "milo", "{e}");
        assert_eq!(e["session_id"], "s1", "{e}");
        let kind = e["kind"].as_str().unwrap().to_string();
        if kind == "token" {
            deltas.push_str(e["delta"].as_str().unwrap());
        }
        kinds.push(kind.clone());
        if kind == "approval_pending" {
            assert_eq!(e["approval_id"], "ap-1", "{e}");
            let r = host
                .call(
                    "agents.chat.approve",
                    json!({"session_id": "s1", "approval_id": "ap-1", "decision": "approve"}),
                )
                .await
                .unwrap();
            assert_eq!(r, json!({"resolved": true, "session_id": "s1"}));
        }
        if kind == "done" {
            assert_eq!(e["text"], "approved=true", "{e}");
            assert_eq!(e["finish_reason"], "stop", "{e}");
            break;
        }
    }
    assert_eq!(deltas, "You said: book it");
    assert_eq!(
        kinds,
        ["token", "token", "tool_call", "approval_pending", "done"]
    );

    // Cancel: the handler sees it and the turn ends `cancelled`.
    host.call(
        "agents.chat",
        json!({"agent_id": "milo", "prompt": "wait", "session_id": "s2"}),
    )
    .await
    .unwrap();
    let r = host
        .call("agents.chat.cancel", json!({"session_id": "s2"}))
        .await
        .unwrap();
    assert_eq!(r["cancelled"], true, "{r}");
    // The daemon dropped the route at cancel, so the agent's terminal event reaches no one;
    // a new turn on the same session id is accepted once the agent has let it go.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match host
            .call(
                "agents.chat",
                json!({"agent_id": "milo", "prompt": "again", "session_id": "s2"}),
            )
            .await
        {
            Ok(ack) => {
                assert_eq!(ack["accepted"], true);
                break;
            }
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "never released: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    loop {
        let e = next(&mut events).await;
        if e["session_id"] == "s2" && e["kind"] == "approval_pending" {
            host.call(
                "agents.chat.approve",
                json!({"session_id": "s2", "approval_id": "ap-1", "decision": false}),
            )
            .await
            .unwrap();
        }
        if e["session_id"] == "s2" && e["kind"] == "done" {
            assert_eq!(e["text"], "approved=false", "{e}");
            break;
        }
    }
}

#[tokio::test]
async fn the_agent_going_away_ends_the_hosts_turn_and_a_wrong_token_is_refused() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let (host, mut events) = host_with_events(&d);
    let agent = agent_client(&d, &host, "flaky").await;
    agent.serve_chat(|turn: &ChatTurnContext| {
        turn.emit_token("working");
        while !turn.abort_signal().wait(Duration::from_millis(50)) {}
        Err("stopped".into())
    });
    agent.call("state.keys", json!({})).await.unwrap();
    host.call(
        "agents.chat",
        json!({"agent_id": "flaky", "prompt": "go", "session_id": "t1"}),
    )
    .await
    .unwrap();
    let e = next(&mut events).await;
    assert_eq!(e["kind"], "token", "{e}");
    agent.close();
    let e = next(&mut events).await;
    assert_eq!(e["kind"], "error", "{e}");
    assert!(e["error"].as_str().unwrap().contains("disconnected"), "{e}");

    let impostor = Client::new(
        ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)).agent("flaky", "x".repeat(43)),
    );
    match impostor.call("state.keys", json!({})).await {
        Err(Error::Handshake { reason, .. }) => assert!(reason.contains("mismatch"), "{reason}"),
        other => panic!("a wrong agent token was accepted: {other:?}"),
    }
}

#[tokio::test]
async fn a_handler_may_send_its_events_as_agent_chat_event_calls() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let (host, mut events) = host_with_events(&d);
    let agent = agent_client(&d, &host, "cary").await;
    agent.serve_chat(|turn: &ChatTurnContext| {
        let sid = turn.session_id().to_string();
        let send = |kind: &str, delta: &str| {
            turn.block_on(turn.client().call(
                "agent.chat.event",
                json!({"session_id": sid, "kind": kind, "delta": delta}),
            ))
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        send("token", "par")?;
        send("token", "tial")?;
        send("done", "the whole answer")?;
        // A second terminal is ignored; the handler's own return value too.
        send("error", "not this")?;
        Ok("nor this".into())
    });
    agent.call("state.keys", json!({})).await.unwrap();
    host.call(
        "agents.chat",
        json!({"agent_id": "cary", "prompt": "hi", "session_id": "c1"}),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    loop {
        let e = next(&mut events).await;
        let done = e["kind"] == "done" || e["kind"] == "error";
        got.push(e);
        if done {
            break;
        }
    }
    let kinds: Vec<&str> = got.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["token", "token", "done"], "{got:?}");
    assert_eq!(got[1]["delta"], "tial");
    assert_eq!(got[2]["text"], "the whole answer", "{got:?}");
    assert_eq!(got[2]["finish_reason"], "stop");
}
