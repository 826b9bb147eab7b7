//! Where the daemon is and how to authenticate to it (bindings-api "Connection and
//! discovery", reference "Cross-host clients").
//!
//! This module owns the precedence rules and nothing else: it never opens a socket. The
//! rules are a pure function of the caller's explicit settings ([`Overrides`]), an
//! environment snapshot ([`EnvSnapshot`]) and a file-system probe ([`FileProbe`]), so each
//! rule is testable without touching the developer's environment:
//!
//! - address: argument, else `CAR_DAEMON_URL`, else [`DEFAULT_URL`]; when the address is
//!   the default local one and the daemon's Unix socket exists (`CAR_SERVER_SOCKET`
//!   overrides its path), the socket is preferred;
//! - token: argument, else trimmed non-empty `CAR_AUTH_TOKEN`, else the trimmed non-empty
//!   platform token file, else none (then no `session.auth` frame is sent);
//! - host token: the `host-token` file beside the token file (host-management calls only);
//! - memory namespace: argument, else `CAR_MEMORY_NAMESPACE`; it rides on `session.auth`.
//!
//! Discovery runs at every connect, so a restarted daemon's fresh token is picked up. The
//! snapshot also carries `CAR_INFER_IDLE_MS`, which is not discovery but the inference idle
//! window ([`crate::TimeoutPolicy::with_env`]); capturing it here keeps every environment
//! read of the client in one place.

use std::path::{Path, PathBuf};

use car_proto::paths::{self, PathEnv, Platform};

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
    pub auth_token: Option<String>,
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
            auth_token: var("CAR_AUTH_TOKEN"),
            memory_namespace: var("CAR_MEMORY_NAMESPACE"),
            infer_idle_ms: var("CAR_INFER_IDLE_MS"),
            paths: PathEnv::from_process(),
        }
    }

    /// An environment with nothing set except `CAR_HOME`: what tests use so the
    /// developer's own variables never leak in.
    pub fn with_car_home(car_home: impl AsRef<Path>) -> Self {
        Self {
            daemon_url: None,
            auth_token: None,
            memory_namespace: None,
            infer_idle_ms: None,
            paths: PathEnv {
                platform: Platform::current(),
                home: None,
                car_home: Some(car_home.as_ref().as_os_str().to_owned()),
                xdg_runtime_dir: None,
                local_app_data: None,
                car_server_socket: None,
            },
        }
    }
}

/// Settings the caller passed explicitly; each wins over the environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub url: Option<String>,
    pub token: Option<Secret>,
    pub memory_namespace: Option<String>,
}

