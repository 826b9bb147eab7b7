//! Delegated inference against a real `car-server`: a test program registers as the
//! runner (`inference.register_runner`), serves `infer_stream` for a `delegated` model with
//! streamed `text`, `tool_start` / `tool_delta` and `usage` events, and when it disconnects
//! mid-call the pending call fails at once.

mod support;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;
use tokio::sync::mpsc;

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

/// A runner connection and the invokes it receives.
async fn runner(d: &Daemon) -> (Client, mpsc::UnboundedReceiver<Value>) {
    let runner = client(d);
    let (tx, rx) = mpsc::unbounded_channel();
    runner.register_notification_handler("inference.runner.invoke", move |params| {
        let _ = tx.send(params);
    });
    let r = runner
        .call("inference.register_runner", json!({}))
        .await
        .unwrap();
    assert_eq!(r, json!({"registered": true}));
    (runner, rx)
}

async fn delegated_model(d: &Daemon) -> Client {
    let c = client(d);
    c.call(
        "models.register",
        json!({"id": "dlg", "source": {"type": "delegated"}}),
    )
    .await
    .unwrap();
    c
}

#[tokio::test]
async fn a_runner_serves_a_delegated_stream_with_text_tool_deltas_and_usage() {
    let d = Daemon::builder().start();
    let caller = delegated_model(&d).await;
    let (runner, mut invokes) = runner(&d).await;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    caller.register_notification_handler("inference.stream.event", move |p| {
        let _ = events_tx.send(p["event"].clone());
    });
    let call = caller.call(
        "infer_stream",
        json!({"prompt": "add one", "model": "dlg", "client_ref": "ref-1", "params": {"max_tokens": 9}}),
    );
    let serve = async {
        let invoke = within("the invoke", invokes.recv()).await.unwrap();
        assert_eq!(invoke["request"]["client_ref"], "ref-1", "{invoke}");
        assert_eq!(invoke["request"]["prompt"], "add one");
        let id = invoke["call_id"].clone();
        for event in [
            json!({"type": "text", "data": "Hel"}),
            json!({"type": "text", "data": "lo"}),
            json!({"type": "tool_start", "name": "add", "index": 0, "id": "t1"}),
            json!({"type": "tool_delta", "index": 0, "data": "{\"a\":"}),
            json!({"type": "tool_delta", "index": 0, "data": "1}"}),
            json!({"type": "usage", "input_tokens": 3, "output_tokens": 4}),
        ] {
            let r = runner
                .call(
                    "inference.runner.event",
                    json!({"call_id": id, "event": event}),
                )
                .await
                .unwrap();
            assert_eq!(r, json!({"emitted": true}));
        }
        let r = runner
            .call(
                "inference.runner.complete",
                json!({"call_id": id, "result": {"text": "", "tool_calls": []}}),
            )
            .await
            .unwrap();
        assert_eq!(r, json!({"completed": true}));
    };
    let (reply, ()) = within("the delegated call", async { tokio::join!(call, serve) }).await;
    let reply = reply.unwrap();
    assert_eq!(reply["text"], "Hello", "{reply}");
    assert_eq!(
        reply["tool_calls"],
        json!([{"id": "t1", "name": "add", "arguments": {"a": 1}}])
    );
    assert_eq!(
        (
            reply["usage"]["input_tokens"].as_u64(),
            reply["usage"]["output_tokens"].as_u64()
        ),
        (Some(3), Some(4))
    );
    assert_eq!(reply["model_used"], "dlg");
    assert_eq!(reply["stop_reason"], "tool_use");
    // Handlers may run after the reply resolves: wait (bounded) for the last event.
    let mut kinds: Vec<String> = Vec::new();
    while !kinds.iter().any(|k| k == "usage") {
        let e = within("the stream events", events.recv()).await.unwrap();
        kinds.push(e["type"].as_str().unwrap().to_string());
    }
    for kind in ["text", "tool_start", "tool_delta", "usage"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{kind} missing from {kinds:?}"
        );
    }

    // A runner that only completes (nothing streamed) answers with its result.
    let call = caller.call("infer", json!({"prompt": "x", "model": "dlg"}));
    let serve = async {
        let invoke = within("the invoke", invokes.recv()).await.unwrap();
        runner
            .call(
                "inference.runner.complete",
                json!({"call_id": invoke["call_id"], "result": {"text": "plain"}}),
            )
            .await
            .unwrap();
    };
    let (reply, ()) = within("the second call", async { tokio::join!(call, serve) }).await;
    assert_eq!(reply.unwrap()["text"], "plain");
}

