//! `events.*`: the durable event log.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, NoParams};
use super::member::{int, json, member, whole};
use super::{op, Declaration};

/// Every event kind the daemon records in its journal (a daemon test checks its sources
/// against this list). CAR's action kinds (`action_succeeded`, …) carry `{tool,
/// params_digest, expected_effects, error_class, attempts, duration_ms}`; the dotted kinds
/// are this daemon's finer-grained records (`run.cancelled` / `run.resumed`: a run's
/// `runs.cancel` receipt and `runs.resume` takeover). No payload has a published schema yet, so
/// `server.schema` lists them all under `coverage.journal_event_payloads.uncovered`.
pub const JOURNAL_KINDS: &[&str] = &[
    "action.aborted",
    "action.failed",
    "action.rejected",
    "action.retry",
    "action.skipped",
    "action_failed",
    "action_rejected",
    "action_skipped",
    "action_succeeded",
    "inference.metered",
    "memory.intervention",
    "permission.recorded",
    "policy.allowed",
    "policy.denied",
    "proposal.completed",
    "proposal.rejected",
    "proposal.submitted",
    "replan.exhausted",
    "replan.requested",
    "replan.unavailable",
    "run.cancelled",
    "run.resumed",
    "session.halt_cleared",
    "session.halted",
    "state.deleted",
    "state.rolled_back",
    "state.written",
    "tool.answered",
    "tool.cached",
    "tool.called",
    "tool.cancelled",
    "tool.failed",
];

/// CAR's `EventQuery`; every field optional, AND-conjoined.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct EventQuery {
    #[serde(default)]
    pub kinds: Option<Vec<String>>,
    #[serde(default)]
    pub action_id: Option<String>,
    #[serde(default)]
    pub proposal_id: Option<String>,
    /// Inclusive lower bound: RFC 3339 text, or Unix milliseconds.
    #[serde(default)]
    pub since: Option<TimeBound>,
    /// Upper bound: RFC 3339 text (exclusive), or Unix milliseconds (inclusive).
    #[serde(default)]
    pub until: Option<TimeBound>,
    /// The connection that caused the event (`conn-<n>`).
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub data_matches: Option<serde_json::Map<String, Json>>,
    /// 0 or absent = unlimited.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// A time bound: RFC 3339 text (CAR's form) or Unix milliseconds.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TimeBound {
    Millis(u64),
    Rfc3339(String),
}

/// `events.query` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct QueryReply {
    pub count: usize,
    /// Most recent first.
    pub events: Vec<Json>,
}

/// One row of `events.cost_by_agent`: what one agent's generations used.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentCost {
    /// The session's agent id; `user` for a session bound to no agent.
    pub agent: String,
    /// Generations metered.
    pub calls: u64,
    /// Prompt tokens, cached and uncached.
    pub tokens_in: u64,
    pub tokens_out: u64,
    /// What the calls would cost at the provider's price; `0` for local models (this daemon
    /// knows no remote prices either, so remote calls count tokens only).
    pub cost_usd: f64,
}

crate::method!(
    /// `events.count` → number.
    Count = op("events.count", "the number of events in the durable event log");
    access: Access::owned(Resource::Events).observer();
    NoParams => u64;
    member("event_count", &[], int())
);
crate::method!(
    /// `events.query` → `{count, events}`.
    Query = op("events.query", "events newest first, filtered by kinds, ids, data and time");
    access: Access::owned(Resource::Events).observer();
    EventQuery => QueryReply;
    member("event_query", &[whole("query_json")], json())
);
/// `events.stats` result: event totals (in all and by kind) and the log's time span, over
/// the events this session may read.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct StatsReply {
    pub total: i64,
    pub by_kind: std::collections::BTreeMap<String, i64>,
    /// The oldest and newest event's `ts_ms` (`null` for an empty log).
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
}

crate::method!(
    /// `events.stats` → totals by kind and the log's time span.
    Stats = op("events.stats", "event totals by kind and the time span of the log");
    access: Access::owned(Resource::Events).observer();
    NoParams => StatsReply
);

crate::method!(
    /// `events.cost_by_agent` → per-agent token/cost rows, folded from `inference.metered`.
    CostByAgent = op("events.cost_by_agent", "tokens and cost per agent, folded from the inference.metered events");
    access: Access::owned(Resource::Events);
    NoParams => Vec<AgentCost>;
    member("event_cost_by_agent", &[], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Count>(),
    Declaration::of::<CostByAgent>(),
    Declaration::of::<Query>(),
    Declaration::of::<Stats>(),
];
