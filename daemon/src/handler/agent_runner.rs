//! Who runs one agent of a `multi.*` coordination, a workflow's pattern stage or a prompt
//! task.
//!
//! [`SessionRunner`] implements `car_multi::AgentRunner` for one call:
//! - by default it sends the `multi.run_agent {spec, task}` reverse call to the calling connection,
//!   whose registered agent runner answers with an `AgentOutput` (CAR's pattern, like
//!   `tools.execute`);
//! - when the caller answers `-32601` (it registered no runner) it falls back, for the rest of the
//!   call, to the daemon's own runner (beyond CAR). `runner: "daemon"` skips the reverse call;
//!   `runner: "caller"` never falls back.
//!
//! The daemon's runner is the one agent loop (`car_agent_loop`, the loop the shared client
//! runs) over [`InDaemon`]: each step is the daemon's own method (`infer`, `verify`,
//! `proposal.submit`, `runs.*`) called through dispatch as the calling session, so its
//! gates, admission queue, policies, approvals and deadlines apply as they would to the
//! caller, and the agent can do no more than its caller could. The spec maps onto the
//! loop's config:
//! - `tools` name tools registered on the calling session (`tools.register`, or
//!   `agents.register_basics` for the built-in ones the daemon runs itself); a name it has not
//!   registered fails the agent before a turn is spent. A registered tool is called back on the
//!   caller with `tools.execute`, a built-in one runs in the daemon.
//! - `system_prompt` is the identity (`You are <name>.` when empty), `max_turns` the turn budget,
//!   the model `metadata.model` or a top-level `model` (else the default local model).
//! - `metadata` (or a top-level field) may set `max_tokens` (per turn, default
//!   [`DEFAULT_MAX_TOKENS`]), `temperature`, `seed`, `tool_choice` (`auto` by default; `required`
//!   makes a small local model call a tool every turn, grammar-constrained) and
//!   `parallel_tool_calls`.
//!
//! The `AgentOutput` carries the loop's turns, tool calls and outcome, and the spend of its
//! model turns: tokens, and the cost priced by each model's registered `cost` (unpriced turns
//! add nothing), so a coordination `budget` meters it. A run that ends without an answer
//! (`give_up`, `failure`, `timeout`) is an agent error. Dropping the call (its deadline,
//! a cancel) drops the loop and cancels its generation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use car_agent_loop::{AgentConfig, Services, Task};
use car_multi::AgentRunner;
use car_proto::errors::METHOD_NOT_FOUND;
use car_proto::methods::multi::{
    AgentOutput, AgentSpec, RunAgentParams, RunnerChoice, TokenUsage, RUN_AGENT_METHOD,
};
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use crate::handler::Call;
use crate::state::session::ReverseCallError;

/// Longest one model turn of the daemon's runner generates when the spec names no
/// `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// Runs agents for one call.
#[derive(Debug)]
pub struct SessionRunner {
    call: Call,
    /// Set once the caller said it has no runner (or was told `runner: "daemon"`).
    on_daemon: AtomicBool,
    fallback: bool,
    timeout: Duration,
}

impl SessionRunner {
    pub fn new(call: &Call, choice: Option<RunnerChoice>) -> Self {
        SessionRunner {
            timeout: call.state.daemon.config.handler_timeout,
            call: call.clone(),
            on_daemon: AtomicBool::new(choice == Some(RunnerChoice::Daemon)),
            fallback: choice != Some(RunnerChoice::Caller),
        }
    }

    async fn on_caller(&self, spec: &AgentSpec, task: &str) -> Result<Option<AgentOutput>, String> {
        let params = serde_json::to_value(RunAgentParams {
            spec: spec.clone(),
            task: task.to_string(),
        })
        .map_err(|e| format!("spec does not encode: {e}"))?;
        let started = Instant::now();
        match self
            .call
            .session
            .call_client(RUN_AGENT_METHOD, &params, self.timeout)
            .await
        {
            Ok(Ok(reply)) => {
                let mut out = car_multi::parse_output(&spec.name, reply)?;
                if out.duration_ms == 0.0 {
                    out.duration_ms = started.elapsed().as_secs_f64() * 1000.0;
                }
                Ok(Some(out))
            }
            Ok(Err(e)) if e.code == METHOD_NOT_FOUND && self.fallback => {
                tracing::debug!(
                    session = self.call.session.id,
                    "caller has no agent runner; the daemon runs agents"
                );
                self.on_daemon.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Ok(Err(e)) => Err(e.message),
            Err(ReverseCallError::Closed) => Err("the caller's connection closed".into()),
            Err(ReverseCallError::TimedOut(d)) => Err(format!(
                "the caller's agent runner did not answer within {}s",
                d.as_secs()
            )),
        }
    }
}

impl AgentRunner for SessionRunner {
    fn run<'a>(
        &'a self,
        spec: &'a AgentSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<AgentOutput, String>> {
        Box::pin(async move {
            if !self.on_daemon.load(Ordering::Relaxed) {
                if let Some(out) = self.on_caller(spec, task).await? {
                    return Ok(out);
                }
            }
            run_on_daemon(&self.call, spec, task).await
        })
    }
}

