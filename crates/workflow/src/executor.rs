//! The daemon's side of a run: the two step kinds the engine cannot interpret itself.

use car_proto::methods::multi::{AgentOutput, AgentSpec};
use serde_json::Value;

pub use futures_util::future::BoxFuture;

use crate::model::{Object, PatternKind};

/// Runs multi-agent patterns and action proposals for the engine. Implemented by the
/// daemon (mapping pattern kinds onto its multi engine and proposals onto its proposal
/// engine) and by test fakes.
pub trait StepExecutor: Send + Sync {
    /// Run a multi-agent pattern. `task` already carries the workflow goal when there is
    /// one (`Overall goal: …\nCurrent step: …`).
    fn run_pattern<'a>(
        &'a self,
        kind: PatternKind,
        task: &'a str,
        agents: &'a [AgentSpec],
        config: &'a Object,
    ) -> BoxFuture<'a, Result<PatternOutcome, String>>;

    /// Run an action proposal against the current state; returns the execution result and
    /// the state keys it wrote.
    fn run_proposal<'a>(
        &'a self,
        proposal: &'a Value,
        state: &'a Object,
    ) -> BoxFuture<'a, Result<ProposalOutcome, String>>;
}

/// What a pattern produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatternOutcome {
    pub outputs: Vec<AgentOutput>,
    pub final_answer: String,
    /// Extra keys (e.g. `review_passed`), stored as `stage.<id>.<key>`.
    pub state: Object,
    pub succeeded: bool,
}

/// What a proposal did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProposalOutcome {
    pub result: Value,
    /// State keys the proposal wrote, merged into the run state as they are.
    pub state_writes: Object,
    pub succeeded: bool,
    pub error: Option<String>,
}
