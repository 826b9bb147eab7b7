//! How a tool call or prompt reaches the daemon, and the projection of the daemon's answer
//! into an MCP tool result.
//!
//! Two ways in, one per transport:
//! - **stdio** ([`DaemonAccess::Process`]): `car-mcp` runs as the user who launched it and reaches
//!   the daemon with the client it was handed, configured from the environment the way every client
//!   is (`CAR_AUTH_TOKEN`, else the token file under `CAR_HOME`). A process that cannot read the
//!   token cannot call anything.
//! - **HTTP** ([`DaemonAccess::PerCaller`]): the endpoint holds no credential of its own. Every
//!   tool call and `prompts/get` runs on a fresh daemon session authenticated with the request's
//!   own `Authorization: Bearer` token (the daemon token, or any token the daemon accepts in
//!   `session.auth`, so the daemon's access rules apply unchanged); a request without one is
//!   refused before anything is dialled. CAR lets any local process call the core tools with no
//!   header; we do not (docs/security.md). Each session is closed when its call ends, so two
//!   callers never share an authenticated connection, and no daemon token, environment variable or
//!   token file is ever substituted.
//!
//! This module owns credentials and connections; it knows nothing about JSON-RPC framing or
//! HTTP.

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use serde_json::{json, Value};

use crate::catalog::Tool;

/// Who is calling, as far as the transport can tell.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The `Authorization: Bearer` token of this HTTP request.
    pub bearer: Option<String>,
    /// The request carried `X-Car-Agent-Id` (a supervised agent's credential).
    pub agent_header: bool,
}

/// Why a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No usable credential came with the request (nothing was sent to the daemon).
    Unauthenticated(String),
    /// The daemon (or the connection to it) failed the call.
    Failed(String),
}

impl CallError {
    /// The human-readable text.
    pub fn message(&self) -> &str {
        match self {
            CallError::Unauthenticated(m) | CallError::Failed(m) => m,
        }
    }
}

/// How calls reach the daemon (see the module docs).
#[derive(Debug, Clone)]
pub enum DaemonAccess {
    /// This process's own client (stdio).
    Process(Client),
    /// A fresh session per call to `url`, with the caller's bearer token (HTTP).
    PerCaller { url: String },
}

impl DaemonAccess {
    /// Runs `method` with `params` as the caller.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        caller: &Caller,
    ) -> Result<Value, CallError> {
        let url = match self {
            DaemonAccess::Process(client) => {
                return client
                    .call(method, params)
                    .await
                    .map_err(|e| CallError::Failed(describe(&e)))
            }
            DaemonAccess::PerCaller { url } => url,
        };
        if caller.agent_header {
            return Err(CallError::Unauthenticated("X-Car-Agent-Id is not supported here: a supervised agent must use its own WebSocket connection".into()));
        }
        let Some(token) = caller.bearer.as_deref() else {
            return Err(CallError::Unauthenticated(
                "this endpoint needs an Authorization: Bearer <daemon token> header".into(),
            ));
        };
        let client = Client::new(
            ClientConfig::with_env(EnvSnapshot::empty())
                .url(url)
                .token(token),
        );
        let outcome = client.call(method, params).await;
        client.close();
        outcome.map_err(|e| CallError::Failed(describe(&e)))
    }

    /// Runs `tool` with `arguments` as its method's params and projects the outcome into a
    /// `CallToolResult`. Every failure, a missing credential and the daemon's input
    /// validation included, is an `isError: true` result.
    pub async fn call_tool(&self, tool: &Tool, arguments: Value, caller: &Caller) -> Value {
        match self.call(tool.def.method, arguments, caller).await {
            Ok(result) => success(tool, result),
            Err(error) => failure(error.message()),
        }
    }
}

/// The text of a failed call: the daemon's own message when it said no.
fn describe(error: &Error) -> String {
    match error {
        Error::Rpc { code, message, .. } => format!("{message} (code {code})"),
        Error::Handshake { reason, .. } => format!("daemon refused the credential: {reason}"),
        other => other.to_string(),
    }
}

/// A successful result: the method's result serialized as the text block, plus
/// `structuredContent` (the same value) when the tool declares an `outputSchema`.
pub fn success(tool: &Tool, result: Value) -> Value {
    let text = serde_json::to_string(&result).unwrap_or_else(|_| "null".into());
    let mut out = json!({
        "content": [{"type": "text", "text": text}],
        "isError": false,
    });
    if tool.structured && result.is_object() {
        out["structuredContent"] = result;
    }
    out
}

/// A failed call as a tool execution error.
pub fn failure(message: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{build, Group};

    fn tool(name: &str) -> Tool {
        build(&[Group::Core, Group::DaemonRead])
            .into_iter()
            .find(|t| t.def.name == name)
            .unwrap()
    }

    #[test]
    fn structured_tools_repeat_the_text_as_structured_content() {
        let reply = json!({"id": "f1", "deleted": true, "kind": "pattern", "fact_count": 0});
        let out = success(&tool("memory_delete"), reply.clone());
        assert_eq!(out["structuredContent"], reply);
        let text = out["content"][0]["text"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), reply);
        let out = success(&tool("memory_query"), json!([]));
        assert!(out.get("structuredContent").is_none());
        assert_eq!(out["content"][0]["text"], "[]");
        assert_eq!(out["isError"], false);
    }

    /// Port 9 (discard) on loopback: nothing listens there in the test environment.
    const NOWHERE: &str = "ws://127.0.0.1:9";

    #[tokio::test]
    async fn every_http_tool_refuses_without_a_bearer_or_with_an_agent_header() {
        let access = DaemonAccess::PerCaller {
            url: NOWHERE.into(),
        };
        for name in ["events_stats", "memory_query", "memory_add_fact", "verify"] {
            let out = access
                .call_tool(&tool(name), json!({}), &Caller::default())
                .await;
            assert_eq!(out["isError"], true, "{name}");
            assert!(
                out["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .contains("Authorization: Bearer"),
                "{name}: {out}"
            );
        }
        let caller = Caller {
            bearer: Some("t".into()),
            agent_header: true,
        };
        let refused = access.call("memory.query", json!({}), &caller).await;
        assert!(
            matches!(&refused, Err(CallError::Unauthenticated(m)) if m.contains("X-Car-Agent-Id")),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn an_unreachable_daemon_is_a_tool_error() {
        let process = DaemonAccess::Process(Client::new(
            ClientConfig::with_env(EnvSnapshot::empty()).url(NOWHERE),
        ));
        let out = process
            .call_tool(
                &tool("memory_query"),
                json!({"query": "x"}),
                &Caller::default(),
            )
            .await;
        assert_eq!(out["isError"], true);
        let per_caller = DaemonAccess::PerCaller {
            url: NOWHERE.into(),
        };
        let caller = Caller {
            bearer: Some("t".into()),
            agent_header: false,
        };
        let failed = per_caller.call("events.stats", json!({}), &caller).await;
        assert!(matches!(failed, Err(CallError::Failed(_))), "{failed:?}");
    }
}
