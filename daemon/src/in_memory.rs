//! An in-memory daemon connection for fast service tests: the real connection loop
//! (`connection::serve`: gates, dispatch, typed routes, reverse calls, notifications) runs
//! over an in-process byte pipe instead of a socket, with the WebSocket framing done by
//! tokio-tungstenite on both ends — the same code path a TCP or Unix-socket client takes,
//! minus the listener and the HTTP upgrade checks.
//!
//! ```text
//! let daemon = InMemoryDaemon::open(home.path(), &["--debug-methods"]).await?;
//! let mut conn = daemon.connect().await;            // authenticated (operator role)
//! let value = conn.call("state.get", json!({"key": "k"})).await?;
//! ```
//!
//! Requests the daemon sends back (`tools.execute`, …) are answered by the handler given
//! to [`MemoryConnection::on_request`] (default: `-32601`); notifications are kept in
//! [`MemoryConnection::notifications`]. Real-process suites remain the proof for the
//! transport, auth files and restart behaviour.

use std::path::Path;
use std::sync::Arc;

use car_proto::errors::RpcError;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::DuplexStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;

use crate::auth::{mint_token, Credentials};
use crate::config::{Args, Config};
use crate::state::ServerState;
use crate::Fatal;

/// Bytes buffered in each direction of the pipe.
const PIPE_BYTES: usize = 1 << 20;

/// A daemon state with no listeners; connections are in-memory pipes.
#[derive(Debug)]
pub struct InMemoryDaemon {
    pub state: Arc<ServerState>,
    token: car_proto::redact::Redacted<String>,
    host_token: car_proto::redact::Redacted<String>,
}

impl InMemoryDaemon {
    /// Opens a daemon state under `home` (its `car.db`, `memory/`, `models/`) with the
    /// given command-line flags (auth stays on: connections authenticate with the token).
    pub async fn open(home: &Path, flags: &[&str]) -> Result<Self, Fatal> {
        let args = Args::try_parse_from(std::iter::once("car-server").chain(flags.iter().copied()))
            .map_err(|e| Fatal::usage(e.to_string()))?;
        let config = Config::from_args(args).map_err(Fatal::usage)?;
        let (token, host_token) = (mint_token(), mint_token());
        let state = crate::open_state(
            config,
            home,
            home.join("memory"),
            Some(Credentials {
                token: token.clone().into(),
                host_token: host_token.clone().into(),
                dashboard_token: mint_token().into(),
            }),
            CancellationToken::new(),
        )
        .await?;
        Ok(InMemoryDaemon {
            state,
            token: token.into(),
            host_token: host_token.into(),
        })
    }

    /// A new connection, not yet authenticated.
    pub async fn connect_raw(&self) -> MemoryConnection {
        let (server_end, client_end) = tokio::io::duplex(PIPE_BYTES);
        let state = self.state.clone();
        tokio::spawn(async move {
            match tokio_tungstenite::accept_async(server_end).await {
                Ok(ws) => {
                    let ticket = crate::pre_auth::Ticket::detached();
                    crate::connection::serve(ws, ticket, state, "memory").await
                }
                Err(e) => tracing::warn!(error = %e, "in-memory upgrade failed"),
            }
        });
        let (ws, _) = tokio_tungstenite::client_async("ws://127.0.0.1/", client_end)
            .await
            .expect("in-memory websocket handshake");
        MemoryConnection {
            ws,
            next_id: 1,
            notifications: Vec::new(),
            on_request: Box::new(|method, _| Err(RpcError::method_not_found(method))),
        }
    }

    /// A connection authenticated with the daemon token (an operator session).
    pub async fn connect(&self) -> MemoryConnection {
        let mut conn = self.connect_raw().await;
        conn.call("session.auth", json!({"token": self.token.expose()}))
            .await
            .expect("in-memory session.auth");
        conn
    }

    /// A connection authenticated with the host token (a host session).
    pub async fn connect_host(&self) -> MemoryConnection {
        let mut conn = self.connect_raw().await;
        conn.call(
            "session.auth",
            json!({"host_token": self.host_token.expose()}),
        )
        .await
        .expect("in-memory session.auth");
        conn
    }
}

type RequestHandler = Box<dyn FnMut(&str, &Value) -> Result<Value, RpcError> + Send>;

