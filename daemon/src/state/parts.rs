//! The parts of [`super::ServerState`]: each groups the stores one family of services
//! reads, so a service names the part it works in (`call.state.access.secret_grants`,
//! `call.state.runs.live`) and a reader sees at a glance what a change can reach.
//!
//! | part | holds | read by |
//! | --- | --- | --- |
//! | [`Daemon`] | config, credentials, `server.schema` reply, state root, shutdown, connections | transport, dispatch, `server.*`, every service's config checks |
//! | [`Agents`] | agent registry, supervised processes, messages, chat routes, supervisors, hosts | `agents.*`, `agent_supervisor.*`, `agent_messages.*`, `supervision.*`, `host.*`, chat |
//! | [`Access`] | secrets and their grants, consumer grants, approvals, agent permissions, the regex budget | `secret.*`, `permission.*`, `agent_permissions.*`, `policy.*`, `session.*` (consumer grants), the proposal gate |
//! | [`Data`] | event store and run records, memory, workflow checkpoints, the tools' workspace | `events.*`, `memory.*`, `skills.*`, `workflow.*`, built-in tools |
//! | [`Runs`] | running runs, the run-event fan-out, scheduling | `runs.*`, `tasks.*`, `scheduler.*` |
//!
//! Parts are opened independently in `crate::open_state`; none holds another.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::RunEvent;
use crate::config::Config;
use crate::state::agent_lifecycle::AgentLifecycle;
use crate::state::agent_messages::MessageRouter;
use crate::state::agent_registry::AgentRegistry;
use crate::state::auth::Credentials;
use crate::state::chat_routes::ChatRoutes;
use crate::state::consumer_grants::ConsumerGrants;
use crate::state::host_state::HostState;
use crate::state::pattern_budget::PatternBudget;
use crate::state::permission::agent_policy::AgentPermissions;
use crate::state::permission::ledger::ApprovalLedger;
use crate::state::pre_auth::PreAuth;
use crate::state::run_registry::RunRegistry;
use crate::state::scheduling::Scheduling;
use crate::state::secret_grants::SecretGrants;
use crate::state::session::Session;
use crate::state::session_registry::Sessions;
use crate::state::store::Store;
use crate::state::supervision::Supervision;

/// The daemon itself: how it was configured, who may connect, who is connected, and
/// when it stops.
#[derive(Debug)]
pub struct Daemon {
    pub config: Config,
    /// `None` when auth is off.
    pub credentials: Option<Credentials>,
    /// The `server.schema` result, computed once from the active method table.
    pub schema_reply: car_proto::methods::server::SchemaReply,
    /// `$CAR_HOME`.
    pub state_root: PathBuf,
    /// Cancelled on SIGINT/SIGTERM: listeners stop, sessions close.
    pub shutdown: CancellationToken,
    /// The open connections (`server.status`).
    pub sessions: Arc<Sessions>,
    /// Slots for connections that have not authenticated yet.
    pub pre_auth: PreAuth,
    /// The dashboard's port once it is bound: browser pages from it may open the WebSocket.
    pub dashboard_port: OnceLock<u16>,
    /// When the daemon state was opened (`server.status` uptime).
    pub started: Instant,
    next_session: AtomicU64,
}

impl Daemon {
    pub fn new(
        config: Config,
        credentials: Option<Credentials>,
        state_root: &Path,
        shutdown: CancellationToken,
    ) -> Self {
        let schema = car_proto::schema::schema(config.debug_methods);
        let schema_reply = car_proto::methods::server::SchemaReply {
            digest: car_proto::schema::digest(&schema),
            digest_algorithm: car_proto::schema::DIGEST_ALGORITHM.to_string(),
            car_version: car_proto::CAR_VERSION.to_string(),
            schema,
        };
        Daemon {
            pre_auth: PreAuth::new(config.max_unauthenticated),
            config,
            credentials,
            schema_reply,
            state_root: state_root.to_path_buf(),
            shutdown,
            sessions: Default::default(),
            dashboard_port: Default::default(),
            started: Instant::now(),
            next_session: AtomicU64::new(1),
        }
    }

    pub fn next_session_id(&self) -> u64 {
        self.next_session.fetch_add(1, Ordering::Relaxed)
    }

    pub fn auth_enabled(&self) -> bool {
        self.credentials.is_some()
    }
}

/// The agents this daemon knows and the traffic between them and their hosts.
#[derive(Debug)]
pub struct Agents {
    /// The durable agent registry (identities and their tokens).
    pub registry: AgentRegistry,
    /// The registry's agents as supervised processes.
    pub lifecycle: AgentLifecycle,
    /// Agent-to-agent messages.
    pub messages: MessageRouter,
    /// Chat turns routed between hosts and attached agents.
    pub chats: ChatRoutes,
    /// Supervisors and the intents parked on them (`supervision.*`).
    pub supervision: Supervision,
    /// The host registry (agents, devices, approvals) and the `host.event` stream.
    pub host: HostState,
}

