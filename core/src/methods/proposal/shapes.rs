//! The proposal's shapes: CAR's `ActionProposal` and `Action`, and the results of `verify`
//! and `proposal.submit`.
//!
//! An action is `{id, type, dependencies?, timeout_ms?, failure_behavior?, max_retries?,
//! expected_effects?}` plus, by type: `tool_call` → `tool`, `parameters?` (object);
//! `state_write` → `key`, `value`; `state_delete` → `key`. It is one flat object, as CAR's
//! is; the fields a type needs are checked by [`Action::check`]. `failure_behavior` is
//! `abort` (default), `skip` or `retry`; `max_retries` (default 3, at most 100) counts
//! retries after the first try and matters only under `retry`. `expected_effects` names the
//! state keys an action sets when it succeeds. Unknown fields are ignored and `null` is an
//! absent field, except `value`, where `null` is the value written.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use super::Object;
use crate::errors::RpcError;
use crate::methods::decode_at;
use crate::methods::fields::{null_default, Json, Name};

/// Most actions one proposal may hold; a larger one is refused as a whole.
pub const MAX_ACTIONS: usize = 1000;
/// Longest per-action budget (24 h).
pub const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Most retries an action may ask for.
pub const MAX_RETRIES: u32 = 100;
/// Retries allowed when `max_retries` is not given.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// CAR's `ActionProposal`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Proposal {
    /// Chosen by the daemon (`prop-<pid>-<n>`) when absent.
    #[serde(default)]
    pub id: Option<Name>,
    /// At most [`MAX_ACTIONS`].
    pub actions: Vec<Action>,
    /// Who proposed it (recorded, not interpreted).
    #[serde(default)]
    pub source: Option<String>,
    /// Free-form context (recorded, not interpreted).
    #[serde(default)]
    pub context: Option<Json>,
}

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionType {
    /// Call `tool` with `parameters` (on the submitting connection, or a built-in tool).
    ToolCall,
    /// Set state `key` to `value`.
    StateWrite,
    /// Delete state `key`.
    StateDelete,
}

/// What happens to the rest of the proposal when an action fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureBehavior {
    /// Stop: later levels are skipped.
    #[default]
    Abort,
    /// Go on as if it had not run.
    Skip,
    /// Try again, up to `max_retries` more times, then stop.
    Retry,
}

/// CAR's `Action`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Action {
    pub id: Name,
    #[serde(rename = "type")]
    pub action_type: ActionType,
    /// The tool of a `tool_call`.
    #[serde(default)]
    pub tool: Option<Name>,
    /// The arguments of a `tool_call`.
    #[serde(default, deserialize_with = "null_default")]
    pub parameters: Object,
    /// The state key of a `state_write` or `state_delete`.
    #[serde(default)]
    pub key: Option<Name>,
    /// The value a `state_write` sets (`null` is a value; absent is an error).
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Json")]
    pub value: Option<Json>,
    /// Ids of actions that must succeed first.
    #[serde(default, deserialize_with = "null_default")]
    pub dependencies: Vec<Name>,
    /// Per-action budget in milliseconds, 1 to [`MAX_TIMEOUT_MS`].
    #[serde(default, deserialize_with = "timeout_ms")]
    #[schemars(range(min = 1, max = 86_400_000))]
    pub timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "null_default")]
    pub failure_behavior: FailureBehavior,
    /// 0 to [`MAX_RETRIES`]; default [`DEFAULT_MAX_RETRIES`].
    #[serde(default, deserialize_with = "max_retries")]
    #[schemars(range(max = 100))]
    pub max_retries: Option<u32>,
    /// State keys (and values) the action sets when it succeeds.
    #[serde(default, deserialize_with = "null_default")]
    pub expected_effects: Object,
}

/// A field that is present, `null` included.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Json>, D::Error> {
    Json::deserialize(d).map(Some)
}

fn bounded<'de, D: Deserializer<'de>>(d: D, min: u64, max: u64) -> Result<Option<u64>, D::Error> {
    match Option::<Json>::deserialize(d)? {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(serde::de::Error::custom(format!(
                "must be an integer from {min} to {max}, got {v}"
            ))),
        },
    }
}

fn timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    bounded(d, 1, MAX_TIMEOUT_MS)
}

fn max_retries<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    Ok(bounded(d, 0, u64::from(MAX_RETRIES))?.map(|n| n as u32))
}

impl Action {
    /// Checks the fields its type needs (`at` names the action in messages).
    pub fn check(&self, at: &str) -> Result<(), RpcError> {
        let needs = |field: &str| {
            RpcError::invalid_params(format!(
                "{at}.{field}: required for a {} action",
                serde_json::to_value(self.action_type)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default()
            ))
        };
        match self.action_type {
            ActionType::ToolCall if self.tool.is_none() => Err(needs("tool")),
            ActionType::StateWrite if self.key.is_none() => Err(needs("key")),
            ActionType::StateWrite if self.value.is_none() => Err(needs("value")),
            ActionType::StateDelete if self.key.is_none() => Err(needs("key")),
            _ => Ok(()),
        }
    }

    /// How many times the executor may try this action.
    pub fn max_attempts(&self) -> u32 {
        match self.failure_behavior {
            FailureBehavior::Retry => self.max_retries.unwrap_or(DEFAULT_MAX_RETRIES) + 1,
            _ => 1,
        }
    }
}

/// One action as [`decode_proposal`] read it: the action, or its id (when readable) and
/// what is wrong.
pub type DecodedAction = Result<Action, (Option<String>, RpcError)>;

