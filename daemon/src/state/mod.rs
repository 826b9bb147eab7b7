//! [`ServerState`]: what every connection of one daemon process shares.
//!
//! The bottom layer of the daemon (see the crate docs): the validated config, the
//! credentials (when auth is on), the stores and engines opened under the state root, the
//! precomputed `server.schema` reply, the host-event channel and the shutdown token, each
//! owned by a small typed store in a submodule. Services reach shared state only through
//! here; nothing here imports a service, dispatch or the transport.

pub mod agent_lifecycle;
pub mod agent_messages;
pub mod agent_registry;
pub mod agent_runner;
pub mod approval_gate;
pub mod auth;
pub mod chat_routes;
pub mod consumer_grants;
pub mod host_state;
pub mod inference;
pub mod outbound;
pub mod pattern_budget;
pub mod per_connection;
pub mod permission;
pub mod pre_auth;
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::state::auth::Credentials;
use crate::state::store::Store;

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

/// The durable stores and engines a daemon opens under its state root.
#[derive(Debug)]
pub struct Stores {
    pub store: Store,
    pub memory: car_memory::MemoryStore,
    pub inference: Arc<crate::state::inference::InferenceService>,
    pub agents: crate::state::agent_registry::AgentRegistry,
    /// `None` when the store could not be opened (logged at startup).
    pub secrets: Option<Arc<car_secrets::SecretStore>>,
    pub secret_activity: Arc<car_secrets::Activity>,
    /// Where the built-in agent tools act.
    pub workspace: Arc<car_builtin_tools::Workspace>,
    /// The approval ledger (`$CAR_HOME/approvals.jsonl`).
    pub approvals: crate::state::permission::ledger::ApprovalLedger,
    /// The per-agent approval policy (`$CAR_HOME/agent-permissions.json`).
    pub agent_permissions: crate::state::permission::agent_policy::AgentPermissions,
    /// The registry's agents as supervised processes.
    pub lifecycle: crate::state::agent_lifecycle::AgentLifecycle,
    pub scheduling: scheduling::Scheduling,
    /// `$CAR_HOME`.
    pub state_root: std::path::PathBuf,
}

#[derive(Debug)]
pub struct ServerState {
    pub config: Config,
    /// `None` when auth is off.
    pub credentials: Option<Credentials>,
    /// The `server.schema` result, computed once from the active method table.
    pub schema_reply: car_proto::methods::server::SchemaReply,
    /// The host registry (agents, devices, approvals) and the `host.event` stream.
    pub host: crate::state::host_state::HostState,
    /// The durable agent registry (identities and their tokens).
    pub agents: crate::state::agent_registry::AgentRegistry,
    /// The registry's agents as supervised processes.
    pub lifecycle: crate::state::agent_lifecycle::AgentLifecycle,
    /// Agent-to-agent messages.
    pub messages: crate::state::agent_messages::MessageRouter,
    /// Paused workflow runs (`$CAR_HOME/workflow-runs`).
    pub workflows: car_workflow::CheckpointStore,
    /// Prompt and command tasks, daemon timers and OS schedules.
    pub scheduling: scheduling::Scheduling,
    /// `$CAR_HOME`.
    pub state_root: std::path::PathBuf,
    /// The secret store (`$CAR_HOME/secrets`) and its attempt counters.
    pub secrets: Option<Arc<car_secrets::SecretStore>>,
    pub secret_activity: Arc<car_secrets::Activity>,
    /// Which agent may read which secret (`secret.grant`).
    /// Slots for connections that have not authenticated yet.
    pub pre_auth: crate::state::pre_auth::PreAuth,
    pub secret_grants: crate::state::secret_grants::SecretGrants,
    /// The built-in agent tools' root.
    pub workspace: Arc<car_builtin_tools::Workspace>,
    /// Inference-consumer grants.
    pub grants: crate::state::consumer_grants::ConsumerGrants,
    /// The daemon-wide bound on compiled policy-regex memory.
    pub patterns: crate::state::pattern_budget::PatternBudget,
    /// Chat turns routed between hosts and attached agents.
    pub chats: crate::state::chat_routes::ChatRoutes,
    /// The daemon-wide approval ledger behind `permission.*` and the proposal gate.
    pub approvals: crate::state::permission::ledger::ApprovalLedger,
    /// The per-agent approval policy behind `agent_permissions.*`.
    pub agent_permissions: crate::state::permission::agent_policy::AgentPermissions,
    /// Supervisors and the intents parked on them (`supervision.*`).
    pub supervision: crate::state::supervision::Supervision,
    /// Run trace records for `runs.subscribe`.
    pub run_events: broadcast::Sender<RunEvent>,
    /// Running runs: their producers, work tokens and resume leases.
    pub live_runs: crate::state::run_registry::RunRegistry,
    /// The event log and run records (`$CAR_HOME/car.db`).
    pub store: Store,
    /// The fact and skill graphs (`$CAR_HOME/memory`).
    pub memory: car_memory::MemoryStore,
    /// Models, engines, admission and in-flight inference calls.
    pub inference: Arc<crate::state::inference::InferenceService>,
    /// Cancelled on SIGINT/SIGTERM: listeners stop, sessions close.
    pub shutdown: CancellationToken,
    /// The open connections (`server.status`).
    pub sessions: crate::state::session_registry::Sessions,
    /// The dashboard's port once it is bound: browser pages from it may open the WebSocket.
    pub dashboard_port: std::sync::OnceLock<u16>,
    /// When the daemon state was opened (`server.status` uptime).
    pub started: std::time::Instant,
    next_session: AtomicU64,
}

