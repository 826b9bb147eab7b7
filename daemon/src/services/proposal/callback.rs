//! One `tools.execute` attempt of a proposal's tool call: the reverse call, its waits, and
//! `tools.cancel` when the daemon stops waiting (see [`super::exec`]). While it waits the
//! callback is registered on the session under the proposal's run, so `runs.cancel` can
//! withdraw it.

use std::time::Duration;

use car_proto::errors::RpcError;
use serde_json::{json, Value};

use super::exec::{Execution, CALLBACK_GRACE};
use crate::state::proposal::Action;
use crate::state::session::ReverseCallError;

/// How an attempt ended.
pub(super) enum Attempt {
    Answered(Value),
    Refused(RpcError),
    Cancelled(String),
    Closed,
}

impl Execution<'_> {
    pub(super) async fn attempt(
        &self,
        action: &Action,
        tool: &str,
        request_id: &str,
        params: &Value,
    ) -> Attempt {
        let session = &self.call.session;
        let daemon_wait = action
            .timeout_ms
            .map(|ms| Duration::from_millis(ms) + CALLBACK_GRACE)
            .unwrap_or(self.tool_timeout);
        session.begin_callback(request_id, &action.id, self.run_id.as_deref());
        let mut guard = CancelOnDrop {
            exec: self,
            request_id,
            action_id: &action.id,
            tool,
            armed: true,
        };
        let wait =
            session.call_client_as(request_id.to_string(), "tools.execute", params, daemon_wait);
        let answer = match action.timeout_ms {
            Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), wait).await {
                Ok(answer) => answer,
                Err(_) => {
                    guard.armed = false;
                    return Attempt::Cancelled(self.cancel(
                        request_id,
                        &action.id,
                        format!("tool '{tool}' exceeded its timeout_ms ({ms}ms)"),
                    ));
                }
            },
            None => wait.await,
        };
        guard.armed = false;
        match answer {
            Ok(Ok(output)) => Attempt::Answered(output),
            Ok(Err(error)) => Attempt::Refused(error),
            Err(ReverseCallError::TimedOut(d)) => Attempt::Cancelled(self.cancel(
                request_id,
                &action.id,
                format!("tool '{tool}' callback timed out ({}s)", d.as_secs()),
            )),
            Err(ReverseCallError::Closed) => Attempt::Closed,
        }
    }

    /// Sends `tools.cancel` and logs it; returns the reason.
    pub(super) fn cancel(&self, request_id: &str, action_id: &str, reason: String) -> String {
        self.call.session.notify(
            "tools.cancel",
            &json!({"request_id": request_id, "action_id": action_id, "reason": reason}),
        );
        self.event(
            "tool.cancelled",
            Some(action_id),
            Some(request_id),
            json!({"reason": reason}),
        );
        reason
    }
}

/// Ends the callback's registration, and sends `tools.cancel` if an attempt is dropped
/// before it finished — the handler was abandoned at its deadline, or its run was cancelled
/// (or its connection closed, in which case the notification has nowhere to go and is
/// dropped). A callback `runs.cancel` already withdrew was told by it.
struct CancelOnDrop<'a> {
    exec: &'a Execution<'a>,
    request_id: &'a str,
    action_id: &'a str,
    tool: &'a str,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let waiting = self.exec.call.session.end_callback(self.request_id);
        if self.armed && waiting {
            self.exec.cancel(
                self.request_id,
                self.action_id,
                format!(
                    "proposal.submit was abandoned before tool '{}' answered",
                    self.tool
                ),
            );
        }
    }
}
