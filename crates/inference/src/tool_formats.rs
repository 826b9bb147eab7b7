//! Model-native tool-call formats: recognising them in a GGUF chat template, constraining
//! decoding to them, and parsing the answer back into `ToolCall`s.
//!
//! Owns: [`ToolFormat`] and deciding it for a chat template ([`native_template`]), each
//! format's grammar, `auto` trigger and parser, and writing calls into a conversation for a
//! template that does not render `tool_calls` itself. Must not touch: the Jinja rendering
//! (`chat_template`), the decode loop (`llama`) or the generic prompt (`llama::tools`).
//!
//! The rule: a model's template is used for tools when it *supports tools* — its source
//! mentions `tools`, and rendering a probe conversation with a probe tool differs from
//! rendering it without — *and* its call format is one recognised here:
//! - **Hermes** (Qwen 2.5, Hermes 2 Pro / 3, SmolLM3, …): a call is `<tool_call>\n{"name": N,
//!   "arguments": A}\n</tool_call>`, calls separated by `\n`. Recognised when the template renders
//!   the probe call that way (`"arguments"` may come first, as Hermes 2 Pro writes it, and then the
//!   grammar writes it first too), or when it renders no `tool_calls` but its tools prompt asks for
//!   `<tool_call>` (SmolLM3): then an assistant turn's calls are written into its content in that
//!   format.
//! - **Llama 3** (Llama 3.1 / 3.2 JSON tool calling): the answer is the single object `{"name": N,
//!   "parameters": A}`; the template allows one call per turn, so this format never makes several.
//!
//! Either way the probe's tool result must appear in the rendering too. Any other template
//! — without tools support, with a call format not recognised here, or one minijinja cannot
//! compile or render — keeps the generic path: the generic tool prompt
//! (`tools::tool_prompt`) in the system message, tool turns as plain text
//! (`tools::plain_turns`), llama.cpp's built-in template matcher, and the generic
//! `{"tool_calls": [...]}` grammar.

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::chat_template::{python_json, ChatTemplate};
use crate::generate::Message;
use crate::grammar::{self, CallSyntax};
use crate::llama::tools;
use crate::tools::{ToolCall, ToolSpec};

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";

/// How tools reach the model and how its calls are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    /// The documented generic prompt and `{"tool_calls": [...]}`.
    Generic,
    /// `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>`.
    Hermes {
        /// `arguments` before `name` (Hermes 2 Pro).
        args_first: bool,
        /// The template renders `tool_calls` itself; otherwise calls are written into the
        /// assistant turn's content.
        native_calls: bool,
    },
    /// `{"name": …, "parameters": …}`, one call per turn.
    Llama3,
}

