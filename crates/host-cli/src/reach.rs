//! Opening the host connection through `car-daemon-client`, and telling "nothing is
//! listening" (what `--start-server` handles and the user is told about) from every other
//! failure.
//!
//! The connection itself — discovery, the Unix-socket preference, the host token,
//! `session.auth`, `server.handshake` — is the client's ([`Client::host_connection_epoch`]).
//! The client does not say *why* opening failed in a way car-host can act on: it reads the
//! host-token file before dialing (and a stopped daemon removes that file, so a stopped
//! daemon looks like [`Error::Refused`]), and a refused connect and a failed WebSocket
//! upgrade are both [`Error::Transport`]. So when opening fails with either kind, [`open`]
//! asks the socket: it dials the endpoint the client's own discovery names (a bare
//! connect, no upgrade, dropped at once) and only when nothing accepts is the failure
//! [`OpenError::Unreachable`]. Anything that answered (a daemon without a readable host
//! token, something that is not a daemon) stays [`OpenError::Failed`] with the client's
//! error.
//!
//! [`configured_url`] and [`endpoint`] are discovery's answers too: the first asks it with
//! the Unix socket ruled out (so it names the URL that was configured), the second with
//! the real socket check. Neither reads a token file.

use std::path::Path;
use std::time::Duration;

use car_daemon_client::discovery::{self, Discovered, EnvSnapshot, FileProbe, RealFs};
use car_daemon_client::{Client, ClientConfig, Endpoint, Error};

/// Why [`open`] failed.
#[derive(Debug)]
pub enum OpenError {
    /// Nothing accepted a connection at the endpoint.
    Unreachable {
        /// The configured URL (see [`configured_url`]).
        url: String,
        endpoint: Endpoint,
        error: Error,
    },
    /// Something answered, but discovery, auth or the handshake failed.
    Failed(Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Unreachable {
                url,
                endpoint,
                error,
            } => match endpoint {
                Endpoint::Tcp { .. } => write!(f, "cannot reach car-server at {url}: {error}"),
                Endpoint::Unix { path } => write!(
                    f,
                    "cannot reach car-server at {url} (unix socket {}): {error}",
                    path.display()
                ),
            },
            OpenError::Failed(error) => write!(f, "{error}"),
        }
    }
}

/// Opens `client`'s host connection (if it has none); its epoch, or why not.
pub async fn open(client: &Client) -> Result<u64, OpenError> {
    let err = match client.host_connection_epoch().await {
        Ok(epoch) => return Ok(epoch),
        Err(err) => err,
    };
    if !matches!(err, Error::Transport(_) | Error::Refused(_)) {
        return Err(OpenError::Failed(err));
    }
    let config = client.config();
    let (Ok(endpoint), Ok(url)) = (endpoint(config), configured_url(config)) else {
        return Err(OpenError::Failed(err));
    };
    match dial(&endpoint, config.timeouts.connect).await {
        Ok(()) => Err(OpenError::Failed(err)),
        Err(error) => {
            tracing::debug!(client_error = %err, %error, "nothing listens");
            Err(OpenError::Unreachable {
                url,
                endpoint,
                error,
            })
        }
    }
}

/// The URL discovery dials: `--url`, else `CAR_DAEMON_URL`, else the default.
pub fn configured_url(config: &ClientConfig) -> Result<String, Error> {
    match discover(config, false)?.endpoint {
        Endpoint::Tcp { url, .. } => Ok(url),
        // Not expected: the probe reports no socket.
        Endpoint::Unix { path } => Err(Error::Refused(format!(
            "discovery chose the unix socket {} it was told is absent",
            path.display()
        ))),
    }
}

/// Where the client connects: discovery's endpoint (the Unix socket when it is preferred).
pub fn endpoint(config: &ClientConfig) -> Result<Endpoint, Error> {
    Ok(discover(config, true)?.endpoint)
}

/// The endpoint as a user names it: the URL, or the Unix socket's path.
pub fn describe(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Tcp { url, .. } => url.clone(),
        Endpoint::Unix { path } => format!("unix socket {}", path.display()),
    }
}

/// A file probe that reads no token file and checks sockets only when `sockets`.
struct AddressOnly {
    sockets: bool,
}

impl FileProbe for AddressOnly {
    fn read_to_string(&self, _path: &Path) -> Option<String> {
        None
    }

    fn is_socket(&self, path: &Path) -> bool {
        self.sockets && RealFs.is_socket(path)
    }
}

