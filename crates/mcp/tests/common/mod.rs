//! Shared support for the `car-mcp` integration tests: start the Streamable HTTP endpoint
//! in process against a daemon URL, and a raw HTTP/1.1 client that sends exactly the bytes a
//! test names (so malformed requests reach the server as written).

#![allow(dead_code)]

use std::net::SocketAddr;

use car_mcp::HttpConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A running endpoint; stops when dropped.
pub struct Endpoint {
    pub addr: SocketAddr,
    shutdown: CancellationToken,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Serves `/mcp` for the daemon at `ws_url` (the endpoint holds no token: callers bring one).
pub async fn endpoint(ws_url: &str, enable_mutations: bool) -> Endpoint {
    endpoint_with(ws_url, enable_mutations, car_mcp::DEFAULT_MAX_BODY_BYTES).await
}

pub async fn endpoint_with(
    ws_url: &str,
    enable_mutations: bool,
    max_body_bytes: usize,
) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = HttpConfig {
        daemon_url: ws_url.to_string(),
        enable_mutations,
        max_body_bytes,
        session_idle: car_mcp::DEFAULT_SESSION_IDLE,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(car_mcp::serve_http(listener, config, shutdown.clone()));
    Endpoint { addr, shutdown }
}

pub use car_test_harness::http_wire::Reply;
use car_test_harness::http_wire::{parse_response, request_bytes};

/// Sends one request (`Connection: close`) and reads the whole response.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let bytes = request_bytes(&addr.to_string(), method, path, headers, body);
    let mut stream = TcpStream::connect(addr).await.unwrap();
    // A server may answer (413) and close before the whole body is written.
    let _ = stream.write_all(&bytes).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    parse_response(&raw)
}

/// Sends raw header bytes (for values that are not UTF-8) followed by `body`.
pub async fn send_raw(addr: SocketAddr, head: &[u8], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw).await;
    parse_response(&raw)
}

/// POSTs one JSON-RPC message with the usual headers plus `extra`.
pub async fn post(addr: SocketAddr, extra: &[(&str, &str)], body: &Value) -> Reply {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    send(addr, "POST", "/mcp", &headers, body.to_string().as_bytes()).await
}

/// A `tools/call` request body.
pub fn call(id: u64, name: &str, arguments: Value) -> Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}
