//! The daemon's own runner against a real `car-server`: with no `multi.run_agent` handler
//! on the caller, `multi.*` agents run on the daemon's agent loop (`car_agent_loop`, the
//! loop the client runs): multi-turn, tool-using, with built-in tools the daemon executes,
//! every turn recorded as a run, and every model turn priced so a USD budget trips.
//!
//! A scripted OpenAI-compatible server is the model where the test needs an exact script;
//! the last test runs the local SmolLM2 model with grammar-constrained calls.

use std::time::Duration;

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::http_script::{Reply, Server};
use car_test_harness::Daemon;
use serde_json::{json, Value};

/// One streamed reply: either tool calls or text, then a usage chunk of 100 prompt and 10
/// completion tokens.
fn turn(calls: &[(&str, &str, Value)], text: &str) -> Reply {
    Reply::openai_turn(text, calls, Some((100, 10)))
}

/// A client with the scripted model registered as `scripted`, priced by `cost` when given.
async fn client_with(d: &Daemon, server: &Server, cost: Option<Value>) -> Client {
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let mut schema =
        json!({"id": "scripted", "base_url": format!("{}/v1", server.base_url), "model": "m"});
    if let Some(cost) = cost {
        schema["cost"] = cost;
    }
    client
        .call_as_host("models.register", schema)
        .await
        .unwrap();
    client
}

fn stage(name: &str, tools: Value) -> Value {
    json!({"name": name, "system_prompt": "You compute.", "tools": tools, "max_turns": 3,
           "metadata": {"model": "scripted", "max_tokens": 32}})
}

#[tokio::test]
async fn a_daemon_run_agent_calls_a_built_in_tool_observes_it_and_finishes() {
    let server = Server::start(vec![
        turn(&[("c1", "calculate", json!({"expression": "17*23"}))], ""),
        turn(&[("c2", "finish", json!({"answer": "17*23 is 391"}))], ""),
    ]);
    let d = Daemon::builder().start();
    let c = client_with(&d, &server, None).await;
    c.call("agents.register_basics", json!({})).await.unwrap();
    let r = c
        .call(
            "multi.pipeline",
            json!({"stages": [stage("calc", json!(["calculate"]))], "task": "What is 17*23?"}),
        )
        .await
        .unwrap();
    let out = &r["stages"][0];
    assert!(out["error"].is_null(), "{out}");
    assert_eq!(out["answer"], "17*23 is 391");
    assert_eq!(
        (out["turns"].as_u64(), out["tool_calls"].as_u64()),
        (Some(2), Some(2)),
        "{out}"
    );
    assert_eq!(out["tokens"]["input_tokens"], 200);
    assert_eq!(out["tokens"]["output_tokens"], 20);
    assert_eq!(out["outcome"]["status"], "success");
    assert_eq!(
        out["outcome"]["tools_called"],
        json!(["calculate", "finish"])
    );

    // The model was offered the built-in tool's schema and `finish`, and its second turn
    // observed what the daemon's calculator returned.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    let offered: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["calculate", "finish"]);
    let second = &requests[1].body;
    let observed = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(observed["role"], "tool", "{second}");
    assert_eq!(observed["tool_call_id"], "c1");
    assert!(
        observed["content"].as_str().unwrap().contains("391"),
        "{observed}"
    );

    // The run is recorded like a client-run agent's: started, two model turns, ended.
    let host = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let trace = host
        .call_host_management(
            "runs.get_trace",
            json!({"run_id": out["outcome"]["run_id"]}),
        )
        .await
        .unwrap();
    let kinds: Vec<&str> = trace["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "model_turn").count(),
        2,
        "{trace}"
    );
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(kinds.last(), Some(&"ended"));
}

