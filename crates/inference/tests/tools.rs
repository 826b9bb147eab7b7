//! Tool calling: the OpenAI wire format against a scripted provider, the request checks,
//! and local models rendering tool turns (local tool calls: `local_tools.rs`).

mod common;

use std::time::Duration;

use car_inference::{
    CancelToken, EngineConfig, ErrorKind, GenerateRequest, GenerateResult, InferenceEngine,
    InferenceError, Message, RegisterRequest, RemoteConfig, StopReason, StreamControl, StreamEvent,
    ToolCall, ToolChoice, ToolSpec,
};
use car_test_harness::http_script::{Reply, Server};
use serde_json::{json, Value};

/// An engine with the scripted provider registered as `remote` (no key, no retries).
fn engine(server: &Server) -> (tempfile::TempDir, InferenceEngine) {
    let home = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(home.path());
    config.remote = RemoteConfig {
        max_retries: 0,
        ..RemoteConfig::default()
    };
    let engine = InferenceEngine::open(config).unwrap();
    engine
        .register(&RegisterRequest {
            id: Some("remote".into()),
            base_url: Some(server.base_url.clone()),
            model: Some("gpt-test".into()),
            ..Default::default()
        })
        .unwrap();
    (home, engine)
}

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Current weather for a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }),
    }
}

fn time() -> ToolSpec {
    ToolSpec {
        name: "get_time".into(),
        description: None,
        parameters: json!({"type": "object", "properties": {"tz": {"type": "string"}}}),
    }
}

/// A conversation with one earlier round trip, asking for more calls.
fn request() -> GenerateRequest {
    GenerateRequest {
        messages: Some(vec![
            Message::new("user", "Weather in Oslo?"),
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(
                    "call_0",
                    "get_weather",
                    json!({"city": "Oslo"}),
                )],
            ),
            Message::tool_result("call_0", "{\"sky\":\"rain\"}"),
            Message::new("user", "And Paris, with the local time?"),
        ]),
        max_tokens: Some(64),
        tools: vec![weather(), time()],
        tool_choice: Some(ToolChoice::Auto),
        parallel_tool_calls: Some(true),
        ..Default::default()
    }
}

/// The calls the scripted provider makes, as the IR.
fn expected_calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("call_1", "get_weather", json!({"city": "Paris"})),
        ToolCall::new("call_2", "get_time", json!({"tz": "Europe/Paris"})),
    ]
}

fn completion_with_calls(arguments: [&str; 2]) -> Value {
    json!({
        "id": "c1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments[0]}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": arguments[1]}}
        ]}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 30}
    })
}

fn whole_reply() -> Reply {
    Reply::json(
        200,
        completion_with_calls(["{\"city\":\"Paris\"}", "{\"tz\":\"Europe/Paris\"}"]),
    )
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn fragment(index: u64, fields: Value) -> Value {
    let mut f = fields;
    f["index"] = json!(index);
    chunk(json!({"tool_calls": [f]}), Value::Null)
}

/// The same answer as `whole_reply`, streamed: the first call's id and name in its first
/// fragment and its arguments over three more, the second call interleaved by index.
fn streamed_reply() -> Reply {
    let events = vec![
        chunk(
            json!({"role": "assistant", "content": "Check"}),
            Value::Null,
        ),
        chunk(json!({"content": "ing."}), Value::Null),
        fragment(
            0,
            json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}),
        ),
        fragment(0, json!({"function": {"arguments": "{\"ci"}})),
        fragment(0, json!({"function": {"arguments": "ty\":\"Pa"}})),
        fragment(
            1,
            json!({"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"tz\":"}}),
        ),
        fragment(0, json!({"function": {"arguments": "ris\"}"}})),
        fragment(1, json!({"function": {"arguments": "\"Europe/Paris\"}"}})),
        chunk(json!({}), json!("tool_calls")),
        json!({"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 30}}),
    ];
    Reply::sse(&events, Duration::ZERO)
}

/// What a stream callback saw.
#[derive(Debug, PartialEq)]
enum Seen {
    Text(String),
    Call(ToolCall),
}

