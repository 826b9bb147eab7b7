//! [`AgentRegistry`]: durable agent identities (CAR's `agents.json` manifest) with one
//! token per agent, and which connection each agent is attached to.
//!
//! # Files
//! - `CAR_HOME/agents.json`: `{"version": 1, "agents": [AgentSpec…]}`, mode 0600, written
//!   atomically (temp + rename) after every change; read once at startup (a file that does not
//!   parse is moved aside to `agents.json.corrupt-<ms>` and the registry starts empty, with an
//!   error logged).
//! - `CAR_HOME/agents/<id>/token`: the agent's token (43 base64url characters), minted by the first
//!   `agents.upsert` of that id and kept across later upserts; mode 0600 in a 0700 directory,
//!   atomic. A host that launches the agent hands it over as `CAR_AGENT_TOKEN` (with
//!   `CAR_AGENT_ID`). `agents.remove` deletes it, so the token dies with the identity.
//!
//! # Attachment
//! `session.auth {token, agent_id}` with the agent's token attaches the connection. A
//! later connection with the same valid credential replaces the earlier one, which is
//! closed (the reference's rule: a respawned agent recovers even before the old socket
//! noticed it died). With auth off nothing proves an identity, so the newest connection
//! takes the attachment and none is closed. Only the connection that still holds the
//! attachment detaches it when it closes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use car_proto::errors::RpcError;
use car_proto::methods::agents::{AgentSpec, ManagedAgent};
use serde::{Deserialize, Serialize};

use crate::state::auth;
use crate::state::session::Session;

/// Longest agent id (bytes).
pub const MAX_ID_BYTES: usize = 128;
/// Registered agents at most.
pub const MAX_AGENTS: usize = 1000;

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    version: u32,
    agents: Vec<AgentSpec>,
}

#[derive(Debug)]
struct Entry {
    spec: AgentSpec,
    token: String,
}

#[derive(Debug)]
pub struct AgentRegistry {
    manifest: PathBuf,
    tokens_dir: PathBuf,
    agents: Mutex<BTreeMap<String, Entry>>,
    attached: Mutex<HashMap<String, Weak<Session>>>,
}

fn invalid(detail: impl std::fmt::Display) -> RpcError {
    RpcError::invalid_params(detail)
}

/// CAR's id rule: ASCII letters, digits, `-`, `_`, `.`; not `.` or `..`.
pub fn validate_id(field: &str, id: &str) -> Result<(), RpcError> {
    if id.len() > MAX_ID_BYTES {
        return Err(invalid(format!(
            "{field}: is longer than {MAX_ID_BYTES} bytes"
        )));
    }
    if id == "." || id == ".." {
        return Err(invalid(format!("{field}: must not be '.' or '..'")));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(invalid(format!(
            "{field}: {c:?} is not allowed (use ASCII letters, digits, '-', '_' or '.')"
        )));
    }
    Ok(())
}

/// Why `path` can no longer be run as an agent's command (`agents.health`), if it cannot.
pub fn command_problem(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Err(e) => Some(format!("{}: {e}", path.display())),
        Ok(m) if !m.is_file() => Some(format!("{} is not a file", path.display())),
        Ok(_) if !is_executable(path) => Some(format!("{} has no execute bit", path.display())),
        Ok(_) => None,
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Resolves `program` against the daemon's `PATH` (CAR's `interpreter` sugar).
fn resolve_interpreter(program: &str) -> Result<String, RpcError> {
    if program.is_empty() || program.contains('/') {
        return Err(invalid(
            "interpreter: must be a bare program name such as \"python3\"",
        ));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_absolute() && is_executable(candidate))
        .map(|p| p.display().to_string())
        .ok_or_else(|| invalid(format!("interpreter: {program:?} was not found on PATH")))
}

