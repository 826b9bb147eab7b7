//! `goal.*`: standing chat goals (the contract: `car_proto::methods::goal`; the store:
//! `car_declagents::goals`; suggestion: `car_declagents::suggest`).
//!
//! Owner scope: a goal remembers the agent that set it (none: the user). An agent session
//! sees, replaces and clears only its own goals, and may not replace another principal's
//! goal for the same `session_id`; operator and host sessions see and clear all.
//! `goal.suggest` from an agent session may not name `working_dir` / `cwd` (it would
//! probe paths outside the agent's confinement).

use std::path::PathBuf;

use car_proto::errors::RpcError;
use car_proto::methods::goal as m;
use serde_json::json;

use crate::handler::{Call, Routes};
use crate::state::declagents::DeclAgents;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Set, _, _>(set)
        .add::<m::Status, _, _>(|call, p: m::SessionParams| async move { Ok(status(&call, p)) })
        .add::<m::Clear, _, _>(clear)
        .add::<m::Suggest, _, _>(suggest);
}

fn now() -> String {
    car_proto::clock::rfc3339(&car_proto::clock::now())
}

/// Whether the caller may see `goal` (agents: only their own).
fn visible(call: &Call, goal: &m::ChatGoalState) -> bool {
    match call.session.agent_id() {
        Some(agent) => goal.owner.as_deref() == Some(agent.as_str()),
        None => true,
    }
}

async fn blocking<T: Send + 'static>(
    call: &Call,
    f: impl FnOnce(&DeclAgents) -> Result<T, String> + Send + 'static,
) -> Result<T, RpcError> {
    crate::handler::declarative::blocking_store(call, &["check:", "session_id:"], f).await
}

/// Stores a goal for `session_id` unless another principal's goal is there (for an agent).
async fn store(
    call: &Call,
    session_id: String,
    check: String,
    max_iterations: Option<u32>,
) -> Result<m::ChatGoalState, RpcError> {
    let owner = call.session.agent_id();
    if let Some(existing) = call.state.data.declagents.goals.get(&session_id) {
        if owner.is_some() && !visible(call, &existing) {
            return Err(RpcError::internal(format!(
                "permission denied: chat session {session_id:?} has a goal another principal set"
            ))
            .with_data(json!({"reason": "not_owner"})));
        }
    }
    blocking(call, move |d| {
        d.goals
            .set(&session_id, &check, max_iterations, owner, now())
    })
    .await
}

async fn set(call: Call, p: m::SetParams) -> Result<m::SetReply, RpcError> {
    let (check, max_iterations) = match p.goal {
        Some(goal) => (goal.check, goal.max_iterations.or(p.max_iterations)),
        None => match p.check {
            Some(check) => (check, p.max_iterations),
            None => return Err(RpcError::invalid_params("goal: give goal {check} or check")),
        },
    };
    let goal = store(&call, p.session_id.into_string(), check, max_iterations).await?;
    Ok(m::SetReply { set: true, goal })
}

fn status(call: &Call, p: m::SessionParams) -> m::StatusReply {
    let goals = &call.state.data.declagents.goals;
    match p.session_id {
        Some(id) => m::StatusReply::One {
            goal: goals.get(&id).filter(|g| visible(call, g)).map(Box::new),
            session_id: id.into_string(),
        },
        None => m::StatusReply::All {
            goals: goals.all(|g| visible(call, g)),
        },
    }
}

async fn clear(call: Call, p: m::SessionParams) -> Result<m::ClearReply, RpcError> {
    let agent = call.session.agent_id();
    let mine = move |g: &m::ChatGoalState| agent.is_none() || g.owner == agent;
    match p.session_id {
        Some(id) => {
            let session_id = id.into_string();
            let target = session_id.clone();
            let n = blocking(&call, move |d| {
                d.goals.clear(|g| g.session_id == target && mine(g))
            })
            .await?;
            Ok(m::ClearReply::One {
                cleared: n > 0,
                session_id,
            })
        }
        None => {
            let cleared = blocking(&call, move |d| d.goals.clear(mine)).await?;
            Ok(m::ClearReply::All { cleared })
        }
    }
}

async fn suggest(call: Call, p: m::SuggestParams) -> Result<m::SuggestReply, RpcError> {
    let objective = p
        .prompt
        .or(p.objective)
        .filter(|o| !o.trim().is_empty())
        .ok_or_else(|| RpcError::invalid_params("prompt: give prompt or objective"))?;
    let dir = p.working_dir.or(p.cwd).filter(|d| !d.trim().is_empty());
    if dir.is_some() && call.session.agent_id().is_some() {
        return Err(RpcError::internal(
            "permission denied: an agent session may not name working_dir for goal.suggest",
        )
        .with_data(json!({"reason": "agent_not_allowed"})));
    }
    if let Some(d) = &dir {
        if !d.starts_with('/') {
            return Err(RpcError::invalid_params(format!(
                "working_dir: must be an absolute path, got {d:?}"
            )));
        }
    }
    if p.set && p.session_id.is_none() {
        return Err(RpcError::invalid_params(
            "session_id: required with set: true",
        ));
    }
    let text = objective.clone();
    let mut reply = tokio::task::spawn_blocking(move || {
        car_declagents::suggest::suggest(&text, dir.map(PathBuf::from).as_deref())
    })
    .await
    .map_err(|e| RpcError::internal(format!("goal suggestion failed: {e}")))?;
    if p.set {
        let session_id = p.session_id.expect("checked above").into_string();
        if let Some(goal) = reply.goal.clone() {
            let stored = store(&call, session_id.clone(), goal.check, goal.max_iterations).await?;
            reply.set = Some(true);
            reply.stored_goal = Some(stored);
        }
        reply.session_id = Some(session_id);
    }
    Ok(reply)
}