fn generate_streaming(
    engine: &InferenceEngine,
    req: &GenerateRequest,
    stop_at_first_call: bool,
) -> (car_inference::Result<GenerateResult>, Vec<Seen>) {
    let mut seen = Vec::new();
    let mut cb = |event: StreamEvent<'_>| match event {
        StreamEvent::Text(t) => {
            seen.push(Seen::Text(t.to_owned()));
            StreamControl::Continue
        }
        StreamEvent::ToolCall(c) => {
            seen.push(Seen::Call(c.clone()));
            if stop_at_first_call {
                StreamControl::Stop
            } else {
                StreamControl::Continue
            }
        }
        _ => StreamControl::Continue,
    };
    let out = engine.generate_with_events(Some("remote"), req, &CancelToken::new(), Some(&mut cb));
    (out, seen)
}

#[test]
fn the_request_carries_tools_choice_and_tool_turns_in_openai_shape() {
    let server = Server::start(vec![whole_reply()]);
    let (_home, engine) = engine(&server);
    engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(
        reqs[0].body,
        json!({
            "model": "gpt-test",
            "max_tokens": 64,
            "stream": false,
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_0", "content": "{\"sky\":\"rain\"}"},
                {"role": "user", "content": "And Paris, with the local time?"}
            ],
            "tools": [
                {"type": "function", "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
                }},
                {"type": "function", "function": {
                    "name": "get_time",
                    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}
                }}
            ],
            "tool_choice": "auto",
            "parallel_tool_calls": true
        })
    );
}

#[test]
fn a_named_tool_choice_is_sent_as_a_function_object() {
    let server = Server::start(vec![whole_reply()]);
    let (_home, engine) = engine(&server);
    let mut req = request();
    req.tool_choice = Some(ToolChoice::Named("get_time".into()));
    req.parallel_tool_calls = None;
    engine
        .generate(Some("remote"), &req, &CancelToken::new(), None)
        .unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_time"}})
    );
    assert!(body.get("parallel_tool_calls").is_none());
}

#[test]
fn a_non_streamed_tool_call_answer_parses_to_the_ir() {
    let server = Server::start(vec![whole_reply()]);
    let (_home, engine) = engine(&server);
    let out = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap();
    assert_eq!(out.tool_calls, expected_calls());
    assert_eq!(out.stop_reason, StopReason::ToolUse);
    assert_eq!(out.text, "Checking.");
    assert_eq!(
        (out.usage.prompt_tokens, out.usage.completion_tokens),
        (50, 30)
    );
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["stop_reason"], "tool_use");
    assert_eq!(
        json["tool_calls"][1],
        json!({"id": "call_2", "name": "get_time", "arguments": {"tz": "Europe/Paris"}})
    );
}

#[test]
fn streamed_fragments_assemble_to_exactly_the_non_streamed_ir() {
    let server = Server::start(vec![whole_reply(), streamed_reply()]);
    let (_home, engine) = engine(&server);
    let whole = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap();
    let (streamed, seen) = generate_streaming(&engine, &request(), false);
    let streamed = streamed.unwrap();
    assert_eq!(streamed.tool_calls, whole.tool_calls);
    assert_eq!(streamed.tool_calls, expected_calls());
    assert_eq!(streamed.text, whole.text);
    assert_eq!(streamed.stop_reason, StopReason::ToolUse);
    assert_eq!(streamed.usage, whole.usage);
    // Text pieces as they came, then each completed call, in order.
    assert_eq!(
        seen,
        vec![
            Seen::Text("Check".into()),
            Seen::Text("ing.".into()),
            Seen::Call(expected_calls()[0].clone()),
            Seen::Call(expected_calls()[1].clone()),
        ]
    );
    assert_eq!(server.requests()[1].body["stream"], true);
}

#[test]
fn the_plain_text_callback_still_works_with_tool_calls() {
    let server = Server::start(vec![streamed_reply()]);
    let (_home, engine) = engine(&server);
    let mut pieces = Vec::new();
    let mut cb = |p: &str| {
        pieces.push(p.to_owned());
        StreamControl::Continue
    };
    let out = engine
        .generate(
            Some("remote"),
            &request(),
            &CancelToken::new(),
            Some(&mut cb),
        )
        .unwrap();
    assert_eq!(pieces, ["Check", "ing."]);
    assert_eq!(out.tool_calls, expected_calls());
}

