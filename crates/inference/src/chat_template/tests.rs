use serde_json::json;

use super::*;
use crate::tools::ToolCall;

/// Qwen/Qwen2.5-*-Instruct's chat template.
pub(crate) const QWEN25: &str =
    include_str!("../../tests/fixtures/templates/qwen2.5-instruct.jinja");
/// NousResearch/Hermes-3-Llama-3.1-8B's `tool_use` chat template.
pub(crate) const HERMES3: &str =
    include_str!("../../tests/fixtures/templates/hermes-3-llama-3.1-tool-use.jinja");
/// HuggingFaceTB/SmolLM3-3B's chat template.
pub(crate) const SMOLLM3: &str = include_str!("../../tests/fixtures/templates/smollm3.jinja");
/// meta-llama/Llama-3.1-8B-Instruct's chat template.
pub(crate) const LLAMA31: &str =
    include_str!("../../tests/fixtures/templates/llama-3.1-instruct.jinja");
/// meta-llama/Llama-3.2-3B-Instruct's chat template.
pub(crate) const LLAMA32: &str =
    include_str!("../../tests/fixtures/templates/llama-3.2-instruct.jinja");

pub(crate) fn weather() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: Some("Current weather for a city".into()),
        parameters: json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
        }),
    }
}

/// A system message, a question, the assistant's call and its result.
pub(crate) fn tool_turns() -> Vec<Message> {
    vec![
        Message::new("system", "You are terse."),
        Message::new("user", "Weather in Oslo?"),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(
                "call_0",
                "get_weather",
                json!({"city": "Oslo"}),
            )],
        ),
        Message::tool_result("call_0", "sunny, 3 C"),
    ]
}

fn render(source: &str, conversation: &[Message], tools: Option<&[ToolSpec]>) -> String {
    ChatTemplate::new(source, "<|begin_of_text|>", "<|eot_id|>")
        .unwrap()
        .render(conversation, tools, true)
        .unwrap()
}

