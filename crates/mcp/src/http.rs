//! The Streamable HTTP transport: `POST` / `DELETE` / `GET /mcp` and `GET /mcp/health`
//! over HTTP/1.1 (hyper), one JSON-RPC message per `POST`, one `application/json` answer.
//!
//! This module owns framing, status codes and the order in which the request rules apply;
//! the rules themselves are `guard`, sessions are `session`, and answers come from the
//! dispatcher. The order for `POST /mcp` (each step refuses before the next runs, so a
//! refused request never reaches dispatch):
//!
//! 1. `Origin` not loopback → `403 {"error":"origin not allowed"}`;
//! 2. `MCP-Protocol-Version` not supported → `400 {"error":"unsupported MCP-Protocol-Version",
//!    "requested":…,"supported":[…]}`;
//! 3. `Mcp-Session-Id` unknown or expired → `404 {"error":"unknown or expired session"}`;
//! 4. `Content-Type` not `application/json` → `415`;
//! 5. a body over the limit (by `Content-Length`, or while reading it) → `413`, reading stops at
//!    the limit;
//! 6. not UTF-8 or not JSON → `400` with a JSON-RPC `-32700` body; a JSON array (batch) → `400`
//!    with a JSON-RPC `-32600` body; any other invalid message → `400` with `-32600`;
//! 7. a notification or a response → `202` with an empty body; a request → `200` with its JSON-RPC
//!    answer, and a successful `initialize` carries a new `Mcp-Session-Id`.
//!
//! `DELETE /mcp` applies steps 1–2, then needs the session header (`400` without it, `404`
//! for an unknown id, `204` once ended). Any other method on `/mcp` is `405` with
//! `Allow: POST, DELETE` (no SSE stream is offered). `GET /mcp/health` is exempt from every
//! rule. Unknown paths are `404`. No input makes a handler panic.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::daemon::DaemonAccess;
use crate::dispatch::{self, McpServer, Message};
use crate::guard;
use crate::session::Sessions;
use crate::{HttpConfig, PROTOCOL_VERSION, SUPPORTED_VERSIONS};

/// How long a client has to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a request handler needs.
#[derive(Debug)]
pub struct Endpoint {
    server: McpServer,
    sessions: Sessions,
    max_body_bytes: usize,
}

impl Endpoint {
    /// The endpoint `config` describes.
    pub fn new(config: HttpConfig) -> Self {
        let access = DaemonAccess::PerCaller {
            url: config.daemon_url,
        };
        Self {
            server: McpServer::http(access, config.enable_mutations),
            sessions: Sessions::new(config.session_idle),
            max_body_bytes: config.max_body_bytes,
        }
    }
}

type Reply = Response<Full<Bytes>>;

/// Accepts connections on `listener` until `shutdown`, then lets in-flight requests finish.
pub async fn serve(listener: TcpListener, endpoint: Endpoint, shutdown: CancellationToken) {
    let endpoint = Arc::new(endpoint);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "mcp endpoint listening");
    }
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "mcp accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let endpoint = endpoint.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(route(&endpoint, req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "mcp connection ended with an error");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        // Reap finished connections so the set does not grow with the connection count.
        while connections.try_join_next().is_some() {}
    }
    while connections.join_next().await.is_some() {}
}

/// Routes one request.
pub async fn route(endpoint: &Endpoint, req: Request<Incoming>) -> Reply {
    match (req.uri().path(), req.method()) {
        ("/mcp/health", &Method::GET | &Method::HEAD) => health(),
        ("/mcp/health", _) => not_allowed("GET"),
        ("/mcp", &Method::POST) => post(endpoint, req).await,
        ("/mcp", &Method::DELETE) => delete(endpoint, &req),
        ("/mcp", _) => not_allowed("POST, DELETE"),
        _ => error(StatusCode::NOT_FOUND, "not found"),
    }
}

fn health() -> Reply {
    json_reply(
        StatusCode::OK,
        &json!({
            "status": "ok",
            "protocol_version": PROTOCOL_VERSION,
            "supported_versions": SUPPORTED_VERSIONS,
        }),
    )
}

