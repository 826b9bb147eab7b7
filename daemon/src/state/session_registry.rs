//! The live connections, for `server.status` (the dashboard's sessions panel).
//!
//! Holds a weak reference per connection (the connection loop owns the session), added when
//! the connection opens and removed when it ends; a row is read from the session's current
//! identity at the moment of the call, so a session that authenticated later shows its role.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use car_proto::methods::server::SessionRow;

use crate::state::session::Session;

#[derive(Debug)]
struct Entry {
    session: Weak<Session>,
    connected_at_ms: u64,
}

/// The open connections, by id.
#[derive(Debug, Default)]
pub struct Sessions {
    open: Mutex<BTreeMap<u64, Entry>>,
}

impl Sessions {
    pub fn add(&self, session: &Arc<Session>) {
        self.open.lock().expect("sessions lock").insert(
            session.id,
            Entry {
                session: Arc::downgrade(session),
                connected_at_ms: car_proto::clock::now_ms_u64(),
            },
        );
    }

    pub fn remove(&self, id: u64) {
        self.open.lock().expect("sessions lock").remove(&id);
    }

    /// Every open connection, by id.
    pub fn live(&self) -> Vec<Arc<Session>> {
        self.open
            .lock()
            .expect("sessions lock")
            .values()
            .filter_map(|e| e.session.upgrade())
            .collect()
    }

    /// One row per open connection, sorted by id.
    pub fn rows(&self) -> Vec<SessionRow> {
        let live: Vec<(Arc<Session>, u64)> = self
            .open
            .lock()
            .expect("sessions lock")
            .values()
            .filter_map(|e| e.session.upgrade().map(|s| (s, e.connected_at_ms)))
            .collect();
        // Identities are read after the registry lock is released.
        live.into_iter()
            .map(|(session, connected_at_ms)| {
                let identity = session.identity();
                let role = if !identity.authenticated {
                    "unauthenticated"
                } else if identity.observer {
                    "observer"
                } else {
                    identity.role.as_str()
                };
                SessionRow {
                    id: session.id,
                    transport: session.transport.to_string(),
                    role: role.to_string(),
                    agent_id: identity.agent_id,
                    client_version: session.client_version(),
                    connected_at_ms,
                }
            })
            .collect()
    }
}