/// The loop's services inside the daemon: the calling session's own methods, through
/// dispatch.
#[derive(Debug)]
pub struct InDaemon<'c> {
    call: &'c Call,
}

impl<'c> InDaemon<'c> {
    pub fn new(call: &'c Call) -> Self {
        InDaemon { call }
    }

    async fn invoke(&self, method: &str, params: Value) -> Result<Value, String> {
        self.call
            .invoke
            .invoke(self.call.clone(), method, params)
            .await
            .map_err(|e| format!("{method} failed: {}", e.message))
    }
}

impl Services for InDaemon<'_> {
    type Error = String;

    /// The tools are the session's own registrations: nothing to register.
    fn prepare<'a>(&'a self, _: &'a [Value], _: &'a [Value]) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    fn call<'a>(
        &'a self,
        method: &'static str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(self.invoke(method, params))
    }

    fn execute(&self, proposal: Value) -> BoxFuture<'_, Result<Value, String>> {
        Box::pin(self.invoke("proposal.submit", json!({"proposal": proposal})))
    }
}

/// A knob from `metadata`, else a top-level field of the spec.
fn knob<'s>(spec: &'s AgentSpec, key: &str) -> Option<&'s Value> {
    spec.metadata.get(key).or_else(|| spec.extra.get(key))
}

fn number<T: TryFrom<u64>>(spec: &AgentSpec, key: &str) -> Option<T> {
    knob(spec, key)
        .and_then(Value::as_u64)
        .and_then(|n| T::try_from(n).ok())
}

/// The loop config for `spec`: its tools' schemas from the session's registry.
fn config_of(call: &Call, spec: &AgentSpec) -> Result<AgentConfig, String> {
    let tool_schemas = call.session.runtime(|rt| {
        spec.tools
            .iter()
            .map(|name| {
                let tool = rt.tools.get(name).ok_or_else(|| {
                    format!(
                        "agent '{}': tool '{name}' is not registered on this connection (register it with tools.register, or call agents.register_basics for the built-in tools)",
                        spec.name
                    )
                })?;
                let mut schema = json!({"name": tool.name, "parameters": tool.parameters});
                if let Some(d) = &tool.description {
                    schema["description"] = json!(d);
                }
                Ok(schema)
            })
            .collect::<Result<Vec<_>, String>>()
    })?;
    let text = |key: &str| knob(spec, key).and_then(Value::as_str).map(str::to_string);
    Ok(AgentConfig {
        agent_id: None,
        agent_name: spec.name.to_string(),
        identity: if spec.system_prompt.is_empty() {
            format!("You are {}.", spec.name)
        } else {
            spec.system_prompt.clone()
        },
        tool_schemas,
        policies: Vec::new(),
        default_model: spec.model().map(str::to_string),
        max_tokens: number(spec, "max_tokens").unwrap_or(DEFAULT_MAX_TOKENS),
        max_turns: spec.max_turns.max(1),
        target_outcome: String::new(),
        tool_choice: text("tool_choice"),
        temperature: knob(spec, "temperature")
            .and_then(Value::as_f64)
            .map(|t| t as f32),
        seed: number(spec, "seed"),
        parallel_tool_calls: knob(spec, "parallel_tool_calls").and_then(Value::as_bool),
    })
}

/// Runs `spec` on `task` with the daemon's agent loop (see the module docs).
pub async fn run_on_daemon(
    call: &Call,
    spec: &AgentSpec,
    task: &str,
) -> Result<AgentOutput, String> {
    let started = Instant::now();
    let config = config_of(call, spec)?;
    let report = car_agent_loop::run(&InDaemon::new(call), &config, Task::goal(task)).await?;
    let outcome = &report.outcome;
    let error =
        matches!(outcome.status.as_str(), "give_up" | "failure" | "timeout").then(|| match outcome
            .status
            .as_str()
        {
            "give_up" if outcome.summary.is_empty() => format!(
                "agent '{}' gave up: {} turns without calling finish",
                spec.name, outcome.metrics.turns
            ),
            status => format!(
                "agent '{}' ended with {status}: {}",
                spec.name, outcome.summary
            ),
        });
    Ok(AgentOutput {
        name: spec.name.to_string(),
        answer: outcome.summary.trim().to_string(),
        turns: outcome.metrics.turns,
        tool_calls: outcome.metrics.tool_calls,
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        error,
        tokens: Some(TokenUsage {
            input_tokens: report.spend.input_tokens,
            output_tokens: report.spend.output_tokens,
            cost_usd: report.spend.cost_usd,
        }),
        outcome: serde_json::to_value(outcome).ok(),
    })
}
