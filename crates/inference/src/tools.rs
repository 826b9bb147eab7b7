//! The engine-neutral tool-calling IR and its checks.
//!
//! Owns: `ToolSpec`, `ToolChoice`, `ToolCall`, the request-level tool checks (every tool's
//! `parameters` is a JSON object, names are unique, `tool_choice` names a given tool, each
//! tool result answers an earlier assistant tool call), parsing a provider's `arguments`
//! into a JSON object, and rendering tool turns as plain text for engines without tool
//! support. Must not touch: any provider's wire format (see `openai`) or any engine.
//!
//! Roles: an assistant turn carries its calls in `Message::tool_calls`; a tool result is a
//! message whose role is `tool_result` (or `tool`) with `tool_use_id` naming the call it
//! answers (`tool_call_id` is accepted as an alias when deserializing).

use std::collections::{HashMap, HashSet};

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Map, Value};

use crate::error::{InferenceError, Result};
use crate::generate::{GenerateRequest, Message};

/// The role of a tool result.
pub const TOOL_RESULT_ROLE: &str = "tool_result";

/// One tool the model may call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The function name the model calls it by; unique within a request.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object for the arguments.
    #[serde(default)]
    pub parameters: Value,
}

/// Whether and which tool the model must call.
///
/// JSON: `"auto"`, `"required"` (also read from `"any"`), `"none"`, or a named tool as
/// `{"type": "function", "function": {"name": N}}` (OpenAI, and how it is written),
/// `{"type": "tool", "name": N}` (Anthropic) or `{"name": N}`. Any other string is read as
/// a tool name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the provider's default when tools are given).
    Auto,
    /// The model must call at least one tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Named(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Required => s.serialize_str("required"),
            Self::None => s.serialize_str("none"),
            Self::Named(name) => {
                json!({"type": "function", "function": {"name": name}}).serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        match &value {
            Value::String(s) => Ok(match s.as_str() {
                "auto" => Self::Auto,
                "required" | "any" => Self::Required,
                "none" => Self::None,
                name => Self::Named(name.to_owned()),
            }),
            Value::Object(o) => {
                let kind = o.get("type").and_then(Value::as_str);
                match kind {
                    Some("auto") => return Ok(Self::Auto),
                    Some("any" | "required") => return Ok(Self::Required),
                    Some("none") => return Ok(Self::None),
                    _ => {}
                }
                o.get("function")
                    .and_then(|f| f.get("name"))
                    .or_else(|| o.get("name"))
                    .and_then(Value::as_str)
                    .map(|n| Self::Named(n.to_owned()))
                    .ok_or_else(|| D::Error::custom("tool_choice object names no tool"))
            }
            _ => Err(D::Error::custom(
                "tool_choice must be \"auto\", \"required\", \"none\" or a named tool",
            )),
        }
    }
}

pub use car_proto::methods::inference::ToolCall;

/// `arguments` as a JSON object: an object is taken as is; a string (OpenAI sends JSON
/// text) is parsed and must hold an object; an empty or blank string, or null, is `{}`.
/// Anything else is an engine error naming `tool`.
pub fn parse_arguments(tool: &str, arguments: &Value) -> Result<Value> {
    let bad = |what: String| {
        InferenceError::Engine(format!(
            "tool call {tool:?} has arguments that are not a JSON object: {what}"
        ))
    };
    match arguments {
        Value::Null => Ok(Value::Object(Map::new())),
        Value::Object(_) => Ok(arguments.clone()),
        Value::String(s) if s.trim().is_empty() => Ok(Value::Object(Map::new())),
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(other) => Err(bad(format!(
                "got {}",
                car_proto::jsonrpc::json_type_name(&other)
            ))),
            Err(e) => Err(bad(format!("invalid JSON ({e})"))),
        },
        other => Err(bad(format!(
            "got {}",
            car_proto::jsonrpc::json_type_name(other)
        ))),
    }
}

/// Whether `role` is a tool result's (`tool_result` or `tool`).
pub fn is_tool_result(role: &str) -> bool {
    role == TOOL_RESULT_ROLE || role == "tool"
}

impl GenerateRequest {
    /// Whether this request asks for tool calling: tools are given and `tool_choice` is not
    /// `None`.
    pub fn uses_tools(&self) -> bool {
        !self.tools.is_empty() && self.tool_choice != Some(ToolChoice::None)
    }

