//! Running a proposal whose tool calls go to a function of the caller's
//! ([`Client::execute_proposal`]), beside the connection's registered tool handler.
//!
//! This module owns the scoping: the proposal's tools are registered on the connection,
//! the proposal is submitted under an execution `session_id` of its own, and the
//! `tools.execute` calls carrying that id are routed to the run's function for as long as
//! the run lasts (concurrent runs never see each other's calls). It must not touch the
//! socket (the client's calls do).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::client::Client;
use crate::error::Error;
use crate::handlers::{HandlerRegistry, HandlerResult, ToolCall};

impl Client {
    /// Runs a proposal whose tool calls are served by `tool_fn` (not by the registered
    /// tool handler): the proposal's tools are registered on the connection, the proposal
    /// is submitted under a fresh execution `session_id` (or the one given), and every
    /// `tools.execute` carrying that id goes to `tool_fn`. Concurrent runs with different
    /// tool functions do not see each other's calls. Returns the `proposal.submit` result.
    pub async fn execute_proposal<F>(
        &self,
        proposal: Value,
        session_id: Option<String>,
        tool_fn: F,
    ) -> Result<Value, Error>
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + 'static,
    {
        static NEXT_RUN: AtomicU64 = AtomicU64::new(1);
        let session_id = session_id.unwrap_or_else(|| {
            format!(
                "exec-{}-{}",
                std::process::id(),
                NEXT_RUN.fetch_add(1, Ordering::Relaxed)
            )
        });
        let mut tools: Vec<&str> = proposal
            .get("actions")
            .and_then(Value::as_array)
            .map(|actions| {
                actions
                    .iter()
                    .filter(|a| a.get("type").and_then(Value::as_str) == Some("tool_call"))
                    .filter_map(|a| a.get("tool").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        tools.sort_unstable();
        tools.dedup();
        if !tools.is_empty() {
            // Only tools the connection lacks: registering a name again would replace a
            // registered schema (its parameters) with a bare name.
            let listed = self.call("tools.list", json!({})).await?;
            let known: Vec<&str> = listed["tools"]
                .as_array()
                .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            let descriptors: Vec<Value> = tools
                .iter()
                .filter(|t| !known.contains(t))
                .map(|t| json!({ "name": t }))
                .collect();
            if !descriptors.is_empty() {
                self.call("tools.register", Value::Array(descriptors))
                    .await?;
            }
        }
        let registry = self.registry().clone();
        registry.set_scoped_tool(&session_id, Some(Arc::new(tool_fn)));
        struct Unscope(Arc<HandlerRegistry>, String);
        impl Drop for Unscope {
            fn drop(&mut self) {
                self.0.set_scoped_tool(&self.1, None);
            }
        }
        let _unscope = Unscope(registry, session_id.clone());
        self.call(
            "proposal.submit",
            json!({ "proposal": proposal, "session_id": session_id }),
        )
        .await
    }
}
