//! State-root, token and socket path resolution (reference "The state root (`CAR_HOME`)"
//! and "Token handshake").
//!
//! Resolution is pure: [`PathEnv`] is a snapshot of the environment it reads, so every
//! platform's rules are testable on any host. Rules:
//!
//! - state root: `CAR_HOME` (must be absolute; empty means unset), else `~/.car`;
//! - token directory: `$CAR_HOME/ai.parslee.car` when `CAR_HOME` is set, else per platform — Linux
//!   `$XDG_RUNTIME_DIR/ai.parslee.car` or `~/.config/ai.parslee.car`, macOS `~/Library/Application
//!   Support/ai.parslee.car`, Windows `%LOCALAPPDATA%\ai.parslee.car`; `auth-token` and
//!   `host-token` live there side by side;
//! - shared socket: `CAR_SERVER_SOCKET`, else `$CAR_HOME/run/car-server.sock` when `CAR_HOME` is
//!   set (`XDG_RUNTIME_DIR` stops deciding, so two relocated daemons never share one), else
//!   `$XDG_RUNTIME_DIR/ai.parslee.car/car-server.sock` on Linux, else `~/.car/run/car-server.sock`;
//! - a non-primary daemon's socket: `car-server-<port>.sock` beside the shared one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The directory name shared by the token directory on every platform.
pub const APP_DIR: &str = "ai.parslee.car";
pub const AUTH_TOKEN_FILE: &str = "auth-token";
pub const HOST_TOKEN_FILE: &str = "host-token";
/// The dashboard's one-time login URL (written by the primary daemon, `0600`).
pub const DASHBOARD_LOGIN_FILE: &str = "dashboard-login";
pub const SOCKET_FILE: &str = "car-server.sock";
pub const LOCK_FILE: &str = "daemon.lock";

/// The platform whose path rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Linux,
    MacOs,
    Windows,
}

impl Platform {
    /// The platform this crate was compiled for (other Unixes follow Linux).
    pub fn current() -> Self {
        if cfg!(target_os = "macos") {
            Platform::MacOs
        } else if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }
}

/// The environment values path resolution reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEnv {
    pub platform: Platform,
    pub home: Option<PathBuf>,
    pub car_home: Option<OsString>,
    pub xdg_runtime_dir: Option<OsString>,
    pub local_app_data: Option<OsString>,
    pub car_server_socket: Option<OsString>,
}

impl PathEnv {
    /// A snapshot of this process's environment.
    pub fn from_process() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let home = if cfg!(windows) {
            var("USERPROFILE")
        } else {
            var("HOME")
        };
        Self {
            platform: Platform::current(),
            home: home.map(PathBuf::from),
            car_home: var("CAR_HOME"),
            xdg_runtime_dir: var("XDG_RUNTIME_DIR"),
            local_app_data: var("LOCALAPPDATA"),
            car_server_socket: var("CAR_SERVER_SOCKET"),
        }
    }
}

/// Why the paths could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `CAR_HOME` was set to a relative path; the daemon exits 2 naming it.
    #[error("CAR_HOME must be an absolute path, got {0:?}")]
    RelativeCarHome(String),
    /// Neither `CAR_HOME` nor a home directory is known.
    #[error("cannot find the home directory: set HOME or CAR_HOME")]
    NoHome,
}

/// Every path the daemon and clients derive from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub state_root: PathBuf,
    /// True when `CAR_HOME` chose the state root.
    pub relocated: bool,
    pub token_dir: PathBuf,
    pub auth_token: PathBuf,
    pub host_token: PathBuf,
    pub dashboard_login: PathBuf,
    pub run_dir: PathBuf,
    pub lock_file: PathBuf,
    pub shared_socket: PathBuf,
    pub memory_dir: PathBuf,
}

impl Paths {
    /// The socket a non-primary daemon on `port` binds (docs/protocol-choices.md, "State root and
    /// instances").
    pub fn instance_socket(&self, port: u16) -> PathBuf {
        let dir = self.shared_socket.parent().unwrap_or(Path::new(""));
        dir.join(format!("car-server-{port}.sock"))
    }
}

fn is_absolute_for(platform: Platform, value: &str) -> bool {
    match platform {
        Platform::Windows => {
            let b = value.as_bytes();
            value.starts_with("\\\\")
                || (b.len() >= 3
                    && b[0].is_ascii_alphabetic()
                    && b[1] == b':'
                    && (b[2] == b'\\' || b[2] == b'/'))
        }
        _ => value.starts_with('/'),
    }
}

