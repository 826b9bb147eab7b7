//! One live connection to an MCP server, on the official Rust SDK's client (`rmcp`):
//! connect (the `initialize` handshake), `tools/list`, `tools/call`, close.
//!
//! Every request is bounded: connecting by the caller's timeout, a call by its action's
//! budget. A server that dies mid-call fails the call as soon as its transport closes (the
//! SDK answers every pending request when its transport ends), and a timeout drops the
//! request, so nothing waits on a dead server. A stdio server is the SDK's child-process
//! transport, whose guard kills the child when the connection is dropped.

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Map, Value};

/// How to reach a server, with its secrets filled in.
#[derive(Debug)]
pub enum Launch {
    /// A Streamable HTTP endpoint and the headers sent with every request.
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
    /// A ready command: the daemon has set its environment and confinement.
    Stdio(tokio::process::Command),
}

/// One tool a server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// The server-side name.
    pub name: String,
    pub description: Option<String>,
    /// Its `inputSchema`.
    pub input_schema: Value,
}

/// A connected server.
#[derive(Debug)]
pub struct Live {
    service: RunningService<RoleClient, ()>,
}

impl Live {
    /// Connects (the MCP handshake) within `timeout`.
    pub async fn connect(launch: Launch, timeout: Duration) -> Result<Self, String> {
        let connecting = async {
            match launch {
                Launch::Http { url, headers } => {
                    let mut custom = HashMap::new();
                    for (name, value) in headers {
                        let name = http::HeaderName::try_from(name.as_str())
                            .map_err(|_| format!("headers: {name:?} is not a header name"))?;
                        let value = http::HeaderValue::try_from(value.as_str()).map_err(|_| {
                            format!("headers.{name}: the value is not a valid header value")
                        })?;
                        custom.insert(name, value);
                    }
                    let config =
                        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
                    let transport = StreamableHttpClientTransport::from_config(config);
                    ().serve(transport).await.map_err(|e| {
                        if e.is_authorization_required() {
                            "the server requires OAuth authorization and no valid access token \
                             was sent"
                                .to_string()
                        } else {
                            e.to_string()
                        }
                    })
                }
                Launch::Stdio(command) => {
                    let program = command
                        .as_std()
                        .get_program()
                        .to_string_lossy()
                        .into_owned();
                    let (transport, _) = TokioChildProcess::builder(command)
                        .stderr(std::process::Stdio::null())
                        .spawn()
                        .map_err(|e| format!("cannot start {program}: {e}"))?;
                    ().serve(transport).await.map_err(|e| e.to_string())
                }
            }
        };
        let service = tokio::time::timeout(timeout, connecting)
            .await
            .map_err(|_| {
                format!(
                    "the server did not complete the MCP handshake within {}s",
                    timeout.as_secs()
                )
            })??;
        Ok(Live { service })
    }

    /// `tools/list`, every page, within `timeout`.
    pub async fn tools(&self, timeout: Duration) -> Result<Vec<ToolInfo>, String> {
        let tools = tokio::time::timeout(timeout, self.service.list_all_tools())
            .await
            .map_err(|_| format!("tools/list did not answer within {}s", timeout.as_secs()))?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        Ok(tools
            .into_iter()
            .map(|t| ToolInfo {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect())
    }

    /// `tools/call` within `timeout`: the tool's output, or its error.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let result = tokio::time::timeout(timeout, self.service.call_tool(params))
            .await
            .map_err(|_| format!("{tool} did not answer within {} ms", timeout.as_millis()))?
            .map_err(|e| format!("{tool} failed: {e}"))?;
        output_of(result)
    }

    /// Whether the connection is still up.
    pub fn is_open(&self) -> bool {
        !self.service.is_transport_closed()
    }
}

/// A tool result as an action's output: its `structuredContent` when it has one, else its
/// text (one text block as a string), else its content blocks; an `isError` result is the
/// error, its text the message.
fn output_of(result: CallToolResult) -> Result<Value, String> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    if result.is_error == Some(true) {
        return Err(if texts.is_empty() {
            "the tool reported an error".into()
        } else {
            texts.join("\n")
        });
    }
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    if texts.len() == result.content.len() {
        return Ok(Value::String(texts.join("\n")));
    }
    serde_json::to_value(&result.content).map_err(|e| format!("the result does not encode: {e}"))
}
