//! The transport-independent MCP dispatcher: one JSON-RPC message in, at most one out.
//!
//! This module owns the MCP method table (`initialize`, `ping`, `tools/*`, `prompts/*`,
//! `resources/list`, `completion/complete`) and the envelope rules; the transports (`http`,
//! `stdio`) own framing, headers and sessions and hand it parsed objects. Dispatch is
//! stateless: it does not remember what a client negotiated, and every answer is legal in
//! every revision it offers.

use car_proto::errors::{self, RpcError};
use serde_json::{json, Map, Value};

use crate::catalog::{self, Group, Tool};
use crate::daemon::{Caller, DaemonAccess};
use crate::{prompts, PROTOCOL_VERSION, SUPPORTED_VERSIONS};

/// The MCP spec's code for `resources/read` of a URI the server does not have.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// What one inbound message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answer it.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification: never answered.
    Notification { method: String },
    /// A JSON-RPC response to a server request (this server sends none): ignored.
    Response,
    /// Not a JSON-RPC message; answer with this error (and `id`, when one was readable).
    Invalid { id: Value, error: RpcError },
}

/// Sorts a parsed JSON value into a [`Message`]. Arrays (batches) are the caller's to
/// refuse before this, since the refusal differs by transport only in framing.
pub fn classify(value: Value) -> Message {
    let Value::Object(mut map) = value else {
        return Message::Invalid {
            id: Value::Null,
            error: RpcError::invalid_request("a message must be a JSON object"),
        };
    };
    let id = map.remove("id");
    let readable_id = match &id {
        Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
        _ => Value::Null,
    };
    if map.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Message::Invalid {
            id: readable_id,
            error: RpcError::invalid_request("jsonrpc: must be \"2.0\""),
        };
    }
    let method = match map.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => {
            return Message::Invalid {
                id: readable_id,
                error: RpcError::invalid_request("method: must be a string"),
            }
        }
        None if id.is_some() && (map.contains_key("result") || map.contains_key("error")) => {
            return Message::Response
        }
        None => {
            return Message::Invalid {
                id: readable_id,
                error: RpcError::invalid_request("method: missing"),
            }
        }
    };
    let params = map.remove("params").unwrap_or(Value::Null);
    match id {
        None => Message::Notification { method },
        Some(id @ (Value::String(_) | Value::Number(_))) => Message::Request { id, method, params },
        Some(_) => Message::Invalid {
            id: Value::Null,
            error: RpcError::invalid_request("id: must be a string or a number"),
        },
    }
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// The answer to a JSON array on a transport that does not take batches.
pub fn batch_refusal() -> Value {
    error_response(
        Value::Null,
        &RpcError::invalid_request(
            "JSON-RPC batches are not supported: send one message per request (MCP 2025-03-26, the only revision with batching, is not offered)",
        ),
    )
}

/// The answer to bytes that are not a JSON value.
pub fn parse_refusal(detail: impl std::fmt::Display) -> Value {
    error_response(Value::Null, &RpcError::parse(detail))
}

/// One MCP server: its registered tools and how they reach the daemon.
#[derive(Debug)]
pub struct McpServer {
    tools: Vec<Tool>,
    access: DaemonAccess,
    /// The working directory sent as `policy_check`'s `cwd` when the caller gives none
    /// (stdio: this process's, so `.car/policies/` is the client's project's, as in CAR;
    /// HTTP: none, and the daemon uses its own).
    cwd: Option<String>,
}

impl McpServer {
    /// The stdio server: core tools only (the daemon tool groups need a per-request bearer
    /// credential, which stdio has no place for).
    pub fn stdio(access: DaemonAccess) -> Self {
        Self {
            tools: catalog::build(&[Group::Core]),
            access,
            cwd: std::env::current_dir()
                .ok()
                .and_then(|d| d.to_str().map(str::to_string)),
        }
    }

    /// The HTTP server: core tools, the daemon read group and, with `enable_mutations`,
    /// the mutating group.
    pub fn http(access: DaemonAccess, enable_mutations: bool) -> Self {
        let mut groups = vec![Group::Core, Group::DaemonRead];
        if enable_mutations {
            groups.push(Group::DaemonMutating);
        }
        Self {
            tools: catalog::build(&groups),
            access,
            cwd: None,
        }
    }

