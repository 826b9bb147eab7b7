//! `runs.*`: durable agent-run records and their traces.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name};
use super::member::{json, member, whole};
use super::{agent, owner, Declaration};

/// `runs.start` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StartParams {
    /// What the agent was asked to do.
    pub intent: String,
    #[serde(default)]
    pub agent_id: Option<Name>,
    #[serde(default)]
    pub agent_name: Option<Name>,
    /// The outcome the agent steers toward.
    #[serde(default)]
    pub outcome_description: Option<String>,
    /// A caller-chosen run id: starting it again returns the existing run.
    #[serde(default)]
    pub idempotency_key: Option<Name>,
}

/// `runs.start` result: CAR's fields (the daemon answers the whole run record, which has
/// them).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StartReply {
    pub run_id: String,
    pub agent_id: String,
}

/// CAR's `AgentOutcome`, or (for older callers) a bare status string.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Outcome {
    Status(String),
    Outcome(AgentOutcome),
}

/// CAR's `AgentOutcome`. Only `status` is required; the rest is recorded as sent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentOutcome {
    /// `success`, `partial_success`, `done`, `give_up`, `timeout` or `failure`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<Json>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_called: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `runs.complete` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CompleteParams {
    pub run_id: Name,
    pub outcome: Outcome,
    /// A summary for callers that send a bare status string.
    #[serde(default)]
    pub summary: Option<String>,
}

/// `runs.complete` result: CAR's fields (the daemon answers the completed run record with
/// `ok: true`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CompleteReply {
    pub run_id: String,
    pub ok: bool,
}

/// `runs.list` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ListParams {
    #[serde(default)]
    pub agent_id: Option<Name>,
    /// `in_progress`, `completed` or `incomplete`.
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `runs.get_trace` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TraceParams {
    pub run_id: Name,
    /// The first record to return (default 0).
    #[serde(default)]
    pub cursor: Option<u64>,
}

/// `runs.subscribe` params: one run, or every run this session may see.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SubscribeParams {
    #[serde(default)]
    pub run_id: Option<Name>,
}

crate::method!(
    /// `runs.start` → the run record (`{run_id, agent_id, owner, intent, status, created, …}`).
    Start = agent("runs.start", "start a durable run record, idempotent by key");
    StartParams => Json;
    member("runs_start", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.complete` → the completed run record with `ok: true`.
    Complete = owner("runs.complete", "complete a run with its outcome");
    CompleteParams => Json;
    member("runs_complete", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.list` → runs newest first.
    List = owner("runs.list", "runs visible to this session, newest first");
    ListParams => Json
);
crate::method!(
    /// `runs.get_trace` → the run and its records in order.
    GetTrace = owner("runs.get_trace", "a run and its trace records");
    TraceParams => Json
);
crate::method!(
    /// `runs.subscribe` → the snapshot; then `runs.trace.event` notifications.
    Subscribe = owner("runs.subscribe", "receive runs.trace.event notifications");
    SubscribeParams => Json
);

/// `runs.record_model_turn` params: one model turn of a run (what CAR's agent loop sends).
/// `turn_index` is accepted and ignored: the daemon stamps the index.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RecordModelTurnParams {
    pub run_id: Name,
    #[serde(default)]
    pub turn_index: Option<Json>,
    #[serde(default)]
    pub model_id: Option<String>,
    #[serde(default)]
    pub assistant_text: Option<String>,
    /// `[{id, name, arguments}]`.
    #[serde(default)]
    pub requested_tool_calls: Option<Vec<Json>>,
    #[serde(default)]
    pub token_usage: Option<Json>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// `runs.record_turns` params: CAR's `RunTurn`s (`{index?, prompt?, tool?, parameters?,
/// output?, cli_outcome?, verifier_verdict?, policy_rejected?}`), passed through.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RecordTurnsParams {
    pub run_id: Name,
    pub turns: Vec<serde_json::Map<String, Json>>,
}

/// `runs.unsubscribe` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct UnsubscribeParams {
    #[serde(default)]
    pub run_id: Option<Name>,
}

/// `runs.unsubscribe` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnsubscribeReply {
    /// Whether a subscription was removed.
    pub removed: bool,
}

crate::method!(
    /// `runs.record_model_turn` → `{run_id, index, ok: true}`, or `{run_id, ok: false,
    /// dropped}` (`run_not_found`, `run_terminal`, `run_turn_limit`, `turn_too_large`).
    RecordModelTurn = agent("runs.record_model_turn", "append a model turn to a run's trace");
    RecordModelTurnParams => Json;
    member("runs_record_model_turn", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.record_turns` → `{run_id, base_index, count, ok: true}`, or `{run_id,
    /// base_index: 0, count: 0, ok: false, dropped}`.
    RecordTurns = agent("runs.record_turns", "append client-narrated turns to a run's trace");
    RecordTurnsParams => Json
);
crate::method!(
    /// `runs.unsubscribe` → `{removed}`.
    Unsubscribe = super::op("runs.unsubscribe", "stop runs.trace.event notifications");
    UnsubscribeParams => UnsubscribeReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<RecordModelTurn>(),
    Declaration::of::<RecordTurns>(),
    Declaration::of::<Unsubscribe>(),
    Declaration::of::<Start>(),
    Declaration::of::<Complete>(),
    Declaration::of::<List>(),
    Declaration::of::<GetTrace>(),
    Declaration::of::<Subscribe>(),
];
