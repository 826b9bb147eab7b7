//! `runs.*`: durable agent-run records and their traces.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name};
use super::member::{json, member, whole};
use super::{agent, owner, Declaration};
use crate::capabilities;

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

/// CAR's `AgentOutcome`, or (for older callers) a bare status string.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Outcome {
    Status(String),
    Outcome(AgentOutcome),
}

/// CAR's `AgentOutcome` statuses: what `runs.complete` accepts as `outcome.status`.
/// `cancelled` is recorded by the daemon for a cancelled run; an agent loop ends with one
/// of the others ([`AGENT_STATUSES`]).
pub const OUTCOME_STATUSES: &[&str] = &[
    "success",
    "partial_success",
    "done",
    "give_up",
    "timeout",
    "failure",
    "cancelled",
];

/// The statuses an agent's own `finish` may name (every outcome status but `cancelled`).
pub const AGENT_STATUSES: &[&str] = OUTCOME_STATUSES.split_at(OUTCOME_STATUSES.len() - 1).0;

/// CAR's `AgentOutcome`. Only `status` is required; the rest is recorded as sent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentOutcome {
    /// `success`, `partial_success`, `done`, `give_up`, `timeout`, `failure` or
    /// `cancelled`.
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

/// `runs.list` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ListParams {
    #[serde(default)]
    pub agent_id: Option<Name>,
    /// `in_progress` (or `running`), `completed`, `incomplete` or `cancelled`.
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

/// A run record (CAR's run): what `runs.start`, `runs.complete`, `runs.list` and
/// `runs.get_trace` report. Absent values are `null`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RunRecord {
    pub run_id: String,
    pub intent: String,
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub idempotency_key: Option<String>,
    /// `running`, `completed`, `incomplete` or `cancelled`.
    pub status: String,
    pub outcome: Option<String>,
    pub summary: Option<String>,
    pub started_ms: i64,
    pub completed_ms: Option<i64>,
}

/// `runs.start` result: the run, and whether this call created it (an idempotency key
/// names an existing run of the same owner: `created: false`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct StartReply {
    #[serde(flatten)]
    pub run: RunRecord,
    pub created: bool,
}

/// `runs.complete` result: the completed run with `ok: true`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct CompleteReply {
    #[serde(flatten)]
    pub run: RunRecord,
    pub ok: bool,
}

/// `runs.list` result: the agent listed (`null`: every agent, for a host) and its runs,
/// newest first.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    pub agent_id: Option<String>,
    pub runs: Vec<RunRecord>,
}

/// `runs.get_trace` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TraceReply {
    /// The run and its records from offset `cursor` (echoed); `next_cursor` is the offset
    /// after them. A record is CAR's `RunRecord`: its kind's fields beside `record`, `seq`
    /// and `ts_ms` (free-form by kind).
    Found {
        run_id: String,
        agent_id: Option<String>,
        run: Box<RunRecord>,
        records: Vec<Json>,
        cursor: u64,
        next_cursor: u64,
    },
    /// No run by that id is visible to this session.
    NotFound { run_id: String, not_found: bool },
}

/// `runs.subscribe` result.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum SubscribeReply {
    /// One run: its turns so far (free-form turn records), the cursor after them and its
    /// live status.
    Run {
        run_id: String,
        agent_id: Option<String>,
        cursor: u64,
        turns_so_far: Vec<Json>,
        status: String,
    },
    /// Every run this session may read.
    All { subscribed: bool },
}

/// `runs.record_model_turn` result: `{run_id, index, ok: true}`, or `{run_id, ok: false,
/// dropped}` when the turn cannot land (the caller stops sending for this run).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RecordModelTurnReply {
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
    pub ok: bool,
    /// `run_not_found`, `run_terminal`, `run_turn_limit`, `run_bytes_limit` or
    /// `turn_too_large`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

/// `runs.record_turns` result: `{run_id, base_index, count, ok: true}`, or a drop with
/// `base_index: 0, count: 0, ok: false, dropped`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RecordTurnsReply {
    pub run_id: String,
    pub base_index: i64,
    pub count: u64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

