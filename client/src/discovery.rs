//! Where the daemon is and how to authenticate to it (bindings-api "Connection and
//! discovery", reference "Cross-host clients").
//!
//! This module owns the precedence rules and nothing else: it never opens a socket. The
//! rules are a pure function of the caller's explicit settings ([`Overrides`]), an
//! environment snapshot ([`EnvSnapshot`]) and a file-system probe ([`FileProbe`]), so each
//! rule is testable without touching the developer's environment:
//!
//! - address: argument, else `CAR_DAEMON_URL`, else [`DEFAULT_URL`]; when the address is the
//!   default local one and the daemon's Unix socket exists (`CAR_SERVER_SOCKET` overrides its
//!   path), the socket is preferred;
//! - token: argument, else trimmed non-empty `CAR_AUTH_TOKEN`, else the trimmed non-empty platform
//!   token file, else none (then no `session.auth` frame is sent);
//! - host token: the `host-token` file beside the token file (host-management calls only);
//! - memory namespace: argument, else `CAR_MEMORY_NAMESPACE`; it rides on `session.auth`;
//! - agent identity (a lifecycle agent the supervisor spawned): argument
//!   ([`crate::ClientConfig::agent`]), else `CAR_AGENT_ID` with `CAR_AGENT_TOKEN`, both trimmed and
//!   non-empty. With one, the operator connection's `session.auth` is `{token: <agent token>,
//!   agent_id, memory_namespace?}`: the agent's token replaces the daemon token (which is then not
//!   needed at all). When only one of the two variables is set, a warning names the missing one
//!   (never the token) at each connect and the client authenticates as if neither were set.
//!
//! Every token (daemon token, host token, agent token) is held as a [`Secret`]
//! (`car_proto::redact::Redacted`), so no `{:?}` of a snapshot, config or discovery result
//! shows one.
//!
//! Discovery runs at every connect, so a restarted daemon's fresh token is picked up. The
//! snapshot also carries `CAR_INFER_IDLE_MS`, which is not discovery but the inference idle
//! window ([`crate::TimeoutPolicy::with_env`]); capturing it here keeps every environment
//! read of the client in one place.

use std::path::{Path, PathBuf};

use car_proto::paths::{self, PathEnv, Platform};
use car_proto::redact::Redacted;

use crate::error::Error;

/// The address used when neither the caller nor `CAR_DAEMON_URL` names one.
pub const DEFAULT_URL: &str = "ws://127.0.0.1:9100";
/// The daemon's default TCP port.
pub const DEFAULT_PORT: u16 = 9100;

/// The environment values discovery reads, captured once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSnapshot {
    /// `CAR_DAEMON_URL`.
    pub daemon_url: Option<String>,
    /// `CAR_AUTH_TOKEN`.
    pub auth_token: Option<Secret>,
    /// `CAR_AGENT_ID`: this process is a lifecycle agent (see [`AgentIdentity`]).
    pub agent_id: Option<String>,
    /// `CAR_AGENT_TOKEN`: that agent's own token.
    pub agent_token: Option<Secret>,
    /// `CAR_MEMORY_NAMESPACE`.
    pub memory_namespace: Option<String>,
    /// `CAR_INFER_IDLE_MS`: the inference idle window (see [`crate::TimeoutPolicy::with_env`]).
    pub infer_idle_ms: Option<String>,
    /// What token-file and socket path resolution reads (`CAR_HOME`, `XDG_RUNTIME_DIR`,
    /// `CAR_SERVER_SOCKET`, the home directory).
    pub paths: PathEnv,
}

impl EnvSnapshot {
    /// This process's environment.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var(name).ok();
        Self {
            daemon_url: var("CAR_DAEMON_URL"),
            auth_token: var("CAR_AUTH_TOKEN").map(Secret::new),
            agent_id: var("CAR_AGENT_ID"),
            agent_token: var("CAR_AGENT_TOKEN").map(Secret::new),
            memory_namespace: var("CAR_MEMORY_NAMESPACE"),
            infer_idle_ms: var("CAR_INFER_IDLE_MS"),
            paths: PathEnv::from_process(),
        }
    }

    /// An environment with nothing set: discovery then uses only what the caller passes
    /// explicitly (URL, token).
    pub fn empty() -> Self {
        Self {
            daemon_url: None,
            auth_token: None,
            agent_id: None,
            agent_token: None,
            memory_namespace: None,
            infer_idle_ms: None,
            paths: PathEnv {
                platform: Platform::current(),
                home: None,
                car_home: None,
                xdg_runtime_dir: None,
                local_app_data: None,
                car_server_socket: None,
            },
        }
    }

    /// An environment with nothing set except `CAR_HOME`: what tests use so the
    /// developer's own variables never leak in.
    pub fn with_car_home(car_home: impl AsRef<Path>) -> Self {
        let mut env = Self::empty();
        env.paths.car_home = Some(car_home.as_ref().as_os_str().to_owned());
        env
    }
}

