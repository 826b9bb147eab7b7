//! The shared agent loop against a real daemon, with a scripted OpenAI-compatible server as
//! the model: the model asks for a tool, the tool runs through `tools.execute` with the
//! model's arguments, the model observes the result linked to its call, `finish` ends the
//! run with CAR's `AgentOutcome`, and the run's trace holds its model turns and tool call.

use std::time::Duration;

use car_daemon_client::{AgentConfig, Client, ClientConfig, EnvSnapshot, ToolCall};
use car_test_harness::http_script::{Reply, Server};
use car_test_harness::Daemon;
use serde_json::{json, Value};

/// One streamed tool call.
fn call(id: &str, name: &str, arguments: Value) -> Reply {
    Reply::sse(
        &[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}}]}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ],
        Duration::ZERO,
    )
}

fn config() -> AgentConfig {
    AgentConfig {
        agent_name: "calc".into(),
        identity: "You are a calculator.".into(),
        tool_schemas: vec![
            json!({"name": "add", "description": "add two numbers", "parameters": {
            "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"]}}),
        ],
        default_model: Some("scripted".into()),
        max_tokens: 64,
        max_turns: 4,
        target_outcome: "the sum".into(),
        ..AgentConfig::default()
    }
}

async fn client_with_model(d: &Daemon, server: &Server) -> Client {
    let client = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    // Registering a remote endpoint needs the host role.
    client
        .call_as_host(
            "models.register",
            json!({"id": "scripted", "base_url": format!("{}/v1", server.base_url), "model": "m"}),
        )
        .await
        .unwrap();
    client
}

#[tokio::test]
async fn a_run_calls_a_tool_observes_it_and_finishes() {
    let server = Server::start(vec![
        call("call_1", "add", json!({"a": 2, "b": 3})),
        call("call_2", "finish", json!({"answer": "the sum is 5"})),
    ]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let outcome = client
        .run_agent(&config(), "add 2 and 3", None, move |call: ToolCall| {
            log.lock().unwrap().push((call.tool.clone(), call.params.clone()));
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() + call.params["b"].as_i64().unwrap()}))
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, "success", "{outcome:?}");
    assert_eq!(outcome.summary, "the sum is 5");
    assert_eq!(outcome.tools_called, ["add", "finish"]);
    assert_eq!(
        (
            outcome.metrics.turns,
            outcome.metrics.tool_calls,
            outcome.metrics.actions_succeeded
        ),
        (2, 2, 2)
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [("add".to_string(), json!({"a": 2, "b": 3}))]
    );

    // The model's second request observed the tool's output, linked to its call.
    let requests = server.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(result["content"].as_str().unwrap()).unwrap(),
        json!({"sum": 5})
    );
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["add", "finish"]);

    // The run's trace, read by a host session: started, model turn, tool call, model turn,
    // completed with CAR's AgentOutcome.
    let host = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let trace = host
        .call_host_management("runs.get_trace", json!({"run_id": outcome.run_id}))
        .await
        .unwrap();
    let kinds: Vec<&str> = trace["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["record"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["started", "model_turn", "turn", "model_turn", "ended"],
        "{trace}"
    );
    assert_eq!(trace["records"][4]["outcome"]["status"], "success");
}

#[tokio::test]
async fn a_run_without_finish_gives_up_after_its_turns() {
    let server = Server::start(vec![
        call("c1", "add", json!({"a": 1, "b": 1})),
        call("c2", "add", json!({"a": 2, "b": 2})),
    ]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let outcome = client
        .run_agent(&config(), "keep adding", Some(2), |call: ToolCall| {
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() * 2}))
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, "give_up", "{outcome:?}");
    assert_eq!(outcome.metrics.turns, 2);
    assert_eq!(outcome.tools_called, ["add", "add"]);
}

/// A second run on the same connection with other tools registers them (and only them),
/// and a schema without `parameters` is a tool taking no arguments.
#[tokio::test]
async fn a_later_run_with_other_tools_registers_them() {
    let server = Server::start(vec![
        call("c1", "add", json!({"a": 1, "b": 2})),
        call("c2", "finish", json!({"answer": "3"})),
        call("c3", "now", json!({})),
        call("c4", "finish", json!({"answer": "noon"})),
    ]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let outcome = client
        .run_agent(&config(), "add", None, |call: ToolCall| {
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() + call.params["b"].as_i64().unwrap()}))
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, "success", "{outcome:?}");
    let clock = AgentConfig {
        tool_schemas: vec![json!({"name": "now", "description": "the time"})],
        ..config()
    };
    let outcome = client
        .run_agent(&clock, "what time is it", None, |call: ToolCall| {
            assert_eq!(call.tool, "now");
            Ok(json!("noon"))
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, "success", "{outcome:?}");
    assert_eq!(outcome.tools_called, ["now", "finish"]);
    let listed = client.call("tools.list", Value::Null).await.unwrap();
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["add", "finish", "now"], "{listed}");
    // The model saw `now` with an empty object schema.
    let requests = server.requests();
    let tools = &requests[2].body["tools"];
    assert_eq!(
        tools[0]["function"]["parameters"],
        json!({"type": "object", "properties": {}}),
        "{tools}"
    );
}