impl Agents {
    /// Opens the registry and the process supervisor under `state_root`.
    pub fn open(state_root: &Path, stop_grace: std::time::Duration) -> Self {
        Agents {
            registry: AgentRegistry::open(state_root),
            lifecycle: AgentLifecycle::open(state_root, stop_grace),
            messages: Default::default(),
            chats: Default::default(),
            supervision: Default::default(),
            host: Default::default(),
        }
    }

    /// The registry's agents with their supervised process state.
    pub fn managed(&self) -> Vec<car_proto::methods::agents::ManagedAgent> {
        self.registry
            .list()
            .into_iter()
            .map(|a| self.lifecycle.managed(a))
            .collect()
    }

    /// [`Self::managed`] as `session` may see them: `env` values only for the host (every
    /// other caller sees the names with hidden values; issue 24).
    pub fn managed_seen_by(
        &self,
        session: &Session,
    ) -> Vec<car_proto::methods::agents::ManagedAgent> {
        let host = session.identity().role == car_proto::methods::CallerRole::Host;
        self.managed()
            .into_iter()
            .map(|a| a.shown_to(host))
            .collect()
    }
}

/// Who may do what beyond their role: secrets and the grants on them, inference-consumer
/// grants, the approval ledger, per-agent approval policy, and the bound on compiled
/// policy patterns.
#[derive(Debug)]
pub struct Access {
    /// The secret store (`$CAR_HOME/secrets`); `None` when it could not be opened (logged
    /// at startup).
    pub secrets: Option<Arc<car_secrets::SecretStore>>,
    /// The secret store's attempt counters.
    pub secret_activity: Arc<car_secrets::Activity>,
    /// Which agent may read which secret (`secret.grant`).
    pub secret_grants: SecretGrants,
    /// Inference-consumer grants.
    pub consumer_grants: ConsumerGrants,
    /// The daemon-wide approval ledger behind `permission.*` and the proposal gate
    /// (`$CAR_HOME/approvals.jsonl`).
    pub approvals: ApprovalLedger,
    /// The per-agent approval policy behind `agent_permissions.*`
    /// (`$CAR_HOME/agent-permissions.json`).
    pub agent_permissions: AgentPermissions,
    /// The daemon-wide bound on compiled policy-regex memory.
    pub patterns: PatternBudget,
}

impl Access {
    /// Opens the grant files, the ledger and the policy under `state_root` around an
    /// already-opened secret store.
    pub fn open(
        state_root: &Path,
        secrets: Option<Arc<car_secrets::SecretStore>>,
        secret_activity: Arc<car_secrets::Activity>,
    ) -> Self {
        Access {
            secrets,
            secret_activity,
            secret_grants: SecretGrants::open(state_root),
            consumer_grants: Default::default(),
            approvals: ApprovalLedger::open(state_root),
            agent_permissions: AgentPermissions::open(state_root),
            patterns: Default::default(),
        }
    }
}

/// The durable stores: the event log and run records, memory, paused workflows, and the
/// root the built-in tools act under.
#[derive(Debug)]
pub struct Data {
    /// The event log and run records (`$CAR_HOME/car.db`).
    pub store: Store,
    /// The fact and skill graphs (`$CAR_HOME/memory`).
    pub memory: car_memory::MemoryStore,
    /// Paused workflow runs (`$CAR_HOME/workflow-runs`, deduplication in
    /// `$CAR_HOME/workflow-dedup`).
    pub workflows: car_workflow::CheckpointStore,
    /// The built-in agent tools' root.
    pub workspace: Arc<car_builtin_tools::Workspace>,
    /// The MCP connectors (`$CAR_HOME/connectors.json`) and their tools.
    pub connectors: Arc<crate::state::connectors::ConnectorHub>,
    /// Declarative agents, their routing store and the standing chat goals.
    pub declagents: Arc<crate::state::declagents::DeclAgents>,
}

impl Data {
    pub fn new(
        state_root: &Path,
        store: Store,
        memory: car_memory::MemoryStore,
        workspace: car_builtin_tools::Workspace,
    ) -> Self {
        Data {
            store,
            memory,
            workflows: car_workflow::CheckpointStore::new(state_root.join("workflow-runs"))
                .with_dedup_dir(state_root.join("workflow-dedup")),
            workspace: Arc::new(workspace),
            connectors: Arc::new(crate::state::connectors::ConnectorHub::open(
                state_root,
                std::env::current_dir().ok().as_deref(),
            )),
            declagents: Arc::new(crate::state::declagents::DeclAgents::open(state_root)),
        }
    }
}

/// Work in motion: running runs, their trace fan-out, and scheduled tasks.
#[derive(Debug)]
pub struct Runs {
    /// Running runs: their producers, work tokens and resume leases.
    pub live: RunRegistry,
    /// Run trace records for `runs.subscribe`.
    pub events: broadcast::Sender<RunEvent>,
    /// Prompt and command tasks, daemon timers and OS schedules.
    pub scheduling: Scheduling,
}

impl Runs {
    pub fn new(scheduling: Scheduling) -> Self {
        let (events, _) = broadcast::channel(1024);
        Runs {
            live: Default::default(),
            events,
            scheduling,
        }
    }
}
