//! Tool calling on the local test model (SmolLM2-135M): grammar-constrained calls that
//! always parse and validate, `none` never calling, and a named tool being the one called.

mod common;

use car_inference::{
    CancelToken, GenerateRequest, GenerateResult, InferenceEngine, StopReason, StreamControl,
    StreamEvent, ToolCall, ToolChoice, ToolSpec,
};
use serde_json::{json, Value};

fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Current weather for a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"]
        }),
    }
}

fn time() -> ToolSpec {
    ToolSpec {
        name: "get_time".into(),
        description: Some("Current time in a time zone".into()),
        parameters: json!({
            "type": "object",
            "properties": {"tz": {"type": "string"}, "utc": {"type": "boolean"}},
            "required": ["tz", "utc"]
        }),
    }
}

fn request(tools: Vec<ToolSpec>, choice: ToolChoice, seed: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: Some("What is the weather in Oslo right now?".into()),
        max_tokens: Some(96),
        seed: Some(seed),
        tools,
        tool_choice: Some(choice),
        ..Default::default()
    }
}

fn run(engine: &InferenceEngine, req: &GenerateRequest) -> (GenerateResult, Vec<ToolCall>, String) {
    let mut streamed = Vec::new();
    let mut text = String::new();
    let mut on_event = |e: StreamEvent<'_>| {
        match e {
            StreamEvent::Text(t) => text.push_str(t),
            StreamEvent::ToolCall(c) => streamed.push(c.clone()),
            _ => {}
        }
        StreamControl::Continue
    };
    let out = engine
        .generate_with_events(
            Some(common::GGUF_ID),
            req,
            &CancelToken::new(),
            Some(&mut on_event),
        )
        .unwrap();
    (out, streamed, text)
}

/// `arguments` validates against `get_weather`'s schema: an object with a string `city`,
/// an optional integer `days`, and nothing else.
fn check_weather(args: &Value) {
    let obj = args.as_object().expect("arguments are an object");
    assert!(obj["city"].is_string(), "{args}");
    if let Some(days) = obj.get("days") {
        assert!(days.is_i64() || days.is_u64(), "{args}");
    }
    assert!(obj.keys().all(|k| k == "city" || k == "days"), "{args}");
}

/// With `required`, every one of 20 seeds produces calls that parse and validate, reported
/// both in the result and as stream events, with no text.
#[test]
fn required_always_yields_valid_calls() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    for seed in 0..20 {
        let req = request(vec![weather()], ToolChoice::Required, seed);
        let (out, streamed, text) = run(&engine, &req);
        assert_eq!(out.stop_reason, StopReason::ToolUse, "seed {seed}: {out:?}");
        assert!(!out.tool_calls.is_empty(), "seed {seed}");
        assert_eq!(out.text, "", "seed {seed}");
        assert_eq!(text, "", "seed {seed}: no text is streamed");
        assert_eq!(streamed, out.tool_calls, "seed {seed}");
        for (i, call) in out.tool_calls.iter().enumerate() {
            assert_eq!(call.id, format!("call_{i}"));
            assert_eq!(call.name, "get_weather", "seed {seed}");
            check_weather(&call.arguments);
        }
    }
}

/// `parallel_tool_calls: false` gives exactly one call.
#[test]
fn without_parallel_calls_there_is_exactly_one() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    for seed in 0..3 {
        let mut req = request(vec![weather(), time()], ToolChoice::Required, seed);
        req.parallel_tool_calls = Some(false);
        let (out, _, _) = run(&engine, &req);
        assert_eq!(out.stop_reason, StopReason::ToolUse, "seed {seed}: {out:?}");
        assert_eq!(out.tool_calls.len(), 1, "seed {seed}");
    }
}

/// A named tool is the one called, although two are given.
#[test]
fn a_named_tool_is_called() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    for seed in 0..5 {
        let req = request(
            vec![weather(), time()],
            ToolChoice::Named("get_time".into()),
            seed,
        );
        let (out, _, _) = run(&engine, &req);
        assert_eq!(out.stop_reason, StopReason::ToolUse, "seed {seed}: {out:?}");
        for call in &out.tool_calls {
            assert_eq!(call.name, "get_time", "seed {seed}");
            let args = call.arguments.as_object().unwrap();
            assert!(
                args["tz"].is_string() && args["utc"].is_boolean(),
                "{args:?}"
            );
            assert_eq!(args.len(), 2);
        }
    }
}

/// With `none` the model never calls, and its text streams as usual.
#[test]
fn none_never_calls() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    for seed in 0..5 {
        let req = request(vec![weather(), time()], ToolChoice::None, seed);
        let (out, streamed, text) = run(&engine, &req);
        assert!(
            out.tool_calls.is_empty() && streamed.is_empty(),
            "seed {seed}"
        );
        assert_ne!(out.stop_reason, StopReason::ToolUse);
        assert_eq!(text, out.text);
    }
}

/// With `auto` the answer is either text or valid calls, never a half-made call.
#[test]
fn auto_gives_text_or_valid_calls() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    for seed in 0..5 {
        let req = request(vec![weather()], ToolChoice::Auto, seed);
        let (out, streamed, text) = run(&engine, &req);
        assert_eq!(streamed, out.tool_calls);
        assert_eq!(text, out.text, "seed {seed}");
        if out.stop_reason == StopReason::ToolUse {
            assert!(out.text.is_empty());
            out.tool_calls
                .iter()
                .for_each(|c| check_weather(&c.arguments));
        } else {
            assert!(out.tool_calls.is_empty());
            if out.stop_reason == StopReason::Stop {
                assert!(!out.text.trim_start().starts_with('{'), "{:?}", out.text);
            }
        }
    }
}

/// Call ids continue after the calls already in the conversation.
#[test]
fn call_ids_continue_the_conversation() {
    let _serial = common::serial();
    let (_home, engine) = common::engine();
    let mut req = request(vec![weather()], ToolChoice::Required, 7);
    req.prompt = None;
    req.messages = Some(vec![
        car_inference::Message::new("user", "Weather in Oslo?"),
        car_inference::Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "call_0",
                "get_weather",
                json!({"city": "Oslo"}),
            )],
        ),
        car_inference::Message::tool_result("call_0", "sunny"),
        car_inference::Message::new("user", "And in Bergen?"),
    ]);
    let (out, _, _) = run(&engine, &req);
    assert_eq!(out.stop_reason, StopReason::ToolUse, "{out:?}");
    assert_eq!(out.tool_calls[0].id, "call_1");
}