impl ServerState {
    pub fn new(
        config: Config,
        credentials: Option<Credentials>,
        stores: Stores,
        shutdown: CancellationToken,
    ) -> Self {
        let Stores {
            store,
            memory,
            inference,
            agents,
            secrets,
            secret_activity,
            workspace,
            approvals,
            agent_permissions,
            lifecycle,
            scheduling,
            state_root,
        } = stores;
        let schema = car_proto::schema::schema(config.debug_methods);
        let schema_reply = car_proto::methods::server::SchemaReply {
            digest: car_proto::schema::digest(&schema),
            digest_algorithm: car_proto::schema::DIGEST_ALGORITHM.to_string(),
            car_version: car_proto::CAR_VERSION.to_string(),
            schema,
        };
        let (run_events, _) = broadcast::channel(1024);
        let secret_grants = crate::state::secret_grants::SecretGrants::open(&state_root);
        ServerState {
            pre_auth: crate::state::pre_auth::PreAuth::new(config.max_unauthenticated),
            secret_grants,
            config,
            credentials,
            schema_reply,
            host: Default::default(),
            agents,
            lifecycle,
            messages: Default::default(),
            workflows: workflow_store(&state_root),
            scheduling,
            state_root,
            secrets,
            secret_activity,
            workspace,
            patterns: Default::default(),
            grants: Default::default(),
            chats: Default::default(),
            approvals,
            agent_permissions,
            supervision: Default::default(),
            run_events,
            live_runs: Default::default(),
            store,
            memory,
            inference,
            shutdown,
            sessions: Default::default(),
            dashboard_port: Default::default(),
            started: std::time::Instant::now(),
            next_session: AtomicU64::new(1),
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    pub fn auth_enabled(&self) -> bool {
        self.credentials.is_some()
    }

    /// `CAR_HOME` (the state root).
    pub fn config_state_root(&self) -> &std::path::Path {
        &self.state_root
    }

    /// The registry's agents with their supervised process state.
    pub fn managed_agents(&self) -> Vec<car_proto::methods::agents::ManagedAgent> {
        self.agents
            .list()
            .into_iter()
            .map(|a| self.lifecycle.managed(a))
            .collect()
    }

    /// [`Self::managed_agents`] as `session` may see them: `env` values only for the host
    /// (every other caller sees the names with hidden values; issue 24).
    pub fn managed_agents_seen_by(
        &self,
        session: &crate::state::session::Session,
    ) -> Vec<car_proto::methods::agents::ManagedAgent> {
        let host = session.identity().role == car_proto::methods::CallerRole::Host;
        self.managed_agents()
            .into_iter()
            .map(|a| a.shown_to(host))
            .collect()
    }

    /// Once the listeners are bound: start the agents that should run and the daemon's
    /// task timers.
    pub async fn boot(&self, daemon_url: String) {
        if !self.config.primary {
            self.lifecycle.observe_only(self.agents.manifest_path());
            return;
        }
        self.lifecycle.boot(&self.agents, daemon_url).await;
    }

    /// Clean exit: stop supervised children and timers.
    pub async fn halt(&self) {
        self.lifecycle.shutdown().await;
        self.scheduling.timers.shutdown().await;
    }
}

fn workflow_store(state_root: &std::path::Path) -> car_workflow::CheckpointStore {
    car_workflow::CheckpointStore::new(state_root.join("workflow-runs"))
        .with_dedup_dir(state_root.join("workflow-dedup"))
}
