//! `agents.message`, `agents.message.pending`, `agents.message.approve`, `agents.peers`:
//! agents talking to each other through the daemon (reference `agents` section; guards as
//! the reference's peer rules state them).
//!
//! The sender is always derived from the connection (a bound agent's id, else
//! `session:<session id>`); a `from` field is ignored. A message reaches the recipient's
//! attached connection as the notification `agents.message.event` ([`PeerMessage`]); one
//! sent to an agent that is not attached waits in its inbox (at most 50 unread) and is
//! delivered when it attaches. The first message from one agent to another is held for the
//! operator (`agents.message.pending` / `agents.message.approve`); approving it releases it
//! and lets that pair talk for the daemon's life. Guards per sender and recipient: a
//! 64 KiB serialized-size cap, 20 messages a minute, and an identical message repeated
//! within 60 s refused.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Name, NoParams};
use super::{host, op, Declaration};

/// `agents.message` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MessageParams {
    pub to: Name,
    pub body: String,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub kind: Option<Name>,
    #[serde(default)]
    pub in_reply_to: Option<Name>,
}

/// What happened to a sent message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// Sent to the recipient's connection.
    Delivered,
    /// Waiting in the recipient's inbox until it attaches.
    Queued,
    /// Waiting for the operator (`agents.message.approve`).
    Held,
}

/// `agents.message` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MessageReply {
    pub id: String,
    pub from: String,
    pub to: String,
    pub status: Delivery,
}

/// A message as the recipient (and the operator) sees it; also the
/// `agents.message.event` notification's params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PeerMessage {
    pub id: String,
    pub from: String,
    pub to: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    pub sent_at: String,
}

/// The notification a recipient receives.
pub const MESSAGE_EVENT: &str = "agents.message.event";

/// `agents.message.approve {id, decision}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ApproveParams {
    pub id: Name,
    pub decision: MessageDecision,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageDecision {
    #[serde(alias = "approve", alias = "allow")]
    Approved,
    #[serde(alias = "deny", alias = "drop", alias = "reject")]
    Denied,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ApproveReply {
    pub id: String,
    pub decision: MessageDecision,
    /// Where the released message went (`null` when denied).
    pub status: Option<Delivery>,
}

/// One `agents.peers` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PeerRow {
    pub id: String,
    pub name: String,
    /// `agent` (registered) or `session` (a connection's host-registered agent).
    pub kind: String,
    /// Whether this kind of peer can receive messages at all.
    pub can_receive: bool,
    /// Whether a message sent now would be delivered at once (an attached connection).
    pub reachable: bool,
    pub status: String,
}

crate::method!(
    /// `agents.message {to, body, summary?, kind?, in_reply_to?}` → `{id, from, to, status}`.
    Message = op("agents.message", "send a message to another agent (the sender is this connection)");
    access: Access::owned(Resource::Messages);
    MessageParams => MessageReply
);
crate::method!(
    /// `agents.message.pending` → `[PeerMessage]` held for the operator.
    Pending = host("agents.message.pending", "agent-to-agent messages waiting for the operator");
    access: Access::owned(Resource::Messages).observer();
    NoParams => Vec<PeerMessage>
);
crate::method!(
    /// `agents.message.approve {id, decision}` → `{id, decision, status}`.
    Approve = host("agents.message.approve", "release or drop a held agent-to-agent message");
    access: Access::owned(Resource::Messages);
    ApproveParams => ApproveReply
);
crate::method!(
    /// `agents.peers` → `[PeerRow]`.
    Peers = op("agents.peers", "the agents this connection can message, with whether each is reachable now");
    access: Access::owned(Resource::Agents).observer();
    NoParams => Vec<PeerRow>
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Message>(),
    Declaration::of::<Pending>(),
    Declaration::of::<Approve>(),
    Declaration::of::<Peers>(),
];
