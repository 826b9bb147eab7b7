//! Tool calling on local GGUF models: the tool plan, the generic tool prompt, and parsing
//! the generic answer.
//!
//! Owns: deciding how a request's tools apply to a llama.cpp generation (`ToolPlan`),
//! the generic tool prompt and adding it to the system message, and turning a constrained
//! generic answer into `ToolCall`s. Must not touch: the decode loop (`llama`), the schema
//! conversion (`grammar`) or the model-native formats (`tool_formats`).
//!
//! Prompt: when the model's own chat template supports tools in a format `tool_formats`
//! recognises (Hermes/Qwen `<tool_call>`, Llama 3 JSON), the tools and tool turns go
//! through that template and the answer is constrained to that format. Otherwise (see
//! `tool_formats` for the rule) the model gets the documented generic prompt
//! ([`tool_prompt`]) in its system message, tool turns as plain text, and the generic
//! `{"tool_calls": [...]}` answer.
//!
//! `tool_choice`: `required` and a named tool constrain the answer with the call grammar
//! from the first token; `none` renders no tools and generates plain text; `auto` generates
//! freely and, if the answer (after leading whitespace) starts with the format's trigger
//! (`{`, or `<tool_call>` for the Hermes format), discards that start and generates again
//! from the prompt with the grammar engaged (a restart rather than llama.cpp's lazy
//! grammar, whose trigger replay aborts the process when the triggering token does not fit
//! the grammar, e.g. a `{}` token).
//!
//! Parallel calls: a small model may keep listing calls until `max_tokens`; the calls
//! completed by then are returned (`StopReason::ToolUse`), the unfinished one dropped.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::generate::{GenerateRequest, Message};
use crate::tool_formats::ToolFormat;
use crate::tools::{ToolCall, ToolChoice, ToolSpec};

/// How a request's tools shape one local generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolPlan {
    /// How the tools reach the model and how its calls are written.
    pub format: ToolFormat,
    /// The generic system-prompt text describing the tools (empty for a native format,
    /// whose template renders them).
    pub prompt: String,
    /// GBNF for the whole answer (`root` rule).
    pub grammar: String,
    /// Whether the grammar applies from the first token (`required` or a named tool);
    /// otherwise only once the answer starts with the format's trigger (`auto`).
    pub eager: bool,
    /// The number of the first call id (`call_<n>`): calls already in the conversation,
    /// so ids stay unique within it.
    pub first_id: usize,
}

impl ToolPlan {
    /// The plan for `request` in `format`, or `None` when it uses no tools.
    pub fn for_request(request: &GenerateRequest, format: ToolFormat) -> Option<Self> {
        if !request.uses_tools() {
            return None;
        }
        let choice = request.tool_choice.clone().unwrap_or(ToolChoice::Auto);
        let parallel = request.parallel_tool_calls != Some(false);
        let allowed: Vec<&ToolSpec> = match &choice {
            ToolChoice::Named(name) => request.tools.iter().filter(|t| t.name == *name).collect(),
            _ => request.tools.iter().collect(),
        };
        let first_id = request
            .messages
            .iter()
            .flatten()
            .map(|m| m.tool_calls.len())
            .sum();
        let prompt = match format {
            ToolFormat::Generic => tool_prompt(&request.tools, &choice, parallel),
            _ => String::new(),
        };
        Some(Self {
            format,
            prompt,
            grammar: format.grammar(&allowed, parallel),
            eager: !matches!(choice, ToolChoice::Auto),
            first_id,
        })
    }
}

/// What the start of an `auto` answer says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// It may still become the trigger (nothing but whitespace, or a prefix of it).
    Undecided,
    /// It starts with the trigger: a call.
    Call,
    /// It cannot be a call: text.
    Text,
}

/// Whether `text`, the answer so far, starts (after whitespace) with `trigger`.
pub(crate) fn probe(text: &str, trigger: &str) -> Probe {
    let start = text.trim_start();
    if start.starts_with(trigger) {
        Probe::Call
    } else if start.is_empty() || trigger.starts_with(start) {
        Probe::Undecided
    } else {
        Probe::Text
    }
}

