//! `outcomes.*`: the durable outcome ledger (reference `outcomes.scoreboard`,
//! `outcomes.resolve_pending`; `docs/routing.md`).
//!
//! Every generation leaves a receipt in `$CAR_HOME/outcome_ledger.jsonl`: a failure when it
//! errored, else inconclusive until `outcomes.resolve_pending` names its `trace_id` with a
//! verdict. The scoreboard folds the ledger per model, priced at each call's own cost.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::NoParams;
use super::member::{json, member};
use super::{op, Declaration};
use crate::methods::Access;

/// One model's row.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ScoreboardRow {
    pub model_id: String,
    pub success_count: u64,
    pub fail_count: u64,
    pub inconclusive_count: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub avg_quality: Option<f64>,
    pub avg_latency_ms: f64,
    pub success_rate: Option<f64>,
    pub tokens_per_success: Option<f64>,
    /// Priced spend ÷ successes; `null` for an unpriced model or before a success.
    pub usd_per_success: Option<f64>,
    /// Always false here: each call is priced when it ends, at its own tier.
    pub usd_is_estimate: bool,
}

/// `outcomes.scoreboard` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Scoreboard {
    pub rows: Vec<ScoreboardRow>,
    pub total_successes: u64,
    pub total_failures: u64,
    pub total_inconclusive: u64,
    /// The priced spend; `null` when no call was priced.
    pub total_usd: Option<f64>,
    pub total_usd_is_estimate: bool,
    pub overall_usd_per_success: Option<f64>,
    pub model_count: u64,
    /// Receipts folded.
    pub receipts: u64,
}

/// `outcomes.resolve_pending` params: `[traceId, success, confidence, output]` tuples.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResolveParams {
    #[serde(rename = "actionResults")]
    pub action_results: Vec<(String, bool, f64, String)>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResolveReply {
    /// How many tuples were passed (CAR's count), not how many receipts they resolved.
    pub recorded: u64,
}

crate::method!(
    /// `outcomes.scoreboard` → the ledger folded per model.
    ScoreboardMethod = op("outcomes.scoreboard", "every model's outcomes, tokens and dollars per success from the durable ledger");
    access: Access::daemon().observer();
    NoParams => Scoreboard;
    member("outcome_scoreboard", &[], json())
);
crate::method!(
    /// `outcomes.resolve_pending {actionResults}` → `{recorded}`.
    ResolvePending = op("outcomes.resolve_pending", "resolve pending generations' outcomes by trace id");
    access: Access::daemon().not_for_agents();
    ResolveParams => ResolveReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<ScoreboardMethod>(),
    Declaration::of::<ResolvePending>(),
];
