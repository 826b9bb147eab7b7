//! [`ServerState`]: what every connection of one daemon process shares.
//!
//! The bottom layer of the daemon (see the crate docs): the validated config, the
//! credentials (when auth is on), the stores and engines opened under the state root, the
//! precomputed `server.schema` reply, the host-event channel and the shutdown token, each
//! owned by a small typed store in a submodule and grouped into the few parts of
//! [`ServerState`] ([`parts`]). Services reach shared state only through here; nothing here
//! imports a service, dispatch or the transport.

pub mod agent_lifecycle;
pub mod agent_messages;
pub mod agent_registry;
pub mod approval_gate;
pub mod auth;
pub mod chat_routes;
pub mod connector_oauth;
pub mod connectors;
pub mod consumer_grants;
pub mod declagents;
pub mod host_state;
pub mod inference;
pub mod inference_runner;
pub mod outbound;
pub mod parts;
pub mod pattern_budget;
pub mod per_connection;
pub mod permission;
pub mod policy_files;
pub mod pre_auth;
pub mod prices;
pub mod proposal;
pub mod registration;
pub mod run_records;
pub mod run_registry;
pub mod scheduling;
pub mod secret_grants;
pub mod session;
pub mod session_registry;
pub mod state_file;
pub mod store;
pub mod supervision;

use std::sync::Arc;

use serde_json::Value;

pub use parts::{Access, Agents, Daemon, Data, Runs};

/// A run trace record as it was appended, fanned out to `runs.subscribe` sessions.
#[derive(Debug, Clone)]
pub struct RunEvent {
    pub owner: String,
    pub run_id: String,
    pub agent_id: Option<String>,
    /// The record's wire form (`{record, seq, ts_ms, …}`).
    pub record: Value,
    /// The run's turn count after this record.
    pub cursor: u64,
    /// CAR's live status after this record.
    pub status: String,
}

/// What every connection of one daemon shares, as six parts a service reads by name:
/// `state.daemon` (config, credentials, connections, lifetime), `state.agents` (the agent
/// registry, processes, messages, chats, supervisors and hosts), `state.access` (secrets
/// and every grant, approval and policy), `state.data` (the durable stores), `state.runs`
/// (live runs and scheduling) and `state.inference`. Each part is built on its own at
/// startup (`crate::open_state`) and knows nothing of the others; what needs two parts
/// (booting agents, halting) is a method here.
#[derive(Debug)]
pub struct ServerState {
    pub daemon: Daemon,
    pub agents: Agents,
    pub access: Access,
    pub data: Data,
    pub runs: Runs,
    /// Models, engines, admission and in-flight inference calls.
    pub inference: Arc<crate::state::inference::InferenceService>,
}

impl ServerState {
    /// Once the listeners are bound: start the agents that should run and the daemon's
    /// task timers.
    pub async fn boot(&self, daemon_url: String) {
        // Connectors connect in the background: a slow or dead server delays nothing.
        let (connectors, secrets) = (self.data.connectors.clone(), self.access.secrets.clone());
        let sessions = self.daemon.sessions.clone();
        tokio::spawn(async move {
            connectors.connect_all(secrets.as_deref(), &sessions).await;
        });
        if !self.daemon.config.primary {
            self.agents
                .lifecycle
                .observe_only(self.agents.registry.manifest_path());
            return;
        }
        self.agents
            .lifecycle
            .boot(&self.agents.registry, daemon_url)
            .await;
    }

    /// Clean exit: stop supervised children and timers.
    pub async fn halt(&self) {
        self.agents.lifecycle.shutdown().await;
        self.runs.scheduling.timers.shutdown().await;
    }
}