/// Checks a spec and resolves its `command` (see the module docs of `services::agents`).
pub fn validate(mut spec: AgentSpec) -> Result<AgentSpec, RpcError> {
    validate_id("id", &spec.id)?;
    spec.command = match (spec.command.take(), spec.interpreter.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(invalid("interpreter: give either command or interpreter"))
        }
        (None, Some(program)) => Some(resolve_interpreter(program)?),
        (Some(command), None) => {
            let path = Path::new(&command);
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "command: must be an absolute path, got {command:?}"
                )));
            }
            if !is_executable(path) {
                return Err(invalid(format!(
                    "command: {command:?} is not an executable file"
                )));
            }
            Some(command)
        }
        (None, None) => return Err(invalid("command: is required (or interpreter)")),
    };
    if let Some(cwd) = &spec.cwd {
        if !Path::new(cwd).is_absolute() {
            return Err(invalid(format!(
                "cwd: must be an absolute path, got {cwd:?}"
            )));
        }
    }
    if let Some(list) = &spec.method_allowlist {
        for (i, method) in list.iter().enumerate() {
            if car_proto::methods::lookup(method).is_none() {
                return Err(invalid(format!(
                    "method_allowlist[{i}]: unknown method {method:?}"
                )));
            }
        }
    }
    Ok(spec)
}

impl AgentRegistry {
    /// Opens the registry under `state_root` (see the module docs).
    pub fn open(state_root: &Path) -> Self {
        let manifest = state_root.join("agents.json");
        let tokens_dir = state_root.join("agents");
        let mut agents = BTreeMap::new();
        match crate::state::state_file::read(&manifest) {
            Ok(None) => {}
            Err(e) => {
                tracing::error!(path = %manifest.display(), error = %e, "cannot read the agent manifest; starting with no agents")
            }
            Ok(Some(bytes)) => match serde_json::from_slice::<Manifest>(&bytes) {
                Ok(m) => {
                    for spec in m.agents {
                        let id = spec.id.to_string();
                        match crate::state::state_file::read_token(
                            &tokens_dir.join(&id).join("token"),
                        ) {
                            Ok(token) => {
                                agents.insert(id, Entry { spec, token });
                            }
                            Err(e) => {
                                tracing::warn!(agent = %id, error = %e, "agent has no readable token; it is dropped from the registry")
                            }
                        }
                    }
                }
                Err(e) => {
                    let aside = manifest
                        .with_extension(format!("json.corrupt-{}", car_proto::clock::now_ms()));
                    tracing::error!(path = %manifest.display(), error = %e, aside = %aside.display(), "the agent manifest does not parse; moved aside, starting with no agents");
                    let _ = std::fs::rename(&manifest, &aside);
                }
            },
        }
        AgentRegistry {
            manifest,
            tokens_dir,
            agents: Mutex::new(agents),
            attached: Mutex::new(HashMap::new()),
        }
    }

    pub fn manifest_path(&self) -> &Path {
        &self.manifest
    }

    fn token_path(&self, id: &str) -> PathBuf {
        self.tokens_dir.join(id).join("token")
    }

    fn persist(&self, agents: &BTreeMap<String, Entry>) -> Result<(), RpcError> {
        let manifest = Manifest {
            version: 1,
            agents: agents.values().map(|e| e.spec.clone()).collect(),
        };
        let text = serde_json::to_string_pretty(&manifest).map_err(RpcError::internal)?;
        auth::write_private_file(&self.manifest, &text)
            .map_err(|e| RpcError::internal(format!("cannot save the agent manifest: {e}")))
    }

    fn managed(&self, entry: &Entry) -> ManagedAgent {
        let id = entry.spec.id.as_str();
        let session = self.attached_session(id);
        ManagedAgent {
            spec: entry.spec.clone(),
            status: if session.is_some() {
                "running".into()
            } else {
                "stopped".into()
            },
            pid: None,
            last_exit_code: None,
            restart_count: 0,
            started_at: None,
            reason: None,
            log_path: None,
            stderr_log_path: None,
            attached: session.is_some(),
            session_id: session.map(|s| s.label()),
            manifest_path: self.manifest.display().to_string(),
            token_path: self.token_path(id).display().to_string(),
        }
    }

