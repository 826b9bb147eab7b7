//! `verify` and `proposal.submit`: checking a plan and running it.
//!
//! Both parse with [`model`] and analyse with [`plan`] against this connection's tools,
//! policies and state. `verify` reports; `proposal.submit` refuses a proposal with any
//! structural error (`-32602`, the first problem in the message and every issue in
//! `error.data.issues`) and otherwise hands the plan to [`exec`] — policy violations
//! surface there as `rejected` actions. Nothing is executed or written for a refused
//! proposal.

pub mod exec;
pub mod model;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use car_proto::errors::RpcError;
use serde_json::{json, Value};

use super::params::Params;
use crate::config::Config;
use crate::dispatch::{Call, HandlerFuture};
use exec::Execution;
use plan::{Context, Plan};

/// Grace the daemon adds to a proposal's summed budgets (the reference: 15 s, smaller than
/// the client's 30 s so reaping goes innermost first).
pub const DEADLINE_GRACE: Duration = Duration::from_secs(15);

static NEXT_PROPOSAL: AtomicU64 = AtomicU64::new(1);

/// The handler deadline of a `proposal.submit` call: the sum over actions of `timeout_ms`
/// (default: the tool timeout) times its attempts, plus 15 s — never below the flat
/// handler deadline. Params that do not parse keep the flat deadline.
pub fn derived_deadline(params: &Value, config: &Config) -> Duration {
    let budget = params
        .get("proposal")
        .and_then(|p| model::parse(p).ok())
        .map(|p| {
            p.actions
                .iter()
                .filter_map(|a| a.as_ref().ok())
                .map(|a| {
                    a.timeout_ms
                        .map(Duration::from_millis)
                        .unwrap_or(config.tool_timeout)
                        * a.max_attempts()
                })
                .sum::<Duration>()
                + DEADLINE_GRACE
        })
        .unwrap_or_default();
    budget.max(config.handler_timeout)
}

fn analyse(
    call: &Call,
    proposal: &model::Proposal,
    initial_state: Option<BTreeMap<String, Value>>,
    session_id: &str,
) -> Plan {
    call.session.runtime(|rt| {
        let state =
            initial_state.unwrap_or_else(|| rt.partition(None).cloned().unwrap_or_default());
        plan::analyze(
            proposal,
            Context {
                tools: &rt.tools,
                policies: &rt.policies,
                state,
                session_id,
            },
        )
    })
}

fn levels_by_id(plan: &Plan, proposal: &model::Proposal) -> Value {
    let id = |i: usize| {
        proposal.actions[i]
            .as_ref()
            .map(|a| a.id.clone())
            .unwrap_or_default()
    };
    json!(plan
        .levels
        .iter()
        .map(|l| l.iter().map(|&i| id(i)).collect::<Vec<_>>())
        .collect::<Vec<_>>())
}

/// `verify {proposal, initial_state?, session_id?}` → `{valid, issues, execution_levels, conflicts}`.
pub fn verify(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["proposal", "initial_state", "session_id"])?;
        let proposal = model::parse(p.required_value("proposal")?)?;
        let initial = p
            .opt_object("initial_state")?
            .map(|m| m.into_iter().collect());
        let session_id = p
            .opt_str("session_id")?
            .unwrap_or_else(|| call.session.label());
        let plan = analyse(&call, &proposal, initial, &session_id);
        Ok(json!({
            "valid": plan.valid(),
            "issues": plan.issues,
            "execution_levels": levels_by_id(&plan, &proposal),
            "conflicts": plan.conflicts,
        }))
    })
}

/// `proposal.submit {proposal, session_id?}` → `{proposal_id, results, outputs, final_state, errors}`.
pub fn submit(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let p = Params::new(params)?.only(&["proposal", "session_id"])?;
        let proposal = model::parse(p.required_value("proposal")?)?;
        let session_id = p
            .opt_str("session_id")?
            .unwrap_or_else(|| call.session.label());
        let plan = analyse(&call, &proposal, None, &session_id);
        let structural = plan.structural_errors();
        if let Some(first) = structural.first() {
            return Err(RpcError::invalid_params(format!(
                "proposal is not runnable: {}",
                first.message
            ))
            .with_data(json!({"issues": structural})));
        }
        let (id, actions) = proposal.clone().strict()?;
        let proposal_id = id.unwrap_or_else(|| {
            format!(
                "prop-{}-{}",
                std::process::id(),
                NEXT_PROPOSAL.fetch_add(1, Ordering::Relaxed)
            )
        });
        let execution = Execution {
            call: &call,
            proposal_id,
            session_id,
            tool_timeout: call.state.config.tool_timeout,
        };
        Ok(execution.run(&actions, &plan.levels).await)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn config(extra: &[&str]) -> Config {
        let mut args = vec![
            "car-server",
            "--handler-timeout",
            "60s",
            "--tool-timeout",
            "300s",
        ];
        args.extend_from_slice(extra);
        Config::from_args(crate::config::Args::try_parse_from(args).unwrap()).unwrap()
    }

    #[test]
    fn deadline_follows_the_reference_formula() {
        let c = config(&[]);
        // No parseable proposal: the flat deadline.
        assert_eq!(derived_deadline(&json!({}), &c), Duration::from_secs(60));
        // One retried action: 10 min budget × (2 retries + 1) + 15 s.
        let p = json!({"proposal": {"actions": [
            {"id": "a", "type": "tool_call", "tool": "t", "timeout_ms": 600_000, "failure_behavior": "retry", "max_retries": 2},
            {"id": "b", "type": "tool_call", "tool": "t"}
        ]}});
        assert_eq!(
            derived_deadline(&p, &c),
            Duration::from_secs(1800 + 300 + 15)
        );
        // A short proposal keeps the flat deadline.
        let short = json!({"proposal": {"actions": [{"id": "a", "type": "tool_call", "tool": "t", "timeout_ms": 10}]}});
        assert_eq!(
            derived_deadline(&short, &config(&["--handler-timeout", "30m"])),
            Duration::from_secs(1800)
        );
    }
}