/// A token value whose `Debug` output never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} chars)", self.0.chars().count())
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
        None => match non_empty(env.auth_token.as_deref()) {
            Some(t) => Some(Credential {
                secret: Secret::new(t),
                source: TokenSource::Env,
            }),
            None => paths.and_then(|p| read_token_file(&p.auth_token, fs)),
        },
    };
    let memory_namespace = non_empty(overrides.memory_namespace.as_deref())
        .or_else(|| non_empty(env.memory_namespace.as_deref()))
        .map(str::to_string);
    Ok(Discovered {
        endpoint,
        token,
        memory_namespace,
    })
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
        secret: Secret::new(t),
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
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    #[derive(Default)]
    struct FakeFs {
        files: HashMap<PathBuf, String>,
        sockets: HashSet<PathBuf>,
    }

    impl FileProbe for FakeFs {
        fn read_to_string(&self, path: &Path) -> Option<String> {
            self.files.get(path).cloned()
        }
        fn is_socket(&self, path: &Path) -> bool {
            self.sockets.contains(path)
        }
    }

    const HOME: &str = "/car-home";

    fn env() -> EnvSnapshot {
        let mut e = EnvSnapshot::with_car_home(HOME);
        e.paths.platform = Platform::Linux;
        e
    }

    fn token_file() -> PathBuf {
        PathBuf::from(HOME).join("ai.parslee.car/auth-token")
    }

    fn socket() -> PathBuf {
        PathBuf::from(HOME).join("run/car-server.sock")
    }

    fn fs_with_token(text: &str) -> FakeFs {
        let mut fs = FakeFs::default();
        fs.files.insert(token_file(), text.into());
        fs
    }

    fn token(o: &Overrides, e: &EnvSnapshot, fs: &FakeFs) -> Option<(String, TokenSource)> {
        discover(o, e, fs)
            .unwrap()
            .token
            .map(|c| (c.secret.expose().to_string(), c.source))
    }

    #[test]
    fn token_argument_beats_env_and_file() {
        let mut e = env();
        e.auth_token = Some("from-env".into());
        let o = Overrides {
            token: Some(Secret::new("from-arg")),
            ..Overrides::default()
        };
        let got = token(&o, &e, &fs_with_token("from-file"));
        assert_eq!(got, Some(("from-arg".into(), TokenSource::Argument)));
    }

    #[test]
    fn token_env_is_trimmed_and_beats_file() {
        let mut e = env();
        e.auth_token = Some("  tok-env\n".into());
        let got = token(&Overrides::default(), &e, &fs_with_token("from-file"));
        assert_eq!(got, Some(("tok-env".into(), TokenSource::Env)));
    }

    #[test]
    fn blank_env_token_falls_through_to_the_file() {
        for blank in ["", "   ", "\n\t"] {
            let mut e = env();
            e.auth_token = Some(blank.into());
            let got = token(&Overrides::default(), &e, &fs_with_token(" tok-file \n"));
            assert_eq!(
                got,
                Some(("tok-file".into(), TokenSource::File(token_file())))
            );
        }
    }

    #[test]
    fn blank_or_missing_file_means_no_token() {
        assert_eq!(
            token(&Overrides::default(), &env(), &FakeFs::default()),
            None
        );
        assert_eq!(
            token(&Overrides::default(), &env(), &fs_with_token(" \n")),
            None
        );
    }

    #[test]
    fn token_file_follows_the_platform_rules() {
        let mut e = env();
        e.paths.car_home = None;
        e.paths.home = Some("/home/u".into());
        e.paths.xdg_runtime_dir = Some("/run/user/7".into());
        let mut fs = FakeFs::default();
        fs.files.insert(
            "/run/user/7/ai.parslee.car/auth-token".into(),
            "xdg-tok".into(),
        );
        let got = token(&Overrides::default(), &e, &fs);
        assert_eq!(got.map(|t| t.0), Some("xdg-tok".into()));
    }

    #[test]
    fn url_precedence() {
        let fs = FakeFs::default();
        let url = |o: &Overrides, e: &EnvSnapshot| match discover(o, e, &fs).unwrap().endpoint {
            Endpoint::Tcp { url, .. } => url,
            other => panic!("{other:?}"),
        };
        assert_eq!(url(&Overrides::default(), &env()), DEFAULT_URL);
        let mut e = env();
        e.daemon_url = Some("ws://127.0.0.1:9200".into());
        assert_eq!(url(&Overrides::default(), &e), "ws://127.0.0.1:9200");
        let o = Overrides {
            url: Some("ws://localhost:9300/".into()),
            ..Overrides::default()
        };
        assert_eq!(url(&o, &e), "ws://localhost:9300/");
        e.daemon_url = Some("  ".into());
        assert_eq!(url(&Overrides::default(), &e), DEFAULT_URL);
    }

    #[test]
    fn unix_socket_preferred_only_for_the_default_local_url() {
        let mut fs = FakeFs::default();
        fs.sockets.insert(socket());
        let d = discover(&Overrides::default(), &env(), &fs).unwrap();
        assert_eq!(d.endpoint, Endpoint::Unix { path: socket() });
        let mut e = env();
        e.daemon_url = Some("ws://localhost:9100/".into());
        assert!(matches!(
            discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
            Endpoint::Unix { .. }
        ));
        e.daemon_url = Some("ws://127.0.0.1:9201".into());
        let d = discover(&Overrides::default(), &e, &fs).unwrap();
        assert_eq!(
            d.endpoint,
            Endpoint::Tcp {
                url: "ws://127.0.0.1:9201".into(),
                addr: "127.0.0.1:9201".into()
            }
        );
        // No socket file: TCP even for the default URL.
        let d = discover(&Overrides::default(), &env(), &FakeFs::default()).unwrap();
        assert!(matches!(d.endpoint, Endpoint::Tcp { .. }));
    }

    #[test]
    fn car_server_socket_overrides_the_socket_path() {
        let mut e = env();
        e.paths.car_server_socket = Some("/tmp/elsewhere.sock".into());
        let mut fs = FakeFs::default();
        fs.sockets.insert(socket());
        assert!(matches!(
            discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
            Endpoint::Tcp { .. }
        ));
        fs.sockets.insert("/tmp/elsewhere.sock".into());
        assert_eq!(
            discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
            Endpoint::Unix {
                path: "/tmp/elsewhere.sock".into()
            }
        );
    }

    #[test]
    fn memory_namespace_precedence() {
        let fs = FakeFs::default();
        let mut e = env();
        assert_eq!(
            discover(&Overrides::default(), &e, &fs)
                .unwrap()
                .memory_namespace,
            None
        );
        e.memory_namespace = Some("proj-a".into());
        assert_eq!(
            discover(&Overrides::default(), &e, &fs)
                .unwrap()
                .memory_namespace
                .as_deref(),
            Some("proj-a")
        );
        let o = Overrides {
            memory_namespace: Some("proj-b".into()),
            ..Overrides::default()
        };
        assert_eq!(
            discover(&o, &e, &fs).unwrap().memory_namespace.as_deref(),
            Some("proj-b")
        );
    }

    #[test]
    fn host_token_is_read_from_its_own_file() {
        let mut fs = fs_with_token("daemon-tok");
        assert!(matches!(
            discover_host_token(&env(), &fs),
            Err(Error::Refused(m)) if m.contains("host token not found")
        ));
        fs.files.insert(
            PathBuf::from(HOME).join("ai.parslee.car/host-token"),
            "host-tok\n".into(),
        );
        let c = discover_host_token(&env(), &fs).unwrap();
        assert_eq!(c.secret.expose(), "host-tok");
    }

    #[test]
    fn url_parsing() {
        let u = parse_ws_url("ws://[::1]:9100").unwrap();
        assert_eq!(
            (u.addr(), u.is_default_local()),
            ("[::1]:9100".into(), true)
        );
        assert_eq!(parse_ws_url("ws://example.com").unwrap().port, 80);
        assert!(!parse_ws_url("ws://127.0.0.1:9100/x")
            .unwrap()
            .is_default_local());
        assert!(matches!(parse_ws_url("wss://h:1"), Err(Error::Refused(m)) if m.contains("wss")));
        assert!(parse_ws_url("http://h:1").is_err());
        assert!(parse_ws_url("ws://:9100").is_err());
        assert!(parse_ws_url("ws://h:notaport").is_err());
    }

    #[test]
    fn secrets_are_redacted_in_debug_output() {
        let c = Credential {
            secret: Secret::new("hunter2"),
            source: TokenSource::Env,
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