/// Settings the caller passed explicitly; each wins over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub url: Option<String>,
    pub token: Option<Secret>,
    pub memory_namespace: Option<String>,
    /// Wins over `CAR_AGENT_ID` / `CAR_AGENT_TOKEN`.
    pub agent: Option<AgentIdentity>,
}

/// A token value whose `Debug` and `Display` output never shows it (`[redacted]`); reach
/// it with `expose()`.
pub type Secret = Redacted<String>;

/// A lifecycle agent's identity: `session.auth` on the operator connection then sends
/// `{token: <token>, agent_id}` (CAR's rule for SDKs the supervisor spawns with
/// `CAR_AGENT_ID` and `CAR_AGENT_TOKEN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIdentity {
    pub agent_id: String,
    /// The agent's own token; it replaces the daemon token in `session.auth`.
    pub token: Secret,
}

impl AgentIdentity {
    pub fn new(agent_id: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            agent_id: agent_id.into(),
            token: Secret::new(token.into()),
        }
    }
}

/// Where a token came from (logged, never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    Argument,
    Env,
    File(PathBuf),
}

/// A discovered token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub secret: Secret,
    pub source: TokenSource,
}

/// How to reach the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A WebSocket over TCP: `host:port` to dial and the URL for the upgrade request.
    Tcp { url: String, addr: String },
    /// The same WebSocket protocol over the daemon's Unix socket.
    Unix { path: PathBuf },
}

/// The outcome of discovery for one connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub endpoint: Endpoint,
    pub token: Option<Credential>,
    pub memory_namespace: Option<String>,
    /// Present when this process authenticates as a lifecycle agent.
    pub agent: Option<AgentIdentity>,
}

/// The file-system questions discovery asks.
pub trait FileProbe {
    /// The file's text, or `None` when it cannot be read.
    fn read_to_string(&self, path: &Path) -> Option<String>;
    /// True when `path` is a Unix socket.
    fn is_socket(&self, path: &Path) -> bool;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl FileProbe for RealFs {
    fn read_to_string(&self, path: &Path) -> Option<String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read token file");
                None
            }
        }
    }

    #[cfg(unix)]
    fn is_socket(&self, path: &Path) -> bool {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
    }

    #[cfg(not(unix))]
    fn is_socket(&self, _path: &Path) -> bool {
        false
    }
}

/// Applies every rule in the module docs.
pub fn discover(
    overrides: &Overrides,
    env: &EnvSnapshot,
    fs: &dyn FileProbe,
) -> Result<Discovered, Error> {
    let url = non_empty(overrides.url.as_deref())
        .or_else(|| non_empty(env.daemon_url.as_deref()))
        .unwrap_or(DEFAULT_URL)
        .to_string();
    let parsed = parse_ws_url(&url)?;
    let paths = resolved_paths(env);
    let socket = paths
        .as_ref()
        .map(|p| p.shared_socket.clone())
        .filter(|path| parsed.is_default_local() && fs.is_socket(path));
    let endpoint = match socket {
        Some(path) => Endpoint::Unix { path },
        None => Endpoint::Tcp {
            addr: parsed.addr(),
            url,
        },
    };
    let token = match &overrides.token {
        Some(secret) => Some(Credential {
            secret: secret.clone(),
            source: TokenSource::Argument,
        }),
        None => match non_empty(env.auth_token.as_ref().map(|t| t.expose().as_str())) {
            Some(t) => Some(Credential {
                secret: Secret::new(t.to_string()),
                source: TokenSource::Env,
            }),
            None => paths.and_then(|p| read_token_file(&p.auth_token, fs)),
        },
    };
    let memory_namespace = non_empty(overrides.memory_namespace.as_deref())
        .or_else(|| non_empty(env.memory_namespace.as_deref()))
        .map(str::to_string);
    let agent = match &overrides.agent {
        Some(given) => Some(explicit_agent(given)?),
        None => agent_from_env(env),
    };
    Ok(Discovered {
        endpoint,
        token,
        memory_namespace,
        agent,
    })
}

