//! How a tool call reaches the daemon: the shared client for the core tools, a fresh
//! bearer-authenticated session per call for the daemon tool groups, and the projection of
//! the daemon's answer into an MCP tool result.
//!
//! This module owns credentials and connections; it knows nothing about JSON-RPC framing or
//! HTTP. The bearer path never substitutes a credential: no daemon token, environment
//! variable or token file is consulted, and each call's session is closed when it ends, so
//! two callers never share an authenticated connection.

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

/// What the daemon tools dial: the shared client, and (on HTTP) the URL bearer sessions use.
#[derive(Debug, Clone)]
pub struct DaemonAccess {
    shared: Client,
    bearer_url: Option<String>,
}

impl DaemonAccess {
    /// Core tools through `shared`; no daemon tool groups (stdio).
    pub fn shared_only(shared: Client) -> Self {
        Self {
            shared,
            bearer_url: None,
        }
    }

    /// Core tools through `shared`; daemon tools on fresh sessions to `url`.
    pub fn with_bearer_url(shared: Client, url: impl Into<String>) -> Self {
        Self {
            shared,
            bearer_url: Some(url.into()),
        }
    }

    /// The shared client (prompts and core tools).
    pub fn shared(&self) -> &Client {
        &self.shared
    }

    /// Runs `tool` with `arguments` as its method's params and projects the outcome into a
    /// `CallToolResult`. Every failure, the daemon's input validation included, is an
    /// `isError: true` result.
    pub async fn call_tool(&self, tool: &Tool, arguments: Value, caller: &Caller) -> Value {
        let outcome = if tool.def.group.needs_bearer() {
            self.call_with_bearer(tool.def.method, arguments, caller)
                .await
        } else {
            self.shared
                .call(tool.def.method, arguments)
                .await
                .map_err(|e| describe(&e))
        };
        match outcome {
            Ok(result) => success(tool, result),
            Err(message) => failure(&message),
        }
    }

    async fn call_with_bearer(
        &self,
        method: &str,
        arguments: Value,
        caller: &Caller,
    ) -> Result<Value, String> {
        if caller.agent_header {
            return Err("X-Car-Agent-Id is not supported here: a supervised agent must use its own WebSocket connection".into());
        }
        let Some(url) = &self.bearer_url else {
            return Err("daemon tools are only served on the daemon's HTTP endpoint".into());
        };
        let Some(token) = caller.bearer.as_deref() else {
            return Err("this tool needs an Authorization: Bearer <daemon token> header".into());
        };
        let client = Client::new(
            ClientConfig::with_env(EnvSnapshot::empty())
                .url(url)
                .token(token),
        );
        let outcome = client.call(method, arguments).await;
        client.close();
        outcome.map_err(|e| describe(&e))
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

    fn unreachable_access(bearer_url: Option<&str>) -> DaemonAccess {
        // Port 9 (discard) on loopback: nothing listens there in the test environment.
        let shared =
            Client::new(ClientConfig::with_env(EnvSnapshot::empty()).url("ws://127.0.0.1:9"));
        match bearer_url {
            Some(url) => DaemonAccess::with_bearer_url(shared, url),
            None => DaemonAccess::shared_only(shared),
        }
    }

    #[tokio::test]
    async fn daemon_tools_refuse_without_a_bearer_or_with_an_agent_header() {
        let access = unreachable_access(Some("ws://127.0.0.1:9"));
        let stats = tool("events_stats");
        let out = access
            .call_tool(&stats, json!({}), &Caller::default())
            .await;
        assert_eq!(out["isError"], true);
        assert!(out["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Authorization: Bearer"));
        let caller = Caller {
            bearer: Some("t".into()),
            agent_header: true,
        };
        let out = access.call_tool(&stats, json!({}), &caller).await;
        assert!(out["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("X-Car-Agent-Id"));
    }

    #[tokio::test]
    async fn an_unreachable_daemon_is_a_tool_error() {
        let access = unreachable_access(None);
        let out = access
            .call_tool(
                &tool("memory_query"),
                json!({"query": "x"}),
                &Caller::default(),
            )
            .await;
        assert_eq!(out["isError"], true);
        let out = access
            .call_tool(&tool("events_stats"), json!({}), &Caller::default())
            .await;
        assert!(out["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("only served"));
    }
}