fn discover(config: &ClientConfig, sockets: bool) -> Result<Discovered, Error> {
    // Only the address is wanted: leave out what would only be warned about again.
    let env = EnvSnapshot {
        auth_token: None,
        agent_id: None,
        agent_token: None,
        ..config.env.clone()
    };
    discovery::discover(&config.overrides, &env, &AddressOnly { sockets })
}

/// Opens (and drops) a bare socket to `endpoint`: does anything accept there?
async fn dial(endpoint: &Endpoint, within: Duration) -> Result<(), Error> {
    let connecting = async {
        match endpoint {
            Endpoint::Tcp { addr, .. } => tokio::net::TcpStream::connect(addr.as_str())
                .await
                .map(drop)
                .map_err(|e| format!("connect to {addr}: {e}")),
            #[cfg(unix)]
            Endpoint::Unix { path } => tokio::net::UnixStream::connect(path)
                .await
                .map(drop)
                .map_err(|e| format!("connect to {}: {e}", path.display())),
            #[cfg(not(unix))]
            Endpoint::Unix { path } => Err(format!(
                "unix sockets are not available on this platform: {}",
                path.display()
            )),
        }
    };
    match tokio::time::timeout(within, connecting).await {
        Ok(outcome) => outcome.map_err(Error::Transport),
        Err(_) => Err(Error::Transport(format!(
            "connect timed out after {}ms",
            within.as_millis()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_daemon_client::discovery::DEFAULT_URL;

    fn client(home: &Path) -> Client {
        Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(home)))
    }

    #[test]
    fn the_url_follows_discovery_precedence() {
        let mut env = EnvSnapshot::with_car_home("/h");
        assert_eq!(
            configured_url(&ClientConfig::with_env(env.clone())).unwrap(),
            DEFAULT_URL
        );
        env.daemon_url = Some(" ws://127.0.0.1:9200 ".into());
        let config = ClientConfig::with_env(env);
        assert_eq!(configured_url(&config).unwrap(), "ws://127.0.0.1:9200");
        assert_eq!(
            configured_url(&config.url("ws://localhost:9300")).unwrap(),
            "ws://localhost:9300"
        );
        let bad = ClientConfig::with_env(EnvSnapshot::with_car_home("/h")).url("http://x");
        assert!(configured_url(&bad).is_err());
    }

    #[tokio::test]
    async fn nothing_listening_is_unreachable_and_named_with_the_url() {
        let home = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("ws://127.0.0.1:{port}");
        let c = Client::new(
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path())).url(url.clone()),
        );
        let err = open(&c).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(&err, OpenError::Unreachable { .. }), "{err:?}");
        assert!(
            text.starts_with(&format!(
                "cannot reach car-server at {url}: transport error: connect to 127.0.0.1:{port}: "
            )),
            "{text}"
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_stale_unix_socket_is_unreachable_and_named_with_the_url() {
        let home = tempfile::tempdir().unwrap();
        let socket = home.path().join("run").join("car-server.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        // Bound and closed: the socket file stays, nothing accepts.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let err = open(&client(home.path())).await.unwrap_err();
        assert!(
            matches!(&err, OpenError::Unreachable { endpoint: Endpoint::Unix { path }, .. } if *path == socket),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "cannot reach car-server at ws://127.0.0.1:9100 (unix socket {}): ",
                socket.display()
            )),
            "{text}"
        );
    }

    /// Accepts every connection and answers the upgrade with a 404.
    async fn not_a_daemon() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\n\r\n").await;
            }
        });
        port
    }

    #[tokio::test]
    async fn something_that_is_not_the_daemon_fails_without_being_unreachable() {
        let port = not_a_daemon().await;
        let home = tempfile::tempdir().unwrap();
        let env = EnvSnapshot::with_car_home(home.path());
        let host_token = car_proto::paths::resolve(&env.paths).unwrap().host_token;
        std::fs::create_dir_all(host_token.parent().unwrap()).unwrap();
        std::fs::write(&host_token, "host-secret").unwrap();
        let c = Client::new(ClientConfig::with_env(env).url(format!("ws://127.0.0.1:{port}")));
        let err = open(&c).await.unwrap_err();
        assert!(
            matches!(&err, OpenError::Failed(Error::Transport(m)) if m.contains("websocket upgrade")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_listener_without_a_host_token_is_not_unreachable() {
        let port = not_a_daemon().await;
        let home = tempfile::tempdir().unwrap();
        let c = Client::new(
            ClientConfig::with_env(EnvSnapshot::with_car_home(home.path()))
                .url(format!("ws://127.0.0.1:{port}")),
        );
        let err = open(&c).await.unwrap_err();
        assert!(
            matches!(&err, OpenError::Failed(Error::Refused(m)) if m.contains("host token not found")),
            "{err:?}"
        );
    }
}