/// Resolves every path from `env` (see the module docs for the rules).
pub fn resolve(env: &PathEnv) -> Result<Paths, PathError> {
    let car_home = match &env.car_home {
        Some(raw) if !raw.is_empty() => {
            let text = raw.to_string_lossy();
            if !is_absolute_for(env.platform, &text) {
                return Err(PathError::RelativeCarHome(text.into_owned()));
            }
            Some(PathBuf::from(raw))
        }
        _ => None,
    };
    let home = env.home.clone();
    let state_root = match (&car_home, &home) {
        (Some(root), _) => root.clone(),
        (None, Some(home)) => home.join(".car"),
        (None, None) => return Err(PathError::NoHome),
    };
    let xdg = env
        .xdg_runtime_dir
        .as_ref()
        .filter(|v| is_absolute_for(env.platform, &v.to_string_lossy()))
        .map(PathBuf::from);
    let token_dir = match (&car_home, env.platform) {
        (Some(root), _) => root.join(APP_DIR),
        (None, Platform::Linux) => match &xdg {
            Some(xdg) => xdg.join(APP_DIR),
            None => home
                .clone()
                .ok_or(PathError::NoHome)?
                .join(".config")
                .join(APP_DIR),
        },
        (None, Platform::MacOs) => home
            .clone()
            .ok_or(PathError::NoHome)?
            .join("Library")
            .join("Application Support")
            .join(APP_DIR),
        (None, Platform::Windows) => match &env.local_app_data {
            Some(local) => PathBuf::from(local).join(APP_DIR),
            None => home
                .clone()
                .ok_or(PathError::NoHome)?
                .join("AppData")
                .join("Local")
                .join(APP_DIR),
        },
    };
    let run_dir = state_root.join("run");
    let shared_socket = match (&env.car_server_socket, &car_home, &xdg, env.platform) {
        (Some(explicit), _, _, _) if !explicit.is_empty() => PathBuf::from(explicit),
        (_, Some(_), _, _) => run_dir.join(SOCKET_FILE),
        (_, None, Some(xdg), Platform::Linux) => xdg.join(APP_DIR).join(SOCKET_FILE),
        _ => run_dir.join(SOCKET_FILE),
    };
    Ok(Paths {
        relocated: car_home.is_some(),
        auth_token: token_dir.join(AUTH_TOKEN_FILE),
        host_token: token_dir.join(HOST_TOKEN_FILE),
        dashboard_login: token_dir.join(DASHBOARD_LOGIN_FILE),
        lock_file: run_dir.join(LOCK_FILE),
        memory_dir: state_root.join("memory"),
        token_dir,
        run_dir,
        shared_socket,
        state_root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(platform: Platform) -> PathEnv {
        PathEnv {
            platform,
            home: Some(PathBuf::from("/home/u")),
            car_home: None,
            xdg_runtime_dir: None,
            local_app_data: None,
            car_server_socket: None,
        }
    }

    #[test]
    fn linux_defaults_and_xdg() {
        let p = resolve(&env(Platform::Linux)).unwrap();
        assert_eq!(p.state_root, PathBuf::from("/home/u/.car"));
        assert_eq!(
            p.auth_token,
            PathBuf::from("/home/u/.config/ai.parslee.car/auth-token")
        );
        assert_eq!(
            p.host_token,
            PathBuf::from("/home/u/.config/ai.parslee.car/host-token")
        );
        assert_eq!(
            p.dashboard_login,
            PathBuf::from("/home/u/.config/ai.parslee.car/dashboard-login")
        );
        assert_eq!(
            p.shared_socket,
            PathBuf::from("/home/u/.car/run/car-server.sock")
        );
        assert_eq!(p.lock_file, PathBuf::from("/home/u/.car/run/daemon.lock"));
        let mut e = env(Platform::Linux);
        e.xdg_runtime_dir = Some("/run/user/1000".into());
        let p = resolve(&e).unwrap();
        assert_eq!(
            p.auth_token,
            PathBuf::from("/run/user/1000/ai.parslee.car/auth-token")
        );
        assert_eq!(
            p.shared_socket,
            PathBuf::from("/run/user/1000/ai.parslee.car/car-server.sock")
        );
        assert_eq!(
            p.instance_socket(9200),
            PathBuf::from("/run/user/1000/ai.parslee.car/car-server-9200.sock")
        );
    }

    #[test]
    fn car_home_moves_tokens_and_socket_even_with_xdg() {
        let mut e = env(Platform::Linux);
        e.xdg_runtime_dir = Some("/run/user/1000".into());
        e.car_home = Some("/tmp/car-alt".into());
        let p = resolve(&e).unwrap();
        assert!(p.relocated);
        assert_eq!(
            p.auth_token,
            PathBuf::from("/tmp/car-alt/ai.parslee.car/auth-token")
        );
        assert_eq!(
            p.shared_socket,
            PathBuf::from("/tmp/car-alt/run/car-server.sock")
        );
        assert_eq!(p.memory_dir, PathBuf::from("/tmp/car-alt/memory"));
        e.car_server_socket = Some("/tmp/explicit.sock".into());
        assert_eq!(
            resolve(&e).unwrap().shared_socket,
            PathBuf::from("/tmp/explicit.sock")
        );
    }

    #[test]
    fn relative_car_home_is_refused_and_empty_is_unset() {
        let mut e = env(Platform::Linux);
        e.car_home = Some("rel/dir".into());
        assert_eq!(
            resolve(&e),
            Err(PathError::RelativeCarHome("rel/dir".into()))
        );
        e.car_home = Some("".into());
        assert_eq!(
            resolve(&e).unwrap().state_root,
            PathBuf::from("/home/u/.car")
        );
        let mut e = env(Platform::Linux);
        e.home = None;
        assert_eq!(resolve(&e), Err(PathError::NoHome));
    }

    #[test]
    fn macos_and_windows() {
        let p = resolve(&env(Platform::MacOs)).unwrap();
        assert_eq!(
            p.auth_token,
            PathBuf::from("/home/u/Library/Application Support/ai.parslee.car/auth-token")
        );
        let mut e = env(Platform::Windows);
        e.home = Some(PathBuf::from("C:\\Users\\u"));
        e.local_app_data = Some("C:\\Users\\u\\AppData\\Local".into());
        let p = resolve(&e).unwrap();
        assert_eq!(
            p.auth_token,
            PathBuf::from("C:\\Users\\u\\AppData\\Local")
                .join(APP_DIR)
                .join("auth-token")
        );
        e.car_home = Some("D:\\car".into());
        assert_eq!(resolve(&e).unwrap().state_root, PathBuf::from("D:\\car"));
        e.car_home = Some("car".into());
        assert!(matches!(resolve(&e), Err(PathError::RelativeCarHome(_))));
    }
}
