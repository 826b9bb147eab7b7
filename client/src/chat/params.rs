//! The params of `agent.chat` and `agent.chat.approve`, validated (CAR's wire shapes).
//!
//! This module owns parsing only: a field of the wrong type, or a required one missing,
//! is `-32602` naming the field (`agent.chat: prompt is required`); an optional field
//! sent as `null` counts as absent. Deciding what a parsed call does is [`super`]'s.

use car_proto::errors::RpcError;
use serde_json::{json, Map, Value};

use crate::error::HandlerError;

/// `agent.chat` params: one turn of the chat session `session_id`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatParams {
    pub session_id: String,
    /// The user's message (may be empty, e.g. beside attachments).
    pub prompt: String,
    /// Whether the caller streams tokens; absent when not sent.
    pub stream: Option<bool>,
    /// Advisory context (`host_client_id`, `voice_input`, …); never needed to run a turn.
    pub context: Option<Map<String, Value>>,
    /// The model the caller asked for, as sent; see [`ChatParams::requested_model`].
    pub model: Option<String>,
    /// Image content blocks, each a JSON object, passed through as sent.
    pub attachments: Vec<Value>,
    pub goal: Option<ChatGoal>,
}

/// `agent.chat`'s `goal`: keep iterating until `check` holds (the handler evaluates it and
/// reports each evaluation with `goal_evaluated`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatGoal {
    pub check: String,
    pub max_iterations: Option<u64>,
}

impl ChatParams {
    /// The params back as JSON (`{session_id, prompt, stream?, model?, attachments?,
    /// goal?, context?}`): what a binding hands its host-language handler.
    pub fn to_json(&self) -> Value {
        let mut out = json!({"session_id": self.session_id, "prompt": self.prompt});
        if let Some(stream) = self.stream {
            out["stream"] = json!(stream);
        }
        if let Some(model) = &self.model {
            out["model"] = json!(model);
        }
        if !self.attachments.is_empty() {
            out["attachments"] = json!(self.attachments);
        }
        if let Some(goal) = &self.goal {
            let mut g = json!({ "check": goal.check });
            if let Some(n) = goal.max_iterations {
                g["max_iterations"] = json!(n);
            }
            out["goal"] = g;
        }
        if let Some(context) = &self.context {
            out["context"] = Value::Object(context.clone());
        }
        out
    }

    /// Parses and validates `agent.chat` params.
    pub fn from_params(params: &Value) -> Result<Self, HandlerError> {
        let obj = object("agent.chat", params)?;
        let field = |name: &str| obj.get(name).filter(|v| !v.is_null());
        let session_id = match field("session_id") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(invalid("session_id must not be empty")),
            Some(_) => return Err(invalid("session_id must be a string")),
            None => return Err(invalid("session_id is required")),
        };
        let prompt = match field("prompt") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(invalid("prompt must be a string")),
            None => return Err(invalid("prompt is required")),
        };
        let stream = match field("stream") {
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(invalid("stream must be a boolean")),
            None => None,
        };
        let context = match field("context") {
            Some(Value::Object(m)) => Some(m.clone()),
            Some(_) => return Err(invalid("context must be an object")),
            None => None,
        };
        let model = match field("model") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(invalid("model must be a string")),
            None => None,
        };
        let attachments = match field("attachments") {
            Some(Value::Array(items)) => {
                if let Some(i) = items.iter().position(|v| !v.is_object()) {
                    return Err(invalid(&format!(
                        "attachments[{i}] must be an object (a content block)"
                    )));
                }
                items.clone()
            }
            Some(_) => return Err(invalid("attachments must be an array")),
            None => Vec::new(),
        };
        let goal = match field("goal") {
            Some(Value::Object(g)) => Some(goal(g)?),
            Some(_) => return Err(invalid("goal must be an object")),
            None => None,
        };
        Ok(Self {
            session_id,
            prompt,
            stream,
            context,
            model,
            attachments,
            goal,
        })
    }

    /// The model override for this turn: `model` trimmed, `None` when absent or blank.
    pub fn requested_model(&self) -> Option<&str> {
        self.model
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty())
    }
}

