//! [`AgentLifecycle`]: the registry's agents run as supervised child processes
//! (`car-supervisor`).
//!
//! # Launch
//! A child gets a minimal environment (issue 24): the spec's `env`, `CAR_AGENT_ID`,
//! `CAR_AGENT_TOKEN` (its registry token), `CAR_DAEMON_URL` (this daemon's WebSocket) and
//! `PATH` (the spec's, else the daemon's), so a client library in it connects back bound
//! to the agent. Nothing else of the daemon's environment is inherited: not its
//! `*_API_KEY`s, not `CAR_AUTH_TOKEN`, not `CAR_HOME` (which would lead it to the daemon's
//! and host's token files). The daemon's variables cannot be set by a spec either: the
//! `CAR_AGENT_*` and `CAR_DAEMON_URL` values written here win. Its working
//! directory is the spec's `cwd`, else `CAR_HOME/agents/<id>/work` (created 0700). Restart
//! policy, crash-loop limit (`max_restarts`, default [`DEFAULT_MAX_RESTARTS`]) and base
//! backoff (`backoff_secs`, default 1 s) come from the spec.
//!
//! # Across daemon restarts
//! `CAR_HOME/run/agents-wanted.json` lists the agents an `agents.start` (or `restart`)
//! asked to run and no `agents.stop` has stopped since. At boot the daemon starts every
//! wanted agent and every `auto_start` one; a child the previous daemon left running (it
//! was killed, say) is adopted through its pid record rather than spawned again. A clean
//! daemon exit stops the children (SIGTERM, grace, SIGKILL) and keeps the wanted list, so
//! the next daemon starts them once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::agent_supervisor::AgentStatus;
use car_proto::methods::agents::{AgentSpec, ManagedAgent, RestartPolicy};
use car_supervisor::{
    Confinement, LaunchSpec, Restart, Status, Supervisor, SupervisorConfig, SupervisorError,
};

use crate::state::agent_registry::AgentRegistry;

/// Consecutive restarts allowed when the spec names no `max_restarts`.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Base backoff when the spec names no `backoff_secs`.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct AgentLifecycle {
    supervisor: Supervisor,
    state_root: PathBuf,
    wanted_path: PathBuf,
    wanted: Mutex<BTreeSet<String>>,
    /// This daemon's WebSocket URL, known once the listener is bound.
    daemon_url: OnceLock<String>,
    /// Set on a daemon that is not its state root's primary: the primary supervises.
    observer: OnceLock<String>,
    /// The daemon's credential directory, hidden from children beside the state root.
    credential_dir: OnceLock<PathBuf>,
}

pub fn status_of(status: Status) -> AgentStatus {
    match status {
        Status::Stopped => AgentStatus::Stopped,
        Status::Starting => AgentStatus::Starting,
        Status::Running => AgentStatus::Running,
        Status::Backoff => AgentStatus::Backoff,
        Status::Errored => AgentStatus::Errored,
    }
}

