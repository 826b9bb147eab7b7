//! `workflow.*`: declarative multi-stage workflows with conditional edges, approval gates
//! that pause durably, and saga compensation (reference `workflow` section).
//!
//! The manifest is CAR's `Workflow` (`{id, name, start, stages: [{id, name, step: {type,
//! …}}], edges: [{from, to, conditions?}], max_iterations?, goal?}`), decoded by the
//! daemon's workflow engine, which names the field path of any defect. Pattern stages run
//! agents through the caller's `multi.run_agent` runner (or the daemon's own agent loop);
//! proposal stages call tools back on the calling connection. A paused run's checkpoint
//! lives in `CAR_HOME/workflow-runs/<run_id>.json` until `workflow.resume` claims it.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Name, NoParams};

mod shapes;
use super::proposal::Object;
use super::{json, module_fn, op, opt_at, req_at, ArgKind::Json as JsonArg, Declaration};
pub use shapes::*;

/// `workflow.run` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RunParams {
    pub workflow: Object,
    #[serde(default)]
    pub initial_state: Option<Object>,
    /// Who runs pattern stages' agents (see [`super::multi::RunnerChoice`]).
    #[serde(default)]
    pub runner: Option<super::multi::RunnerChoice>,
}

/// `workflow.chain` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ChainParams {
    pub workflows: Vec<Object>,
    #[serde(default)]
    pub initial_state: Option<Object>,
    /// Who runs pattern stages' agents (see [`super::multi::RunnerChoice`]).
    #[serde(default)]
    pub runner: Option<super::multi::RunnerChoice>,
}

/// `workflow.resume` params: the run by `run_id`, or (CAR's embedded `resume_workflow`)
/// by the `paused` checkpoint object a paused result carried.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResumeParams {
    #[serde(default)]
    pub run_id: Option<Name>,
    #[serde(default)]
    pub paused: Option<Object>,
    #[serde(default)]
    pub input: Option<Object>,
    #[serde(default)]
    pub runner: Option<super::multi::RunnerChoice>,
}

/// `workflow.verify` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct VerifyParams {
    pub workflow: Object,
}

/// `workflow.verify` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct VerifyReply {
    pub valid: bool,
    pub issues: Vec<String>,
    pub has_cycles: bool,
    pub reachable_stages: Vec<String>,
    pub unreachable_stages: Vec<String>,
    pub semantic: Vec<String>,
}

/// One `workflow.list_paused` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PausedRow {
    pub run_id: String,
    pub paused_stage_id: String,
    pub prompt: String,
    pub created_at: String,
}

crate::method!(
    /// `workflow.run {workflow, initial_state?}` → the workflow result
    /// (`{workflow_id, workflow_name, status, stages, compensations, final_state, paused?, …}`).
    Run = op("workflow.run", "run a declarative workflow (agents, tools and approval gates)");
    access: Access::owned(Resource::Workflows);
    RunParams => WorkflowResult;
    module_fn(
        "run_workflow",
        &[req_at("workflow_json", "workflow", JsonArg), opt_at("initial_state_json", "initial_state", JsonArg)],
        json()
    )
);
crate::method!(
    /// `workflow.chain {workflows, initial_state?}` → `{results, status, paused_at_index?, error?, failed_at_index?}`.
    Chain = op("workflow.chain", "run workflows in sequence, each seeded with the previous one's final state");
    access: Access::owned(Resource::Workflows);
    ChainParams => ChainResult;
    module_fn(
        "workflow_chain",
        &[req_at("workflows_json", "workflows", JsonArg), opt_at("initial_state_json", "initial_state", JsonArg)],
        json()
    )
);
crate::method!(
    /// `workflow.resume {run_id, input?}` → the next workflow result.
    Resume = op("workflow.resume", "resume a workflow paused at an approval gate");
    access: Access::owned(Resource::Workflows);
    ResumeParams => WorkflowResult;
    module_fn(
        "resume_workflow",
        &[req_at("paused_json", "paused", JsonArg), req_at("input_json", "input", JsonArg)],
        json()
    )
);
crate::method!(
    /// `workflow.list_paused` → `[{run_id, paused_stage_id, prompt, created_at}]`.
    ListPaused = op("workflow.list_paused", "the paused workflow runs that can be resumed");
    access: Access::owned(Resource::Workflows).observer();
    NoParams => Vec<PausedRow>
);
crate::method!(
    /// `workflow.verify {workflow}` → `{valid, issues, has_cycles, reachable_stages, unreachable_stages, semantic}`.
    Verify = op("workflow.verify", "check a workflow's structure without running it");
    access: Access::owned(Resource::Workflows);
    VerifyParams => VerifyReply;
    module_fn("verify_workflow", &[req_at("workflow_json", "workflow", JsonArg)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Run>(),
    Declaration::of::<Chain>(),
    Declaration::of::<Resume>(),
    Declaration::of::<ListPaused>(),
    Declaration::of::<Verify>(),
];
