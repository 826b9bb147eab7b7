//! The daemon's working form of a proposal: CAR's `ActionProposal` decoded by the contract
//! (`car_proto::methods::proposal::decode_proposal`, which names every malformed action),
//! each action turned into an [`Action`] whose [`ActionKind`] carries exactly the fields
//! its type needs. The shape and its rules are documented on the contract's types.

use car_proto::errors::RpcError;
use car_proto::methods::proposal::{self as wire, ActionType, Object};
use serde_json::{json, Map, Value};

pub use car_proto::methods::proposal::{FailureBehavior, MAX_ACTIONS};

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

/// An action entry that could not be decoded: its id (when readable) and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub index: usize,
    pub action_id: Option<String>,
    pub error: RpcError,
}

/// A decoded proposal; `actions[i]` is `Err` for a malformed entry.
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

impl From<wire::Action> for Action {
    /// The working form of an action that passed `wire::Action::check`.
    fn from(a: wire::Action) -> Action {
        let name = |n: Option<car_proto::methods::fields::Name>| {
            n.map(|n| n.into_string()).unwrap_or_default()
        };
        let kind = match a.action_type {
            ActionType::ToolCall => ActionKind::ToolCall {
                tool: name(a.tool),
                parameters: a.parameters,
            },
            ActionType::StateWrite => ActionKind::StateWrite {
                key: name(a.key),
                value: a.value.unwrap_or(Value::Null),
            },
            ActionType::StateDelete => ActionKind::StateDelete { key: name(a.key) },
        };
        Action {
            id: a.id.into_string(),
            kind,
            dependencies: a
                .dependencies
                .into_iter()
                .map(|d| d.into_string())
                .collect(),
            timeout_ms: a.timeout_ms,
            failure_behavior: a.failure_behavior,
            max_retries: a.max_retries.unwrap_or(wire::DEFAULT_MAX_RETRIES),
            expected_effects: a.expected_effects,
        }
    }
}

/// Decodes the proposal's outer shape (errors are `-32602`) and each action (errors are
/// kept per action).
pub fn parse(value: &Value) -> Result<Proposal, RpcError> {
    let Value::Object(map) = value else {
        return Err(RpcError::invalid_params(format!(
            "proposal: must be an object, got {}",
            car_proto::jsonrpc::json_type_name(value)
        )));
    };
    let (id, actions) = wire::decode_proposal(map, "proposal")?;
    Ok(Proposal {
        id,
        actions: actions
            .into_iter()
            .enumerate()
            .map(|(index, a)| {
                a.map(Action::from).map_err(|(action_id, error)| Malformed {
                    index,
                    action_id,
                    error,
                })
            })
            .collect(),
    })
}

/// Decodes one action given on its own (`permission.approve {action}`); errors name `what`.
pub fn parse_single(value: &Value, what: &str) -> Result<Action, RpcError> {
    wire::decode_action(value.clone(), what)
        .map(Action::from)
        .map_err(|(_, e)| e)
}

/// A proposal whose actions all decode; the first malformed action is `-32602` naming its
/// path (every one is listed in `error.data.issues`).
pub fn parse_whole(proposal: Object) -> Result<Proposal, RpcError> {
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
            msg(3).contains("proposal.actions[3].type: unknown variant `launch_rocket`"),
            "{}",
            msg(3)
        );
        assert!(
            msg(4).contains("proposal.actions[4].tool: required for a tool_call action"),
            "{}",
            msg(4)
        );
        // Unknown fields are ignored (a misspelt optional field is simply absent).
        assert!(p.actions[5].is_ok());
        // max_retries without retry is accepted and does nothing.
        assert_eq!(p.actions[6].as_ref().unwrap().max_attempts(), 1);
        assert!(
            msg(7).contains("proposal.actions[7]: invalid type: integer `7`"),
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
            .contains("proposal: must be an object"));
        assert!(parse(&json!({}))
            .unwrap_err()
            .message
            .contains("proposal: missing field `actions`"));
        assert!(parse(&json!({"actions": {}}))
            .unwrap_err()
            .message
            .contains("proposal.actions: invalid type: map, expected a sequence"));
        let many: Vec<Value> = (0..MAX_ACTIONS + 1)
            .map(|i| json!({"id": i.to_string(), "type": "state_delete", "key": "k"}))
            .collect();
        assert!(parse(&json!({"actions": many}))
            .unwrap_err()
            .message
            .contains("at most 1000"));
    }
}
