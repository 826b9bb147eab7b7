//! Acceptance 6 against the real `car-server` (`debug.call_client` makes the daemon send a
//! reverse call to this client and return the client's JSON-RPC answer verbatim): a
//! handler's result, ordinary error, terminal error and panic each reach the daemon as the
//! right response, unknown methods get `-32601`, `tools.execute` accepts `parameters` or
//! `params`, and a slow handler does not delay other calls.

mod support;

use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, HandlerError};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;

fn setup() -> (Daemon, Client) {
    let d = Daemon::builder().args(["--debug-methods"]).start();
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    (d, client)
}

async fn reverse(client: &Client, method: &str, params: Value) -> Value {
    client
        .call(
            "debug.call_client",
            json!({"method": method, "params": params, "timeout_ms": 30_000}),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_errors_terminal_errors_panics_and_unknown_methods() {
    let (_d, client) = setup();
    client.register_handler("t.ok", |p| Ok(json!({"seen": p})));
    client.register_handler("t.fail", |_| Err(HandlerError::new("tool unavailable")));
    client.register_handler("t.terminal", |_| {
        Err(HandlerError::terminal("receipt journal is unavailable")
            .with_data(json!({"path": "/j"})))
    });
    client.register_handler("t.panic", |_| panic!("tool exploded"));
    client.register_async_handler("t.async", |p| async move {
        // Suspend once, so the answer comes from a resumed future, not a ready one.
        tokio::task::yield_now().await;
        Ok(json!({"async": p["n"]}))
    });

    assert_eq!(
        reverse(&client, "t.ok", json!({"a": 1})).await,
        json!({"result": {"seen": {"a": 1}}})
    );
    assert_eq!(
        reverse(&client, "t.async", json!({"n": 5})).await,
        json!({"result": {"async": 5}})
    );
    assert_eq!(
        reverse(&client, "t.fail", json!({})).await,
        json!({"error": {"code": -32000, "message": "tool unavailable"}})
    );
    assert_eq!(
        reverse(&client, "t.terminal", json!({})).await,
        json!({"error": {"code": -32000, "message": "receipt journal is unavailable",
                         "data": {"path": "/j", "terminal": true}}})
    );
    let panicked = reverse(&client, "t.panic", json!({})).await;
    assert_eq!(panicked["error"]["code"], -32603, "{panicked}");
    assert!(panicked["error"]["message"]
        .as_str()
        .unwrap()
        .contains("tool exploded"));
    let unknown = reverse(&client, "t.nobody", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    // The connection and its handlers survive all of that.
    assert_eq!(
        reverse(&client, "t.ok", json!([1])).await,
        json!({"result": {"seen": [1]}})
    );
    // A reverse call whose params are not an object or array is refused, not ignored.
    let invalid = reverse(&client, "t.ok", json!(1)).await;
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_execute_accepts_parameters_or_params() {
    let (_d, client) = setup();
    client.register_tool_handler(|call| Ok(call.to_call_json()));
    let base = json!({"tool": "search", "action_id": "a0", "request_id": "cb-77",
                      "timeout_ms": 180000, "attempt": 2, "session_id": "sess-7"});
    let mut with_parameters = base.clone();
    with_parameters["parameters"] = json!({"q": "rust"});
    let mut with_params = base;
    with_params["params"] = json!({"q": "rust"});
    let want = json!({"result": {"tool": "search", "params": {"q": "rust"}, "action_id": "a0",
                      "request_id": "cb-77", "timeout_ms": 180000, "session_id": "sess-7", "attempt": 2}});
    assert_eq!(
        reverse(&client, "tools.execute", with_parameters).await,
        want
    );
    assert_eq!(reverse(&client, "tools.execute", with_params).await, want);
    let bad = reverse(&client, "tools.execute", json!({"parameters": {}})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    client.unregister_tool_handler();
    let gone = reverse(&client, "tools.execute", json!({"tool": "x"})).await;
    assert_eq!(gone["error"]["code"], -32601);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_does_not_delay_other_calls() {
    let (_d, client) = setup();
    let (release_tx, release_rx) = std_mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    // The handler blocks until the test releases it, which it only does after other
    // calls finished: if the handler blocked the reader, those calls could never finish.
    client.register_handler("t.slow", move |_| {
        release_rx.lock().unwrap().recv().unwrap();
        Ok(json!("slow done"))
    });
    client.connect().await.unwrap();
    let slow = tokio::spawn({
        let client = client.clone();
        async move { reverse(&client, "t.slow", json!({})).await }
    });
    for i in 0..20 {
        // The slow handler never returns on its own: a call it held up would never finish.
        let got = within(
            "an ordinary call while the slow handler blocks",
            client.call("debug.echo", json!([i])),
        )
        .await
        .unwrap();
        assert_eq!(got, json!([i]));
    }
    // Reverse calls to other handlers are not held up either.
    client.register_handler("t.fast", |_| Ok(json!("fast")));
    assert_eq!(
        reverse(&client, "t.fast", json!({})).await,
        json!({"result": "fast"})
    );
    assert!(!slow.is_finished());
    release_tx.send(()).unwrap();
    assert_eq!(slow.await.unwrap(), json!({"result": "slow done"}));
}