fn goal(g: &Map<String, Value>) -> Result<ChatGoal, HandlerError> {
    let check = match g.get("check").filter(|v| !v.is_null()) {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(invalid("goal.check must not be empty")),
        Some(_) => return Err(invalid("goal.check must be a string")),
        None => return Err(invalid("goal.check is required")),
    };
    let max_iterations = match g.get("max_iterations").filter(|v| !v.is_null()) {
        Some(v) => Some(
            v.as_u64()
                .ok_or_else(|| invalid("goal.max_iterations must be a non-negative integer"))?,
        ),
        None => None,
    };
    Ok(ChatGoal {
        check,
        max_iterations,
    })
}

/// `agent.chat.approve` params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApproveParams {
    pub(crate) session_id: String,
    pub(crate) approval_id: String,
    pub(crate) approved: bool,
}

impl ApproveParams {
    pub(crate) fn from_params(params: &Value) -> Result<Self, HandlerError> {
        let obj = object("agent.chat.approve", params)?;
        let text = |name: &str| match obj.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(Value::Null) | None => Err(approve_invalid(&format!("{name} is required"))),
            Some(_) => Err(approve_invalid(&format!("{name} must be a string"))),
        };
        Ok(Self {
            session_id: text("session_id")?,
            approval_id: text("approval_id")?,
            approved: approves(obj.get("decision")),
        })
    }
}

/// Whether an `agent.chat.approve` `decision` approves: `true`, or one of the strings
/// `approve` / `approved` / `yes` (trimmed, any letter case). Anything else, or no
/// decision at all, denies: an unclear answer must never run the action.
pub fn approves(decision: Option<&Value>) -> bool {
    match decision {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => {
            let s = s.trim();
            ["approve", "approved", "yes"]
                .iter()
                .any(|w| s.eq_ignore_ascii_case(w))
        }
        _ => false,
    }
}

fn object<'a>(method: &str, params: &'a Value) -> Result<&'a Map<String, Value>, HandlerError> {
    params.as_object().ok_or_else(|| {
        HandlerError::from(RpcError::invalid_params(format!(
            "{method}: params must be an object"
        )))
    })
}

fn invalid(detail: &str) -> HandlerError {
    HandlerError::from(RpcError::invalid_params(format!("agent.chat: {detail}")))
}

