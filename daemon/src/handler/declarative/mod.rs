//! Running declarative agents (`declagents.invoke`, `route`, `run_scenarios`, and
//! `agents.chat` to a declarative agent).
//!
//! # One invocation ([`invoke`])
//! 1. The agent must be registered and enabled.
//! 2. Its session ([`agent_session`]) acts as the caller, with only the spec's allowed tools
//!    (allowlist minus deny list; built-in tools and enabled connector tools; an empty allowlist
//!    means no tools) and a fresh scratch workspace for the built-in file tools.
//! 3. Each pass is one run of the daemon's agent loop
//!    (`crate::handler::agent_runner::run_on_daemon`) on that session: the spec's identity as
//!    system prompt (its standing goal appended), `max_turns`, model and sampling knobs.
//! 4. With a `goal`, its check runs in the scratch workspace after each pass ([`check`]); a failed
//!    check re-drives the agent with the input and the check's reason, until it passes or
//!    `max_iterations` passes ran. The result's `goal` says what happened; `error` is
//!    `goal_not_met: …` when it never passed. `on_verdict` hears each verdict (chat streams it as
//!    `goal_evaluated`).
//! 5. When `learn` (not for scenario runs), the outcome (success: no error) is recorded in the
//!    routing store under the agent's id, with the input as a need it handles well on success.
//!
//! Dropping the future (a cancel, the caller's deadline) drops the loop, its generation and a
//! running check (its process group is killed), and the scratch workspace goes.

mod agent_session;
pub mod chat;
mod check;
pub mod decompose;
pub mod rank;

use car_declagents::registry::Entry;
use car_proto::errors::RpcError;
use car_proto::methods::declagents::{DeclarativeAgentSpec, GoalReport, InvokeReply};
use car_proto::methods::multi::AgentSpec;
use serde_json::json;

use crate::handler::Call;
pub use agent_session::AgentSession;
pub use check::Verdict;

/// Runs work on the declarative-agent stores (file writes) off the async workers. An error
/// that starts with one of `caller_fields` names the caller's field (`-32602`); any other is
/// the daemon's (`-32603`).
pub async fn blocking_store<T: Send + 'static>(
    call: &Call,
    caller_fields: &[&str],
    f: impl FnOnce(&crate::state::declagents::DeclAgents) -> Result<T, String> + Send + 'static,
) -> Result<T, RpcError> {
    let decl = call.state.data.declagents.clone();
    tokio::task::spawn_blocking(move || f(&decl))
        .await
        .map_err(|e| RpcError::internal(format!("declarative agent store task failed: {e}")))?
        .map_err(|e| {
            if caller_fields.iter().any(|p| e.starts_with(p)) {
                RpcError::invalid_params(e)
            } else {
                RpcError::internal(e)
            }
        })
}

/// The registered, enabled agent `id`.
pub fn runnable(call: &Call, id: &str) -> Result<Entry, RpcError> {
    let entry = call.state.data.declagents.registry.get(id).ok_or_else(|| {
        RpcError::invalid_params(format!("id: no declarative agent {id:?}"))
            .with_data(json!({"reason": "not_found"}))
    })?;
    if !entry.enabled {
        return Err(RpcError::internal(format!(
            "declarative agent {id:?} is disabled (declagents.set_enabled)"
        ))
        .with_data(json!({"reason": "agent_disabled"})));
    }
    Ok(entry)
}

