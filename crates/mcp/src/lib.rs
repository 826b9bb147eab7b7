//! `car-mcp`: CAR's MCP server. CAR's tools are thin adapters over daemon JSON-RPC methods,
//! served over Streamable HTTP (embedded in `car-server`, [`serve_http`]) and over stdio
//! (the `car-mcp` binary, [`serve_stdio`]).
//!
//! Owns: the MCP protocol (sessions, framing, the tool catalog) and the mapping of tools onto
//! daemon methods. Must not touch: daemon state directly (every tool is a daemon call through
//! `car-daemon-client` with the caller's credential).
//!
//! One transport-independent dispatcher ([`McpServer`], module `dispatch`) answers
//! `initialize`, `ping`, `tools/list`, `tools/call`, `prompts/list`, `prompts/get`,
//! `resources/list`, `completion/complete`; `resources/subscribe`, `resources/unsubscribe`,
//! `resources/templates/list` and `logging/setLevel` are `-32601` by decision, matching the
//! capabilities `initialize` advertises. The modules:
//!
//! - `catalog`: the static tool table (tool name → daemon method, annotations, group) and the
//!   self-contained `inputSchema` / `outputSchema` generated from `car_proto::methods`;
//! - `daemon`: how calls reach the daemon — stdio with the process's own client (token from the
//!   environment like every client), HTTP with a fresh `session.auth`-ed session per call on the
//!   request's `Authorization: Bearer` token (no header, no call) — and the projection of a daemon
//!   answer into a tool result (`isError: true` for every error);
//! - `prompts`: the `car_context` prompt over `memory.build_context`, and completion;
//! - `guard`, `session`, `http`: the HTTP header rules, sessions, and the hyper server;
//! - `stdio`: newline-delimited JSON-RPC on stdin/stdout.
//!
//! This crate never opens the daemon's stores: everything goes through
//! `car_daemon_client`, so the daemon's handlers stay the single implementation and the
//! single authority check.
//!
//! ## Why not `rmcp`
//!
//! The official Rust SDK (`rmcp`, checked at 1.x) was evaluated against the reference's
//! HTTP rules and does not fit them, so both transports are written here on `hyper` (already
//! a workspace dependency) in a few hundred lines:
//!
//! - its `StreamableHttpService` answers with plain `application/json` only in stateless mode
//!   (`json_response` applies only when `legacy_session_mode` is off); with sessions it answers
//!   over SSE. The reference wants sessions *and* plain JSON with no push channel;
//! - session ids come from its `SessionManager`; using ours (and keeping the session table's idle
//!   and size bounds) means reimplementing that trait and its SSE stream plumbing;
//! - its `MCP-Protocol-Version` check accepts its own `KNOWN_VERSIONS` (2025-03-26 included, which
//!   this server deliberately does not offer) and refuses with a plain-text body, where the
//!   reference wants our list and a JSON body naming `requested` and `supported`; its Origin
//!   allow-list takes exact entries, so "any address in `127.0.0.0/8`, any port" and the
//!   reference's `{"error":"origin not allowed"}` body need a layer in front anyway, as do the
//!   checks' order relative to body parsing;
//! - it negotiates `protocolVersion` itself, and it would bring `axum`/`tower` into a workspace
//!   that has neither.
//!
//! Its stdio server and model types would fit, but using them for stdio alone would give
//! the two transports different dispatchers, which the reference rules out ("same dispatch
//! logic, same tool schemas"); the dispatcher works on `serde_json::Value` with the
//! contract's own error type instead.

mod catalog;
mod daemon;
mod dispatch;
mod guard;
mod http;
mod prompts;
mod session;
mod stdio;

use std::sync::Arc;
use std::time::Duration;

use car_daemon_client::Client;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use catalog::{Group, Hints, ToolDef, TOOLS};
pub use daemon::{CallError, Caller, DaemonAccess};
pub use dispatch::{classify, McpServer, Message};
pub use session::MAX_SESSIONS;
pub use stdio::MAX_LINE_BYTES;

/// The MCP revisions this server speaks, oldest first. Append a new revision and move
/// [`PROTOCOL_VERSION`] to it; never drop one. `2025-03-26` is deliberately absent: it makes
/// receiving JSON-RPC batches a MUST, and this server takes one message per request.
pub const SUPPORTED_VERSIONS: &[&str] = &["2024-11-05", "2025-06-18", "2025-11-25"];

/// The newest supported revision: what `initialize` answers when the client asks for one
/// this server does not speak (or none), and what `/mcp/health` reports.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// The default request body limit for [`HttpConfig::max_body_bytes`] (4 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The default session idle expiry for [`HttpConfig::session_idle`] (24 hours).
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(24 * 60 * 60);

/// How the daemon runs its Streamable HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The daemon URL each request's bearer-authenticated session dials. The endpoint holds
    /// no credential of its own.
    pub daemon_url: String,
    /// Register the mutating daemon tools (`workflow_run`, `workflow_resume`,
    /// `scheduler_schedule`, `scheduler_unschedule`).
    pub enable_mutations: bool,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// A session unused this long is forgotten.
    pub session_idle: Duration,
}

/// Serves `POST/DELETE/GET /mcp` and `GET /mcp/health` on `listener` until `shutdown`;
/// requests in flight at shutdown finish first.
pub async fn serve_http(listener: TcpListener, config: HttpConfig, shutdown: CancellationToken) {
    http::serve(listener, http::Endpoint::new(config), shutdown).await;
}

/// Serves MCP over `input` / `output` (newline-delimited JSON-RPC) until `input` ends,
/// reaching the daemon through `client`. Only the core tools are registered.
pub async fn serve_stdio<R, W>(client: Client, input: R, output: W) -> std::io::Result<()>
where
    R: tokio::io::AsyncBufRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let server = Arc::new(McpServer::stdio(DaemonAccess::Process(client)));
    stdio::serve(server, input, output).await
}