crate::method!(
    /// `runs.start` → the run record (`{run_id, agent_id, owner, intent, status, created, …}`).
    Start = agent("runs.start", "start a durable run record, idempotent by key");
    access: Access::owned(Resource::Runs);
    StartParams => StartReply;
    member("runs_start", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.complete` → the completed run record with `ok: true`.
    Complete = owner("runs.complete", "complete a run with its outcome");
    access: Access::owned(Resource::Runs);
    CompleteParams => CompleteReply;
    member("runs_complete", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.list` → runs newest first.
    List = owner("runs.list", "runs visible to this session, newest first");
    access: Access::owned(Resource::Runs).observer();
    ListParams => ListReply
);
crate::method!(
    /// `runs.get_trace` → `{run_id, agent_id, run, records, cursor, next_cursor}`: the
    /// records in order, `started … ended`, from `cursor` (echoed).
    GetTrace = owner("runs.get_trace", "a run and its trace records");
    access: Access::owned(Resource::Runs).observer();
    TraceParams => TraceReply
);
crate::method!(
    /// `runs.subscribe {run_id}` → the snapshot `{run_id, agent_id, turns_so_far, cursor,
    /// status}`, then a `runs.trace.event` per record appended after it; without `run_id`
    /// → `{subscribed: true}` and the events of every run the session may read.
    Subscribe = owner("runs.subscribe", "receive runs.trace.event notifications");
    access: Access::owned(Resource::Runs).observer();
    SubscribeParams => SubscribeReply
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

/// `runs.unsubscribe` result: CAR's `{run_id, removed}` (`run_id` is null for the
/// all-runs subscription).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct UnsubscribeReply {
    pub run_id: Option<String>,
    /// Whether a subscription was removed.
    pub removed: bool,
}

/// The `runs.trace.event` notification's params (CAR's shape): one record the daemon
/// appended to a run's trace.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TraceEvent {
    pub run_id: String,
    pub agent_id: Option<String>,
    /// The trace record: `{record: "started" | "model_turn" | "turn" |
    /// "cancellation_requested" | "ended", seq, ts_ms, …}`.
    pub record: Json,
    /// The run's turn count after this record (a turn's is its index + 1).
    pub cursor: u64,
    /// `in_progress`, `completed`, `incomplete` or `cancelled`, after this record.
    pub status: String,
}

/// Longest `runs.cancel` idempotency key (bytes).
pub const MAX_CANCEL_KEY_BYTES: usize = 128;
/// Longest `runs.cancel` reason (bytes).
pub const MAX_CANCEL_REASON_BYTES: usize = 1024;

/// `runs.cancel` params (CAR's): every field required and non-empty.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CancelParams {
    pub run_id: Name,
    /// A retry with the same key, reason and caller answers the same receipt. At most 128
    /// bytes.
    #[schemars(length(min = 1, max = 128))]
    pub idempotency_key: String,
    /// Why the run is cancelled; only its SHA-256 is kept. At most 1024 bytes.
    #[schemars(length(min = 1, max = 1024))]
    pub reason: String,
}

/// What a `runs.cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelStatus {
    /// The daemon stopped the run's work and committed its cancelled terminal.
    CancelledConfirmed,
    /// The run had already ended (completed, incomplete or cancelled); nothing was appended.
    AlreadyTerminal,
    /// The stop could not be confirmed. This daemon never answers it (see
    /// docs/protocol-choices.md, "Run lifecycle").
    TerminationUnconfirmed,
}

