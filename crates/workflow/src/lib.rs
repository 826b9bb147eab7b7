//! `car-workflow`: the declarative workflow engine behind the daemon's `workflow.run`,
//! `workflow.chain`, `workflow.verify`, `workflow.resume` and `workflow.list_paused`
//! (CAR-compatible).
//!
//! Owns: parsing, validating and running workflows, approval checkpoints and dedup sets under
//! the directories it is given. Must not touch: models, tools or proposals directly (every step
//! runs through the daemon's `StepExecutor`).
//!
//! # Design
//!
//! * **Manifest** ([`model`]): CAR's serde shape, decoded by [`parse`] with `serde_path_to_error`
//!   so a bad manifest is rejected with the JSON path of the problem (`stages[0].step: missing
//!   field `prompt``). Unknown fields are ignored.
//! * **Verification** ([`verify()`]): static checks that never run anything: structural errors make
//!   `valid` false, unreachable stages and cycles are warnings, and `semantic` lists edge
//!   conditions on state keys no stage can produce. [`run`] and [`chain`] refuse workflows that do
//!   not verify.
//! * **Execution** ([`run`], [`resume`]): one flat JSON state object threads through the run.
//!   Traversal starts at `start`; after each stage the first edge (declaration order) whose
//!   conditions all hold names the next stage, and no such edge completes the run. Every stage
//!   execution counts against `max_iterations`. Multi-agent patterns and action proposals are
//!   delegated to the daemon through [`StepExecutor`]; the other step kinds (loops, fan-out,
//!   sub-workflows, dedup, delivery) are interpreted here.
//! * **Failure** is a saga: a failed stage ends the run and the `compensation` step of every stage
//!   that had succeeded runs, most recent first, once per stage.
//! * **Approval** gates pause the run: the whole run (workflow, state, stage results, iteration
//!   count) is written atomically to `<dir>/<run_id>.json` by the [`CheckpointStore`]. [`resume`]
//!   claims the file by renaming it to `<run_id>.claimed`, so exactly one resume proceeds; invalid
//!   input puts the claim back.
//! * **Chains** ([`chain`]) verify every workflow before running any, then run them in order, each
//!   seeded with the previous final state.
//!
//! Logs go through `tracing`; nothing here prints.

mod chain;
mod checkpoint;
mod condition;
mod dedup;
mod engine;
mod error;
mod executor;
pub mod model;
mod steps;
mod template;
mod verify;

pub use chain::{chain, ChainResult};
pub use checkpoint::{Checkpoint, CheckpointStore, PausedSummary};
pub use engine::{
    resume, run, CompensationResult, RunStatus, StageResult, StageStatus, WorkflowResult,
};
pub use error::WorkflowError;
pub use executor::{BoxFuture, PatternOutcome, ProposalOutcome, StepExecutor};
pub use model::{
    parse, ApprovalField, ApprovalStep, ConditionOp, DedupStep, DeliverStep, Edge, ForEachStep,
    LoopUntilStep, Object, PatternKind, PatternStep, Precondition, Proposal, ProposalStep, Stage,
    StageStep, SubWorkflowStep, Workflow,
};
pub use steps::DEFAULT_CONCURRENCY;
pub use verify::{verify, VerifyReport, MAX_DEPTH};