/// The client end of an in-memory connection.
pub struct MemoryConnection {
    ws: WebSocketStream<DuplexStream>,
    next_id: u64,
    /// Every notification received so far, as `(method, params)`.
    pub notifications: Vec<(String, Value)>,
    on_request: RequestHandler,
}

impl std::fmt::Debug for MemoryConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryConnection")
            .field("next_id", &self.next_id)
            .field("notifications", &self.notifications.len())
            .finish_non_exhaustive()
    }
}

impl MemoryConnection {
    /// Answers the daemon's requests (`tools.execute`, …) with `handler`.
    pub fn on_request(
        &mut self,
        handler: impl FnMut(&str, &Value) -> Result<Value, RpcError> + Send + 'static,
    ) {
        self.on_request = Box::new(handler);
    }

    /// Calls `method` and waits for its answer, answering reverse calls and keeping
    /// notifications meanwhile. A closed pipe is `-32603 connection closed`.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send(&request).await?;
        loop {
            let frame = match self.ws.next().await {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | None => return Err(closed()),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(RpcError::internal(format!("in-memory read: {e}"))),
            };
            let msg: Value = serde_json::from_str(&frame)
                .map_err(|e| RpcError::internal(format!("in-memory frame: {e}")))?;
            match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
                (Some(m), Some(rid)) => {
                    let answer = match (self.on_request)(m, &msg["params"]) {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": rid, "result": result}),
                        Err(e) => json!({"jsonrpc": "2.0", "id": rid, "error": e}),
                    };
                    self.send(&answer).await?;
                }
                (Some(m), None) => self
                    .notifications
                    .push((m.to_string(), msg["params"].clone())),
                (None, Some(rid)) if rid == &json!(id) => {
                    if let Some(error) = msg.get("error") {
                        return Err(serde_json::from_value(error.clone())
                            .unwrap_or_else(|_| RpcError::internal(error.to_string())));
                    }
                    return Ok(msg.get("result").cloned().unwrap_or(Value::Null));
                }
                _ => {}
            }
        }
    }

    async fn send(&mut self, message: &Value) -> Result<(), RpcError> {
        self.ws
            .send(Message::text(message.to_string()))
            .await
            .map_err(|_| closed())
    }
}

fn closed() -> RpcError {
    RpcError::internal("connection closed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn services_answer_over_an_in_memory_connection() {
        let home = tempfile::tempdir().unwrap();
        let daemon = InMemoryDaemon::open(home.path(), &[]).await.unwrap();
        let mut conn = daemon.connect().await;
        assert_eq!(
            conn.call("state.set", json!({"key": "k", "value": [1]}))
                .await
                .unwrap(),
            json!("ok")
        );
        assert_eq!(
            conn.call("state.get", json!({"key": "k"})).await.unwrap(),
            json!([1])
        );
        let bad = conn.call("state.get", json!({"key": 5})).await.unwrap_err();
        assert_eq!(bad.code, car_proto::errors::INVALID_PARAMS);
        assert!(
            bad.message.starts_with("invalid params: key: "),
            "{}",
            bad.message
        );
        // A reverse call answered by the test's handler.
        conn.call("tools.register", json!({"name": "echo"}))
            .await
            .unwrap();
        conn.on_request(|method, params| {
            assert_eq!(method, "tools.execute");
            Ok(json!({"echoed": params["parameters"]}))
        });
        let run = conn
            .call(
                "proposal.submit",
                json!({"proposal": {"actions": [
                    {"id": "a", "type": "tool_call", "tool": "echo", "parameters": {"x": 1}}
                ]}}),
            )
            .await
            .unwrap();
        assert_eq!(run["results"][0]["status"], "succeeded");
        assert_eq!(run["results"][0]["output"], json!({"echoed": {"x": 1}}));
        assert_eq!(run["cost"]["tool_calls"], 1);
        // Host methods need the host session.
        let refused = conn
            .call("session.clear_halt", json!({}))
            .await
            .unwrap_err();
        assert_eq!(refused.data, Some(json!({"reason": "host_required"})));
        let mut host = daemon.connect_host().await;
        assert_eq!(
            host.call("session.clear_halt", Value::Null).await.unwrap(),
            json!({"cleared": false})
        );
    }
}
