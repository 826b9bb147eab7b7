//! Tool-calling inference through the daemon with a remote (OpenAI-compatible) model, a
//! scripted HTTP server standing in for the provider: CAR's request shape in, OpenAI's
//! format out, tool calls assembled from streamed fragments back into the IR
//! (`tool_calls: [{id, name, arguments}]`, `stop_reason: "tool_use"`), streamed as
//! `{type: "tool_call"}` events; bad tool inputs are precise `-32602`s.

mod common;

use car_test_harness::http_script::{Reply, Server};
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

const KEY_VAR: &str = "CAR_TEST_TOOL_API_KEY";

/// A streamed tool call in fragments: id and name first, the arguments in three pieces.
fn fragments() -> Reply {
    let chunk = |delta: Value, finish: Value| json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    Reply::sse(
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_9", "type": "function", "function": {"name": "add", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\": "}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "2, \"b\""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ": 3}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        Duration::ZERO,
    )
}

fn add_tool() -> Value {
    json!({"name": "add", "description": "add two numbers", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"]}})
}

#[tokio::test]
async fn a_remote_model_calls_tools_through_the_daemon() {
    let server = Server::start(vec![fragments(), fragments()]);
    let d = Daemon::builder().env(KEY_VAR, "sk-test").start();
    // Registering a remote endpoint needs a host session.
    let mut ws = Ws::host(&d).await;
    let r = ws
        .call(
            "models.register",
            json!({"schema": {"id": "remote", "name": "gpt-test", "provider": "openai",
                   "source": {"type": "remote_api", "endpoint": format!("{}/v1", server.base_url),
                              "api_key_env": KEY_VAR}}}),
        )
        .await;
    assert_eq!(r["result"]["registered"], true, "{r}");
    // CAR's agent-loop request: an empty prompt beside messages, knobs under params, an
    // earlier call and its result in the conversation.
    let request = json!({
        "prompt": "", "model": "remote", "cache_control": true, "intent": null,
        "params": {"max_tokens": 64, "tool_choice": "auto", "strict_model": true, "cache_ttl": "one_hour"},
        "tools": [add_tool()],
        "messages": [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "add 1 and 1, then 2 and 3"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "add", "arguments": {"a": 1, "b": 1}}]},
            {"role": "tool_result", "tool_use_id": "call_1", "content": "{\"sum\": 2}"}
        ]
    });
    let r = ws.call("infer", request.clone()).await;
    let result = &r["result"];
    assert_eq!(
        result["tool_calls"],
        json!([{"id": "call_9", "name": "add", "arguments": {"a": 2, "b": 3}}]),
        "{r}"
    );
    assert_eq!(result["stop_reason"], "tool_use");

    // What went to the provider, in OpenAI's format.
    let sent = &server.requests()[0].body;
    assert_eq!(
        sent["tools"],
        json!([{"type": "function", "function": {"name": "add", "description": "add two numbers",
                "parameters": add_tool()["parameters"]}}])
    );
    assert_eq!(sent["tool_choice"], "auto");
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages[2]["role"], "assistant");
    assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "add");
    let args: Value = serde_json::from_str(
        messages[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"a": 1, "b": 1}));
    assert_eq!(
        (
            messages[3]["role"].as_str(),
            messages[3]["tool_call_id"].as_str()
        ),
        (Some("tool"), Some("call_1"))
    );

    // Streamed: the call arrives as one tool_call event equal to the final result's.
    let id = ws.request("infer_stream", request).await;
    let mut events = Vec::new();
    let final_result = loop {
        let msg = ws.recv_json().await;
        if msg["method"] == "inference.stream.event" {
            events.push(msg["params"]["event"].clone());
        } else if msg["id"] == json!(id) {
            break msg["result"].clone();
        }
    };
    let calls: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_call").collect();
    assert_eq!(calls.len(), 1, "{events:?}");
    assert_eq!(
        json!([calls[0]["data"]]),
        final_result["tool_calls"],
        "{final_result}"
    );
}

#[tokio::test]
async fn bad_tool_inputs_are_precise_errors_and_reach_no_provider() {
    let server = Server::start(vec![]);
    let d = Daemon::builder().env(KEY_VAR, "sk-test").start();
    // Registering a remote endpoint needs a host session.
    let mut ws = Ws::host(&d).await;
    let r = ws
        .call(
            "models.register",
            json!({"id": "remote", "base_url": format!("{}/v1", server.base_url), "model": "m", "api_key_env": KEY_VAR}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let base = json!({"model": "remote", "prompt": "hi"});
    let with = |extra: Value| {
        let mut p = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    for (params, expected) in [
        (
            with(json!({"tools": [{"name": "lookup", "parameters": [1]}]})),
            "tools[0].parameters of tool \"lookup\" must be a JSON Schema object",
        ),
        (
            with(json!({"tools": [add_tool()], "tool_choice": {"name": "subtract"}})),
            "names tool \"subtract\", which is not among the given tools",
        ),
        (
            json!({"model": "remote", "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool_result", "tool_use_id": "call_7", "content": "y"}]}),
            "messages[1].tool_use_id \"call_7\" matches no earlier assistant tool call",
        ),
        (
            with(json!({"images": [{"url": "x"}]})),
            "images: this daemon's engines are text-only",
        ),
    ] {
        let r = ws.call("infer", params.clone()).await;
        assert_eq!(code(&r), -32602, "{params} → {r}");
        assert!(message(&r).contains(expected), "{params} → {r}");
    }
    assert!(server.requests().is_empty(), "nothing reached the provider");
}
