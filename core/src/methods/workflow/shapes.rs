//! The results of `workflow.run`, `workflow.chain` and `workflow.resume`, CAR's shapes;
//! `car-workflow` runs the workflows and builds them.
//!
//! A paused run's [`Checkpoint`] carries the workflow as the manifest object it was run
//! from (the workflow model itself is `car-workflow`'s, and a manifest is what callers
//! send and read back).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::super::proposal::Object;
use crate::methods::fields::Json;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Completed,
    /// At an approval gate; `paused` holds the checkpoint.
    Paused,
    Failed,
    /// A stage failed and the compensations ran.
    Compensated,
}

/// How a stage (or a compensation) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    Succeeded,
    Failed,
    Skipped,
}

/// One stage's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageResult {
    pub stage_id: String,
    pub stage_name: String,
    pub status: StageStatus,
    /// The step's output (its kind's own shape).
    pub output: Json,
    pub duration_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One compensation's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompensationResult {
    pub stage_id: String,
    pub status: StageStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Json>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn default_field_type() -> String {
    "text".into()
}

/// One field an approval gate asks for (CAR's `ApprovalField`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalField {
    pub name: String,
    #[serde(default)]
    pub label: String,
    /// Default `text`.
    #[serde(default = "default_field_type")]
    pub field_type: String,
    /// The allowed answers, when restricted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
    #[serde(default)]
    pub required: bool,
}

/// A paused run: everything needed to continue it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Checkpoint {
    pub run_id: String,
    /// The workflow manifest.
    pub workflow: Object,
    pub paused_stage_id: String,
    pub prompt: String,
    pub fields: Vec<ApprovalField>,
    pub output_key: String,
    pub wf_state: Object,
    /// Stages finished before the gate; the gate's own result is added on resume.
    pub stage_results: Vec<StageResult>,
    /// RFC 3339.
    pub created_at: String,
    /// Stage executions so far, counted against `max_iterations` after resume.
    pub iterations: u32,
}

/// `workflow.run` / `workflow.resume` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowResult {
    pub workflow_id: String,
    pub workflow_name: String,
    pub status: RunStatus,
    pub stages: Vec<StageResult>,
    pub compensations: Vec<CompensationResult>,
    pub duration_ms: f64,
    /// RFC 3339, when the run (or this resumed leg of it) ended.
    pub timestamp: String,
    pub final_state: Object,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Checkpoint>,
    /// Why a run failed without a failed stage (the cycle limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `workflow.chain` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChainResult {
    /// Every workflow that ran, in order.
    pub results: Vec<WorkflowResult>,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at_index: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at_index: Option<usize>,
}
