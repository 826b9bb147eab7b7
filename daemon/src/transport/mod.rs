//! Listeners: WebSocket over TCP and over the Unix socket, speaking the identical
//! protocol. Owns accepting, the pre-auth budget (`crate::state::pre_auth`: a slot per
//! unauthenticated connection, taken before any byte is read, and a byte cap on what a
//! stranger may send), the upgrade-time checks (`crate::transport::upgrade`) and the WebSocket
//! limits; hands each upgraded stream to `crate::transport::connection`.

pub mod connection;
pub mod instance;
pub mod sidecars;
pub mod upgrade;

use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::dispatch::Dispatch;
use crate::state::ServerState;

/// Binds the TCP listener.
pub async fn bind_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Binds the Unix socket (mode `0600`, parent directory `0700`).
pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Per-connection read buffer. tungstenite's default (128 KiB) is allocated up front for
/// every connection and was nearly all of an idle connection's memory (136 KiB of it, with
/// 1,000 connections; 15 KiB with this); a larger message is still read whole, in more
/// chunks. The write buffer grows only as replies need it, so its default stays.
const READ_BUFFER_BYTES: usize = 8 * 1024;

fn ws_config(state: &ServerState) -> WebSocketConfig {
    let max = state.daemon.config.max_message_bytes;
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
}

/// Waits for open connections to close after shutdown (they see the same token and send
/// Close 1001), then aborts stragglers.
async fn finish(mut connections: JoinSet<()>) {
    let all_closed = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(5), all_closed)
        .await
        .is_err()
    {
        connections.abort_all();
    }
}

/// A pre-auth slot for a just-accepted connection; `None` (the stream is then dropped,
/// closing it) when `--max-unauthenticated` connections are already waiting to
/// authenticate.
fn admit(state: &ServerState, transport: &'static str) -> Option<crate::state::pre_auth::Ticket> {
    let ticket = state.daemon.pre_auth.admit();
    if ticket.is_none() {
        tracing::warn!(
            transport,
            max = state.daemon.config.max_unauthenticated,
            "connection refused: too many unauthenticated connections"
        );
    }
    ticket
}

/// Accepts TCP connections until shutdown.
pub async fn accept_tcp(listener: TcpListener, state: Arc<ServerState>, dispatch: Arc<Dispatch>) {
    let mut connections = JoinSet::new();
    let loopback = state.daemon.config.bind.is_loopback();
    loop {
        tokio::select! {
            _ = state.daemon.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Some(ticket) = admit(&state, "tcp") else { continue };
                    let _ = stream.set_nodelay(true);
                    let (state, dispatch) = (state.clone(), dispatch.clone());
                    connections.spawn(async move {
                        upgrade_and_serve(stream, ticket, state, dispatch, "tcp", loopback, peer.to_string()).await
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "tcp accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    finish(connections).await;
}

/// Accepts Unix-socket connections until shutdown.
pub async fn accept_unix(
    listener: UnixListener,
    path: PathBuf,
    state: Arc<ServerState>,
    dispatch: Arc<Dispatch>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = state.daemon.shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(ticket) = admit(&state, "unix") else { continue };
                    let (state, dispatch) = (state.clone(), dispatch.clone());
                    connections.spawn(async move {
                        upgrade_and_serve(stream, ticket, state, dispatch, "unix", true, "unix".into()).await
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %path.display(), "unix accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    finish(connections).await;
}

// The callback's error type is tungstenite's HTTP response; its size is not ours to choose.
#[allow(clippy::result_large_err)]
async fn upgrade_and_serve<S>(
    stream: S,
    ticket: crate::state::pre_auth::Ticket,
    state: Arc<ServerState>,
    dispatch: Arc<Dispatch>,
    transport: &'static str,
    loopback: bool,
    peer: String,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let check = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
        let origin = request
            .headers()
            .get("origin")
            .map(|v| v.to_str().unwrap_or("\u{fffd}"));
        let pages = upgrade::PageOrigins {
            dashboard_port: state.daemon.dashboard_port.get().copied(),
            allowed: &state.daemon.config.allow_origins,
        };
        match upgrade::refusal(origin, header("host"), loopback, &pages) {
            None => Ok(response),
            Some(reason) => {
                tracing::warn!(%peer, %reason, "websocket upgrade refused");
                let mut refusal = ErrorResponse::new(Some(reason));
                *refusal.status_mut() = StatusCode::FORBIDDEN;
                Err(refusal)
            }
        }
    };
    let stream = crate::state::pre_auth::Budgeted::new(stream, ticket.authenticated.clone());
    let handshake = tokio::time::timeout(
        state.daemon.config.auth_deadline,
        tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(ws_config(&state))),
    )
    .await;
    match handshake {
        Ok(Ok(ws)) => connection::serve(ws, ticket, state, dispatch, transport).await,
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "websocket upgrade failed"),
        Err(_) => tracing::debug!(%peer, "websocket upgrade timed out"),
    }
}