#[tokio::test]
async fn a_usd_budget_stops_a_pipeline_once_the_priced_cost_is_reached() {
    // 110 tokens a turn at $1000 per 1M tokens: $0.11 a turn.
    let server = Server::start((0..3).map(|i| turn(&[], &format!("answer {i}"))).collect());
    let d = Daemon::builder().start();
    let cost = json!({"input_per_mtok": 1000.0, "output_per_mtok": 1000.0});
    let c = client_with(&d, &server, Some(cost)).await;
    let stages: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|n| stage(n, json!([])))
        .collect();
    let r = c
        .call(
            "multi.pipeline",
            json!({"stages": stages, "task": "T", "budget": {"max_cost_usd": 0.15}}),
        )
        .await
        .unwrap();
    let stages = r["stages"].as_array().unwrap();
    let cost_of = |s: &Value| s["tokens"]["cost_usd"].as_f64().unwrap();
    assert!((cost_of(&stages[0]) - 0.11).abs() < 1e-9, "{}", stages[0]);
    // The second stage started under the limit and crossed it; the third was refused.
    assert!(stages[1]["error"].is_null(), "{}", stages[1]);
    let refused = stages[2]["error"].as_str().unwrap();
    assert!(refused.contains("cost"), "{refused}");
    assert_eq!(stages[2]["outcome"]["status"], "give_up");
    assert_eq!(
        server.requests().len(),
        2,
        "the refused stage reached no model"
    );
}

