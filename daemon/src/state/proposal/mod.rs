//! Proposal and action shapes, parsed leniently enough that `verify` can report every
//! malformed action while `proposal.submit` refuses the first one with `-32602`.
//!
//! A proposal is `{id?, actions: [...]}` with at most [`MAX_ACTIONS`] actions. An action is
//! `{id, type, dependencies?, timeout_ms?, failure_behavior?, max_retries?}` plus, by type:
//! `tool_call` → `tool`, `parameters?` (object); `state_write` → `key`, `value`;
//! `state_delete` → `key`. `failure_behavior` is `abort` (default), `skip` or `retry`;
//! `max_retries` (default 3, at most 100) counts retries after the first try and matters
//! only under `retry`. `expected_effects` (an object, optional) names the state keys an
//! action sets when it succeeds: `verify` simulates them and reports two actions of one
//! level that set the same key as a conflict; the executor writes them on success.
//! Unknown fields are ignored.

use car_proto::errors::RpcError;
use car_proto::jsonrpc::json_type_name;
use serde_json::{json, Map, Value};

mod params;

use params::Params;

/// Most actions one proposal may hold; a larger one is refused as a whole.
pub const MAX_ACTIONS: usize = 1000;
/// Longest per-action budget (24 h).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Retries allowed when `max_retries` is not given.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureBehavior {
    Abort,
    Skip,
    Retry,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ActionKind {
    ToolCall {
        tool: String,
        parameters: Map<String, Value>,
    },
    StateWrite {
        key: String,
        value: Value,
    },
    StateDelete {
        key: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Action {
    pub id: String,
    pub kind: ActionKind,
    pub dependencies: Vec<String>,
    pub timeout_ms: Option<u64>,
    pub failure_behavior: FailureBehavior,
    pub max_retries: u32,
    pub expected_effects: Map<String, Value>,
}

impl Action {
    /// How many times the executor may try this action.
    pub fn max_attempts(&self) -> u32 {
        match self.failure_behavior {
            FailureBehavior::Retry => self.max_retries + 1,
            _ => 1,
        }
    }

    /// The operation the permission classifier judges.
    pub fn operation(&self) -> crate::state::permission::classify::Operation<'_> {
        use crate::state::permission::classify::Operation;
        match &self.kind {
            ActionKind::ToolCall { tool, parameters } => Operation::Tool { tool, parameters },
            ActionKind::StateWrite { key, .. } => Operation::State {
                action_type: "state_write",
                key,
            },
            ActionKind::StateDelete { key } => Operation::State {
                action_type: "state_delete",
                key,
            },
        }
    }

    /// The state key this action writes or deletes, if any.
    pub fn state_key(&self) -> Option<&str> {
        match &self.kind {
            ActionKind::StateWrite { key, .. } | ActionKind::StateDelete { key } => Some(key),
            ActionKind::ToolCall { .. } => None,
        }
    }

    /// Every state key this action sets or deletes when it succeeds: its state key, then its
    /// `expected_effects`.
    pub fn written_keys(&self) -> Vec<&str> {
        self.state_key()
            .into_iter()
            .chain(self.expected_effects.keys().map(String::as_str))
            .collect()
    }
}

/// An action entry that could not be parsed: its id (when readable) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub index: usize,
    pub action_id: Option<String>,
    pub error: RpcError,
}

/// A parsed proposal; `actions[i]` is `Err` for a malformed entry.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub id: Option<String>,
    pub actions: Vec<Result<Action, Malformed>>,
}

impl Proposal {
    /// The well-formed actions, or the first malformed one as `-32602`.
    pub fn strict(self) -> Result<(Option<String>, Vec<Action>), RpcError> {
        let actions = self
            .actions
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|m| m.error)?;
        Ok((self.id, actions))
    }
}

/// Parses the proposal's outer shape (errors are `-32602`) and each action (errors are
/// kept per action).
pub fn parse(value: &Value) -> Result<Proposal, RpcError> {
    // Unknown fields (CAR's `source`, `context`, …) are ignored.
    let p = Params::element(value, "proposal")?;
    let id = p.opt_str("id")?;
    let actions = match p.value("actions") {
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "proposal.actions must be an array, got {}",
                json_type_name(other)
            )))
        }
        None => return Err(RpcError::invalid_params("proposal.actions is required")),
    };
    if actions.len() > MAX_ACTIONS {
        return Err(RpcError::invalid_params(format!(
            "proposal.actions has {} actions, at most {MAX_ACTIONS}",
            actions.len()
        )));
    }
    Ok(Proposal {
        id,
        actions: actions
            .iter()
            .enumerate()
            .map(|(i, a)| parse_action(i, a))
            .collect(),
    })
}

/// Parses one action given on its own (`permission.approve {action}`); errors name `what`.
pub fn parse_single(value: &Value, what: &str) -> Result<Action, RpcError> {
    parse_named(0, value, what.to_string()).map_err(|m| m.error)
}

fn parse_action(index: usize, value: &Value) -> Result<Action, Malformed> {
    parse_named(index, value, format!("proposal.actions[{index}]"))
}

