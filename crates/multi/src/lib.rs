//! `car-multi`: the multi-agent coordination engine behind the daemon's `multi.*` methods
//! (CAR 0.58.0-compatible shapes; the wire types live in [`car_proto::methods::multi`]).
//!
//! Owns: the coordination patterns and their budgets. Must not touch: models, sockets or files
//! (agents run through the `AgentRunner` seam the daemon provides).
//!
//! # Design
//!
//! - **The runner is a seam.** This crate never talks to a model or a socket: every agent call goes
//!   through an [`AgentRunner`], which the daemon implements twice (a `multi.run_agent` reverse
//!   call to the client, or its own agent loop). The trait is object-safe and returns a boxed
//!   `Send` future that may borrow the runner, the spec and the task, so every pattern is a plain
//!   `async fn` over `&dyn AgentRunner`.
//! - **Concurrency without spawning.** Parallel steps are `futures_util::future::join_all` over
//!   borrowed futures, polled by whichever task awaits the pattern; no `tokio::spawn` (the runner
//!   is borrowed, not `'static`) and no runtime dependency. Dropping a pattern's future cancels
//!   every agent call still in flight.
//! - **Agents fail softly.** A runner `Err(e)` becomes `AgentOutput::failed(name, "agent '{name}'
//!   failed: {e}")` in the result and the run goes on; only a failing *supervisor* agent aborts
//!   ([`MultiError`]). `duration_ms` is measured around every runner call and filled in when the
//!   reply leaves it at 0.
//! - **One budget per run.** Each pattern builds a [`Budget`] from its optional `BudgetLimits`.
//!   Every agent is admitted before it starts (for a parallel batch, all of the batch is admitted
//!   before any of it launches, so `max_agents` is a hard cap) and its reported tokens and cost are
//!   added when it finishes. A refused agent appears as [`budget_refusal`]'s `give_up` output; a
//!   refused combining agent (synthesizer, reducer, judge, supervisor) falls back instead of
//!   failing the run.
//! - **Prompts in one place.** [`prompts`] holds every prompt a pattern builds, so the wording can
//!   be read (and documented) in one file.
//!
//! Modules: [`budget`] (the tracker), [`run`] (one guarded agent call and parallel
//! batches), [`output`] (lenient decoding of a runner's reply), [`mod@swarm`] (swarm and
//! pipeline), [`supervise`] (supervisor rounds), [`gather`] (map-reduce and vote),
//! [`mod@tournament`] (single-elimination judging and verdict parsing).

use std::future::Future;
use std::pin::Pin;

use car_proto::methods::multi::{AgentOutput, AgentSpec};

pub mod budget;
pub mod gather;
pub mod output;
pub mod prompts;
pub mod run;
pub mod subtask;
pub mod supervise;
pub mod swarm;
pub mod tournament;

pub use budget::{budget_refusal, Budget, Spend};
pub use gather::{map_reduce, vote};
pub use output::parse_output;
pub use run::{run_agent, run_parallel};
pub use subtask::subtask;
pub use supervise::supervisor;
pub use swarm::{pipeline, swarm};
pub use tournament::{parse_verdict, tournament, Side};

/// The boxed future an [`AgentRunner`] returns.
pub type AgentFuture<'a> = Pin<Box<dyn Future<Output = Result<AgentOutput, String>> + Send + 'a>>;

/// Runs one agent. Object-safe; the daemon implements it twice (a reverse call to the
/// client, or its own agent loop).
///
/// `Err(e)` means the agent could not be run at all; patterns record it as a failed
/// [`AgentOutput`]. An `Ok` output whose `error` is set counts as failed too.
pub trait AgentRunner: Send + Sync {
    fn run<'a>(&'a self, spec: &'a AgentSpec, task: &'a str) -> AgentFuture<'a>;
}

/// Errors that abort a whole pattern (everything else is recorded in the result).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultiError {
    /// An agent the pattern cannot do without failed, e.g.
    /// `supervisor error: agent 'boss' failed: …`.
    #[error("{0}")]
    Agent(String),
}