impl ToolFormat {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Generic => "generic",
            Self::Hermes { .. } => "hermes",
            Self::Llama3 => "llama3",
        }
    }

    /// What the answer starts with when it calls a tool; `auto` engages the grammar when
    /// the answer (after leading whitespace) starts with it.
    pub fn trigger(&self) -> &'static str {
        match self {
            Self::Hermes { .. } => HERMES_OPEN,
            Self::Generic | Self::Llama3 => "{",
        }
    }

    /// The GBNF grammar of an answer calling `tools` (one call, or one or more when
    /// `parallel` and the format allows it).
    pub fn grammar(&self, tools: &[&ToolSpec], parallel: bool) -> String {
        match self {
            Self::Generic => grammar::tool_calls_gbnf(tools, parallel),
            Self::Hermes { args_first, .. } => grammar::native_calls_gbnf(
                tools,
                parallel,
                &CallSyntax {
                    open: "<tool_call>\n",
                    close: "\n</tool_call>",
                    separator: "\n",
                    args_key: "arguments",
                    args_first: *args_first,
                },
            ),
            Self::Llama3 => grammar::native_calls_gbnf(
                tools,
                false,
                &CallSyntax {
                    open: "",
                    close: "",
                    separator: "",
                    args_key: "parameters",
                    args_first: false,
                },
            ),
        }
    }

    /// The calls in a constrained answer, numbered from `call_<first_id>`. With
    /// `truncated` (cut by `max_tokens` or the context), the complete calls at its start;
    /// `None` when there is not one.
    pub fn parse(&self, text: &str, first_id: usize, truncated: bool) -> Option<Vec<ToolCall>> {
        match (self, truncated) {
            (Self::Generic, false) => tools::parse_calls(text, first_id),
            (Self::Generic, true) => tools::parse_truncated_calls(text, first_id),
            (Self::Hermes { .. }, _) => parse_hermes(text, first_id, truncated),
            (Self::Llama3, _) => {
                let v: Value = serde_json::from_str(text.trim()).ok()?;
                Some(vec![call_from(&v, "parameters", first_id)?])
            }
        }
    }

    /// `conversation` as the template is given it: unchanged, except that for a Hermes
    /// template which does not render `tool_calls`, each assistant turn's calls are written
    /// into its content (after its text) in the Hermes format.
    pub fn prepare<'a>(&self, conversation: &'a [Message]) -> Cow<'a, [Message]> {
        let Self::Hermes {
            native_calls: false,
            args_first,
        } = *self
        else {
            return Cow::Borrowed(conversation);
        };
        if conversation.iter().all(|m| m.tool_calls.is_empty()) {
            return Cow::Borrowed(conversation);
        }
        Cow::Owned(
            conversation
                .iter()
                .map(|m| {
                    if m.tool_calls.is_empty() {
                        return m.clone();
                    }
                    let mut parts: Vec<String> = Vec::new();
                    if !m.content.is_empty() {
                        parts.push(m.content.clone());
                    }
                    parts.extend(m.tool_calls.iter().map(|c| hermes_call(c, args_first)));
                    Message::new(m.role.clone(), parts.join("\n"))
                })
                .collect(),
        )
    }
}

/// One call in the Hermes format, its JSON as Python's `json.dumps` writes it.
fn hermes_call(call: &ToolCall, args_first: bool) -> String {
    let name = python_json(&Value::String(call.name.clone()));
    let args = python_json(&call.arguments);
    let body = if args_first {
        format!(r#"{{"arguments": {args}, "name": {name}}}"#)
    } else {
        format!(r#"{{"name": {name}, "arguments": {args}}}"#)
    };
    format!("{HERMES_OPEN}\n{body}\n{HERMES_CLOSE}")
}

/// Complete `<tool_call>` blocks, each holding one `{"name", "arguments"}` object.
fn parse_hermes(text: &str, first_id: usize, truncated: bool) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let Some(body) = rest.strip_prefix(HERMES_OPEN) else {
            // Cut inside the next opening tag, or not a call at all.
            if truncated && HERMES_OPEN.starts_with(rest) {
                break;
            }
            return None;
        };
        let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        let value = match stream.next() {
            Some(Ok(v)) => v,
            _ if truncated => break,
            _ => return None,
        };
        calls.push(call_from(&value, "arguments", first_id + calls.len())?);
        let after = body[stream.byte_offset()..].trim_start();
        match after.strip_prefix(HERMES_CLOSE) {
            Some(r) => rest = r.trim_start(),
            None if truncated => break,
            None => return None,
        }
    }
    (!calls.is_empty()).then_some(calls)
}

/// `{"name": N, <args_key>: {…}}` as call `call_<id>`.
fn call_from(v: &Value, args_key: &str, id: usize) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?;
    let args = v.get(args_key)?;
    args.is_object()
        .then(|| ToolCall::new(format!("call_{id}"), name, args.clone()))
}

/// The probe tool, call and result used to recognise a template's format.
const PROBE_TOOL: &str = "car_probe_tool";
const PROBE_ARG: &str = "car_probe_arg";
const PROBE_VALUE: &str = "car-probe-value";
const PROBE_RESULT: &str = "car-probe-result";

fn probe_tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: PROBE_TOOL.into(),
        description: Some("Probe tool.".into()),
        parameters: json!({
            "type": "object",
            "properties": {PROBE_ARG: {"type": "string", "description": "Probe argument."}},
            "required": [PROBE_ARG],
        }),
    }]
}

fn probe_call() -> ToolCall {
    ToolCall::new("call_0", PROBE_TOOL, json!({PROBE_ARG: PROBE_VALUE}))
}

