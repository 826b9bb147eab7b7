//! A proposal's call of a built-in agent tool (`agents.register_basics`): executed by the
//! daemon itself in the configured workspace root ([`car_builtin_tools::Workspace`]), or in
//! the session's own root when it has one (a declarative agent's scratch workspace), never
//! called back on the client.
//!
//! The policies are checked first (a violation → `rejected`, as for any tool). A mutating
//! tool (`write_file`, `edit_file`) then passes the approval gate as `tool:<name>`: a
//! denial or timeout → `rejected` with the gate's message, and nothing is written. The
//! tool runs once, off the async workers, against the session's read ledger (its
//! read-before-edit guard). A tool error fails the action with the tool's message (which
//! names paths relative to the root only); retries follow the action's `failure_behavior`
//! like any other failure.

use serde_json::{json, Map, Value};

use super::exec::{ActionResult, Execution, Status};
use crate::state::proposal::Action;

impl Execution<'_> {
    pub(super) async fn call_builtin(
        &self,
        action: &Action,
        tool: &str,
        parameters: &Map<String, Value>,
        mut result: ActionResult,
    ) -> ActionResult {
        if let Some(why) = self.policy_refusal(action, tool, parameters) {
            result.status = Status::Rejected;
            result.error = Some(why);
            return result;
        }
        let params = Value::Object(parameters.clone());
        if car_builtin_tools::is_mutating(tool) {
            let gate = crate::state::approval_gate::admit(
                &self.call.state,
                &self.call.session,
                tool,
                format!("tool:{tool}"),
                &params,
            )
            .await;
            if let Err(e) = gate {
                self.event(
                    "action.rejected",
                    Some(&action.id),
                    None,
                    json!({"tool": tool, "reason": e.message}),
                );
                result.status = Status::Rejected;
                result.error = Some(e.message);
                return result;
            }
        }
        for attempt in 1..=action.max_attempts() {
            result.attempts = attempt;
            self.event(
                "tool.called",
                Some(&action.id),
                None,
                json!({"tool": tool, "attempt": attempt, "builtin": true}),
            );
            let workspace = self
                .call
                .session
                .workspace()
                .unwrap_or_else(|| self.call.state.data.workspace.clone());
            let session = self.call.session.clone();
            let (name, input) = (tool.to_string(), params.clone());
            let outcome = tokio::task::spawn_blocking(move || {
                workspace.execute(&name, &input, session.read_ledger())
            })
            .await;
            match outcome {
                Ok(Ok(output)) => return self.answered(action, None, attempt, output, result),
                Ok(Err(e)) => {
                    self.event(
                        "tool.failed",
                        Some(&action.id),
                        None,
                        json!({"attempt": attempt, "error": e.to_json()}),
                    );
                    result.error = Some(e.to_string());
                }
                Err(e) => {
                    result.error = Some(format!("built-in tool {tool} failed: {e}"));
                    return result;
                }
            }
        }
        self.exhausted(action, result)
    }
}