/// `runs.cancel` result: CAR's body-free receipt.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct CancelReceipt {
    pub receipt_version: u64,
    pub run_id: String,
    pub idempotency_key: String,
    /// Lower-case hex SHA-256 of the reason's UTF-8 bytes.
    pub reason_digest: String,
    /// Who cancelled: `host` or `agent:<agent_id>`.
    pub principal: String,
    pub status: CancelStatus,
    /// Lower-case hex SHA-256 of the canonical JSON of the run's `ended` record; null when
    /// the stop is unconfirmed.
    pub terminal_digest: Option<String>,
    /// The tool callback that was running when the run was cancelled (it was sent
    /// `tools.cancel`), else null.
    pub action_id: Option<String>,
    pub request_id: Option<String>,
    /// Lower-case hex SHA-256 of the canonical JSON (RFC 8785) of every field above.
    pub receipt_digest: String,
}

/// `runs.resume` params (CAR's): the run to take over.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResumeParams {
    pub run_id: Name,
}

/// `runs.resume` result (CAR's).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResumeReply {
    pub run_id: String,
    pub agent_id: String,
    /// This connection, now the run's one live producer.
    pub client_id: String,
    /// The connection that produced the run before it dropped.
    pub resumed_from_client_id: String,
}

crate::method!(
    /// `runs.record_model_turn` → `{run_id, index, ok: true}`, or `{run_id, ok: false,
    /// dropped}` (`run_not_found`, `run_terminal`, `run_turn_limit`, `run_bytes_limit`,
    /// `turn_too_large`).
    RecordModelTurn = agent("runs.record_model_turn", "append a model turn to a run's trace");
    access: Access::owned(Resource::Runs);
    RecordModelTurnParams => RecordModelTurnReply;
    member("runs_record_model_turn", &[whole("params_json")], json())
);
crate::method!(
    /// `runs.record_turns` → `{run_id, base_index, count, ok: true}`, or `{run_id,
    /// base_index: 0, count: 0, ok: false, dropped}`.
    RecordTurns = agent("runs.record_turns", "append client-narrated turns to a run's trace");
    access: Access::owned(Resource::Runs);
    RecordTurnsParams => RecordTurnsReply
);
crate::method!(
    /// `runs.cancel` → CAR's receipt; the run's work is stopped and its trace ends
    /// `cancelled`.
    Cancel = owner("runs.cancel", "cancel a running run: stop its work and end it cancelled")
        .capability(capabilities::RUNS_CANCEL_V1);
    access: Access::owned(Resource::Runs);
    CancelParams => CancelReceipt
);
crate::method!(
    /// `runs.resume` → `{run_id, agent_id, client_id, resumed_from_client_id}`: this
    /// connection takes over a run whose producer connection dropped.
    Resume = agent("runs.resume", "take over a run whose producer connection dropped")
        .capability(capabilities::RUNS_RESUME_V1);
    access: Access::owned(Resource::Runs);
    ResumeParams => ResumeReply
);
crate::method!(
    /// `runs.unsubscribe` → `{run_id, removed}`.
    Unsubscribe = super::op("runs.unsubscribe", "stop runs.trace.event notifications");
    access: Access::owned(Resource::Runs).observer();
    UnsubscribeParams => UnsubscribeReply
);

/// `runs.delete` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeleteParams {
    pub run_id: Name,
}

/// `runs.delete` result: `deleted` is false for an unknown run or one this session may not
/// delete (the two are not told apart).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DeleteReply {
    pub run_id: String,
    pub deleted: bool,
}

crate::method!(
    /// `runs.delete {run_id}` → `{run_id, deleted}` (ours: CAR keeps runs forever). The
    /// identity that started the run, or a host, deletes an ended run with its trace; a
    /// running run is refused (`-32602`, `data.reason: "run_running"`).
    Delete = owner("runs.delete", "delete an ended run and its trace");
    access: Access::owned(Resource::Runs);
    DeleteParams => DeleteReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Delete>(),
    Declaration::of::<RecordModelTurn>(),
    Declaration::of::<RecordTurns>(),
    Declaration::of::<Unsubscribe>(),
    Declaration::of::<Start>(),
    Declaration::of::<Complete>(),
    Declaration::of::<List>(),
    Declaration::of::<GetTrace>(),
    Declaration::of::<Subscribe>(),
    Declaration::of::<Cancel>(),
    Declaration::of::<Resume>(),
];
