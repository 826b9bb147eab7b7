//! `car-dashboard`: the daemon's loopback dashboard, served on `127.0.0.1:<ws_port + 1>`.
//!
//! Owns: the dashboard's HTTP server, its page and the one-time login exchange. Must not touch:
//! daemon state (the page reads through the WebSocket with the observer token), or any
//! non-loopback address.
//!
//! What it owns: one small HTTP/1 server (hyper) that serves a static page (`assets/`,
//! compiled in) and `GET /auth-token`, which hands the page the daemon's read-only
//! **dashboard token** and the WebSocket URL in exchange for a one-time login secret
//! ([`login`]: the URL the daemon writes to a `0600` file and logs, as Jupyter does). Everything
//! the page shows it reads itself, over the daemon's ordinary JSON-RPC WebSocket, as a read-only
//! observer session: this crate never talks to the daemon's state and has no JSON-RPC in it.
//!
//! What it must not do: serve anything to a foreign site. Every request's `Host` must be a
//! loopback name (DNS rebinding), the token goes only to this dashboard's own origin
//! (`http://localhost:<port>` or `http://<its address>:<port>`) or a native client (no `Origin`, no `Sec-Fetch-Site`), no response carries CORS headers, and
//! every response carries a strict CSP (no inline script; `connect-src` names only the
//! daemon's WebSocket port). The rules are in [`routes`]; the loopback parsing is
//! `car_proto::loopback`, shared with the daemon's upgrade check and the MCP endpoint.
//!
//! Concurrency: one task per connection (at most [`MAX_CONNECTIONS`] at once; past that
//! the accept loop waits), a header-read timeout against idle sockets, and one
//! `CancellationToken`: on shutdown the loop stops accepting, open connections finish
//! their current response and close, and [`serve`] returns once they have (or after
//! [`DRAIN_TIMEOUT`]).

mod assets;
pub mod login;
pub mod routes;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::routes::{respond, Site};

/// What the dashboard server needs from the daemon.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// The daemon's WebSocket port (the page connects to `ws://<host>:<ws_port>`).
    pub ws_port: u16,
    /// The read-only dashboard token `GET /auth-token` serves; `None` when auth is off.
    pub token: Option<String>,
    /// Where the login URL is published (`0600`); `None`: in the log only.
    pub login_file: Option<std::path::PathBuf>,
}

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`serve`] waits for open connections after shutdown before dropping them.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the dashboard on `listener` until `shutdown` is cancelled.
///
/// The login URL is minted and published when this is called, before the returned future
/// is first polled, so an embedder that announces readiness after spawning it has the
/// login file in place.
pub fn serve(
    listener: TcpListener,
    config: DashboardConfig,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let site = listener.local_addr().map(|own_addr| {
        Arc::new(Site::new(
            config.ws_port,
            own_addr,
            config.token,
            config.login_file,
        ))
    });
    async move {
        match site {
            Ok(site) => accept_loop(listener, site, shutdown).await,
            Err(e) => {
                tracing::error!(error = %e, "dashboard listener has no local address; not serving")
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, site: Arc<Site>, shutdown: CancellationToken) {
    let own_addr = site.own_addr;
    tracing::info!(addr = %own_addr, ws_port = site.ws_port, "dashboard listening");
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        match accepted {
            Ok((stream, peer)) => {
                let site = site.clone();
                let shutdown = shutdown.clone();
                connections.spawn(async move {
                    serve_connection(stream, site, shutdown).await;
                    tracing::trace!(%peer, "dashboard connection closed");
                    drop(permit);
                });
            }
            Err(e) => {
                // Typically EMFILE: back off instead of spinning on the error.
                tracing::warn!(error = %e, "dashboard accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "dashboard connections dropped at shutdown"
        );
        connections.abort_all();
    }
    tracing::info!("dashboard stopped");
}

async fn serve_connection(stream: TcpStream, site: Arc<Site>, shutdown: CancellationToken) {
    let service = service_fn(move |request: Request<Incoming>| {
        let response = respond(&site, request.method(), request.uri(), request.headers());
        async move { Ok::<_, Infallible>(response) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.as_mut().await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "dashboard connection ended with an error");
    }
}
