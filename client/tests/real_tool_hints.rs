//! A registered tool's hints against a real `car-server`: `cache_ttl_secs` answers a repeat
//! call from the cache without a callback, `rate_limit` rejects the call past its window, and
//! a malformed hint is refused at `tools.register` by field.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error, ToolCall};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

fn call_of(tool: &str, id: &str, x: i64) -> Value {
    json!({"id": id, "type": "tool_call", "tool": tool, "parameters": {"x": x}})
}

#[tokio::test]
async fn cached_answers_skip_the_callback_and_rate_limits_reject_the_excess() {
    let d = Daemon::start();
    let c = client(&d);
    c.call(
        "tools.register",
        json!([
            {"name": "lookup", "cache_ttl_secs": 3600, "idempotent": true},
            {"name": "ping", "rate_limit": {"max_calls": 2, "interval_secs": 3600}}
        ]),
    )
    .await
    .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let run = |actions: Value| {
        let (c, calls) = (c.clone(), calls.clone());
        async move {
            c.execute_proposal(json!({"actions": actions}), None, move |call: ToolCall| {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(json!({"tool": call.tool, "x": call.params["x"]}))
            })
            .await
            .unwrap()
        }
    };

    let first = run(json!([call_of("lookup", "a", 1)])).await;
    assert_eq!(
        first["outputs"]["a"],
        json!({"tool": "lookup", "x": 1}),
        "{first}"
    );
    let again = run(json!([
        call_of("lookup", "b", 1),
        call_of("lookup", "c", 2)
    ]))
    .await;
    assert_eq!(again["outputs"]["b"], json!({"tool": "lookup", "x": 1}));
    assert_eq!(again["outputs"]["c"], json!({"tool": "lookup", "x": 2}));
    // x = 1 came from the cache; x = 2 was a new call.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let cached = again["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action_id"] == "b")
        .unwrap()
        .clone();
    assert_eq!(cached["attempts"], 0, "{cached}");

    calls.store(0, Ordering::SeqCst);
    let sent = run(json!([
        call_of("ping", "s1", 1),
        call_of("ping", "s2", 2),
        call_of("ping", "s3", 3)
    ]))
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2, "{sent}");
    let statuses: Vec<&str> = sent["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == "rejected").count(),
        1,
        "{sent}"
    );
    let rejected = sent["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "rejected")
        .unwrap()
        .clone();
    assert!(
        rejected["error"]
            .as_str()
            .unwrap()
            .contains("rate_limit_tool:ping"),
        "{rejected}"
    );

    for (limit, field) in [
        (json!({"max_calls": 1}), "rate_limit.interval_secs"),
        (
            json!({"max_calls": -1, "interval_secs": 1}),
            "rate_limit.max_calls",
        ),
        (
            json!({"max_calls": 1, "interval_secs": 0}),
            "rate_limit.interval_secs",
        ),
    ] {
        let e = c
            .call(
                "tools.register",
                json!([{"name": "bad", "rate_limit": limit.clone()}]),
            )
            .await
            .unwrap_err();
        match e {
            Error::Rpc { code, message, .. } => {
                assert_eq!(code, -32602, "{limit}: {message}");
                assert!(message.contains(field), "{limit}: {message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