    /// The registered tools.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Handles one classified message; `None` when it gets no answer.
    pub async fn handle(&self, message: Message, caller: &Caller) -> Option<Value> {
        match message {
            Message::Request { id, method, params } => {
                let reply = match self.request(&method, params, caller).await {
                    Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                    Err(error) => error_response(id, &error),
                };
                Some(reply)
            }
            Message::Notification { method } => {
                tracing::debug!(%method, "mcp notification");
                None
            }
            Message::Response => None,
            Message::Invalid { id, error } => Some(error_response(id, &error)),
        }
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        caller: &Caller,
    ) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({
                "tools": self.tools.iter().map(|t| t.listing.clone()).collect::<Vec<_>>()
            })),
            "tools/call" => self.call_tool(params, caller).await,
            "prompts/list" => Ok(prompts::list()),
            "prompts/get" => prompts::get(&self.access, &params, caller).await,
            "resources/list" => Ok(json!({"resources": []})),
            "resources/read" => {
                let uri = params.get("uri").and_then(Value::as_str).unwrap_or("");
                Err(RpcError::new(
                    RESOURCE_NOT_FOUND,
                    format!("resource not found: {uri}"),
                ))
            }
            "completion/complete" => prompts::complete(&params),
            // Declined by decision (capabilities say so): no subscriptions, no logging, no
            // templates.
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    async fn call_tool(&self, params: Value, caller: &Caller) -> Result<Value, RpcError> {
        let Value::Object(mut params) = params else {
            return Err(RpcError::invalid_params("params: must be an object"));
        };
        let name = match params.remove("name") {
            Some(Value::String(name)) => name,
            _ => return Err(RpcError::invalid_params("name: a tool name is required")),
        };
        let mut arguments = match params.remove("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(args)) => args,
            Some(_) => return Err(RpcError::invalid_params("arguments: must be an object")),
        };
        let Some(tool) = self.tools.iter().find(|t| t.def.name == name) else {
            // A catalog tool this server did not register (mutations off, or a daemon tool
            // on stdio) is absent, not advertised-but-broken: method-not-found. A name the
            // catalog has never had is an invalid `name`.
            return Err(match catalog::find(&name) {
                Some(_) => RpcError::new(
                    errors::METHOD_NOT_FOUND,
                    format!("unknown tool: {name} (not enabled on this server)"),
                ),
                None => RpcError::invalid_params(format!("name: unknown tool: {name}")),
            });
        };
        if tool.def.method == "policy.check" && !arguments.contains_key("cwd") {
            if let Some(cwd) = &self.cwd {
                arguments.insert("cwd".into(), Value::String(cwd.clone()));
            }
        }
        Ok(self
            .access
            .call_tool(tool, Value::Object(arguments), caller)
            .await)
    }
}

