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

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Start>(),
    Declaration::of::<Complete>(),
    Declaration::of::<List>(),
    Declaration::of::<GetTrace>(),
    Declaration::of::<Subscribe>(),
];