#[tokio::test]
async fn a_runner_that_disconnects_fails_its_pending_call_at_once() {
    let d = Daemon::builder().start();
    let caller = delegated_model(&d).await;
    let (runner, mut invokes) = runner(&d).await;
    let call = caller.call("infer", json!({"prompt": "x", "model": "dlg"}));
    let kill = async {
        within("the invoke", invokes.recv()).await.unwrap();
        runner.close();
    };
    // The call would wait for the runner forever; the hang guard is a minute.
    let (reply, ()) = within("the call of a runner that left", async {
        tokio::join!(call, kill)
    })
    .await;
    match reply {
        Err(Error::Rpc {
            code,
            data,
            message,
        }) => {
            assert_eq!(code, -32603, "{message}");
            assert_eq!(data.unwrap()["reason"], "runner_disconnected");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    // With no runner now, a delegated call fails at once too.
    match caller
        .call("infer", json!({"prompt": "x", "model": "dlg"}))
        .await
    {
        Err(Error::Rpc { data, .. }) => assert_eq!(data.unwrap()["reason"], "no_runner"),
        other => panic!("expected no_runner, got {other:?}"),
    }
}

#[tokio::test]
async fn runner_failures_and_bad_runner_input_are_reported() {
    let d = Daemon::builder().start();
    let caller = delegated_model(&d).await;
    let (runner, mut invokes) = runner(&d).await;
    let call = caller.call("infer", json!({"prompt": "x", "model": "dlg"}));
    let serve = async {
        let invoke = within("the invoke", invokes.recv()).await.unwrap();
        let id = invoke["call_id"].clone();
        // A shape outside CAR's list is refused by field; so is a call id nobody opened.
        match runner
            .call(
                "inference.runner.event",
                json!({"call_id": id, "event": {"type": "thinking"}}),
            )
            .await
        {
            Err(Error::Rpc { code, message, .. }) => {
                assert!(code == -32602 && message.contains("event"), "{message}")
            }
            other => panic!("expected -32602, got {other:?}"),
        }
        match runner
            .call(
                "inference.runner.complete",
                json!({"call_id": "nope", "result": {}}),
            )
            .await
        {
            Err(Error::Rpc { code, message, .. }) => {
                assert!(code == -32602 && message.contains("call_id"), "{message}")
            }
            other => panic!("expected -32602, got {other:?}"),
        }
        // Another session cannot finish the runner's call.
        let stranger = client(&d);
        match stranger
            .call(
                "inference.runner.fail",
                json!({"call_id": id, "error": "hijack"}),
            )
            .await
        {
            Err(Error::Rpc { code, .. }) => assert_eq!(code, -32602),
            other => panic!("expected a refusal, got {other:?}"),
        }
        runner
            .call(
                "inference.runner.fail",
                json!({"call_id": id, "error": "rate limited"}),
            )
            .await
            .unwrap();
    };
    let (reply, ()) = within("the failed call", async { tokio::join!(call, serve) }).await;
    match reply {
        Err(Error::Rpc { message, data, .. }) => {
            assert!(message.contains("rate limited"), "{message}");
            assert_eq!(data.unwrap()["reason"], "runner_failed");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    // An agent session may not become the runner.
    let host = client(&d);
    let agent = support::agent_client(&d.home, &host, "worker").await;
    match agent.call("inference.register_runner", json!({})).await {
        Err(Error::Rpc { data, .. }) => assert_eq!(data.unwrap()["reason"], "agent_not_allowed"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn an_abandoned_call_is_announced_to_the_runner_and_its_late_answer_refused() {
    let d = Daemon::builder().start();
    let caller = delegated_model(&d).await;
    let (runner, mut invokes) = runner(&d).await;
    let (cancel_tx, mut cancels) = mpsc::unbounded_channel();
    runner.register_notification_handler("inference.runner.cancel", move |p| {
        let _ = cancel_tx.send(p);
    });
    let pending = {
        let caller = caller.clone();
        tokio::spawn(async move {
            caller
                .call("infer", json!({"prompt": "x", "model": "dlg"}))
                .await
        })
    };
    let invoke = within("the invoke", invokes.recv()).await.unwrap();
    // The caller goes away mid-call: the runner hears of it.
    caller.close();
    let cancelled = within("inference.runner.cancel", cancels.recv())
        .await
        .unwrap();
    assert_eq!(cancelled["call_id"], invoke["call_id"], "{cancelled}");
    assert!(within("the abandoned call", pending)
        .await
        .unwrap()
        .is_err());
    let late = runner
        .call(
            "inference.runner.complete",
            json!({"call_id": invoke["call_id"], "result": {"text": "late", "tool_calls": []}}),
        )
        .await
        .unwrap_err();
    match late {
        Error::Rpc { code, .. } => assert_eq!(code, -32602),
        other => panic!("{other:?}"),
    }
}