    /// Adds or replaces a (validated) spec; mints the token of a new id.
    pub fn upsert(&self, spec: AgentSpec) -> Result<ManagedAgent, RpcError> {
        let id = spec.id.to_string();
        let mut agents = self.agents.lock().expect("agents lock");
        if !agents.contains_key(&id) && agents.len() >= MAX_AGENTS {
            return Err(RpcError::internal(format!(
                "the agent registry is full ({MAX_AGENTS} agents)"
            )));
        }
        let token = match agents.get(&id) {
            Some(existing) => existing.token.clone(),
            None => {
                let token = auth::mint_token();
                auth::write_private_file(&self.token_path(&id), &token).map_err(|e| {
                    RpcError::internal(format!("cannot write the agent's token: {e}"))
                })?;
                token
            }
        };
        let previous = agents.insert(id.clone(), Entry { spec, token });
        if let Err(e) = self.persist(&agents) {
            match previous {
                Some(p) => agents.insert(id, p),
                None => agents.remove(&id),
            };
            return Err(e);
        }
        let entry = agents.get(&id).expect("just inserted");
        Ok(self.managed(entry))
    }

    pub fn list(&self) -> Vec<ManagedAgent> {
        let agents = self.agents.lock().expect("agents lock");
        agents.values().map(|e| self.managed(e)).collect()
    }

    /// Removes an agent, its token file and its attachment (that connection is closed).
    pub fn remove(&self, id: &str) -> Result<bool, RpcError> {
        let mut agents = self.agents.lock().expect("agents lock");
        let Some(entry) = agents.remove(id) else {
            return Ok(false);
        };
        if let Err(e) = self.persist(&agents) {
            agents.insert(id.to_string(), entry);
            return Err(e);
        }
        drop(agents);
        let dir = self.tokens_dir.join(id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(agent = %id, error = %e, "could not delete the agent's token directory");
        }
        if let Some(session) = self.attached.lock().expect("attached lock").remove(id) {
            if let Some(session) = session.upgrade() {
                session.evict("agent removed from the registry");
            }
        }
        Ok(true)
    }

    /// The agent's spec when `token` is its token (constant-time comparison).
    pub fn verify(&self, id: &str, token: &str) -> Option<AgentSpec> {
        let agents = self.agents.lock().expect("agents lock");
        let entry = agents.get(id)?;
        auth::tokens_match(&entry.token, token).then(|| entry.spec.clone())
    }

    /// A registered agent's token (handed to the child the supervisor starts).
    pub fn token(&self, id: &str) -> Option<String> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(id)
            .map(|e| e.token.clone())
    }

    /// The spec of a registered agent.
    pub fn spec(&self, id: &str) -> Option<AgentSpec> {
        self.agents
            .lock()
            .expect("agents lock")
            .get(id)
            .map(|e| e.spec.clone())
    }

    /// Attaches `session` to agent `id`; with `evict` (auth on: the credential was
    /// proven) the connection it replaces, if still open, is closed. With auth off nothing
    /// proves an identity, so no connection may close another: the newest just takes the
    /// attachment.
    pub fn attach(&self, id: &str, session: &Arc<Session>, evict: bool) {
        let previous = self
            .attached
            .lock()
            .expect("attached lock")
            .insert(id.to_string(), Arc::downgrade(session));
        if let Some(previous) = previous.and_then(|w| w.upgrade()).filter(|_| evict) {
            if previous.id != session.id {
                tracing::info!(agent = %id, old = previous.id, new = session.id, "a newer connection took over the agent");
                previous.evict("replaced by a newer connection for this agent");
            }
        }
    }

    /// Detaches `session` from agent `id` if it still holds the attachment.
    pub fn detach(&self, id: &str, session: &Session) {
        let mut attached = self.attached.lock().expect("attached lock");
        let holds = attached
            .get(id)
            .and_then(|w| w.upgrade())
            .is_none_or(|s| s.id == session.id);
        if holds {
            attached.remove(id);
        }
    }

    /// The open connection attached to agent `id`.
    pub fn attached_session(&self, id: &str) -> Option<Arc<Session>> {
        self.attached
            .lock()
            .expect("attached lock")
            .get(id)
            .and_then(|w| w.upgrade())
            .filter(|s| !s.closed.is_cancelled())
    }
}