impl AgentLifecycle {
    pub fn open(state_root: &Path, grace: Duration) -> Self {
        let mut config = SupervisorConfig::new(
            state_root.join("logs"),
            state_root.join("run").join("agents"),
        );
        config.grace = grace;
        let wanted_path = state_root.join("run").join("agents-wanted.json");
        let wanted = crate::state::state_file::read(&wanted_path)
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice::<BTreeSet<String>>(&bytes).ok())
            .unwrap_or_default();
        AgentLifecycle {
            supervisor: Supervisor::new(config),
            state_root: state_root.to_path_buf(),
            wanted_path,
            wanted: Mutex::new(wanted),
            daemon_url: OnceLock::new(),
            observer: OnceLock::new(),
            credential_dir: OnceLock::new(),
        }
    }

    /// Hides `dir` (the token directory, when it is outside the state root) from every
    /// child started from now on.
    pub fn hide_credentials(&self, dir: PathBuf) {
        let _ = self.credential_dir.set(dir);
    }

    /// What a confined child may not touch: the state root and the credential directory.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut hidden = vec![self.state_root.clone()];
        hidden.extend(self.credential_dir.get().cloned());
        hidden
    }

    /// CAR's observe-only mode: another daemon is primary for this state root, so this one
    /// lists agents but starts, stops and restarts none (`manifest` names what the primary
    /// supervises).
    pub fn observe_only(&self, manifest: &Path) {
        tracing::warn!(manifest = %manifest.display(), "another car-server is primary for this state root: agent supervision is observe-only here");
        let _ = self.observer.set(manifest.display().to_string());
    }

    fn refuse_if_observer(&self) -> Result<(), RpcError> {
        match self.observer.get() {
            Some(manifest) => Err(RpcError::internal(format!(
                "observe-only: another car-server supervises the agents of {manifest}; send this to the primary daemon"
            ))
            .with_data(serde_json::json!({"reason": "observe_only", "manifest_path": manifest}))),
            None => Ok(()),
        }
    }

    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    fn set_wanted(&self, id: &str, wanted: bool) {
        let mut set = self.wanted.lock().expect("wanted lock");
        let changed = if wanted {
            set.insert(id.to_string())
        } else {
            set.remove(id)
        };
        if changed {
            let text = serde_json::to_string(&*set).unwrap_or_else(|_| "[]".into());
            if let Err(e) = crate::state::auth::write_private_file(&self.wanted_path, &text) {
                tracing::warn!(error = %e, "could not save which agents should run");
            }
        }
    }

    fn launch_spec(
        &self,
        registry: &AgentRegistry,
        spec: &AgentSpec,
    ) -> Result<LaunchSpec, RpcError> {
        let id = spec.id.to_string();
        let command = spec.command.clone().ok_or_else(|| {
            RpcError::invalid_params(format!("agent '{id}' has no command to run"))
        })?;
        let token = registry
            .token(&id)
            .ok_or_else(|| RpcError::internal(format!("agent '{id}' has no token")))?;
        let cwd = match &spec.cwd {
            Some(cwd) => PathBuf::from(cwd),
            None => {
                let dir = self.state_root.join("agents").join(&id).join("work");
                crate::state::auth::ensure_private_dir(&dir).map_err(|e| {
                    RpcError::internal(format!("cannot create {}: {e}", dir.display()))
                })?;
                dir
            }
        };
        let mut env: BTreeMap<String, String> = spec.env.clone().unwrap_or_default();
        if !env.contains_key("PATH") {
            if let Some(path) = std::env::var_os("PATH").and_then(|p| p.into_string().ok()) {
                env.insert("PATH".into(), path);
            }
        }
        env.insert("CAR_AGENT_ID".into(), id.clone());
        env.insert("CAR_AGENT_TOKEN".into(), token);
        if let Some(url) = self.daemon_url.get() {
            env.insert("CAR_DAEMON_URL".into(), url.clone());
        }
        // The state root (every agent's token, the secrets, the stores) and the credential
        // directory are hidden; the agent's own directory and working directory are not.
        let confine = Confinement {
            hidden: self.hidden_paths(),
            exposed: vec![self.state_root.join("agents").join(&id), cwd.clone()],
        };
        Ok(LaunchSpec {
            confine: Some(confine),
            id,
            command: PathBuf::from(command),
            args: spec.args.clone().unwrap_or_default(),
            cwd: Some(cwd),
            env,
            restart: match spec.restart.unwrap_or_default() {
                RestartPolicy::Never => Restart::Never,
                RestartPolicy::OnFailure => Restart::OnFailure,
                RestartPolicy::Always => Restart::Always,
            },
            max_restarts: spec.max_restarts.unwrap_or(DEFAULT_MAX_RESTARTS),
            backoff: spec
                .backoff_secs
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_BACKOFF),
        })
    }

    pub async fn start(&self, registry: &AgentRegistry, id: &str) -> Result<(), RpcError> {
        self.run(registry, id, false).await
    }

    pub async fn restart(&self, registry: &AgentRegistry, id: &str) -> Result<(), RpcError> {
        self.run(registry, id, true).await
    }

    /// Starts (or, with `restart`, stops then starts) agent `id` and marks it wanted.
    async fn run(&self, registry: &AgentRegistry, id: &str, restart: bool) -> Result<(), RpcError> {
        self.refuse_if_observer()?;
        let spec = registry
            .spec(id)
            .ok_or_else(|| RpcError::invalid_params(format!("id: no registered agent '{id}'")))?;
        let launch = self.launch_spec(registry, &spec)?;
        let outcome = if restart {
            self.supervisor.restart(launch).await
        } else {
            self.supervisor.start(launch).await
        };
        outcome.map_err(RpcError::from)?;
        self.set_wanted(id, true);
        Ok(())
    }

    pub async fn stop(
        &self,
        registry: &AgentRegistry,
        id: &str,
        kill: bool,
    ) -> Result<(), RpcError> {
        self.refuse_if_observer()?;
        if registry.spec(id).is_none() {
            return Err(RpcError::invalid_params(format!(
                "id: no registered agent '{id}'"
            )));
        }
        self.set_wanted(id, false);
        match self.supervisor.stop(id, kill).await {
            Ok(_) | Err(SupervisorError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// `agents.remove`: stops the child and forgets it (its logs stay).
    pub async fn forget(&self, id: &str) {
        self.set_wanted(id, false);
        if let Err(e) = self.supervisor.forget(id).await {
            if !matches!(e, SupervisorError::NotFound(_)) {
                tracing::warn!(agent = %id, error = %e, "could not stop a removed agent");
            }
        }
    }

    /// `ManagedAgent` with the supervised process's state folded in.
    pub fn managed(&self, mut agent: ManagedAgent) -> ManagedAgent {
        let logs = self
            .supervisor
            .config()
            .logs_dir
            .join("agents")
            .join(agent.spec.id.as_str());
        agent.log_path = Some(logs.join("stdout.log").display().to_string());
        agent.stderr_log_path = Some(logs.join("stderr.log").display().to_string());
        if let Some(rt) = self.supervisor.status(agent.spec.id.as_str()) {
            agent.status = status_of(rt.status).as_str().to_string();
            agent.pid = rt.pid;
            agent.last_exit_code = rt.last_exit_code;
            agent.restart_count = rt.restart_count;
            agent.started_at = rt.started_at;
            agent.reason = rt.reason;
        }
        agent
    }

    /// Boot: remembers the daemon's URL, then starts every wanted or `auto_start` agent
    /// (adopting children a previous daemon left running).
    pub async fn boot(&self, registry: &AgentRegistry, daemon_url: String) {
        let _ = self.daemon_url.set(daemon_url);
        let wanted = self.wanted.lock().expect("wanted lock").clone();
        for agent in registry.list() {
            let id = agent.spec.id.to_string();
            if !(wanted.contains(&id) || agent.spec.auto_start == Some(true)) {
                continue;
            }
            if let Err(e) = self.start(registry, &id).await {
                tracing::warn!(agent = %id, error = %e.message, "could not start the agent at boot");
            }
        }
    }

    /// Clean daemon exit: stop every child; the wanted list stays for the next boot.
    pub async fn shutdown(&self) {
        self.supervisor.shutdown(true).await;
    }
}
