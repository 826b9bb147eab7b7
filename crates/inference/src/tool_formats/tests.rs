use serde_json::json;

use super::*;
use crate::chat_template::tests::{
    tool_turns, weather, HERMES3, LLAMA31, LLAMA32, QWEN25, SMOLLM3,
};

fn format_of(source: &str) -> ToolFormat {
    native_template(source, "<|begin_of_text|>", "<|eot_id|>")
        .map_or(ToolFormat::Generic, |(_, f)| f)
}

const HERMES: ToolFormat = ToolFormat::Hermes {
    args_first: false,
    native_calls: true,
};

/// SmolLM2-135M-Instruct's template: ChatML without any tools support.
const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[test]
fn real_templates_are_recognised() {
    assert_eq!(format_of(QWEN25), HERMES);
    assert_eq!(format_of(HERMES3), HERMES);
    assert_eq!(
        format_of(SMOLLM3),
        ToolFormat::Hermes {
            args_first: false,
            native_calls: false
        }
    );
    assert_eq!(format_of(LLAMA31), ToolFormat::Llama3);
    assert_eq!(format_of(LLAMA32), ToolFormat::Llama3);
}

#[test]
fn other_templates_keep_the_generic_path() {
    // No tools support at all.
    assert_eq!(format_of(SMOLLM2), ToolFormat::Generic);
    // Mentions `tools` but renders nothing different with them.
    let ignores = "{# tools are not supported #}{% for m in messages %}{{ m.content }}{% endfor %}";
    assert_eq!(format_of(ignores), ToolFormat::Generic);
    // Supports tools in a format not recognised here (Mistral-style).
    let mistral = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS]{{ m.tool_calls | tojson }}{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{% else %}[INST]{{ m.content }}[/INST]{% endif %}{% endfor %}";
    assert_eq!(format_of(mistral), ToolFormat::Generic);
    // Drops tool results.
    let drops = "{% if tools %}<tool_call>{% endif %}{% for m in messages %}{% for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>{% endfor %}{% endfor %}";
    assert_eq!(format_of(drops), ToolFormat::Generic);
    // Does not compile.
    assert_eq!(format_of("{% if tools %}"), ToolFormat::Generic);
}

/// Hermes 2 Pro writes `arguments` before `name`; the format follows it.
#[test]
fn arguments_first_is_detected_and_kept() {
    let source = "{% if tools %}TOOLS{% endif %}{% for m in messages %}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}<tool_call>\n{ \"arguments\": {{ c.function.arguments | tojson }}, \"name\": \"{{ c.function.name }}\"}\n</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}{% endfor %}";
    let format = format_of(source);
    assert_eq!(
        format,
        ToolFormat::Hermes {
            args_first: true,
            native_calls: true
        }
    );
    let tool = weather();
    let g = format.grammar(&[&tool], true);
    assert!(
        g.contains(r#"t0-call ::= "{" ws "\"arguments\"" ws ":" ws t0-args ws "," ws "\"name\"""#),
        "{g}"
    );
}

#[test]
fn hermes_grammar_wraps_each_call_in_tags() {
    let tool = weather();
    let many = HERMES.grammar(&[&tool], true);
    assert!(
        many.contains("block ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n"),
        "{many}"
    );
    assert!(
        many.contains("root ::= block ( \"\\n\" block )*\n"),
        "{many}"
    );
    let one = HERMES.grammar(&[&tool], false);
    assert!(one.contains("root ::= block\n"), "{one}");
    // Llama 3 makes one bare `{"name", "parameters"}` object, even when parallel.
    let llama = ToolFormat::Llama3.grammar(&[&tool], true);
    assert!(
        llama.contains("root ::= block\n") && llama.contains("\"\\\"parameters\\\"\""),
        "{llama}"
    );
}

#[test]
fn hermes_answers_parse_into_numbered_calls() {
    let text = "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"</tool_call>\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
    assert_eq!(
        HERMES.parse(text, 3, false).unwrap(),
        vec![
            ToolCall::new("call_3", "a", json!({"x": "</tool_call>"})),
            ToolCall::new("call_4", "b", json!({})),
        ]
    );
    // Cut short: the complete calls only.
    let cut = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"argu";
    assert_eq!(
        HERMES.parse(cut, 0, true).unwrap(),
        vec![ToolCall::new("call_0", "a", json!({}))]
    );
    assert_eq!(HERMES.parse(cut, 0, false), None);
    let in_tag = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_c";
    assert_eq!(HERMES.parse(in_tag, 0, true).unwrap().len(), 1);
    let no_close = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool";
    assert_eq!(HERMES.parse(no_close, 0, true).unwrap().len(), 1);
    assert_eq!(HERMES.parse(no_close, 0, false), None);
    assert_eq!(
        HERMES.parse("<tool_call>\n{\"name\": \"b\", \"argu", 0, true),
        None
    );
    assert_eq!(HERMES.parse("Sure! <tool_call>", 0, false), None);
    assert_eq!(
        HERMES.parse(
            "<tool_call>\n{\"name\": \"a\", \"arguments\": 3}\n</tool_call>",
            0,
            false
        ),
        None
    );
    let llama = ToolFormat::Llama3;
    assert_eq!(
        llama
            .parse(" {\"name\": \"a\", \"parameters\": {\"x\": 1}}", 1, false)
            .unwrap(),
        vec![ToolCall::new("call_1", "a", json!({"x": 1}))]
    );
    assert_eq!(llama.parse("{\"name\": \"a\", \"param", 1, true), None);
    assert_eq!(HERMES.trigger(), "<tool_call>");
    assert_eq!(llama.trigger(), "{");
}

/// SmolLM3 renders no `tool_calls`: the calls are written into the assistant's content.
#[test]
fn calls_are_written_into_content_when_the_template_does_not_render_them() {
    let (template, format) = native_template(SMOLLM3, "", "<|im_end|>").unwrap();
    let tools = [weather()];
    let out = template
        .render(&format.prepare(&tool_turns()), Some(&tools), true)
        .unwrap();
    assert!(
        out.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>"),
        "{out}"
    );
    assert!(out.contains("sunny, 3 C"), "{out}");
    // A template that renders them keeps the turns as they are.
    assert!(matches!(HERMES.prepare(&tool_turns()), Cow::Borrowed(_)));
}
