//! `agents.*`: the agent registry (`upsert`, `list`, `remove`) and chat turns routed to
//! attached agents (`chat`, `chat.cancel`, `chat.approve`, and the agent's
//! `agent.chat.event` stream). Files and attachment: [`crate::state::agent_registry`]; routing:
//! [`crate::state::chat_routes`].
//!
//! # `agents.upsert`
//! CAR's `AgentSpec`, checked before anything is written: `id` file-name safe (ASCII
//! letters, digits, `-_.`, at most 128 bytes), `command` an absolute path to an executable
//! file or `interpreter` a program found on the daemon's `PATH` (resolved once, stored in
//! `command`), `cwd` absolute, every `method_allowlist` entry a declared method. The
//! agent is not started: `agents.start` (or `auto_start: true` at the next boot) runs it
//! under supervision ([`crate::state::agent_lifecycle`], `services::agent_lifecycle`).
//!
//! # `agents.chat`
//! The agent must be registered and attached (`session.auth {token, agent_id}`). The
//! daemon opens the route, reverse-calls `agent.chat {session_id, prompt, stream, context:
//! {host_client_id, voice_input}, model?, attachments?, goal?}` on the agent's connection
//! and waits at most [`CHAT_ACK`] for its ack; it answers the host `{accepted: true,
//! session_id}` (an agent error, or no ack, is the host's error and drops the route). The
//! reply streams as `agents.chat.event`. `attachments` are checked (CAR's image blocks:
//! base64 data non-empty, an image media type; `http(s)` URLs) and forwarded verbatim;
//! `goal` and `attachments` are mutually exclusive, as in CAR.
//!
//! # Cancel and approve
//! Only the host connection that started the turn, or a host session, may cancel or
//! approve it. `agents.chat.cancel` notifies the agent (`agent.chat.cancel`) and drops the
//! route: `{cancelled: true}`, or `false` for a turn not in flight. `agents.chat.approve`
//! reverse-requests `agent.chat.approve {session_id, approval_id, decision}` and relays
//! the agent's `{resolved}` (waiting at most [`APPROVE_ACK`]).

use std::sync::Arc;
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::agents::{
    self as m, AgentListEntry, AgentSpec, ChatApproveParams, ChatApproveReply, ChatCancelReply,
    ChatEventParams, ChatParams, ChatReply, ChatSessionParams, DeclarativeEntry, IdParams,
    ImageBlock, ManagedAgent, RemoveReply,
};
use car_proto::methods::fields::NoParams;
use car_proto::methods::CallerRole;
use serde_json::{json, Value};

use crate::handler::{Call, Routes};
use crate::state::agent_registry;
use crate::state::chat_routes::{ChatRoutes, Route};
use crate::state::session::{ReverseCallError, Session};
use crate::state::ServerState;

/// How long the agent has to ack a turn.
pub const CHAT_ACK: Duration = Duration::from_secs(5);
/// How long the agent has to answer an approval.
pub const APPROVE_ACK: Duration = Duration::from_secs(10);
/// Attachments per turn at most.
pub const MAX_ATTACHMENTS: usize = 16;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Upsert, _, _>(upsert)
        .add::<m::List, _, _>(list)
        .add::<m::Remove, _, _>(remove)
        .add::<m::RegisterBasics, _, _>(register_basics)
        .add::<m::Chat, _, _>(chat)
        .add::<m::ChatCancel, _, _>(chat_cancel)
        .add::<m::ChatApprove, _, _>(chat_approve)
        .immediate::<m::ChatEvent, _>(chat_event);
}

async fn upsert(call: Call, spec: AgentSpec) -> Result<ManagedAgent, RpcError> {
    let spec = agent_registry::validate(spec)?;
    let agents = call.state.clone();
    let agent = tokio::task::spawn_blocking(move || agents.agents.registry.upsert(spec))
        .await
        .map_err(|e| RpcError::internal(format!("agents.upsert failed: {e}")))??;
    Ok(agent.shown_to(call.session.identity().role == CallerRole::Host))
}

/// Every agent; `env` values are shown to the host only. The declarative agents follow
/// (not for an agent session: they are not its own rows).
async fn list(call: Call, _: NoParams) -> Result<Vec<AgentListEntry>, RpcError> {
    let mut entries: Vec<AgentListEntry> = call
        .state
        .agents
        .managed_seen_by(&call.session)
        .into_iter()
        .map(|a| AgentListEntry::Managed(Box::new(a)))
        .collect();
    if call.session.agent_id().is_none() {
        entries.extend(
            call.state
                .data
                .declagents
                .registry
                .entries()
                .iter()
                .map(|e| {
                    let row = e.row();
                    AgentListEntry::Declarative(DeclarativeEntry {
                        id: row.id,
                        name: row.name,
                        kind: row.kind,
                        enabled: row.enabled,
                        capabilities: vec!["chat".into()],
                        tools: row.tools,
                    })
                }),
        );
    }
    Ok(entries)
}

