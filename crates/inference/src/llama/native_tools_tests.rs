//! Tool calling through a model's own chat template, end to end on the real SmolLM2-135M
//! GGUF: its own template (no tools support) keeps the generic path; with a tools-aware
//! template forced in (`with_chat_template`) the tools and tool turns render in that
//! template's format and the grammar-constrained calls parse and validate.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;
use serde_json::{json, Value};

use crate::chat_template::tests::{tool_turns, weather, HERMES3, LLAMA31, QWEN25};
use crate::generate::{CancelToken, GenerateRequest, Message, StopReason, StreamControl};
use crate::llama::{LlamaConfig, LlamaEngineModel};
use crate::tool_formats::ToolFormat;
use crate::tools::{ToolCall, ToolChoice, ToolSpec};

/// Generations run one at a time (2 cores).
static SERIAL: Mutex<()> = Mutex::new(());

fn model() -> LlamaEngineModel {
    let Some(path) = std::env::var_os("CAR_TEST_GGUF") else {
        panic!("CAR_TEST_GGUF is not set: run `eval \"$(scripts/fetch-models)\"` first");
    };
    LlamaEngineModel::load(Path::new(&path), &config()).unwrap()
}

fn config() -> LlamaConfig {
    LlamaConfig {
        n_threads: 2,
        ..LlamaConfig::default()
    }
}

fn time() -> ToolSpec {
    ToolSpec {
        name: "get_time".into(),
        description: Some("Current time in a time zone".into()),
        parameters: json!({
            "type": "object",
            "properties": {"tz": {"type": "string"}},
            "required": ["tz"],
        }),
    }
}

fn request(tools: Vec<ToolSpec>, choice: ToolChoice, seed: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: Some("What is the weather in Oslo right now?".into()),
        max_tokens: Some(64),
        seed: Some(seed),
        tools,
        tool_choice: Some(choice),
        ..Default::default()
    }
}

fn generate(model: &LlamaEngineModel, req: &GenerateRequest) -> crate::llama::Generated {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let max = req.max_tokens.unwrap_or(64);
    model
        .generate(
            req,
            max,
            &config(),
            &CancelToken::new(),
            Instant::now(),
            &mut |_| StreamControl::Continue,
        )
        .unwrap()
}

/// `args` validates against `get_weather`'s schema: exactly a string `city`.
fn check_weather(args: &Value) {
    let obj = args.as_object().expect("arguments are an object");
    assert!(obj.get("city").is_some_and(Value::is_string), "{args}");
    assert_eq!(obj.len(), 1, "{args}");
}

#[test]
fn smollm2_without_tools_support_keeps_the_generic_path() {
    let model = model();
    assert_eq!(model.tool_format(), ToolFormat::Generic);
    let mut req = request(vec![weather()], ToolChoice::Required, 0);
    req.prompt = None;
    req.messages = Some(tool_turns());
    let (plan, prompt) = model.prompt_for(&req).unwrap();
    let plan = plan.unwrap();
    assert_eq!(plan.format, ToolFormat::Generic);
    assert!(plan.grammar.contains("tool_calls"), "{}", plan.grammar);
    assert!(
        prompt.contains("# Tools\n\nYou can call these tools"),
        "{prompt}"
    );
    // Tool turns as plain text.
    assert!(
        prompt.contains(
            r#"{"tool_calls":[{"id":"call_0","name":"get_weather","arguments":{"city":"Oslo"}}]}"#
        ),
        "{prompt}"
    );
    assert!(!prompt.contains("<tool_call>"), "{prompt}");
}

#[test]
fn a_tools_aware_template_renders_the_tools_and_turns_in_its_format() {
    let model = model().with_chat_template(QWEN25);
    assert_eq!(
        model.tool_format(),
        ToolFormat::Hermes {
            args_first: false,
            native_calls: true
        }
    );
    let mut req = request(vec![weather()], ToolChoice::Auto, 0);
    req.prompt = None;
    let mut turns = tool_turns();
    turns.push(Message::new("user", "And in Bergen?"));
    req.messages = Some(turns);
    let (plan, prompt) = model.prompt_for(&req).unwrap();
    let plan = plan.unwrap();
    assert!(!plan.eager);
    assert_eq!(plan.first_id, 1);
    assert_eq!(plan.prompt, "", "the template renders the tools");
    for part in [
        "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nsunny, 3 C\n</tool_response><|im_end|>\n",
        "<|im_start|>user\nAnd in Bergen?<|im_end|>\n<|im_start|>assistant\n",
    ] {
        assert!(prompt.contains(part), "missing {part:?} in\n{prompt}");
    }
    assert!(!prompt.contains("You can call these tools"), "{prompt}");
    assert!(
        LlamaSampler::grammar(&model.core.model, &plan.grammar, "root").is_ok(),
        "{}",
        plan.grammar
    );
    // `none` renders no tools, but the history stays in the model's format.
    req.tool_choice = Some(ToolChoice::None);
    let (plan, prompt) = model.prompt_for(&req).unwrap();
    assert!(plan.is_none());
    assert!(!prompt.contains("<tools>"), "{prompt}");
    assert!(prompt.contains("<tool_response>\nsunny, 3 C"), "{prompt}");
}

