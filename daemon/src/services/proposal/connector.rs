//! A proposal's call of an enabled MCP connector tool (`mcp_{slug}_{tool}`): run by the daemon
//! against the connector's server, never called back on the client.
//!
//! The policies are checked before every attempt (a `deny_connector` or `deny_tool` →
//! `rejected`, as for any tool); the permission tier and supervision gates already admitted
//! the proposal. Each attempt is bounded by the action's `timeout_ms` (the daemon's tool
//! timeout without one); a server that errors, times out or dies mid-call fails the attempt
//! with its message, and retries follow the action's `failure_behavior` like any failure.

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::exec::{ActionResult, Execution, Status};
use crate::state::proposal::Action;

impl Execution<'_> {
    pub(super) async fn call_connector(
        &self,
        action: &Action,
        tool: &str,
        parameters: &Map<String, Value>,
        mut result: ActionResult,
    ) -> ActionResult {
        let budget = action
            .timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.call.state.daemon.config.tool_timeout);
        for attempt in 1..=action.max_attempts() {
            if let Some(why) = self.policy_refusal(action, tool, parameters) {
                result.status = Status::Rejected;
                result.error = Some(why);
                return result;
            }
            result.attempts = attempt;
            self.event(
                "tool.called",
                Some(&action.id),
                None,
                json!({"tool": tool, "attempt": attempt, "connector": true}),
            );
            let connectors = &self.call.state.data.connectors.set;
            match connectors.call(tool, parameters.clone(), budget).await {
                Ok(output) => return self.answered(action, None, attempt, output, result),
                Err(e) => {
                    self.event(
                        "tool.failed",
                        Some(&action.id),
                        None,
                        json!({"attempt": attempt, "error": e}),
                    );
                    result.error = Some(e);
                }
            }
        }
        self.exhausted(action, result)
    }
}