#[tokio::test]
async fn infer_reports_the_priced_cost_and_null_for_an_unpriced_model() {
    let server = Server::start(vec![turn(&[], "hi"), turn(&[], "hi")]);
    let d = Daemon::builder().start();
    let c = client_with(
        &d,
        &server,
        Some(json!({"input_per_mtok": 2.0, "output_per_mtok": 10.0})),
    )
    .await;
    let r = c
        .call("infer", json!({"prompt": "x", "model": "scripted"}))
        .await
        .unwrap();
    let expected = (100.0 * 2.0 + 10.0 * 10.0) / 1e6;
    assert!(
        (r["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{r}"
    );
    // The registry keeps the declared prices; re-registered without them, the model is
    // unpriced and its cost is null, not 0.
    let listed = c.call("models.list", json!({})).await.unwrap();
    let row = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "scripted")
        .unwrap()
        .clone();
    assert_eq!(row["cost"]["output_per_mtok"], 10.0, "{row}");
    c.call_as_host(
        "models.register",
        json!({"id": "scripted", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
    )
    .await
    .unwrap();
    let r = c
        .call("infer", json!({"prompt": "x", "model": "scripted"}))
        .await
        .unwrap();
    assert!(r["cost_usd"].is_null(), "{r}");
}

#[tokio::test]
async fn bad_prices_and_unknown_tools_are_refused_by_name() {
    let server = Server::start(vec![]);
    let d = Daemon::builder().start();
    let c = client_with(&d, &server, None).await;
    let bad = json!({"id": "x", "base_url": format!("{}/v1", server.base_url), "model": "m",
                     "cost": {"input_per_mtok": -1.0}});
    match c.call_as_host("models.register", bad).await {
        Err(Error::Rpc { code, message, .. }) => {
            assert_eq!(code, -32602);
            assert!(message.contains("cost.input_per_mtok"), "{message}");
        }
        other => panic!("expected -32602, got {other:?}"),
    }
    let r = c
        .call(
            "multi.pipeline",
            json!({"stages": [stage("calc", json!(["calculate"]))], "task": "T"}),
        )
        .await
        .unwrap();
    let err = r["stages"][0]["error"].as_str().unwrap();
    assert!(
        err.contains("tool 'calculate' is not registered")
            && err.contains("agents.register_basics"),
        "{err}"
    );
    assert!(server.requests().is_empty(), "no turn was spent");
}

#[tokio::test]
async fn a_swarm_of_local_agents_makes_grammar_constrained_tool_calls() {
    let Ok(gguf) = std::env::var("CAR_TEST_GGUF") else {
        panic!("CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` before the tests");
    };
    let d = Daemon::builder().start();
    let c = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    c.call("models.register", json!({"id": "smol", "path": gguf}))
        .await
        .unwrap();
    c.call("agents.register_basics", json!({})).await.unwrap();
    let agent = |name: &str, seed: u32| {
        json!({"name": name, "system_prompt": "You are a calculator. Use the calculate tool, then call finish with the result.",
               "tools": ["calculate"], "max_turns": 3,
               "metadata": {"model": "smol", "max_tokens": 48, "seed": seed, "temperature": 0.0,
                            "tool_choice": "required"}})
    };
    let r = tokio::time::timeout(
        Duration::from_secs(900),
        c.call(
            "multi.swarm",
            json!({"mode": "sequential", "agents": [agent("one", 1), agent("two", 2)],
                                     "task": "What is 12 * 12?"}),
        ),
    )
    .await
    .expect("the swarm finished")
    .unwrap();
    let outputs = r["outputs"].as_array().unwrap();
    // Multi-turn and tool-using: the daemon ran the model's calculator calls and the model
    // was asked again after observing them (SmolLM2 tends to keep calculating rather than
    // finish, which ends its run with `give_up` after its turns).
    let succeeded: u64 = outputs
        .iter()
        .map(|o| {
            o["outcome"]["metrics"]["actions_succeeded"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(succeeded >= 1, "no tool call ran: {r}");
    assert!(outputs.iter().any(|o| o["turns"].as_u64() > Some(1)), "{r}");
    for out in outputs {
        // `required` makes every turn a call the grammar constrains to the offered tools.
        let turns = out["turns"].as_u64().unwrap();
        assert!(turns >= 1, "{out}");
        assert_eq!(
            out["tool_calls"].as_u64(),
            Some(turns),
            "one call a turn: {out}"
        );
        let called = out["outcome"]["tools_called"].as_array().unwrap();
        assert!(
            called.iter().all(|t| t == "calculate" || t == "finish"),
            "{out}"
        );
        assert!(
            out["tokens"]["output_tokens"].as_u64().unwrap() > 0,
            "{out}"
        );
        assert!(
            out["tokens"]["cost_usd"] == 0.0,
            "an unpriced local model adds nothing: {out}"
        );
        let host = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
        let trace = host
            .call_host_management(
                "runs.get_trace",
                json!({"run_id": out["outcome"]["run_id"]}),
            )
            .await
            .unwrap();
        let model_turns = trace["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["record"] == "model_turn")
            .count();
        assert_eq!(model_turns as u64, turns, "{trace}");
    }
}

#[tokio::test]
async fn a_streamed_tool_call_is_also_sent_as_cars_tool_start_and_tool_delta() {
    let server = Server::start(vec![turn(
        &[("c1", "calculate", json!({"expression": "1+1"}))],
        "",
    )]);
    let d = Daemon::builder().start();
    let c = client_with(&d, &server, None).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    c.register_notification_handler("inference.stream.event", move |p| {
        let _ = tx.send(p["event"].clone());
    });
    let tools = json!([{"name": "calculate", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}]);
    let r = c
        .call(
            "infer_stream",
            json!({"prompt": "x", "model": "scripted", "tools": tools}),
        )
        .await
        .unwrap();
    assert_eq!(r["tool_calls"][0]["name"], "calculate");
    // Handlers may run after the reply resolves: wait (bounded) for the last event.
    let mut events = Vec::new();
    while !events.iter().any(|e: &Value| e["type"] == "tool_delta") {
        let next = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
        events.push(
            next.expect("the stream events arrived (hang guard)")
                .unwrap(),
        );
    }
    let of = |kind: &str| events.iter().find(|e| e["type"] == kind).cloned();
    assert_eq!(of("tool_call").unwrap()["data"]["id"], "c1", "{events:?}");
    assert_eq!(
        of("tool_start").unwrap(),
        json!({"type": "tool_start", "name": "calculate", "index": 0, "id": "c1"})
    );
    let delta = of("tool_delta").unwrap();
    assert_eq!(delta["index"], 0);
    let args: Value = serde_json::from_str(delta["data"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"expression": "1+1"}));
}
