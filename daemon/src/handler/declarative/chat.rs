//! `agents.chat` to a declarative agent: no process and no reverse call; the daemon runs
//! the agent itself ([`super::invoke`]) and streams the turn to the host as
//! `agents.chat.event` (`{session_id, agent_id, kind, …}`):
//! - `goal_evaluated {iteration, met, grounded, reason}` after each goal check;
//! - `token {delta}` with the answer, then `done {delta, turns, tool_calls, goal?}`;
//! - or `error {error}` when the run fails or its goal is not met.
//!
//! `agents.chat.cancel` aborts the turn (the run, its generation and a running check
//! stop at once) and no frame follows. Inline `goal` and `attachments` are refused: the
//! agent's own spec owns completion, as in CAR.

use std::sync::Arc;

use car_declagents::registry::Entry;
use car_proto::errors::RpcError;
use car_proto::methods::agents::{ChatParams, ChatReply};
use serde_json::{json, Value};

use crate::handler::Call;
use crate::state::declagents::ChatTurn;

/// Starts a chat turn of declarative agent `entry` (see the module docs).
pub fn start(call: &Call, entry: Entry, p: ChatParams) -> Result<ChatReply, RpcError> {
    if p.goal.is_some() {
        return Err(RpcError::invalid_params(
            "goal: a declarative agent's completion check is its spec's goal; an inline goal is refused",
        ));
    }
    if p.attachments.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(RpcError::invalid_params(
            "attachments: declarative agents take no image attachments",
        ));
    }
    if !entry.enabled {
        return Err(RpcError::internal(format!(
            "declarative agent {:?} is disabled (declagents.set_enabled)",
            entry.spec.id.as_str()
        ))
        .with_data(json!({"reason": "agent_disabled"})));
    }
    let session_id = p
        .session_id
        .map(|s| s.into_string())
        .unwrap_or_else(|| format!("chat-{}", crate::state::auth::mint_token()));
    let agent_id = entry.spec.id.to_string();
    let host = call.session.clone();
    let emit = {
        let (host, session_id, agent_id) = (host.clone(), session_id.clone(), agent_id.clone());
        Arc::new(move |kind: &str, fields: Value| {
            let mut event = json!({"session_id": session_id, "agent_id": agent_id, "kind": kind});
            if let (Some(e), Value::Object(f)) = (event.as_object_mut(), fields) {
                e.extend(f);
            }
            host.notify("agents.chat.event", &event);
        })
    };
    let run_call = call.clone();
    let (sid, prompt) = (session_id.clone(), p.prompt);
    let decl = call.state.data.declagents.clone();
    // The task waits for its registration before it runs, so a turn that ends at once
    // is never registered after its end.
    let (registered, wait) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        if wait.await.is_err() {
            return;
        }
        let verdicts = emit.clone();
        let on_verdict = move |iteration: u32, v: &super::Verdict| {
            verdicts(
                "goal_evaluated",
                json!({"iteration": iteration, "met": v.met, "grounded": v.met, "reason": v.reason}),
            );
        };
        match super::invoke(&run_call, &entry, &prompt, &on_verdict, true).await {
            Ok(reply) => match &reply.error {
                None => {
                    emit("token", json!({"delta": reply.output}));
                    emit(
                        "done",
                        json!({"delta": reply.output, "turns": reply.turns, "tool_calls": reply.tool_calls, "goal": reply.goal}),
                    );
                }
                Some(error) => emit("error", json!({"error": error, "goal": reply.goal})),
            },
            Err(e) => emit("error", json!({"error": e.message})),
        }
        decl.end_chat(&sid);
    });
    let turn = ChatTurn {
        host_session: host.id,
        task: task.abort_handle(),
    };
    if let Err(e) = call.state.data.declagents.start_chat(&session_id, turn) {
        task.abort();
        return Err(RpcError::invalid_params(e));
    }
    let _ = registered.send(());
    Ok(ChatReply {
        accepted: true,
        session_id,
    })
}
