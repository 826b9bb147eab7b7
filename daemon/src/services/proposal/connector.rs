//! A proposal's call of an enabled MCP connector tool (`mcp_{slug}_{tool}`): run by the daemon
//! against the connector's server, never called back on the client.
//!
//! The policies are checked before every attempt (a `deny_connector` or `deny_tool` →
//! `rejected`, as for any tool); the permission tier and supervision gates already admitted
//! the proposal. Each attempt is bounded by the action's `timeout_ms` (the daemon's tool
//! timeout without one); a server that errors, times out or dies mid-call fails the attempt
//! with its message, and retries follow the action's `failure_behavior` like any failure.
//!
//! Before each attempt a connector whose connection died (its server exited or closed the
//! stream) is connected again (a stdio server restarted), and an OAuth connector whose
//! access token is about to expire reconnects with a refreshed one; a reconnection that
//! fails fails the attempt with its reason.

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
            let hub = &self.call.state.data.connectors;
            let slug = tool
                .strip_prefix("mcp_")
                .and_then(|rest| rest.split_once('_'))
                .map(|(slug, _)| slug);
            let ready = match slug {
                Some(slug) => {
                    hub.ensure_connected(
                        self.call.state.access.secrets.as_deref(),
                        &self.call.state.daemon.sessions,
                        slug,
                    )
                    .await
                }
                None => Ok(()),
            };
            let called = match ready {
                Ok(()) => hub.set.call(tool, parameters.clone(), budget).await,
                Err(e) => Err(format!("connector {slug:?} could not reconnect: {e}")),
            };
            match called {
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