/// A `finish` requested beside another call was written before that call's result: it is
/// refused (the model observes why), and a later `finish` alone ends the run.
#[tokio::test]
async fn finish_beside_other_calls_waits_for_their_results() {
    let both = Reply::sse(
        &[
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}},
                {"index": 1, "id": "c2", "type": "function", "function": {"name": "finish", "arguments": "{\"answer\": \"a guess\"}"}}
            ]}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        ],
        Duration::ZERO,
    );
    let server = Server::start(vec![both, call("c3", "finish", json!({"answer": "4"}))]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let outcome = client
        .run_agent(&config(), "add 2 and 2", None, |call: ToolCall| {
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() + call.params["b"].as_i64().unwrap()}))
        })
        .await
        .unwrap();
    assert_eq!(
        (outcome.status.as_str(), outcome.summary.as_str()),
        ("success", "4"),
        "{outcome:?}"
    );
    assert_eq!(outcome.metrics.turns, 2);
    assert_eq!(outcome.tools_called, ["add", "finish"]);
    let second = &server.requests()[1].body["messages"];
    let results: Vec<&Value> = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 2, "{second}");
    assert_eq!(results[0]["tool_call_id"], "c1");
    assert_eq!(results[1]["tool_call_id"], "c2");
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("called together with other tools"),
        "{second}"
    );
}

/// A chat turn (CAR's `run_chat_turn`): the caller's conversation goes to the model after
/// the system prompt, tools run as in a task, and the reply is the text the model ends on.
#[tokio::test]
async fn a_chat_turn_answers_from_the_conversation_with_tools() {
    let text = Reply::sse(
        &[
            json!({"choices": [{"index": 0, "delta": {"content": "It is 5."}, "finish_reason": null}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ],
        Duration::ZERO,
    );
    let server = Server::start(vec![call("c1", "add", json!({"a": 2, "b": 3})), text]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let history = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": "Hello! What shall I add?"}),
        json!({"role": "user", "content": "add 2 and 3"}),
    ];
    let turn = client
        .run_chat_turn(&config(), &history, Some("scripted"), |call: ToolCall| {
            Ok(json!({"sum": call.params["a"].as_i64().unwrap() + call.params["b"].as_i64().unwrap()}))
        })
        .await
        .unwrap();
    assert_eq!(turn.text, "It is 5.");
    let first = &server.requests()[0].body["messages"];
    let roles: Vec<&str> = first
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"], "{first}");
    assert_eq!(first[3]["content"], "add 2 and 3");
    let host = Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(&d.home)));
    let trace = host
        .call_host_management("runs.get_trace", json!({"run_id": turn.run_id}))
        .await
        .unwrap();
    assert_eq!(trace["run"]["intent"], "add 2 and 3", "{trace}");

    for bad in [
        vec![json!({"role": "assistant", "content": "no user turn"})],
        vec![
            json!({"role": "tool", "content": "x"}),
            json!({"role": "user", "content": "y"}),
        ],
        vec![json!({"role": "user", "content": {"text": "y"}})],
    ] {
        let err = client
            .run_chat_turn(&config(), &bad, None, |_: ToolCall| Ok(json!(null)))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("messages"), "{bad:?}: {err}");
    }
    assert_eq!(server.requests().len(), 2, "refused turns reach no model");
}

/// A tool call's abort signal is set by the daemon's `tools.cancel` (here: the budget the
/// schema's `timeoutMs` declares runs out), and the model observes the timeout.
#[tokio::test]
async fn a_cancelled_call_sees_its_abort_signal() {
    let server = Server::start(vec![
        call("c1", "add", json!({"a": 2, "b": 3})),
        call("c2", "finish", json!({"answer": "gave up"})),
    ]);
    let d = Daemon::start();
    let client = client_with_model(&d, &server).await;
    let mut slow = config();
    slow.tool_schemas[0]["timeoutMs"] = json!(300);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let log = seen.clone();
    let outcome = client
        .run_agent(&slow, "add", None, move |call: ToolCall| {
            // The bound only keeps a broken build from hanging the suite.
            let aborted = call.abort.wait(Duration::from_secs(60));
            *log.lock().unwrap() = Some((call.timeout_ms, aborted, call.abort.is_aborted()));
            Ok(json!({"sum": 5}))
        })
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), Some((Some(300), true, true)));
    assert_eq!(outcome.metrics.actions_failed, 1, "{outcome:?}");
    let observed = &server.requests()[1].body["messages"];
    let result = observed
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("exceeded its timeout_ms (300ms)"),
        "{observed}"
    );
}