/// An identity passed explicitly, trimmed; a blank id or token is refused rather than
/// silently authenticating as someone else.
fn explicit_agent(given: &AgentIdentity) -> Result<AgentIdentity, Error> {
    match (
        non_empty(Some(&given.agent_id)),
        non_empty(Some(given.token.expose())),
    ) {
        (Some(id), Some(token)) => Ok(AgentIdentity::new(id, token)),
        (None, _) => Err(Error::InvalidArgument(
            "agent: agent_id must not be empty".into(),
        )),
        (_, None) => Err(Error::InvalidArgument(
            "agent: token must not be empty".into(),
        )),
    }
}

/// `CAR_AGENT_ID` with `CAR_AGENT_TOKEN`; only one of them is a misconfigured spawn, so
/// it is logged (naming the missing variable, never the token) and ignored.
fn agent_from_env(env: &EnvSnapshot) -> Option<AgentIdentity> {
    let id = non_empty(env.agent_id.as_deref());
    let token = non_empty(env.agent_token.as_ref().map(|t| t.expose().as_str()));
    match (id, token) {
        (Some(id), Some(token)) => Some(AgentIdentity::new(id, token)),
        (Some(_), None) => {
            tracing::warn!(
                "CAR_AGENT_ID is set but CAR_AGENT_TOKEN is missing: authenticating without an agent identity"
            );
            None
        }
        (None, Some(_)) => {
            tracing::warn!(
                "CAR_AGENT_TOKEN is set but CAR_AGENT_ID is missing: authenticating without an agent identity"
            );
            None
        }
        (None, None) => None,
    }
}

/// The host token for host-management calls: only ever the `host-token` file.
pub fn discover_host_token(env: &EnvSnapshot, fs: &dyn FileProbe) -> Result<Credential, Error> {
    let paths = resolved_paths(env)
        .ok_or_else(|| Error::Refused("cannot locate the host-token file".into()))?;
    read_token_file(&paths.host_token, fs).ok_or_else(|| {
        Error::Refused(format!(
            "host token not found at {}",
            paths.host_token.display()
        ))
    })
}

fn resolved_paths(env: &EnvSnapshot) -> Option<paths::Paths> {
    match paths::resolve(&env.paths) {
        Ok(p) => Some(p),
        Err(e) => {
            // Cross-host clients may have no home directory at all; they pass the token
            // and URL explicitly, so a missing local state root is not fatal here.
            tracing::debug!(error = %e, "no local state root: token file and socket skipped");
            None
        }
    }
}

fn read_token_file(path: &Path, fs: &dyn FileProbe) -> Option<Credential> {
    let text = fs.read_to_string(path)?;
    non_empty(Some(&text)).map(|t| Credential {
        secret: Secret::new(t.to_string()),
        source: TokenSource::File(path.to_path_buf()),
    })
}

/// Trimmed, and `None` when empty or whitespace only: a shell-quoting slip must not
/// silently disable auth or point the client nowhere.
fn non_empty(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// The parts of a `ws://` URL the client needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl WsUrl {
    /// `host:port` for dialing, with IPv6 hosts bracketed.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// True for `ws://{127.0.0.1,localhost,[::1]}:9100` with an empty or `/` path.
    pub fn is_default_local(&self) -> bool {
        let loopback = matches!(self.host.as_str(), "127.0.0.1" | "localhost" | "::1");
        loopback && self.port == DEFAULT_PORT && (self.path.is_empty() || self.path == "/")
    }
}

/// Parses `ws://host[:port][/path]`. `wss://` is refused: this client has no TLS stack,
/// and a silent downgrade to plain text would leak the token.
pub fn parse_ws_url(url: &str) -> Result<WsUrl, Error> {
    let rest = if let Some(rest) = url.strip_prefix("ws://") {
        rest
    } else if url.starts_with("wss://") {
        return Err(Error::Refused(format!(
            "url {url:?}: wss is not supported by this client"
        )));
    } else {
        return Err(Error::Refused(format!("url {url:?} must start with ws://")));
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let bad = || Error::Refused(format!("url {url:?} has no valid host and port"));
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad())?,
            None if after.is_empty() => 80,
            None => return Err(bad()),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad())?),
            None => (authority.to_string(), 80),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    Ok(WsUrl {
        host: host.to_ascii_lowercase(),
        port,
        path: path.to_string(),
    })
}

#[cfg(test)]
mod tests;
