//! [`ChatRoutes`]: which host connection waits for which chat turn's events.
//!
//! `agents.chat` opens a route `session_id → (agent, agent connection, host connection)`
//! before it reverse-calls the agent, so no early event is lost. Each `agent.chat.event`
//! the agent sends is forwarded to that host as `agents.chat.event` (with `agent_id`
//! added) in the order received; an event for an unknown `session_id`, or from a
//! connection that is not the route's agent, is dropped (logged at debug). `done` and
//! `error` end the turn and drop the route. When the agent's connection closes, each of
//! its turns ends with an `error` event (`"agent disconnected"`); when the host's closes,
//! its turns are cancelled at the agent (`agent.chat.cancel`).
//!
//! A cancelled turn leaves a tombstone `(session_id, agent connection)`: the agent still
//! sends that turn's remaining events and its terminal one, and they must not be taken for
//! a newer turn of the same `session_id` (an agent may ack the next turn just before the
//! cancelled one's terminal event goes out). Until the tombstone goes, events of that
//! session from that agent are dropped; it goes with the old turn's terminal event, or
//! after [`TOMBSTONE_TTL`] for an agent that never sends one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use car_proto::errors::RpcError;
use car_proto::methods::agents::ChatEventParams;
use serde_json::{json, Value};

use crate::state::session::Session;

/// Chat turns in flight at most (daemon-wide).
pub const MAX_ROUTES: usize = 4096;
/// How long a cancelled turn's late events are dropped at most.
pub const TOMBSTONE_TTL: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Route {
    pub agent_id: String,
    /// The agent connection's session id.
    pub agent_session: u64,
    pub agent: Weak<Session>,
    pub host: Weak<Session>,
    pub host_session: u64,
}

#[derive(Debug, Default)]
pub struct ChatRoutes {
    routes: Mutex<HashMap<String, Route>>,
    /// Cancelled turns whose remaining events are dropped (see the module docs).
    tombstones: Mutex<HashMap<(String, u64), std::time::Instant>>,
}

impl ChatRoutes {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.routes.lock().expect("chat routes lock")
    }

    /// Opens the route of a new turn; refused while a turn with that id is in flight.
    pub fn open(&self, session_id: &str, route: Route) -> Result<(), RpcError> {
        let mut routes = self.lock();
        if let Some(existing) = routes.get(session_id) {
            if existing.host.strong_count() > 0 && existing.agent.strong_count() > 0 {
                return Err(RpcError::invalid_params(format!(
                    "session_id: a turn of chat session {session_id:?} is still in flight"
                ))
                .with_data(json!({"reason": "turn_in_flight"})));
            }
        }
        if routes.len() >= MAX_ROUTES && !routes.contains_key(session_id) {
            return Err(RpcError::internal(format!(
                "server busy: {MAX_ROUTES} chat turns in flight"
            )));
        }
        routes.insert(session_id.to_string(), route);
        Ok(())
    }

    pub fn get(&self, session_id: &str) -> Option<Route> {
        self.lock().get(session_id).cloned()
    }

    pub fn remove(&self, session_id: &str) -> Option<Route> {
        self.lock().remove(session_id)
    }

    fn tombstones(&self) -> std::sync::MutexGuard<'_, HashMap<(String, u64), std::time::Instant>> {
        let mut tombstones = self.tombstones.lock().expect("chat tombstones lock");
        tombstones.retain(|_, since| since.elapsed() < TOMBSTONE_TTL);
        tombstones
    }

    /// Cancels a turn: drops its route and tombstones it (see the module docs).
    pub fn cancel(&self, session_id: &str) -> Option<Route> {
        let route = self.remove(session_id)?;
        let mut tombstones = self.tombstones();
        if tombstones.len() < MAX_ROUTES {
            tombstones.insert(
                (session_id.to_string(), route.agent_session),
                std::time::Instant::now(),
            );
        }
        Some(route)
    }

    /// Forwards one agent event to its host (see the module docs).
    pub fn forward(&self, from: &Session, event: ChatEventParams) {
        let session_id = event.session_id.to_string();
        {
            let mut tombstones = self.tombstones();
            let key = (session_id.clone(), from.id);
            if tombstones.contains_key(&key) {
                if event.kind.is_terminal() {
                    tombstones.remove(&key);
                }
                tracing::debug!(session = from.id, chat = %session_id, "event of a cancelled turn dropped");
                return;
            }
        }
        let route = {
            let mut routes = self.lock();
            match routes.get(&session_id) {
                Some(r) if r.agent_session == from.id => {
                    let route = r.clone();
                    if event.kind.is_terminal() {
                        routes.remove(&session_id);
                    }
                    route
                }
                _ => {
                    tracing::debug!(session = from.id, chat = %session_id, "agent.chat.event for no turn of this connection dropped");
                    return;
                }
            }
        };
        let Some(host) = route.host.upgrade() else {
            return;
        };
        let mut params = serde_json::to_value(&event).unwrap_or_else(|_| json!({}));
        if let Value::Object(map) = &mut params {
            map.insert("agent_id".into(), json!(route.agent_id));
        }
        host.notify("agents.chat.event", &params);
    }

    /// A connection ended: end the turns it served, cancel the turns it asked for.
    pub fn on_session_closed(&self, session: &Session) {
        self.tombstones()
            .retain(|(_, agent), _| *agent != session.id);
        let ended: Vec<(String, Route)> = {
            let mut routes = self.lock();
            let ids: Vec<String> = routes
                .iter()
                .filter(|(_, r)| r.agent_session == session.id || r.host_session == session.id)
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| routes.remove(&id).map(|r| (id, r)))
                .collect()
        };
        for (session_id, route) in ended {
            if route.agent_session == session.id {
                if let Some(host) = route.host.upgrade() {
                    host.notify(
                        "agents.chat.event",
                        &json!({
                            "session_id": session_id,
                            "agent_id": route.agent_id,
                            "kind": "error",
                            "error": "agent disconnected before the turn ended",
                        }),
                    );
                }
            } else if let Some(agent) = route.agent.upgrade() {
                agent.notify("agent.chat.cancel", &json!({"session_id": session_id}));
            }
        }
    }

    /// The open agent connection of a route.
    pub fn agent_of(route: &Route) -> Option<Arc<Session>> {
        route.agent.upgrade().filter(|s| !s.closed.is_cancelled())
    }
}