#[test]
fn stopping_at_a_reported_call_keeps_the_calls_reported_so_far() {
    let server = Server::start(vec![streamed_reply(), whole_reply()]);
    let (_home, engine) = engine(&server);
    for _ in 0..2 {
        // The second answer is one JSON body to a streamed request: reported the same way.
        let (out, seen) = generate_streaming(&engine, &request(), true);
        let out = out.unwrap();
        assert_eq!(out.stop_reason, StopReason::Cancelled);
        assert_eq!(out.tool_calls, expected_calls()[..1]);
        assert_eq!(seen.last(), Some(&Seen::Call(expected_calls()[0].clone())));
    }
}

#[test]
fn invalid_arguments_from_the_provider_are_an_engine_error_naming_the_tool() {
    let bad_stream = Reply::sse(
        &[
            fragment(
                0,
                json!({"id": "call_1", "function": {"name": "get_weather", "arguments": "{\"city\": Par"}}),
            ),
            chunk(json!({}), json!("tool_calls")),
        ],
        Duration::ZERO,
    );
    let server = Server::start(vec![
        Reply::json(200, completion_with_calls(["{\"city\":\"Paris\"}", "{tz"])),
        bad_stream,
        Reply::json(200, completion_with_calls(["", "{\"tz\":\"UTC\"}"])),
    ]);
    let (_home, engine) = engine(&server);
    let err = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap_err();
    assert!(matches!(err, InferenceError::Engine(_)), "{err:?}");
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(
        err.to_string()
            .starts_with("engine error: tool call \"get_time\" has arguments that are not a JSON object: invalid JSON"),
        "{err}"
    );
    let (out, seen) = generate_streaming(&engine, &request(), false);
    let err = out.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("engine error: tool call \"get_weather\" has arguments"),
        "{err}"
    );
    assert!(seen.is_empty());
    // An empty arguments string is an empty object.
    let out = engine
        .generate(Some("remote"), &request(), &CancelToken::new(), None)
        .unwrap();
    assert_eq!(out.tool_calls[0].arguments, json!({}));
}

/// Each check fails before anything is sent, as invalid params naming the field.
#[test]
fn tool_requests_are_checked_before_anything_is_sent() {
    let server = Server::start(vec![]);
    let (_home, engine) = engine(&server);
    let mut not_object = request();
    let mut bad = time();
    bad.name = "lookup".into();
    bad.parameters = json!(["city"]);
    not_object.tools.push(bad);
    let mut duplicate = request();
    duplicate.tools.push(weather());
    let mut unknown_choice = request();
    unknown_choice.tool_choice = Some(ToolChoice::Named("get_stock".into()));
    let mut unmatched = request();
    unmatched
        .messages
        .as_mut()
        .unwrap()
        .push(Message::tool_result("call_7", "late"));
    let cases = [
        (
            not_object,
            "invalid tools: tools[2].parameters of tool \"lookup\" must be a JSON Schema object, got an array",
        ),
        (
            duplicate,
            "invalid tools: tools[2].name \"get_weather\" duplicates tools[0]; tool names must be unique",
        ),
        (
            unknown_choice,
            "invalid tool_choice: names tool \"get_stock\", which is not among the given tools",
        ),
        (
            unmatched,
            "invalid messages: messages[4].tool_use_id \"call_7\" matches no earlier assistant tool call",
        ),
    ];
    for (req, want) in cases {
        let err = engine
            .generate(Some("remote"), &req, &CancelToken::new(), None)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidParams, "{err}");
        assert_eq!(err.to_string(), want);
    }
    assert!(server.requests().is_empty());
}

/// A local model with `tool_choice` none renders tool turns as plain text and calls nothing.
#[test]
fn local_models_accept_tool_turns_without_tools() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    let mut req = request();
    req.tool_choice = Some(ToolChoice::None);
    req.max_tokens = Some(3);
    req.temperature = Some(0.0);
    let out = engine
        .generate(Some(common::GGUF_ID), &req, &CancelToken::new(), None)
        .unwrap();
    assert!(out.tool_calls.is_empty());
    assert_ne!(out.stop_reason, StopReason::ToolUse);
    assert!(out.usage.prompt_tokens > 0);
}