async fn remove(call: Call, p: IdParams) -> Result<RemoveReply, RpcError> {
    call.state.agents.lifecycle.forget(&p.id).await;
    let state = call.state.clone();
    let removed = tokio::task::spawn_blocking(move || state.agents.registry.remove(&p.id))
        .await
        .map_err(|e| RpcError::internal(format!("agents.remove failed: {e}")))??;
    Ok(RemoveReply { removed })
}

/// `agents.register_basics`: the built-in tools join this session's registry
/// (`source: "builtin"`), replacing same-named tools; see `proposal::builtin`.
async fn register_basics(call: Call, _: NoParams) -> Result<(), RpcError> {
    let tools = crate::state::registration::builtin_descriptors();
    crate::state::registration::install_tools(&call.session, tools)?;
    Ok(())
}

fn check_attachments(attachments: &[ImageBlock]) -> Result<(), RpcError> {
    if attachments.len() > MAX_ATTACHMENTS {
        return Err(RpcError::invalid_params(format!(
            "attachments: at most {MAX_ATTACHMENTS} images per turn"
        )));
    }
    for (i, block) in attachments.iter().enumerate() {
        match block {
            ImageBlock::ImageBase64 { data, .. } if data.is_empty() => {
                return Err(RpcError::invalid_params(format!(
                    "attachments[{i}].data: must not be empty"
                )))
            }
            ImageBlock::ImageUrl { url, .. }
                if !(url.starts_with("https://") || url.starts_with("http://")) =>
            {
                return Err(RpcError::invalid_params(format!(
                    "attachments[{i}].url: must be an http(s) URL"
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

async fn chat(call: Call, p: ChatParams) -> Result<ChatReply, RpcError> {
    let attachments = p.attachments.clone().unwrap_or_default();
    check_attachments(&attachments)?;
    if p.goal.is_some() && !attachments.is_empty() {
        return Err(RpcError::invalid_params(
            "goal: cannot be combined with attachments",
        ));
    }
    if p.prompt.trim().is_empty() && attachments.is_empty() {
        return Err(RpcError::invalid_params("prompt: must not be empty"));
    }
    let agent_id = p.agent_id.to_string();
    if call.state.agents.registry.spec(&agent_id).is_none() {
        if let Some(entry) = call.state.data.declagents.registry.get(&agent_id) {
            return crate::handler::declarative::chat::start(&call, entry, p);
        }
        return Err(RpcError::invalid_params(format!(
            "agent_id: no registered agent {agent_id:?}"
        ))
        .with_data(json!({"reason": "not_found"})));
    }
    let Some(agent) = call.state.agents.registry.attached_session(&agent_id) else {
        return Err(RpcError::internal(format!(
            "agent {agent_id:?} is not attached: no connection has authenticated as it"
        ))
        .with_data(json!({"reason": "agent_not_attached"})));
    };
    let session_id = p
        .session_id
        .map(|s| s.into_string())
        .unwrap_or_else(|| format!("chat-{}", crate::state::auth::mint_token()));
    call.state.agents.chats.open(
        &session_id,
        Route {
            agent_id: agent_id.clone(),
            agent_session: agent.id,
            agent: Arc::downgrade(&agent),
            host: Arc::downgrade(&call.session),
            host_session: call.session.id,
        },
    )?;
    let mut request = json!({
        "session_id": session_id,
        "prompt": p.prompt,
        "stream": p.stream.unwrap_or(true),
        "context": {
            "host_client_id": call.session.label(),
            "voice_input": p.voice_input.unwrap_or(false),
        },
    });
    let obj = request.as_object_mut().expect("an object");
    if let Some(model) = p.model.filter(|m| !m.trim().is_empty()) {
        obj.insert("model".into(), json!(model));
    }
    if !attachments.is_empty() {
        obj.insert("attachments".into(), json!(attachments));
    }
    // The turn's own goal, else the session's standing one (`goal.set`).
    match p.goal {
        Some(goal) => {
            obj.insert("goal".into(), json!(goal));
        }
        None => {
            if let Some(standing) = call.state.data.declagents.goals.get(&session_id) {
                obj.insert(
                    "goal".into(),
                    json!({"check": standing.check, "max_iterations": standing.max_iterations}),
                );
            }
        }
    }
    let refused = |chats: &ChatRoutes, e: RpcError| {
        chats.remove(&session_id);
        e
    };
    match agent.call_client("agent.chat", &request, CHAT_ACK).await {
        Ok(Ok(ack)) if ack.get("accepted") == Some(&Value::Bool(false)) => Err(refused(
            &call.state.agents.chats,
            RpcError::internal(format!("agent {agent_id:?} declined the chat turn"))
                .with_data(json!({"reason": "agent_declined"})),
        )),
        Ok(Ok(_)) => Ok(ChatReply {
            accepted: true,
            session_id,
        }),
        Ok(Err(e)) => Err(refused(
            &call.state.agents.chats,
            RpcError::new(
                e.code,
                format!("agent {agent_id:?} refused the chat turn: {}", e.message),
            ),
        )),
        Err(e) => Err(refused(
            &call.state.agents.chats,
            RpcError::internal(format!("agent {agent_id:?} did not accept the turn: {e}"))
                .with_data(json!({"reason": match e {
                    ReverseCallError::Closed => "agent_disconnected",
                    ReverseCallError::TimedOut(_) => "agent_timeout",
                }})),
        )),
    }
}

/// The route of `session_id` when the caller may act on it.
/// Cancels a declarative agent's turn (same owner rule as a routed turn).
fn cancel_declarative(call: &Call, session_id: &str) -> Result<bool, RpcError> {
    let decl = &call.state.data.declagents;
    let Some(host) = decl.chat_host(session_id) else {
        return Ok(false);
    };
    if host != call.session.id && call.session.identity().role != CallerRole::Host {
        return Err(RpcError::internal(format!(
            "permission denied: chat session {session_id:?} was started by another connection"
        ))
        .with_data(json!({"reason": "not_owner"})));
    }
    Ok(decl.cancel_chat(session_id))
}

fn authorized_route(call: &Call, session_id: &str) -> Result<Option<Route>, RpcError> {
    let Some(route) = call.state.agents.chats.get(session_id) else {
        return Ok(None);
    };
    let is_host = call.session.identity().role == CallerRole::Host;
    if route.host_session != call.session.id && !is_host {
        return Err(RpcError::internal(format!(
            "permission denied: chat session {session_id:?} was started by another connection"
        ))
        .with_data(json!({"reason": "not_owner"})));
    }
    Ok(Some(route))
}

async fn chat_cancel(call: Call, p: ChatSessionParams) -> Result<ChatCancelReply, RpcError> {
    let session_id = p.session_id.into_string();
    let cancelled = match authorized_route(&call, &session_id)? {
        None => cancel_declarative(&call, &session_id)?,
        Some(route) => {
            call.state.agents.chats.cancel(&session_id);
            if let Some(agent) = ChatRoutes::agent_of(&route) {
                agent.notify("agent.chat.cancel", &json!({"session_id": session_id}));
            }
            true
        }
    };
    Ok(ChatCancelReply {
        cancelled,
        session_id,
    })
}

async fn chat_approve(call: Call, p: ChatApproveParams) -> Result<ChatApproveReply, RpcError> {
    let session_id = p.session_id.into_string();
    let Some(route) = authorized_route(&call, &session_id)? else {
        return Ok(ChatApproveReply {
            resolved: false,
            session_id,
        });
    };
    let Some(agent) = ChatRoutes::agent_of(&route) else {
        return Ok(ChatApproveReply {
            resolved: false,
            session_id,
        });
    };
    let mut request = json!({"session_id": session_id, "approval_id": p.approval_id});
    if let Some(decision) = p.decision {
        request["decision"] = decision;
    }
    let resolved = match agent
        .call_client("agent.chat.approve", &request, APPROVE_ACK)
        .await
    {
        Ok(Ok(reply)) => reply
            .get("resolved")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Ok(Err(e)) => {
            tracing::debug!(chat = %session_id, error = %e, "agent.chat.approve refused");
            false
        }
        Err(e) => {
            return Err(
                RpcError::internal(format!("the agent did not answer the approval: {e}"))
                    .with_data(json!({"reason": "agent_timeout"})),
            )
        }
    };
    Ok(ChatApproveReply {
        resolved,
        session_id,
    })
}

/// `agent.chat.event`: immediate, so a turn's events keep their order.
fn chat_event(
    session: &Arc<Session>,
    state: &ServerState,
    p: ChatEventParams,
) -> Result<(), RpcError> {
    observe_goal(state, &p);
    state.agents.chats.forward(session, p);
    Ok(())
}

/// Folds a forwarded chat event into the session's standing goal, if it has one (only
/// events of a turn in flight: an unrouted one is dropped by the forwarder anyway).
fn observe_goal(state: &ServerState, p: &ChatEventParams) {
    use car_declagents::goals::Observed;
    use car_proto::methods::agents::ChatEventKind;
    if state.agents.chats.get(&p.session_id).is_none() {
        return;
    }
    let text = |k: &str| p.rest.get(k).and_then(Value::as_str);
    let event = match p.kind {
        ChatEventKind::GoalEvaluated => Observed::Evaluated {
            iteration: p
                .rest
                .get("iteration")
                .and_then(Value::as_u64)
                .map(|n| n as u32),
            met: p.rest.get("met").and_then(Value::as_bool),
            grounded: p.rest.get("grounded").and_then(Value::as_bool),
            reason: text("reason"),
        },
        ChatEventKind::Done => Observed::Done(p.delta.as_deref().or(text("text"))),
        ChatEventKind::Error => Observed::Error(text("error").or(p.delta.as_deref())),
        _ => return,
    };
    let now = car_proto::clock::rfc3339(&car_proto::clock::now());
    state
        .data
        .declagents
        .goals
        .observe(&p.session_id, event, now);
}