/// Steps 1 and 2 of the module docs, shared by `POST` and `DELETE`: the refusal, if any.
fn header_refusal(req: &Request<Incoming>) -> Option<Reply> {
    if !guard::origin_allowed(req.headers()) {
        return Some(error(StatusCode::FORBIDDEN, "origin not allowed"));
    }
    if let Err(requested) = guard::protocol_version(req.headers()) {
        return Some(json_reply(
            StatusCode::BAD_REQUEST,
            &json!({
                "error": "unsupported MCP-Protocol-Version",
                "requested": requested,
                "supported": SUPPORTED_VERSIONS,
            }),
        ));
    }
    None
}

async fn post(endpoint: &Endpoint, req: Request<Incoming>) -> Reply {
    if let Some(refusal) = header_refusal(&req) {
        return refusal;
    }
    match guard::session_id(req.headers()) {
        Some(Ok(id)) if endpoint.sessions.touch(&id) => {}
        Some(_) => return error(StatusCode::NOT_FOUND, "unknown or expired session"),
        None => {}
    }
    if !guard::is_json_content(req.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content-type must be application/json",
        );
    }
    let caller = guard::caller(req.headers());
    let body = match read_body(req, endpoint.max_body_bytes).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            let mut reply = error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body exceeds {} bytes", endpoint.max_body_bytes),
            );
            // The unread rest of the body makes the connection unusable.
            reply
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
            return reply;
        }
        Err(BodyError::Read) => {
            return error(StatusCode::BAD_REQUEST, "request body could not be read")
        }
    };
    let value: Value = match std::str::from_utf8(&body) {
        Err(_) => {
            return json_reply(
                StatusCode::BAD_REQUEST,
                &dispatch::parse_refusal("body is not UTF-8"),
            )
        }
        Ok(text) => match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) => return json_reply(StatusCode::BAD_REQUEST, &dispatch::parse_refusal(e)),
        },
    };
    if value.is_array() {
        return json_reply(StatusCode::BAD_REQUEST, &dispatch::batch_refusal());
    }
    let message = dispatch::classify(value);
    let initialize = matches!(&message, Message::Request { method, .. } if method == "initialize");
    let invalid = matches!(message, Message::Invalid { .. });
    let Some(answer) = endpoint.server.handle(message, &caller).await else {
        return empty(StatusCode::ACCEPTED);
    };
    if invalid {
        return json_reply(StatusCode::BAD_REQUEST, &answer);
    }
    let mut reply = json_reply(StatusCode::OK, &answer);
    if initialize && answer.get("result").is_some() {
        let id = endpoint.sessions.mint();
        if let Ok(value) = HeaderValue::from_str(&id) {
            reply.headers_mut().insert(guard::SESSION_HEADER, value);
        }
    }
    reply
}

fn delete(endpoint: &Endpoint, req: &Request<Incoming>) -> Reply {
    if let Some(refusal) = header_refusal(req) {
        return refusal;
    }
    match guard::session_id(req.headers()) {
        None => error(StatusCode::BAD_REQUEST, "missing Mcp-Session-Id"),
        Some(Ok(id)) if endpoint.sessions.end(&id) => empty(StatusCode::NO_CONTENT),
        Some(_) => error(StatusCode::NOT_FOUND, "unknown or expired session"),
    }
}

enum BodyError {
    TooLarge,
    Read,
}

/// The body, refused as soon as it is known to exceed `max` bytes (declared length first,
/// then while reading, so an oversized body is never buffered whole).
async fn read_body(req: Request<Incoming>, max: usize) -> Result<Bytes, BodyError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = req.into_body();
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Read)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

fn json_reply(status: StatusCode, body: &Value) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(body.to_string())));
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    reply
}

fn error(status: StatusCode, message: &str) -> Reply {
    json_reply(status, &json!({"error": message}))
}

fn empty(status: StatusCode) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::new()));
    *reply.status_mut() = status;
    reply
}

fn not_allowed(allow: &'static str) -> Reply {
    let mut reply = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    reply
        .headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    reply
}