/// The format for a compiled template (see the module docs for the rule).
pub(crate) fn detect(template: &ChatTemplate) -> ToolFormat {
    if !template.mentions_tools() {
        return ToolFormat::Generic;
    }
    let tools = probe_tools();
    let question = [Message::new("user", "Probe question?")];
    let (Ok(with), Ok(without)) = (
        template.render(&question, Some(&tools), true),
        template.render(&question, None, true),
    ) else {
        return ToolFormat::Generic;
    };
    if with == without {
        return ToolFormat::Generic;
    }
    let turn = |calls: Vec<ToolCall>| {
        vec![
            Message::new("user", "Probe question?"),
            Message::assistant_tool_calls("", calls),
            Message::tool_result("call_0", PROBE_RESULT),
            Message::new("user", "Thanks."),
        ]
    };
    let conversation = turn(vec![probe_call()]);
    let Ok(rendered) = template.render(&conversation, Some(&tools), true) else {
        return ToolFormat::Generic;
    };
    if !rendered.contains(PROBE_RESULT) {
        return ToolFormat::Generic;
    }
    if let Some(args_first) = hermes_probe(&rendered) {
        return ToolFormat::Hermes {
            args_first,
            native_calls: true,
        };
    }
    if json_objects(&rendered).any(|v| is_probe_call(&v, "parameters")) {
        return ToolFormat::Llama3;
    }
    if with.contains(HERMES_OPEN) && !rendered.contains(PROBE_VALUE) {
        // The template asks for `<tool_call>` but does not render `tool_calls`: write
        // them into the content, and check that they then show.
        let inline = ToolFormat::Hermes {
            args_first: false,
            native_calls: false,
        };
        let prepared = inline.prepare(&conversation);
        if let Ok(r) = template.render(&prepared, Some(&tools), true) {
            if hermes_probe(&r).is_some() && r.contains(PROBE_RESULT) {
                return inline;
            }
        }
    }
    ToolFormat::Generic
}

/// Whether `rendered` holds the probe call as a `<tool_call>` block; if so, whether its
/// arguments come before its name.
fn hermes_probe(rendered: &str) -> Option<bool> {
    rendered.match_indices(HERMES_OPEN).find_map(|(at, _)| {
        let body = &rendered[at + HERMES_OPEN.len()..];
        let start = body.find('{')?;
        if !body[..start].trim().is_empty() {
            return None;
        }
        let body = &body[start..];
        let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        let value = stream.next()?.ok()?;
        let end = stream.byte_offset();
        if !is_probe_call(&value, "arguments")
            || !body[end..].trim_start().starts_with(HERMES_CLOSE)
        {
            return None;
        }
        let object = &body[..end];
        Some(object.find("\"arguments\"")? < object.find("\"name\"")?)
    })
}

fn is_probe_call(v: &Value, args_key: &str) -> bool {
    v.get("name").and_then(Value::as_str) == Some(PROBE_TOOL)
        && v.get(args_key) == Some(&json!({PROBE_ARG: PROBE_VALUE}))
}

/// Every JSON object that starts somewhere in `text`.
fn json_objects(text: &str) -> impl Iterator<Item = Value> + '_ {
    text.match_indices('{').filter_map(|(at, _)| {
        serde_json::Deserializer::from_str(&text[at..])
            .into_iter::<Value>()
            .next()?
            .ok()
            .filter(Value::is_object)
    })
}

/// A GGUF chat template that supports tools in a recognised format, compiled, with that
/// format; `None` (the generic path) otherwise.
pub(crate) fn native_template(
    source: &str,
    bos: &str,
    eos: &str,
) -> Option<(ChatTemplate, ToolFormat)> {
    let template = match ChatTemplate::new(source, bos, eos) {
        Ok(t) => t,
        Err(e) => {
            if source.contains("tools") {
                tracing::warn!(error = %e, "chat template does not compile with minijinja; tools use the generic prompt");
            }
            return None;
        }
    };
    match detect(&template) {
        ToolFormat::Generic => None,
        format => Some((template, format)),
    }
}

#[cfg(test)]
mod tests;