fn approve_invalid(detail: &str) -> HandlerError {
    HandlerError::from(RpcError::invalid_params(format!(
        "agent.chat.approve: {detail}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(params: Value) -> String {
        let e = ChatParams::from_params(&params).unwrap_err();
        assert_eq!(e.code, -32602, "{}", e.message);
        e.message
    }

    #[test]
    fn a_full_call_parses() {
        let p = ChatParams::from_params(&json!({
            "session_id": "s1", "prompt": "hi", "stream": true,
            "context": {"host_client_id": "h1", "voice_input": true},
            "model": " m-1 ", "attachments": [{"type": "image", "data": "…"}],
            "goal": {"check": "the answer is 4", "max_iterations": 3},
        }))
        .unwrap();
        assert_eq!((p.session_id.as_str(), p.prompt.as_str()), ("s1", "hi"));
        assert_eq!(p.stream, Some(true));
        assert_eq!(p.context.as_ref().unwrap()["host_client_id"], "h1");
        assert_eq!(p.requested_model(), Some("m-1"));
        assert_eq!(p.attachments.len(), 1);
        assert_eq!(
            p.goal,
            Some(ChatGoal {
                check: "the answer is 4".into(),
                max_iterations: Some(3)
            })
        );
    }

    #[test]
    fn optional_fields_may_be_absent_or_null() {
        let want = ChatParams {
            session_id: "s1".into(),
            prompt: String::new(),
            ..ChatParams::default()
        };
        assert_eq!(
            ChatParams::from_params(&json!({"session_id": "s1", "prompt": ""})).unwrap(),
            want
        );
        let nulls = json!({"session_id": "s1", "prompt": "", "stream": null, "context": null,
                           "model": null, "attachments": null, "goal": null});
        assert_eq!(ChatParams::from_params(&nulls).unwrap(), want);
        let blank_model = json!({"session_id": "s1", "prompt": "", "model": "  "});
        assert_eq!(
            ChatParams::from_params(&blank_model)
                .unwrap()
                .requested_model(),
            None
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (json!([1]), "params must be an object"),
            (json!({"prompt": "hi"}), "session_id is required"),
            (
                json!({"session_id": " ", "prompt": "hi"}),
                "session_id must not be empty",
            ),
            (
                json!({"session_id": 7, "prompt": "hi"}),
                "session_id must be a string",
            ),
            (json!({"session_id": "s"}), "prompt is required"),
            (
                json!({"session_id": "s", "prompt": null}),
                "prompt is required",
            ),
            (
                json!({"session_id": "s", "prompt": 1}),
                "prompt must be a string",
            ),
            (
                json!({"session_id": "s", "prompt": "", "stream": "yes"}),
                "stream must be a boolean",
            ),
            (
                json!({"session_id": "s", "prompt": "", "context": []}),
                "context must be an object",
            ),
            (
                json!({"session_id": "s", "prompt": "", "model": 3}),
                "model must be a string",
            ),
            (
                json!({"session_id": "s", "prompt": "", "attachments": {}}),
                "attachments must be an array",
            ),
            (
                json!({"session_id": "s", "prompt": "", "attachments": [{}, "x"]}),
                "attachments[1] must be an object",
            ),
            (
                json!({"session_id": "s", "prompt": "", "goal": "win"}),
                "goal must be an object",
            ),
            (
                json!({"session_id": "s", "prompt": "", "goal": {}}),
                "goal.check is required",
            ),
            (
                json!({"session_id": "s", "prompt": "", "goal": {"check": ""}}),
                "goal.check must not be empty",
            ),
            (
                json!({"session_id": "s", "prompt": "", "goal": {"check": "c", "max_iterations": -1}}),
                "goal.max_iterations must be a non-negative integer",
            ),
        ];
        for (params, want) in cases {
            let got = refusal(params.clone());
            assert!(got.contains(want), "{params}: {got}");
            if params.is_object() {
                assert!(got.contains("agent.chat: "), "{got}");
            }
        }
    }

    #[test]
    fn decisions_approve_only_when_clear() {
        for yes in [
            json!(true),
            json!("approve"),
            json!("approved"),
            json!(" YES "),
        ] {
            assert!(approves(Some(&yes)), "{yes}");
        }
        for no in [
            json!(false),
            json!("deny"),
            json!("no"),
            json!(""),
            json!("approve it"),
            json!(1),
            json!(null),
            json!({"approve": true}),
        ] {
            assert!(!approves(Some(&no)), "{no}");
        }
        assert!(!approves(None));
    }

    #[test]
    fn approve_params_need_both_ids() {
        let p = ApproveParams::from_params(
            &json!({"session_id": "s", "approval_id": "a", "decision": "yes"}),
        )
        .unwrap();
        assert_eq!(
            p,
            ApproveParams {
                session_id: "s".into(),
                approval_id: "a".into(),
                approved: true
            }
        );
        let p =
            ApproveParams::from_params(&json!({"session_id": "s", "approval_id": "a"})).unwrap();
        assert!(!p.approved, "no decision denies");
        for (params, want) in [
            (json!({"approval_id": "a"}), "session_id is required"),
            (
                json!({"session_id": "s", "approval_id": 2}),
                "approval_id must be a string",
            ),
            (json!("x"), "params must be an object"),
        ] {
            let e = ApproveParams::from_params(&params).unwrap_err();
            assert_eq!(e.code, -32602);
            assert!(e.message.contains(want), "{}", e.message);
        }
    }
}