fn parse_named(index: usize, value: &Value, what: String) -> Result<Action, Malformed> {
    let readable_id = value.get("id").and_then(Value::as_str).map(str::to_string);
    let fail = |error: RpcError| Malformed {
        index,
        action_id: readable_id.clone(),
        error,
    };
    let p = Params::element(value, &what).map_err(fail)?;
    let id = p.str("id").map_err(fail)?;
    let kind_name = p.str("type").map_err(fail)?;
    if !["tool_call", "state_write", "state_delete"].contains(&kind_name.as_str()) {
        return Err(fail(RpcError::invalid_params(format!(
            "{what}.type must be tool_call, state_write or state_delete, got {kind_name:?}"
        ))));
    }
    let kind = match kind_name.as_str() {
        "tool_call" => ActionKind::ToolCall {
            tool: p.str("tool").map_err(fail)?,
            parameters: p
                .opt_object("parameters")
                .map_err(fail)?
                .unwrap_or_default(),
        },
        "state_write" => ActionKind::StateWrite {
            key: p.str("key").map_err(fail)?,
            value: p.required_value("value").map_err(fail)?.clone(),
        },
        _ => ActionKind::StateDelete {
            key: p.str("key").map_err(fail)?,
        },
    };
    let dependencies = p
        .opt_str_list("dependencies")
        .map_err(fail)?
        .unwrap_or_default();
    let timeout_ms = p.opt_u64("timeout_ms", 1, MAX_TIMEOUT_MS).map_err(fail)?;
    let failure_behavior = match p.opt_str("failure_behavior").map_err(fail)?.as_deref() {
        None | Some("abort") => FailureBehavior::Abort,
        Some("skip") => FailureBehavior::Skip,
        Some("retry") => FailureBehavior::Retry,
        Some(other) => {
            return Err(fail(RpcError::invalid_params(format!(
                "{what}.failure_behavior must be abort, skip or retry, got {other:?}"
            ))))
        }
    };
    let max_retries = p.opt_u64("max_retries", 0, 100).map_err(fail)?;
    let expected_effects = p
        .opt_object("expected_effects")
        .map_err(fail)?
        .unwrap_or_default();
    Ok(Action {
        id,
        kind,
        dependencies,
        timeout_ms,
        failure_behavior,
        max_retries: max_retries.map(|n| n as u32).unwrap_or(DEFAULT_MAX_RETRIES),
        expected_effects,
    })
}

/// A proposal whose actions all parse; the first malformed action is `-32602` naming its
/// path (every one is listed in `error.data.issues`).
pub fn parse_whole(proposal: Map<String, Value>) -> Result<Proposal, RpcError> {
    let proposal = parse(&Value::Object(proposal))?;
    let malformed: Vec<&Malformed> = proposal
        .actions
        .iter()
        .filter_map(|a| a.as_ref().err())
        .collect();
    if let Some(first) = malformed.first() {
        let issues: Vec<Value> = malformed
            .iter()
            .map(|m| json!({"action_id": m.action_id, "message": m.error.message}))
            .collect();
        return Err(first.error.clone().with_data(json!({"issues": issues})));
    }
    Ok(proposal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_type_and_names_bad_fields() {
        let p = parse(&json!({"actions": [
            {"id": "a", "type": "tool_call", "tool": "t", "parameters": {"x": 1}, "timeout_ms": 50, "failure_behavior": "retry", "max_retries": 2},
            {"id": "b", "type": "state_write", "key": "k", "value": [1], "dependencies": ["a"]},
            {"id": "c", "type": "state_delete", "key": "k"},
            {"id": "d", "type": "launch_rocket"},
            {"id": "e", "type": "tool_call"},
            {"id": "f", "type": "tool_call", "tool": "t", "paramters": {}},
            {"id": "g", "type": "state_write", "key": "k", "value": 1, "max_retries": 1},
            7
        ]}))
        .unwrap();
        let a = p.actions[0].as_ref().unwrap();
        assert_eq!((a.max_attempts(), a.timeout_ms), (3, Some(50)));
        assert!(p.actions[1].is_ok() && p.actions[2].is_ok());
        let msg = |i: usize| p.actions[i].as_ref().unwrap_err().error.message.clone();
        assert!(
            msg(3).contains("proposal.actions[3].type must be tool_call"),
            "{}",
            msg(3)
        );
        assert!(
            msg(4).contains("proposal.actions[4].tool is required"),
            "{}",
            msg(4)
        );
        // Unknown fields are ignored (a misspelt optional field is simply absent).
        assert!(p.actions[5].is_ok());
        // max_retries without retry is accepted and does nothing.
        assert_eq!(p.actions[6].as_ref().unwrap().max_attempts(), 1);
        assert!(
            msg(7).contains("proposal.actions[7] must be an object"),
            "{}",
            msg(7)
        );
        assert_eq!(
            p.actions[3].as_ref().unwrap_err().action_id.as_deref(),
            Some("d")
        );
        assert!(parse(&json!({"actions": [{"id": "x"}]}))
            .unwrap()
            .strict()
            .is_err());
    }

    #[test]
    fn outer_shape_errors() {
        assert!(parse(&json!([]))
            .unwrap_err()
            .message
            .contains("proposal must be an object"));
        assert!(parse(&json!({}))
            .unwrap_err()
            .message
            .contains("proposal.actions is required"));
        assert!(parse(&json!({"actions": {}}))
            .unwrap_err()
            .message
            .contains("must be an array"));
        let many: Vec<Value> = (0..MAX_ACTIONS + 1)
            .map(|i| json!({"id": i.to_string(), "type": "state_delete", "key": "k"}))
            .collect();
        assert!(parse(&json!({"actions": many}))
            .unwrap_err()
            .message
            .contains("at most 1000"));
    }
}
