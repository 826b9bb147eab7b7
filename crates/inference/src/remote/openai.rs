//! The tool-calling IR in OpenAI's chat-completions wire format, both ways.
//!
//! Owns: translating messages (assistant `tool_calls`, tool results), `tools`,
//! `tool_choice` and `parallel_tool_calls` into a request body, and reading tool calls back
//! from a whole `message` or from streamed `delta.tool_calls` fragments. Must not touch:
//! HTTP, retries or the rest of the response (see `remote`).
//!
//! Request: a tool result becomes `{role: "tool", tool_call_id, content}`; an assistant
//! turn with calls becomes `{role: "assistant", content (null when empty), tool_calls:
//! [{id, type: "function", function: {name, arguments: <JSON text>}}]}`. `tool_choice` and
//! `parallel_tool_calls` are sent only with tools (OpenAI rejects them otherwise).
//!
//! Response: `arguments` JSON text is parsed into an object (empty text is `{}`); text
//! that is not a JSON object is an engine error naming the tool. A call without an id gets
//! `call_<index>`; one without a function name is a malformed response. Streamed fragments
//! are keyed by `index`: the id and name usually come in the first fragment and the
//! arguments text in pieces; a name sent again whole is not doubled.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{InferenceError, Result};
use crate::generate::{GenerateRequest, Message};
use crate::tools::{is_tool_result, parse_arguments, ToolCall, ToolChoice, ToolSpec};

/// The `messages` array for a conversation.
pub(crate) fn chat_messages(conversation: &[Message]) -> Vec<Value> {
    conversation.iter().map(chat_message).collect()
}

fn chat_message(m: &Message) -> Value {
    if is_tool_result(&m.role) {
        return json!({
            "role": "tool",
            "tool_call_id": m.tool_use_id.as_deref().unwrap_or_default(),
            "content": m.content,
        });
    }
    if m.tool_calls.is_empty() {
        return json!({"role": m.role, "content": m.content});
    }
    let calls: Vec<Value> = m
        .tool_calls
        .iter()
        .map(|c| {
            // The IR holds an object; JSON text is passed through as it is.
            let arguments = match &c.arguments {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": arguments},
            })
        })
        .collect();
    let content = if m.content.is_empty() {
        Value::Null
    } else {
        Value::from(m.content.as_str())
    };
    json!({"role": m.role, "content": content, "tool_calls": calls})
}

/// `tools` in OpenAI's shape.
pub(crate) fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            let mut function = json!({"name": t.name, "parameters": t.parameters});
            if let Some(d) = &t.description {
                function["description"] = Value::from(d.as_str());
            }
            json!({"type": "function", "function": function})
        })
        .collect()
}

/// `tool_choice` in OpenAI's shape.
pub(crate) fn tool_choice_json(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::Required => json!("required"),
        ToolChoice::None => json!("none"),
        ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// Adds `response_format` in OpenAI's shape: `{type: "json_object"}`, or `{type:
/// "json_schema", json_schema: {name, schema, strict}}`.
pub(crate) fn add_response_format(body: &mut Value, request: &GenerateRequest) {
    use car_proto::methods::inference::ResponseFormat;
    match &request.response_format {
        None => {}
        Some(ResponseFormat::JsonObject) => {
            body["response_format"] = serde_json::json!({"type": "json_object"});
        }
        Some(format) => {
            body["response_format"] = serde_json::json!({"type": "json_schema", "json_schema": {
                "name": format.name(), "schema": format.schema(), "strict": format.strict()}});
        }
    }
}

/// Adds `tools`, `tool_choice` and `parallel_tool_calls` to a request body when tools are
/// given.
pub(crate) fn add_tools(body: &mut Value, request: &GenerateRequest) {
    if request.tools.is_empty() {
        return;
    }
    body["tools"] = tools_json(&request.tools);
    if let Some(choice) = &request.tool_choice {
        body["tool_choice"] = tool_choice_json(choice);
    }
    if let Some(parallel) = request.parallel_tool_calls {
        body["parallel_tool_calls"] = Value::Bool(parallel);
    }
}

/// The calls in a non-streamed `choices[0].message`. `truncated` (the provider stopped at
/// `max_tokens`) is mentioned when arguments do not parse.
pub(crate) fn message_tool_calls(message: &Value, truncated: bool) -> Result<Vec<ToolCall>> {
    let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) else {
        return Ok(Vec::new());
    };
    let calls = calls
        .as_array()
        .ok_or_else(|| malformed("message.tool_calls is not an array"))?;
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let function = &c["function"];
            build(
                i as u64,
                c["id"].as_str().unwrap_or_default(),
                function["name"].as_str().unwrap_or_default(),
                &function["arguments"],
                truncated,
            )
        })
        .collect()
}

fn build(index: u64, id: &str, name: &str, arguments: &Value, truncated: bool) -> Result<ToolCall> {
    if name.is_empty() {
        return Err(malformed(&format!(
            "tool call {index} has no function name"
        )));
    }
    let arguments = parse_arguments(name, arguments).map_err(|e| match e {
        InferenceError::Engine(msg) if truncated => InferenceError::Engine(format!(
            "{msg} (the provider stopped at max_tokens, mid-call)"
        )),
        other => other,
    })?;
    let id = if id.is_empty() {
        format!("call_{index}")
    } else {
        id.to_owned()
    };
    Ok(ToolCall::new(id, name, arguments))
}

fn malformed(what: &str) -> InferenceError {
    InferenceError::Provider(format!("malformed response: {what}"))
}

/// One call being assembled from stream fragments.
#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles streamed `delta.tool_calls` fragments, keyed by `index`, into calls.
#[derive(Debug, Default)]
pub(crate) struct StreamedToolCalls {
    calls: BTreeMap<u64, Partial>,
}

impl StreamedToolCalls {
    /// Takes one delta's `tool_calls` (if any); returns whether it held any fragment.
    pub(crate) fn push(&mut self, delta: &Value) -> Result<bool> {
        let Some(fragments) = delta.get("tool_calls").filter(|c| !c.is_null()) else {
            return Ok(false);
        };
        let fragments = fragments
            .as_array()
            .ok_or_else(|| malformed("delta.tool_calls is not an array"))?;
        for (k, f) in fragments.iter().enumerate() {
            let index = f["index"].as_u64().unwrap_or(k as u64);
            let call = self.calls.entry(index).or_default();
            if let Some(id) = f["id"].as_str().filter(|s| !s.is_empty()) {
                call.id = id.to_owned();
            }
            let function = &f["function"];
            if let Some(name) = function["name"].as_str() {
                if call.name.is_empty() {
                    call.name = name.to_owned();
                } else if name != call.name {
                    call.name.push_str(name);
                }
            }
            match &function["arguments"] {
                Value::String(s) => call.arguments.push_str(s),
                Value::Null => {}
                // A provider sending the arguments as an object sends them whole.
                other => call.arguments = other.to_string(),
            }
        }
        Ok(!fragments.is_empty())
    }

    /// Whether no fragment arrived.
    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The assembled calls in index order.
    pub(crate) fn finish(self, truncated: bool) -> Result<Vec<ToolCall>> {
        self.calls
            .into_iter()
            .map(|(index, p)| {
                build(
                    index,
                    &p.id,
                    &p.name,
                    &Value::String(p.arguments),
                    truncated,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