/// The generic tool prompt: each tool as one line of JSON (`name`, `description`,
/// `parameters`), then the answer format `{"tool_calls": [{"name", "arguments"}]}` and
/// what `choice` and `parallel` ask for.
pub fn tool_prompt(tools: &[ToolSpec], choice: &ToolChoice, parallel: bool) -> String {
    let mut out = String::from(
        "# Tools\n\nYou can call these tools (name, description, and JSON Schema of the arguments):\n",
    );
    for t in tools {
        let line = json!({
            "name": t.name,
            "description": t.description.as_deref().unwrap_or(""),
            "parameters": t.parameters,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out.push_str(
        "\nTo call tools, reply with only this JSON and nothing else:\n\
         {\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<arguments>}}]}\n",
    );
    out.push_str(if parallel {
        "List several calls to call several tools at once.\n"
    } else {
        "Call one tool at a time.\n"
    });
    match choice {
        ToolChoice::Required => out.push_str("You must call a tool.\n"),
        ToolChoice::Named(name) => out.push_str(&format!("You must call the tool {name:?}.\n")),
        _ => out.push_str("Otherwise, reply with plain text.\n"),
    }
    out
}

/// `conversation` with `prompt` appended to its leading system message (or added as one).
pub(crate) fn with_tool_prompt(mut conversation: Vec<Message>, prompt: &str) -> Vec<Message> {
    match conversation.first_mut() {
        Some(first) if first.role == "system" => {
            if !first.content.is_empty() {
                first.content.push_str("\n\n");
            }
            first.content.push_str(prompt);
        }
        _ => conversation.insert(0, Message::new("system", prompt)),
    }
    conversation
}

/// The complete calls at the start of a constrained answer that was cut short (by
/// `max_tokens` or the context window): the answer up to the end of its last complete call,
/// closed with `]}`. `None` if not even one call is complete.
pub(crate) fn parse_truncated_calls(text: &str, first_id: usize) -> Option<Vec<ToolCall>> {
    // The grammar guarantees the shape, so the longest prefix ending in `}` that parses once
    // closed ends the last complete call (a `}` inside a string leaves the string open).
    text.char_indices()
        .rev()
        .filter(|(_, c)| *c == '}')
        .find_map(|(i, _)| parse_calls(&format!("{}]}}", &text[..=i]), first_id))
}

/// The calls in a constrained answer, numbered from `call_<first_id>`; `None` if the text is
/// not a complete `{"tool_calls": [...]}` object.
pub(crate) fn parse_calls(text: &str, first_id: usize) -> Option<Vec<ToolCall>> {
    #[derive(Deserialize)]
    struct Answer {
        tool_calls: Vec<Call>,
    }
    #[derive(Deserialize)]
    struct Call {
        name: String,
        arguments: Value,
    }
    let answer: Answer = serde_json::from_str(text.trim()).ok()?;
    if answer.tool_calls.is_empty() {
        return None;
    }
    answer
        .tool_calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            c.arguments
                .is_object()
                .then(|| ToolCall::new(format!("call_{}", first_id + i), c.name, c.arguments))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_parse_and_number_from_the_first_id() {
        let text = r#" {"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]}"#;
        let calls = parse_calls(text, 2).unwrap();
        assert_eq!(
            calls,
            vec![
                ToolCall::new("call_2", "a", json!({"x": 1})),
                ToolCall::new("call_3", "b", json!({})),
            ]
        );
        assert_eq!(
            parse_calls(r#"{"tool_calls": [{"name": "a", "argu"#, 0),
            None
        );
        assert_eq!(parse_calls(r#"{"tool_calls": []}"#, 0), None);
        let cut = r#"{"tool_calls": [{"name": "a", "arguments": {"x": "}"}}, {"name": "a", "arguments": {"x": "}"#;
        assert_eq!(
            parse_truncated_calls(cut, 0).unwrap(),
            vec![ToolCall::new("call_0", "a", json!({"x": "}"}))]
        );
        assert_eq!(
            parse_truncated_calls(r#"{"tool_calls": [{"name": "a", "#, 0),
            None
        );
        assert_eq!(
            parse_calls(r#"{"tool_calls": [{"name": "a", "arguments": 3}]}"#, 0),
            None
        );
    }

    #[test]
    fn the_prompt_joins_the_system_message() {
        let conv = vec![
            Message::new("system", "Be brief."),
            Message::new("user", "hi"),
        ];
        let out = with_tool_prompt(conv, "TOOLS");
        assert_eq!(out[0].content, "Be brief.\n\nTOOLS");
        assert_eq!(out.len(), 2);
        let out = with_tool_prompt(vec![Message::new("user", "hi")], "TOOLS");
        assert_eq!(out[0], Message::new("system", "TOOLS"));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn the_probe_waits_for_the_trigger_or_text() {
        assert_eq!(probe(" \n", "{"), Probe::Undecided);
        assert_eq!(probe(" {\"", "{"), Probe::Call);
        assert_eq!(probe("Sure", "{"), Probe::Text);
        assert_eq!(probe("\n<tool", "<tool_call>"), Probe::Undecided);
        assert_eq!(probe("<tool_call>\n{", "<tool_call>"), Probe::Call);
        assert_eq!(probe("<tool_response>", "<tool_call>"), Probe::Text);
        assert_eq!(probe("<b>bold", "<tool_call>"), Probe::Text);
        assert_eq!(probe("{", "<tool_call>"), Probe::Text);
    }

    #[test]
    fn plans_follow_tool_choice() {
        let tool = |n: &str| ToolSpec {
            name: n.into(),
            description: None,
            parameters: json!({"type": "object"}),
        };
        let mut req = GenerateRequest {
            prompt: Some("hi".into()),
            tools: vec![tool("a"), tool("b")],
            ..Default::default()
        };
        let auto = ToolPlan::for_request(&req, ToolFormat::Generic).unwrap();
        assert!(!auto.eager);
        assert!(auto.grammar.contains(r#""\"a\"""#) && auto.grammar.contains(r#""\"b\"""#));
        assert!(auto.prompt.contains("Otherwise, reply with plain text."));
        req.tool_choice = Some(ToolChoice::Named("b".into()));
        let named = ToolPlan::for_request(&req, ToolFormat::Generic).unwrap();
        assert!(named.eager);
        assert!(!named.grammar.contains(r#""\"a\"""#) && named.grammar.contains(r#""\"b\"""#));
        req.tool_choice = Some(ToolChoice::None);
        assert_eq!(ToolPlan::for_request(&req, ToolFormat::Generic), None);
    }
}