/// The loop's spec for one pass of `spec`.
fn loop_spec(spec: &DeclarativeAgentSpec) -> AgentSpec {
    let mut identity = if spec.identity.trim().is_empty() {
        format!("You are {}.", car_declagents::display_name(spec))
    } else {
        spec.identity.clone()
    };
    if let Some(goal) = spec.standing_goal.as_ref().filter(|g| !g.trim().is_empty()) {
        identity.push_str("\n\nYour standing goal: ");
        identity.push_str(goal);
    }
    let mut metadata = serde_json::Map::new();
    let mut put = |k: &str, v: Option<serde_json::Value>| {
        if let Some(v) = v {
            metadata.insert(k.to_string(), v);
        }
    };
    put("model", spec.model.clone().map(|m| json!(m)));
    put("max_tokens", spec.max_tokens.map(|n| json!(n)));
    put("temperature", spec.temperature.map(|t| json!(t)));
    put("seed", spec.seed.map(|s| json!(s)));
    put("tool_choice", spec.tool_choice.clone().map(|c| json!(c)));
    serde_json::from_value(json!({
        "name": car_declagents::display_name(spec),
        "system_prompt": identity,
        "tools": car_declagents::allowed_tools(spec),
        "max_turns": spec.max_turns.unwrap_or(car_declagents::DEFAULT_TURNS),
        "metadata": metadata,
    }))
    .expect("an AgentSpec")
}

/// The input of pass `n` (1-based) after a failed verdict.
fn redrive(input: &str, check: &str, verdict: &Verdict) -> String {
    format!(
        "{input}\n\nYour previous attempt did not meet the completion check `{check}`: {}. \
         Continue the task in the same workspace until the check passes.",
        verdict.reason
    )
}

/// Runs agent `entry` on `input` (see the module docs).
pub async fn invoke(
    call: &Call,
    entry: &Entry,
    input: &str,
    on_verdict: &(dyn Fn(u32, &Verdict) + Send + Sync),
    learn: bool,
) -> Result<InvokeReply, RpcError> {
    let spec = &entry.spec;
    let session = AgentSession::open(call, spec)?;
    let agent = loop_spec(spec);
    let goal = spec.goal.as_ref();
    let passes = goal.map_or(1, |g| {
        car_proto::methods::goal::clamp_iterations(g.max_iterations)
    });
    let mut reply = InvokeReply {
        output: String::new(),
        turns: 0,
        tool_calls: 0,
        error: None,
        goal: None,
        model_served: spec.model.clone(),
        run_ids: Vec::new(),
    };
    let mut task = input.to_string();
    for pass in 1..=passes {
        let out = crate::handler::agent_runner::run_on_daemon(&session.call, &agent, &task)
            .await
            .map_err(|e| {
                RpcError::internal(format!("agent {:?}: {e}", spec.id.as_str()))
                    .with_data(json!({"reason": "agent_failed"}))
            })?;
        reply.turns += out.turns;
        reply.tool_calls += out.tool_calls;
        reply.output = out.answer;
        reply.error = out.error;
        if let Some(run) = out.outcome.as_ref().and_then(|o| o["run_id"].as_str()) {
            reply.run_ids.push(run.to_string());
        }
        let Some(goal) = goal else { break };
        let verdict = check::run(&call.state, goal.check.as_str(), &session.scratch).await;
        on_verdict(pass, &verdict);
        reply.goal = Some(GoalReport {
            check: goal.check.to_string(),
            max_iterations: passes,
            iterations: pass,
            met: verdict.met,
            grounded: verdict.met,
            last_exit_code: verdict.exit_code,
            last_reason: verdict.reason.clone(),
        });
        if verdict.met {
            reply.error = None;
            break;
        }
        reply.error = Some(format!(
            "goal_not_met after {pass} of {passes} passes: {}",
            verdict.reason
        ));
        task = redrive(input, goal.check.as_str(), &verdict);
    }
    drop(session);
    if learn {
        let (decl, id, need) = (
            call.state.data.declagents.clone(),
            spec.id.to_string(),
            input.to_string(),
        );
        let success = reply.error.is_none();
        let saved =
            tokio::task::spawn_blocking(move || decl.routing.record(&id, success, Some(&need)))
                .await;
        if let Ok(Err(e)) | Err(e) = saved.map_err(|e| e.to_string()) {
            tracing::warn!(agent = %spec.id, error = %e, "routing outcome not saved");
        }
    }
    Ok(reply)
}