/// The whole Qwen 2.5 prompt: the tools block in the system message (each tool as Python's
/// `json.dumps` writes it), the call in `<tool_call>` tags, the result in a user turn's
/// `<tool_response>`, and the generation prompt.
#[test]
fn qwen25_renders_tools_calls_and_results_in_its_format() {
    let tools = [weather()];
    let out = render(QWEN25, &tool_turns(), Some(&tools));
    let want = concat!(
        "<|im_start|>system\nYou are terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n",
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        r#"{"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city", "parameters": {"properties": {"city": {"description": "The city", "type": "string"}}, "required": ["city"], "type": "object"}}}"#,
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n",
        "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\nWeather in Oslo?<|im_end|>\n",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nsunny, 3 C\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n",
    );
    assert_eq!(out, want);
    // Without tools the template takes its other branch.
    let plain = render(QWEN25, &[Message::new("user", "hi")], None);
    assert_eq!(
        plain,
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}

/// Hermes 3: BOS, the tools as Python-style signatures plus JSON parameters, the call in
/// `<tool_call>` tags and the result as a `tool` turn (which needs `loop.previtem`).
#[test]
fn hermes3_renders_tools_calls_and_results_in_its_format() {
    let tools = [weather()];
    let out = render(HERMES3, &tool_turns(), Some(&tools));
    for part in [
        "<|begin_of_text|><|im_start|>system\nYou are a function calling AI model.",
        "<tools> {\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"get_weather(city: str) - Current weather for a city\n\n    Args:\n        city(str): The city\", \"parameters\": {\"properties\": {\"city\": {\"description\": \"The city\", \"type\": \"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}} </tools>",
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n",
        "<|im_start|>tool\n<tool_response>\nsunny, 3 C\n</tool_response><|im_end|><|im_start|>assistant\n",
    ] {
        assert!(out.contains(part), "missing {part:?} in\n{out}");
    }
    assert!(out.ends_with("<|im_start|>assistant\n"), "{out}");
}

/// Llama 3.1: the tools (indented JSON) in the first user turn, the call as
/// `{"name", "parameters"}` and the result as an `ipython` turn.
#[test]
fn llama31_renders_tools_calls_and_results_in_its_format() {
    let tools = [weather()];
    for source in [LLAMA31, LLAMA32] {
        let out = render(source, &tool_turns(), Some(&tools));
        for part in [
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n",
            "You are terse.<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions",
            "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",",
            "Weather in Oslo?<|eot_id|>",
            "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}<|eot_id|>",
            "<|start_header_id|>ipython<|end_header_id|>\n\n",
        ] {
            assert!(out.contains(part), "missing {part:?} in\n{out}");
        }
        assert!(out.contains("sunny, 3 C"));
        assert!(out.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n"));
    }
}

/// SmolLM3 reads its tools from `xml_tools`, and its `{% generation %}` markers render.
#[test]
fn smollm3_reads_xml_tools_and_generation_blocks() {
    let tools = [weather()];
    let conv = [
        Message::new("user", "Weather in Oslo?"),
        Message::new("assistant", "Let me check."),
        Message::new("user", "Thanks"),
    ];
    let out = render(SMOLLM3, &conv, Some(&tools));
    assert!(out.contains("### Tools\n\n"), "{out}");
    // `tool | string` is Python's `str(dict)`, as in transformers.
    assert!(
        out.contains("<tools>\n{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Current weather for a city', 'parameters': {"),
        "{out}"
    );
    assert!(
        out.contains("<|im_start|>assistant\nLet me check.<|im_end|>\n"),
        "{out}"
    );
    let without = render(SMOLLM3, &conv, None);
    assert!(!without.contains("### Tools"), "{without}");
}

#[test]
fn tool_results_carry_their_call_id_and_name() {
    let source = "{% for m in messages %}{{ m.role }}|{{ m.content }}|{{ m.tool_call_id }}|{{ m.name }}|{{ m.tool_calls is defined }}|{{ m.tool_calls[0].id if m.tool_calls else '' }}\n{% endfor %}";
    let out = render(source, &tool_turns(), None);
    assert_eq!(
        out,
        "system|You are terse.|||False|\nuser|Weather in Oslo?|||False|\nassistant|None|||True|call_0\ntool|sunny, 3 C|call_0|get_weather|False|\n"
    );
}

#[test]
fn tojson_writes_as_python_does() {
    let source = "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true) }}|{{ [] | tojson(indent=2) }}";
    let t = ChatTemplate::new(source, "", "").unwrap();
    let v = json!({"z": "<a & 'b'>\n", "a": [1, 2.5, 1e-5, true, null], "é": 3.0});
    let out = t.render_value_for_test(json_value(&v));
    let compact = r#"{"a": [1, 2.5, 1e-05, true, null], "z": "<a & 'b'>\n", "é": 3.0}"#;
    let indented = "{\n  \"a\": [\n    1,\n    2.5,\n    1e-05,\n    true,\n    null\n  ],\n  \"z\": \"<a & 'b'>\\n\",\n  \"é\": 3.0\n}";
    assert_eq!(out, format!("{compact}|{indented}|{compact}|[]"));
    assert_eq!(
        python_json(&json!({"k": [1e16, -0.0]})),
        r#"{"k": [1e+16, -0.0]}"#
    );
}

#[test]
fn helpers_behave_like_transformers() {
    let t = |s: &str| ChatTemplate::new(s, "<s>", "</s>").unwrap();
    // Python string methods, loop controls, bos/eos.
    let out = t("{{ bos_token }}{% for w in '  a b  '.strip().split() %}{% if w == 'b' %}{% break %}{% endif %}{{ w.upper() }}{% endfor %}{{ eos_token }}")
        .render(&[], None, false)
        .unwrap();
    assert_eq!(out, "<s>A</s>");
    let err = t("{{ raise_exception('no way') }}")
        .render(&[], None, false)
        .unwrap_err();
    assert!(err.to_string().contains("no way"), "{err}");
    // trim_blocks and lstrip_blocks, as transformers sets them.
    let out = t("{% if true %}\n  x\n    {% endif %}\ny")
        .render(&[], None, false)
        .unwrap();
    assert_eq!(out, "  x\ny");
    assert_eq!(
        generation_blocks("a{%- generation -%}b{% endgeneration %}c{% if x %}"),
        "a{%- if true -%}b{% endif %}c{% if x %}"
    );
    // Without tools, `tools` is undefined (templates test `is defined`); with them it is a
    // list.
    let probe = t("{{ tools is defined }}|{{ tools | length if tools is defined else '' }}");
    assert_eq!(probe.render(&[], None, false).unwrap(), "False|");
    assert_eq!(
        probe.render(&[], Some(&[weather()]), false).unwrap(),
        "True|1"
    );
}

impl ChatTemplate {
    /// The template rendered with only `v` in its context.
    fn render_value_for_test(&self, v: Value) -> String {
        self.env
            .get_template(NAME)
            .unwrap()
            .render(Value::from_pairs([("v", v)]))
            .unwrap()
    }
}
