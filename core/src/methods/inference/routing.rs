//! The routing vocabulary: CAR's `IntentHint`, the route decision `models.route` answers
//! (and `infer` follows when no model is named), and `models.stats`' live profiles.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::methods::fields::null_default;

/// CAR's `IntentHint`: task semantics instead of a model id.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct IntentHint {
    /// `chat`, `classify`, `summarize`, `reasoning`, `code` or `extract`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_local: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_fast: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefer_quality: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub high_stakes: Option<bool>,
    /// Capabilities a model must declare (a hard filter).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub require: Vec<String>,
    /// Models (id or name) to avoid; dropped when nothing else is left.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub exclude_models: Vec<String>,
}

/// One model the router scored.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RouteCandidate {
    pub model_id: String,
    /// The outcome-derived band key: the Beta(successes + 1, failures + 1) posterior mean.
    pub reliability: f64,
    /// Reliability plus the cost, latency, locality and context tie-breakers.
    pub score: f64,
    pub selected: bool,
    pub in_band: bool,
}

/// CAR's route decision.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct RouteDecision {
    pub model_id: String,
    pub model_name: String,
    pub task: String,
    /// `simple`, `moderate` or `complex` (by the prompt's size).
    pub complexity: String,
    pub reason: String,
    /// `outcome_first`.
    pub strategy: String,
    pub predicted_quality: f64,
    /// The retry chain, best first.
    pub fallbacks: Vec<String>,
    #[serde(default)]
    pub context_length: Option<u64>,
    pub needs_compaction: bool,
    pub candidates: Vec<RouteCandidate>,
}

/// `models.route` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RouteParams {
    pub prompt: String,
    #[serde(default)]
    pub intent: Option<IntentHint>,
}

/// CAR's `ModelStat` (since the daemon started).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ModelStat {
    pub model_id: String,
    pub total_calls: u64,
    pub success_count: u64,
    pub fail_count: u64,
    /// `null` until an outcome is known (never a fabricated prior).
    pub success_rate: Option<f64>,
    pub avg_latency_ms: f64,
    pub ema_quality: Option<f64>,
}

/// `models.stats` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StatsReply {
    pub profiles: Vec<ModelStat>,
}
