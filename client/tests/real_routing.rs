//! Inference policy against a real `car-server`: `models.route` filters and ranks by
//! capabilities, exclusions and outcomes; `infer` without a model follows the route and
//! falls back when the chosen model fails (never when the model is pinned or
//! `strict_model` is set); every call leaves a receipt in the durable outcome ledger that
//! `outcomes.resolve_pending` resolves and `outcomes.scoreboard` prices; the user's price
//! table overrides registered prices.
//!
//! The models are delegated ones served by this test program: `flaky*` always fail, the
//! others answer `from <model>` with fixed usage.

mod support;

use std::sync::Arc;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};
use support::within;
use tokio::sync::mpsc;

fn client(d: &Daemon) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)))
}

async fn register(c: &Client, id: &str, extra: Value) {
    let mut schema = json!({"id": id, "source": {"type": "delegated"}});
    for (k, v) in extra.as_object().unwrap() {
        schema[k] = v.clone();
    }
    c.call("models.register", json!({"schema": schema}))
        .await
        .unwrap();
}

/// Serves every delegated call: `flaky` fails, anyone else answers with 1,000 input and
/// 500 output tokens.
async fn runner(d: &Daemon) -> Arc<Client> {
    let runner = Arc::new(client(d));
    let (tx, mut invokes) = mpsc::unbounded_channel::<Value>();
    runner.register_notification_handler("inference.runner.invoke", move |p| {
        let _ = tx.send(p);
    });
    runner
        .call("inference.register_runner", json!({}))
        .await
        .unwrap();
    let serving = runner.clone();
    tokio::spawn(async move {
        while let Some(invoke) = invokes.recv().await {
            let id = invoke["call_id"].clone();
            let model = invoke["request"]["model"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            if model.starts_with("flaky") {
                let _ = serving
                    .call(
                        "inference.runner.fail",
                        json!({"call_id": id, "error": "flaky is down"}),
                    )
                    .await;
                continue;
            }
            let _ = serving
                .call(
                    "inference.runner.event",
                    json!({"call_id": id, "event": {"type": "usage", "input_tokens": 1000, "output_tokens": 500}}),
                )
                .await;
            let _ = serving
                .call(
                    "inference.runner.complete",
                    json!({"call_id": id, "result": {"text": format!("from {model}"), "tool_calls": []}}),
                )
                .await;
        }
    });
    runner
}

fn rpc_error(e: Error) -> (i64, String) {
    match e {
        Error::Rpc { code, message, .. } => (code, message),
        other => panic!("not an RPC error: {other:?}"),
    }
}

#[tokio::test]
async fn the_router_filters_ranks_and_falls_back_and_every_call_leaves_a_receipt() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let _runner = runner(&d).await;
    let price = |i: f64, o: f64| json!({"input_per_mtok": i, "output_per_mtok": o});
    register(
        &c,
        "flaky",
        json!({"capabilities": ["code"], "cost": price(0.1, 0.1)}),
    )
    .await;
    register(
        &c,
        "steady",
        json!({"capabilities": ["code", "vision"], "cost": price(1.0, 2.0)}),
    )
    .await;
    register(&c, "plain", json!({})).await;

    // Cold start: every model is as reliable as the next; the cheapest priced one leads.
    let route = c
        .call("models.route", json!({"prompt": "fix this bug in my code"}))
        .await
        .unwrap();
    assert_eq!(route["model_id"], "flaky", "{route}");
    assert_eq!(route["task"], "code");
    assert_eq!(route["strategy"], "outcome_first");
    assert_eq!(route["candidates"].as_array().unwrap().len(), 3);
    assert!(route["candidates"][0]["selected"].as_bool().unwrap());
    let vision = c
        .call(
            "models.route",
            json!({"prompt": "x", "intent": {"require": ["vision"]}}),
        )
        .await
        .unwrap();
    assert_eq!(
        (vision["model_id"].as_str(), vision["fallbacks"].clone()),
        (Some("steady"), json!([]))
    );
    let excluded = c
        .call(
            "models.route",
            json!({"prompt": "fix this bug", "intent": {"exclude_models": ["flaky"]}}),
        )
        .await
        .unwrap();
    assert_ne!(excluded["model_id"], "flaky", "{excluded}");
    for (params, field) in [
        (
            json!({"prompt": "x", "intent": {"require": ["telepathy"]}}),
            "intent.require",
        ),
        (json!({"prompt": "  "}), "prompt"),
        (
            json!({"prompt": "x", "intent": {"require": "vision"}}),
            "intent.require",
        ),
    ] {
        let (code, message) = rpc_error(c.call("models.route", params.clone()).await.unwrap_err());
        assert_eq!(code, -32602, "{params}: {message}");
        assert!(message.contains(field), "{params}: {message}");
    }

    // No model: the route's pick (flaky) fails, and the next one answers.
    let reply = within(
        "a routed infer",
        c.call("infer", json!({"prompt": "fix this bug in my code"})),
    )
    .await
    .unwrap();
    assert_ne!(reply["model_used"], "flaky", "{reply}");
    let answered_by = reply["model_used"].as_str().unwrap().to_string();
    assert_eq!(reply["text"], format!("from {answered_by}"));
    // strict_model, or a pinned model, surfaces the failure instead. (flaky is out of the
    // band now; a fresh, cheaper flaky-b leads the route.)
    register(
        &c,
        "flaky-b",
        json!({"capabilities": ["code"], "cost": price(0.05, 0.05)}),
    )
    .await;
    let route = c
        .call("models.route", json!({"prompt": "fix this bug in my code"}))
        .await
        .unwrap();
    assert_eq!(route["model_id"], "flaky-b", "{route}");
    let (code, message) = rpc_error(
        c.call(
            "infer",
            json!({"prompt": "fix this bug in my code", "params": {"strict_model": true}}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, -32603, "{message}");
    assert!(message.contains("flaky is down"), "{message}");
    let (_, message) = rpc_error(
        c.call("infer", json!({"prompt": "hi", "model": "flaky"}))
            .await
            .unwrap_err(),
    );
    assert!(message.contains("flaky is down"), "{message}");

    // A priced success, resolved, is dollars per success on the scoreboard.
    let priced = c
        .call("infer", json!({"prompt": "hi", "model": "steady"}))
        .await
        .unwrap();
    // 1,000 × $1 + 500 × $2 per 1M tokens.
    assert!(
        (priced["cost_usd"].as_f64().unwrap() - 0.002).abs() < 1e-12,
        "{priced}"
    );
    let resolved = c
        .call(
            "outcomes.resolve_pending",
            json!({"actionResults": [[priced["trace_id"], true, 0.9, "ok"], ["", true, 1.0, "skipped"]]}),
        )
        .await
        .unwrap();
    assert_eq!(resolved, json!({"recorded": 2}));
    let board = c.call("outcomes.scoreboard", json!(null)).await.unwrap();
    let rows = board["rows"].as_array().unwrap();
    let row = |id: &str| rows.iter().find(|r| r["model_id"] == id).unwrap().clone();
    assert_eq!(row("flaky")["fail_count"], 2, "{board}");
    assert_eq!(row("flaky-b")["fail_count"], 1, "{board}");
    assert_eq!(row("flaky")["usd_per_success"], Value::Null);
    let steady = row("steady");
    assert_eq!(steady["success_count"], 1, "{board}");
    // Spend ÷ successes: both of steady's calls cost $0.002, one is a known success.
    assert!(
        (steady["usd_per_success"].as_f64().unwrap() - 0.004).abs() < 1e-9,
        "{steady}"
    );
    assert_eq!(steady["avg_quality"], 0.9);
    assert_eq!(
        rows[0]["model_id"], "steady",
        "cheapest correct outcome first: {board}"
    );
    // routed (flaky, then its fallback), strict flaky-b, pinned flaky, pinned steady.
    assert_eq!(board["receipts"], 5, "{board}");
    let stats = c.call("models.stats", json!(null)).await.unwrap();
    let flaky = stats["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["model_id"] == "flaky")
        .unwrap()
        .clone();
    assert_eq!(
        (flaky["fail_count"].as_u64(), flaky["success_rate"].as_f64()),
        (Some(2), Some(0.0))
    );

    // Failures took flaky out of the band: the route leads with another model.
    let route = c
        .call("models.route", json!({"prompt": "fix this bug in my code"}))
        .await
        .unwrap();
    assert_ne!(route["model_id"], "flaky", "{route}");
    let flaky_candidate = route["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model_id"] == "flaky")
        .unwrap()
        .clone();
    assert_eq!(flaky_candidate["in_band"], false, "{route}");
    assert!((flaky_candidate["reliability"].as_f64().unwrap() - 0.25).abs() < 1e-9);

    // Bad tuples are refused by position.
    let (code, message) = rpc_error(
        c.call(
            "outcomes.resolve_pending",
            json!({"actionResults": [["t", true, 7.0, ""]]}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, -32602);
    assert!(message.contains("actionResults[0][2]"), "{message}");
}

#[tokio::test]
async fn the_price_table_overrides_registered_prices_and_survives_typos() {
    let d = Daemon::builder().start();
    let c = client(&d);
    let _runner = runner(&d).await;
    register(&c, "plain", json!({})).await;
    let unpriced = c
        .call("infer", json!({"prompt": "hi", "model": "plain"}))
        .await
        .unwrap();
    assert_eq!(
        unpriced["cost_usd"],
        Value::Null,
        "unpriced is unknown, not 0"
    );
    std::fs::write(
        d.home.join("prices.json"),
        json!({"plain": {"input_per_mtok": 3.0, "output_per_mtok": 6.0}, "bad": {"input_per_mtok": -1}}).to_string(),
    )
    .unwrap();
    let priced = c
        .call("infer", json!({"prompt": "hi", "model": "plain"}))
        .await
        .unwrap();
    assert!(
        (priced["cost_usd"].as_f64().unwrap() - 0.006).abs() < 1e-12,
        "{priced}"
    );
    std::fs::write(d.home.join("prices.json"), "{not json").unwrap();
    let after_typo = c
        .call("infer", json!({"prompt": "hi", "model": "plain"}))
        .await
        .unwrap();
    assert_eq!(
        after_typo["cost_usd"],
        Value::Null,
        "a broken table is ignored, inference goes on"
    );
    let board = c.call("outcomes.scoreboard", json!(null)).await.unwrap();
    assert_eq!(board["receipts"], 3, "{board}");
}
