//! [`MessageRouter`]: agent-to-agent messages (`agents.message*`, see the declaration
//! module `car_proto::methods::agent_messages` for the rules).
//!
//! Everything here is in memory: held messages, inboxes and the pairs the operator allowed
//! last for the daemon's life (a restart forgets them, like CAR's peer queues).
//! Notifications are sent with the router's lock released.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use car_proto::errors::RpcError;
use car_proto::methods::agent_messages::{Delivery, PeerMessage, MESSAGE_EVENT};
use serde_json::json;

use crate::state::session::Session;

/// Unread messages one inbox holds at most.
pub const MAX_INBOX: usize = 50;
/// Held messages at most (daemon-wide).
pub const MAX_HELD: usize = 500;
/// Messages per sender per recipient per minute.
pub const RATE_PER_MINUTE: usize = 20;
/// An identical message from the same sender to the same recipient within this window is
/// refused.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(60);
/// Largest serialized message.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Inner {
    inboxes: HashMap<String, VecDeque<PeerMessage>>,
    held: BTreeMap<String, PeerMessage>,
    allowed: HashSet<(String, String)>,
    sent: HashMap<(String, String), VecDeque<(Instant, u64)>>,
}

#[derive(Debug, Default)]
pub struct MessageRouter {
    inner: Mutex<Inner>,
}

fn refused(reason: &str, message: String) -> RpcError {
    RpcError::invalid_params(message).with_data(json!({"reason": reason}))
}

fn digest(body: &str, summary: Option<&str>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut h);
    summary.hash(&mut h);
    h.finish()
}

impl MessageRouter {
    /// Applies the guards and decides where `msg` goes. `hold` is whether a first message
    /// of this pair waits for the operator; `recipient` is its attached connection.
    pub fn send(
        &self,
        msg: PeerMessage,
        hold: bool,
        recipient: Option<Arc<Session>>,
    ) -> Result<Delivery, RpcError> {
        let size = serde_json::to_vec(&msg)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        if size > MAX_MESSAGE_BYTES {
            return Err(refused(
                "message_too_large",
                format!(
                    "body: the message is {size} bytes serialized, more than {MAX_MESSAGE_BYTES}"
                ),
            ));
        }
        let pair = (msg.from.clone(), msg.to.clone());
        let now = Instant::now();
        let hash = digest(&msg.body, msg.summary.as_deref());
        let mut inner = self.inner.lock().expect("messages lock");
        let sent = inner.sent.entry(pair.clone()).or_default();
        while sent
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(60))
        {
            sent.pop_front();
        }
        if sent.len() >= RATE_PER_MINUTE {
            return Err(refused(
                "rate_limited",
                format!(
                    "to: {} has sent {RATE_PER_MINUTE} messages to {} in the last minute",
                    pair.0, pair.1
                ),
            ));
        }
        if sent
            .iter()
            .any(|(t, h)| *h == hash && now.duration_since(*t) < REPEAT_WINDOW)
        {
            return Err(refused(
                "duplicate",
                format!(
                    "body: the same message was sent to {} less than {}s ago",
                    pair.1,
                    REPEAT_WINDOW.as_secs()
                ),
            ));
        }
        let needs_hold = hold && !inner.allowed.contains(&pair);
        if !needs_hold && recipient.is_none() {
            let queued = inner.inboxes.get(&msg.to).map_or(0, VecDeque::len);
            if queued >= MAX_INBOX {
                return Err(refused(
                    "inbox_full",
                    format!("to: {} has {MAX_INBOX} unread messages", msg.to),
                ));
            }
        }
        if needs_hold && inner.held.len() >= MAX_HELD {
            return Err(refused(
                "held_full",
                format!("to: {MAX_HELD} messages already wait for the operator"),
            ));
        }
        inner.sent.entry(pair).or_default().push_back((now, hash));
        if needs_hold {
            inner.held.insert(msg.id.clone(), msg);
            return Ok(Delivery::Held);
        }
        Ok(self.route(inner, msg, recipient))
    }

    /// Delivers (lock released first) or queues.
    fn route<'a>(
        &'a self,
        mut inner: std::sync::MutexGuard<'a, Inner>,
        msg: PeerMessage,
        recipient: Option<Arc<Session>>,
    ) -> Delivery {
        if let Some(session) = recipient {
            drop(inner);
            let params = serde_json::to_value(&msg).unwrap_or_default();
            if session.notify(MESSAGE_EVENT, &params) {
                return Delivery::Delivered;
            }
            // The connection is closing: keep the message for the next attachment.
            inner = self.inner.lock().expect("messages lock");
        }
        inner
            .inboxes
            .entry(msg.to.clone())
            .or_default()
            .push_back(msg);
        Delivery::Queued
    }

    /// Held messages, oldest first.
    pub fn pending(&self) -> Vec<PeerMessage> {
        let inner = self.inner.lock().expect("messages lock");
        let mut held: Vec<_> = inner.held.values().cloned().collect();
        held.sort_by(|a, b| a.sent_at.cmp(&b.sent_at));
        held
    }

    /// Releases (and allows the pair from now on) or drops a held message.
    pub fn decide(
        &self,
        id: &str,
        approve: bool,
        recipient: impl FnOnce(&str) -> Option<Arc<Session>>,
    ) -> Result<Option<Delivery>, RpcError> {
        let mut inner = self.inner.lock().expect("messages lock");
        let msg = inner
            .held
            .remove(id)
            .ok_or_else(|| RpcError::invalid_params(format!("id: no held message '{id}'")))?;
        if !approve {
            return Ok(None);
        }
        inner.allowed.insert((msg.from.clone(), msg.to.clone()));
        let session = recipient(&msg.to);
        Ok(Some(self.route(inner, msg, session)))
    }

    /// Sends `agent`'s queued messages to its newly attached connection, in order.
    pub fn flush(&self, agent: &str, session: &Session) {
        let queued = self
            .inner
            .lock()
            .expect("messages lock")
            .inboxes
            .remove(agent)
            .unwrap_or_default();
        for msg in queued {
            let params = serde_json::to_value(&msg).unwrap_or_default();
            session.notify(MESSAGE_EVENT, &params);
        }
    }

    /// Unread messages waiting for `agent`.
    pub fn queued(&self, agent: &str) -> usize {
        self.inner
            .lock()
            .expect("messages lock")
            .inboxes
            .get(agent)
            .map_or(0, VecDeque::len)
    }
}
