//! `agents.message`, `agents.message.pending`, `agents.message.approve`, `agents.peers`
//! ([`crate::state::agent_messages`]; rules in `car_proto::methods::agent_messages`).
//!
//! Recipients are the registry's agents. A message between two agents is held for the
//! operator the first time that pair talks, unless the daemon runs with `--no-approvals`;
//! one from a host or operator session to an agent goes straight through.

use car_proto::errors::RpcError;
use car_proto::methods::agent_messages::{
    self as m, ApproveParams, ApproveReply, MessageDecision, MessageParams, MessageReply,
    PeerMessage, PeerRow,
};
use car_proto::methods::fields::NoParams;

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Message, _, _>(message)
        .add::<m::Pending, _, _>(pending)
        .add::<m::Approve, _, _>(approve)
        .add::<m::Peers, _, _>(peers);
}

fn new_id() -> String {
    format!("msg-{}", car_proto::token::random_hex(8))
}

async fn message(call: Call, p: MessageParams) -> Result<MessageReply, RpcError> {
    let identity = call.session.identity();
    let from = match &identity.agent_id {
        Some(id) => id.clone(),
        None => format!("session:{}", call.session.label()),
    };
    let to = p.to.to_string();
    if identity.agent_id.as_deref() == Some(to.as_str()) {
        return Err(RpcError::invalid_params(
            "to: an agent cannot message itself",
        ));
    }
    if call.state.agents.registry.spec(&to).is_none() {
        return Err(RpcError::invalid_params(format!(
            "to: no agent '{to}' (see agents.peers)"
        )));
    }
    let msg = PeerMessage {
        id: new_id(),
        from: from.clone(),
        to: to.clone(),
        body: p.body,
        summary: p.summary,
        kind: p.kind.map(|k| k.into_string()),
        in_reply_to: p.in_reply_to.map(|k| k.into_string()),
        sent_at: car_proto::clock::now_rfc3339(),
    };
    let hold = identity.agent_id.is_some() && call.state.daemon.config.approvals.enabled;
    let id = msg.id.clone();
    let recipient = call.state.agents.registry.attached_session(&to);
    let status = call.state.agents.messages.send(msg, hold, recipient)?;
    Ok(MessageReply {
        id,
        from,
        to,
        status,
    })
}

async fn pending(call: Call, _: NoParams) -> Result<Vec<PeerMessage>, RpcError> {
    Ok(call.state.agents.messages.pending())
}

async fn approve(call: Call, p: ApproveParams) -> Result<ApproveReply, RpcError> {
    let approve = p.decision == MessageDecision::Approved;
    let agents = &call.state.agents.registry;
    let status = call
        .state
        .agents
        .messages
        .decide(&p.id, approve, |to| agents.attached_session(to))?;
    Ok(ApproveReply {
        id: p.id.to_string(),
        decision: p.decision,
        status,
    })
}

async fn peers(call: Call, _: NoParams) -> Result<Vec<PeerRow>, RpcError> {
    let own = call.session.identity().agent_id;
    let mut rows: Vec<PeerRow> = call
        .state
        .agents
        .managed()
        .into_iter()
        .filter(|a| own.as_deref() != Some(a.spec.id.as_str()))
        .map(|a| PeerRow {
            id: a.spec.id.to_string(),
            name: a.spec.name.to_string(),
            kind: "agent".into(),
            can_receive: true,
            reachable: a.attached,
            status: a.status,
        })
        .collect();
    for agent in call.state.agents.host.agents() {
        if rows.iter().any(|r| r.id == agent.id) {
            continue;
        }
        rows.push(PeerRow {
            id: agent.id,
            name: agent.name,
            kind: "session".into(),
            can_receive: false,
            reachable: false,
            status: serde_json::to_value(agent.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        });
    }
    Ok(rows)
}