/// With `required`, every one of 20 seeds gives `<tool_call>` calls that parse and validate.
#[test]
fn required_native_calls_always_parse_and_validate() {
    let model = model().with_chat_template(QWEN25);
    let (plan, _) = model
        .prompt_for(&request(vec![weather()], ToolChoice::Required, 0))
        .unwrap();
    let plan = plan.unwrap();
    assert!(
        plan.eager && plan.grammar.contains("<tool_call>"),
        "{}",
        plan.grammar
    );
    for seed in 0..20 {
        let req = request(vec![weather()], ToolChoice::Required, seed);
        let out = generate(&model, &req);
        assert_eq!(out.stop_reason, StopReason::ToolUse, "seed {seed}: {out:?}");
        assert!(!out.tool_calls.is_empty(), "seed {seed}");
        assert_eq!(out.text, "", "seed {seed}");
        for (i, call) in out.tool_calls.iter().enumerate() {
            assert_eq!(call.id, format!("call_{i}"), "seed {seed}");
            assert_eq!(call.name, "get_weather", "seed {seed}");
            check_weather(&call.arguments);
        }
    }
}

/// A named tool is the one called, one call when parallel calls are off, on Hermes 3's
/// template and Llama 3.1's (whose format is a bare `{"name", "parameters"}` object).
#[test]
fn named_and_single_native_calls_follow_tool_choice() {
    for (source, format) in [
        (
            HERMES3,
            ToolFormat::Hermes {
                args_first: false,
                native_calls: true,
            },
        ),
        (LLAMA31, ToolFormat::Llama3),
    ] {
        let model = model().with_chat_template(source);
        assert_eq!(model.tool_format(), format);
        for seed in 0..3 {
            let mut req = request(
                vec![weather(), time()],
                ToolChoice::Named("get_time".into()),
                seed,
            );
            req.parallel_tool_calls = Some(false);
            let out = generate(&model, &req);
            assert_eq!(
                out.stop_reason,
                StopReason::ToolUse,
                "{format:?} seed {seed}: {out:?}"
            );
            assert_eq!(out.tool_calls.len(), 1, "{format:?} seed {seed}");
            let call = &out.tool_calls[0];
            assert_eq!(call.name, "get_time");
            let args = call.arguments.as_object().unwrap();
            assert!(args["tz"].is_string() && args.len() == 1, "{args:?}");
        }
    }
}

/// With `auto` the answer is either text that does not open a `<tool_call>`, or valid calls.
#[test]
fn auto_native_answers_are_text_or_valid_calls() {
    let model = model().with_chat_template(QWEN25);
    for seed in 0..5 {
        let req = request(vec![weather()], ToolChoice::Auto, seed);
        let out = generate(&model, &req);
        if out.stop_reason == StopReason::ToolUse {
            assert!(out.text.is_empty());
            out.tool_calls
                .iter()
                .for_each(|c| check_weather(&c.arguments));
        } else {
            assert!(out.tool_calls.is_empty());
            assert!(
                !out.text.trim_start().starts_with("<tool_call>"),
                "{:?}",
                out.text
            );
        }
    }
}

/// A template minijinja cannot render for a conversation (Llama 3.1 raises on two calls in
/// one turn) falls back to llama.cpp's matcher and the generic tool prompt, not an error.
#[test]
fn a_failing_native_render_falls_back_to_the_generic_path() {
    let model = model().with_chat_template(LLAMA31);
    assert_eq!(model.tool_format(), ToolFormat::Llama3);
    let mut req = request(vec![weather()], ToolChoice::Required, 0);
    req.prompt = None;
    req.messages = Some(vec![
        Message::new("user", "Weather in Oslo and Bergen?"),
        Message::assistant_tool_calls(
            "",
            vec![
                ToolCall::new("call_0", "get_weather", json!({"city": "Oslo"})),
                ToolCall::new("call_1", "get_weather", json!({"city": "Bergen"})),
            ],
        ),
        Message::tool_result("call_0", "sunny"),
        Message::tool_result("call_1", "rain"),
    ]);
    let (plan, prompt) = model.prompt_for(&req).unwrap();
    let plan = plan.unwrap();
    assert_eq!(plan.format, ToolFormat::Generic);
    assert_eq!(plan.first_id, 2);
    assert!(prompt.contains("You can call these tools"), "{prompt}");
    let out = generate(&model, &req);
    assert_eq!(out.stop_reason, StopReason::ToolUse, "{out:?}");
    assert_eq!(out.tool_calls[0].id, "call_2");
    check_weather(&out.tool_calls[0].arguments);
}
