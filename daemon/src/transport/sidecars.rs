//! The daemon's sibling endpoints (the reference's "Sibling endpoints on the same daemon"):
//! the loopback dashboard on the WebSocket port + 1 (`car-dashboard`) and the MCP endpoint
//! at `127.0.0.1:9102/mcp` (`car-mcp`). Both are bound after the WebSocket listener and
//! served until shutdown.
//!
//! - The dashboard always binds loopback. It serves the read-only dashboard token
//!   (`Credentials::dashboard_token`) at `GET /auth-token` in exchange for a one-time login secret,
//!   whose URL the primary daemon writes to `<token dir>/dashboard-login` (`0600`) and logs (a
//!   non-primary daemon only logs it); its port is recorded in `Daemon::dashboard_port` so the
//!   WebSocket upgrade admits the page's `Origin`.
//! - The MCP endpoint reaches the daemon the way every other client does: through
//!   `car-daemon-client` over the daemon's own WebSocket. It is given no credential: every call
//!   connects with the caller's own `Authorization: Bearer` token.
//!
//! A default address that cannot be bound (another daemon holds 9102, or port + 1 is
//! taken) is logged and the daemon runs without that endpoint; an address given explicitly
//! (`--dashboard-port`, `--mcp-bind`) that cannot be bound stops the daemon.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Fatal;
use crate::state::ServerState;

/// The largest MCP request body (CAR publishes none; a tool call carries a proposal or a
/// workflow manifest at most).
const MCP_MAX_BODY_BYTES: usize = 4 << 20;
/// An MCP session unused this long is forgotten (the reference's 24 h).
const MCP_SESSION_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// The bound sibling endpoints, for the ready file and the startup log.
#[derive(Debug, Default, Clone)]
pub struct Bound {
    pub dashboard_url: Option<String>,
    pub mcp_url: Option<String>,
}

async fn bind(addr: SocketAddr, explicit: bool, what: &str) -> Result<Option<TcpListener>, Fatal> {
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(e) if explicit => Err(Fatal::runtime(format!(
            "cannot listen on {addr} for the {what}: {e}"
        ))),
        Err(e) => {
            tracing::warn!(%addr, error = %e, "the {what} is not served: its default address is taken");
            Ok(None)
        }
    }
}

/// Where the MCP endpoint dials the daemon's own WebSocket: its bind address, or loopback
/// when it listens on every interface.
fn dial_addr(bind: std::net::IpAddr, port: u16) -> SocketAddr {
    let ip = match bind {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, port)
}

/// Binds and starts the dashboard and the MCP endpoint; `ws_port` is the WebSocket's port,
/// `login_file` where the dashboard publishes its login URL (the primary's token dir).
pub async fn start(
    state: &Arc<ServerState>,
    ws_port: u16,
    login_file: Option<std::path::PathBuf>,
) -> Result<Bound, Fatal> {
    let mut bound = Bound::default();
    if let Some(port) = state.daemon.config.dashboard {
        let explicit = port.is_some();
        let port = port.unwrap_or_else(|| ws_port.wrapping_add(1));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        if let Some(listener) = bind(addr, explicit, "dashboard").await? {
            let local = listener
                .local_addr()
                .map_err(|e| Fatal::runtime(e.to_string()))?;
            let _ = state.daemon.dashboard_port.set(local.port());
            let config = car_dashboard::DashboardConfig {
                ws_port,
                token: state
                    .daemon
                    .credentials
                    .as_ref()
                    .map(|c| c.dashboard_token.expose().clone()),
                login_file,
            };
            tokio::spawn(car_dashboard::serve(
                listener,
                config,
                state.daemon.shutdown.clone(),
            ));
            bound.dashboard_url = Some(format!("http://{local}/"));
        }
    }
    if let Some(addr) = state.daemon.config.mcp_bind {
        if let Some(listener) =
            bind(addr, state.daemon.config.mcp_bind_explicit, "MCP endpoint").await?
        {
            let local = listener
                .local_addr()
                .map_err(|e| Fatal::runtime(e.to_string()))?;
            if !addr.ip().is_loopback() {
                tracing::warn!(%local, "the MCP endpoint listens on a non-loopback address; its only guard is the Origin check");
            }
            let daemon_url = format!("ws://{}", dial_addr(state.daemon.config.bind, ws_port));
            let config = car_mcp::HttpConfig {
                daemon_url,
                enable_mutations: state.daemon.config.mcp_enable_mutations,
                max_body_bytes: MCP_MAX_BODY_BYTES,
                session_idle: MCP_SESSION_IDLE,
            };
            tokio::spawn(car_mcp::serve_http(
                listener,
                config,
                state.daemon.shutdown.clone(),
            ));
            bound.mcp_url = Some(format!("http://{local}/mcp"));
        }
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_endpoint_dials_the_bind_address() {
        let v4: std::net::IpAddr = "0.0.0.0".parse().unwrap();
        assert_eq!(dial_addr(v4, 9).to_string(), "127.0.0.1:9");
        let v6: std::net::IpAddr = "::".parse().unwrap();
        assert_eq!(dial_addr(v6, 9).to_string(), "[::1]:9");
        let lan: std::net::IpAddr = "10.1.2.3".parse().unwrap();
        assert_eq!(dial_addr(lan, 9).to_string(), "10.1.2.3:9");
    }
}