/// The `initialize` result: the requested revision when supported, else the newest.
fn initialize(params: &Value) -> Value {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = requested
        .and_then(|r| SUPPORTED_VERSIONS.iter().find(|v| **v == r))
        .copied()
        .unwrap_or(PROTOCOL_VERSION);
    json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": {},
            "resources": {"subscribe": false, "listChanged": false},
            "prompts": {"listChanged": false},
            "completions": {},
        },
        "serverInfo": {"name": "car-runtime", "version": car_proto::CAR_VERSION},
        "instructions": "CAR's graph memory, skills and static plan verification. Tools never execute a proposal; on HTTP every tool call and prompt needs an Authorization: Bearer header.",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(enable_mutations: bool) -> McpServer {
        McpServer::http(
            DaemonAccess::PerCaller {
                url: "ws://127.0.0.1:9".into(),
            },
            enable_mutations,
        )
    }

    async fn ask(server: &McpServer, method: &str, params: Value) -> Value {
        let message =
            classify(json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}));
        server.handle(message, &Caller::default()).await.unwrap()
    }

    #[tokio::test]
    async fn initialize_negotiates_without_ever_failing() {
        let s = server(false);
        for (asked, got) in [
            (json!("2024-11-05"), "2024-11-05"),
            (json!("2025-06-18"), "2025-06-18"),
            (json!("2025-11-25"), "2025-11-25"),
            (json!("2025-03-26"), "2025-11-25"),
            (json!(42), "2025-11-25"),
            (Value::Null, "2025-11-25"),
        ] {
            let reply = ask(&s, "initialize", json!({"protocolVersion": asked})).await;
            assert_eq!(reply["result"]["protocolVersion"], got);
        }
        let reply = ask(&s, "initialize", Value::Null).await;
        let caps = &reply["result"]["capabilities"];
        assert_eq!(caps["tools"], json!({}));
        assert_eq!(
            caps["resources"],
            json!({"subscribe": false, "listChanged": false})
        );
        assert_eq!(caps["prompts"], json!({"listChanged": false}));
        assert_eq!(caps["completions"], json!({}));
        assert!(caps.get("logging").is_none());
        assert_eq!(reply["result"]["serverInfo"]["name"], "car-runtime");
        assert_eq!(reply["id"], 7);
    }

    #[tokio::test]
    async fn declined_methods_are_method_not_found() {
        let s = server(false);
        for method in [
            "resources/subscribe",
            "resources/unsubscribe",
            "logging/setLevel",
            "resources/templates/list",
            "nope",
        ] {
            assert_eq!(
                ask(&s, method, json!({})).await["error"]["code"],
                -32601,
                "{method}"
            );
        }
        assert_eq!(ask(&s, "ping", Value::Null).await["result"], json!({}));
        assert_eq!(
            ask(&s, "resources/list", Value::Null).await["result"]["resources"],
            json!([])
        );
    }

    #[tokio::test]
    async fn mutating_tools_register_only_when_enabled() {
        let names = |s: &McpServer| -> Vec<String> {
            s.tools().iter().map(|t| t.def.name.to_string()).collect()
        };
        assert!(!names(&server(false)).contains(&"workflow_run".to_string()));
        assert!(names(&server(false)).contains(&"events_query".to_string()));
        assert!(names(&server(true)).contains(&"scheduler_unschedule".to_string()));
        let reply = ask(
            &server(false),
            "tools/call",
            json!({"name": "workflow_run"}),
        )
        .await;
        assert_eq!(reply["error"]["code"], -32601);
        let stdio = McpServer::stdio(server(false).access.clone());
        assert_eq!(stdio.tools().len(), 16);
        let reply = ask(&stdio, "tools/call", json!({"name": "events_query"})).await;
        assert_eq!(reply["error"]["code"], -32601);
    }

    #[tokio::test]
    async fn malformed_tool_calls_are_invalid_params() {
        let s = server(false);
        for params in [
            json!({}),
            json!({"name": 3}),
            json!({"name": "memory_query", "arguments": [1]}),
            json!({"name": "memory_query", "arguments": "x"}),
            json!({"name": "no_such_tool"}),
            json!([]),
        ] {
            let reply = ask(&s, "tools/call", params.clone()).await;
            assert_eq!(reply["error"]["code"], -32602, "{params}");
        }
    }

    #[tokio::test]
    async fn a_failing_tool_is_an_error_result_not_an_rpc_error() {
        let s = server(false);
        let reply = ask(
            &s,
            "tools/call",
            json!({"name": "memory_query", "arguments": {"query": "q"}}),
        )
        .await;
        assert_eq!(reply["result"]["isError"], true);
    }

    #[test]
    fn classify_sorts_messages() {
        assert!(matches!(
            classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            Message::Notification { .. }
        ));
        assert_eq!(
            classify(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
            Message::Response
        );
        for bad in [
            json!(3),
            json!({"id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1}),
            json!({"jsonrpc": "2.0", "id": null, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": {}, "method": "ping"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": 5}),
        ] {
            match classify(bad.clone()) {
                Message::Invalid { error, .. } => assert_eq!(error.code, -32600, "{bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert_eq!(batch_refusal()["error"]["code"], -32600);
        assert_eq!(parse_refusal("x")["error"]["code"], -32700);
    }
}