    /// The tool checks `validate` runs (see the module docs); each failure is an
    /// `InvalidRequest` naming `tools`, `tool_choice` or `messages`.
    pub fn validate_tools(&self) -> Result<()> {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, tool) in self.tools.iter().enumerate() {
            if tool.name.trim().is_empty() {
                return Err(InferenceError::invalid(
                    "tools",
                    format!("tools[{i}].name must not be empty"),
                ));
            }
            if let Some(first) = seen.insert(tool.name.as_str(), i) {
                return Err(InferenceError::invalid(
                    "tools",
                    format!(
                        "tools[{i}].name {:?} duplicates tools[{first}]; tool names must be unique",
                        tool.name
                    ),
                ));
            }
            if !tool.parameters.is_object() {
                return Err(InferenceError::invalid(
                    "tools",
                    format!(
                        "tools[{i}].parameters of tool {:?} must be a JSON Schema object, got {}",
                        tool.name,
                        car_proto::jsonrpc::json_type_name(&tool.parameters)
                    ),
                ));
            }
        }
        match &self.tool_choice {
            Some(ToolChoice::Named(name)) if !seen.contains_key(name.as_str()) => {
                return Err(InferenceError::invalid(
                    "tool_choice",
                    format!("names tool {name:?}, which is not among the given tools"),
                ))
            }
            Some(ToolChoice::Required) if self.tools.is_empty() => {
                return Err(InferenceError::invalid(
                    "tool_choice",
                    "\"required\" needs at least one tool in tools",
                ))
            }
            _ => {}
        }
        if let Some(messages) = &self.messages {
            check_linkage(messages)?;
        }
        Ok(())
    }
}

/// Tool calls only on assistant turns, each well formed; every tool result answers a call
/// made earlier in the conversation.
fn check_linkage(messages: &[Message]) -> Result<()> {
    let mut calls: HashSet<&str> = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        if !m.tool_calls.is_empty() && m.role != "assistant" {
            return Err(InferenceError::invalid(
                "messages",
                format!(
                    "messages[{i}].tool_calls: only assistant messages carry tool calls, not {:?}",
                    m.role
                ),
            ));
        }
        for (j, call) in m.tool_calls.iter().enumerate() {
            let at = format!("messages[{i}].tool_calls[{j}]");
            if call.id.is_empty() || call.name.is_empty() {
                return Err(InferenceError::invalid(
                    "messages",
                    format!("{at} needs a non-empty id and name"),
                ));
            }
            if !call.arguments.is_object() {
                return Err(InferenceError::invalid(
                    "messages",
                    format!(
                        "{at}.arguments of tool {:?} must be a JSON object, got {}",
                        call.name,
                        car_proto::jsonrpc::json_type_name(&call.arguments)
                    ),
                ));
            }
            calls.insert(call.id.as_str());
        }
        if is_tool_result(&m.role) {
            match m.tool_use_id.as_deref() {
                None | Some("") => {
                    return Err(InferenceError::invalid(
                        "messages",
                        format!(
                        "messages[{i}].tool_use_id: a tool result must name the call it answers"
                    ),
                    ))
                }
                Some(id) if !calls.contains(id) => {
                    return Err(InferenceError::invalid(
                        "messages",
                        format!(
                        "messages[{i}].tool_use_id {id:?} matches no earlier assistant tool call"
                    ),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// `(role, text)` turns for a chat template without tool support: an assistant turn's
/// calls are appended to its text as `{"tool_calls": [{id, name, arguments}]}`, and a tool
/// result becomes a `tool` turn holding its content.
pub fn plain_turns(conversation: &[Message]) -> Vec<(String, String)> {
    conversation
        .iter()
        .map(|m| {
            if is_tool_result(&m.role) {
                return ("tool".to_owned(), m.content.clone());
            }
            if m.tool_calls.is_empty() {
                return (m.role.clone(), m.content.clone());
            }
            // Through a struct rather than `json!`, so each call keeps its field order.
            #[derive(Serialize)]
            struct Calls<'a> {
                tool_calls: &'a [ToolCall],
            }
            let calls = serde_json::to_string(&Calls {
                tool_calls: &m.tool_calls,
            })
            .unwrap_or_default();
            let text = if m.content.is_empty() {
                calls
            } else {
                format!("{}\n{calls}", m.content)
            };
            (m.role.clone(), text)
        })
        .collect()
}

#[cfg(test)]
mod tests;
