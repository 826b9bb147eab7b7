//! The one agent loop: propose → verify → execute → observe, turn after turn, until the
//! model calls the `finish` tool or the turn budget runs out.
//!
//! The loop is written once, over [`Services`]: the three things a run needs from a daemon.
//! The shared client implements them over its connection (`car_daemon_client::agent_loop`,
//! what every binding's `run_agent` wraps), and the daemon implements them in-process for
//! the agents it runs itself (`multi.*`, `workflow.*` pattern stages, prompt tasks), by
//! calling its own methods through dispatch as the calling session. Either way every step is
//! the same daemon method with the same gates, so an agent the daemon runs can do no more
//! than its caller could.
//!
//! One run ([`run`]):
//! 1. the config's tool schemas (one without `parameters` takes none) and policies, plus the
//!    `finish` tool, are made available with [`Services::prepare`] (the client registers what its
//!    connection lacks; the daemon's tools are already on the session);
//! 2. `runs.start {agent_id, agent_name, intent: goal, outcome_description}` brackets the run;
//! 3. each turn sends `infer` in CAR's request shape (`prompt: ""`, `messages`, `tools`, `params
//!    {max_tokens, tool_choice: "auto", cache_ttl: "one_hour"}`, `cache_control: true`: a local
//!    model keeps the conversation's KV prefix for the next turn) and records it with
//!    `runs.record_model_turn`; its `usage` and `cost_usd` add to the run's [`Spend`];
//! 4. the requested calls other than `finish` become a proposal of `tool_call` actions (ids = the
//!    call ids; `timeout_ms` the budget the tool's schema declares as `timeoutMs`, as in CAR's
//!    loops), checked with `verify` (an invalid proposal is observed by the model as an error
//!    result for every call, not run) and run with [`Services::execute`];
//! 5. the model observes an assistant message with its calls and one `tool_result` message per call
//!    (`{role: "tool_result", tool_use_id, content}`, content the output as JSON text, or
//!    `{"error": …}`);
//! 6. `finish {answer?, summary?, status?}` called alone ends the run with `success` (or the CAR
//!    status it names); called beside other tools, it is refused (an error result: its answer was
//!    written before their results) and the turns go on; a turn with no call ends it with `done`
//!    and the text as summary; running out of turns ends it with `give_up`. `runs.complete {run_id,
//!    outcome}` records CAR's `AgentOutcome`, which is returned with the spend.
//!
//! Cancelling is dropping the run's future: the in-flight `infer` or proposal is dropped
//! with it, and the daemon cancels a dropped generation.

mod config;
mod run;

pub use config::{AgentConfig, AgentMetrics, AgentOutcome, ChatTurn, Report, Spend};
pub use run::{run, Task};

use futures_util::future::BoxFuture;
use serde_json::Value;

/// The tool that ends a run.
pub const FINISH_TOOL: &str = "finish";

/// What a run needs from a daemon. Implementations must not hold a lock across the
/// futures they return.
pub trait Services: Send + Sync {
    /// The error a daemon call fails with; the loop passes it through untouched.
    type Error: Send;

    /// Makes `schemas` (the `finish` tool included) and `policies` available to this run's
    /// proposals.
    fn prepare<'a>(
        &'a self,
        schemas: &'a [Value],
        policies: &'a [Value],
    ) -> BoxFuture<'a, Result<(), Self::Error>>;

    /// Calls daemon method `method` (`infer`, `verify`, `runs.*`) as this run's principal.
    fn call<'a>(
        &'a self,
        method: &'static str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, Self::Error>>;

    /// Runs a verified proposal (`proposal.submit`), its tool calls served wherever this
    /// run's tools live; returns the `ProposalResult`.
    fn execute(&self, proposal: Value) -> BoxFuture<'_, Result<Value, Self::Error>>;
}