/// Decodes a proposal (`at` names it in messages, e.g. `proposal`). Its outer shape is
/// decoded as a whole (errors are the `Err`); each action is decoded and checked on its
/// own.
pub fn decode_proposal(
    proposal: &Object,
    at: &str,
) -> Result<(Option<String>, Vec<DecodedAction>), RpcError> {
    /// The outer shape, the actions left undecoded.
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        id: Option<Name>,
        actions: Vec<Json>,
        /// Checked (a string), then unused.
        #[serde(default, rename = "source")]
        _source: Option<String>,
    }
    if let Some(n) = proposal
        .get("actions")
        .and_then(Json::as_array)
        .map(Vec::len)
        .filter(|&n| n > MAX_ACTIONS)
    {
        return Err(RpcError::invalid_params(format!(
            "{at}.actions: has {n} actions, at most {MAX_ACTIONS}"
        )));
    }
    let outer: Outer = decode_at(Json::Object(proposal.clone()), at)?;
    let actions = outer
        .actions
        .into_iter()
        .enumerate()
        .map(|(i, raw)| decode_action(raw, &format!("{at}.actions[{i}]")))
        .collect();
    Ok((outer.id.map(Name::into_string), actions))
}

/// Decodes and checks one action given on its own (`at` names it).
pub fn decode_action(raw: Json, at: &str) -> DecodedAction {
    let id = raw.get("id").and_then(Json::as_str).map(str::to_string);
    decode_at::<Action>(raw, at)
        .and_then(|a| a.check(at).map(|()| a))
        .map_err(|e| (id, e))
}

/// How bad a [`VerifyIssue`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// What a [`VerifyIssue`] is about. `proposal.submit` refuses structural errors up front
/// but runs a proposal with policy violations, rejecting those actions when they come up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Structure,
    /// A call of an unregistered tool, or parameters its schema refuses.
    Tool,
    Policy,
    Conflict,
}

/// CAR's `VerifyIssue` (with our `category`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct VerifyIssue {
    pub action_id: Option<String>,
    pub severity: Severity,
    pub category: Category,
    pub message: String,
    /// CAR's evidence tier: `decision_procedure`, `heuristic` or `sampled`.
    pub tier: String,
}

/// Two actions of one level that write one key: CAR's `[action1, action2, key]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct Conflict(pub String, pub String, pub String);

/// One check `verify` ran (CAR's `CheckRecord`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct CheckRecord {
    pub name: String,
    pub ran: bool,
    /// What a pass establishes.
    pub verifies: Vec<String>,
    /// What it does not establish, even on a pass.
    pub cannot_verify: Vec<String>,
    pub findings: u64,
    pub tier: String,
}

/// CAR's `VerificationEvidence`: the verifier's declared scope.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Evidence {
    /// The share of the checks that ran (coverage, not a probability of success).
    pub confidence: f64,
    pub checks: Vec<CheckRecord>,
    pub assumptions: Vec<String>,
    pub untested_regions: Vec<String>,
    pub residual_risks: Vec<String>,
}

/// `verify` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct VerifyReport {
    pub valid: bool,
    pub issues: Vec<VerifyIssue>,
    /// The dependency levels, action ids level by level.
    pub execution_levels: Vec<Vec<String>>,
    pub conflicts: Vec<Conflict>,
    /// The state after every level's writes and expected effects.
    pub simulated_state: BTreeMap<String, Json>,
    pub evidence: Evidence,
}

/// How an action ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActionStatus {
    Succeeded,
    Failed,
    Rejected,
    /// Not run: `failure_behavior: skip` of a dependency, or an earlier failure stopped the
    /// proposal (the reason is in `error`).
    Skipped,
}

/// CAR's `ActionResult`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ActionResult {
    pub action_id: String,
    pub status: ActionStatus,
    /// The tool's answer (`null` for state actions and failures).
    pub output: Json,
    pub error: Option<String>,
    /// The state keys this action set (their new values) or deleted (`null`).
    pub state_changes: Object,
    pub duration_ms: u64,
    /// When the action ended (RFC 3339, UTC).
    pub timestamp: String,
    pub attempts: u32,
    pub terminal: bool,
    pub rolled_back: bool,
}

impl ActionResult {
    /// A result for `action_id` that ended now, with nothing run yet.
    pub fn new(action_id: &str, status: ActionStatus, error: Option<String>) -> Self {
        ActionResult {
            action_id: action_id.to_string(),
            status,
            output: Json::Null,
            error,
            state_changes: Object::new(),
            duration_ms: 0,
            timestamp: crate::clock::now_rfc3339(),
            attempts: 0,
            terminal: false,
            rolled_back: false,
        }
    }
}

/// CAR's `CostSummary` of one proposal run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct ProposalCost {
    /// Tool dispatches, retries included.
    pub tool_calls: u32,
    pub actions_executed: u32,
    pub actions_rejected: u32,
    pub actions_skipped: u32,
    pub total_duration_ms: u64,
    pub retries: u32,
}

/// `proposal.submit` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ProposalResult {
    pub proposal_id: String,
    /// One per action, in the proposal's order.
    pub results: Vec<ActionResult>,
    /// Each succeeded tool call's output, by action id.
    pub outputs: Object,
    /// The connection's state after the run.
    pub final_state: BTreeMap<String, Json>,
    /// `<action id>: <error>` for each action with an error.
    pub errors: Vec<String>,
    pub cost: ProposalCost,
    /// The gate's decision, when an admission gate refused the proposal (`{gate, reason,
    /// …}`: the gate's own fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Json>,
    /// How many replanned runs preceded this one (`replan.set_config`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replans: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
