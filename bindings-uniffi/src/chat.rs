//! Serving chat turns (the agent side of `agents.chat`) from Swift and Kotlin: the
//! [`ChatHandler`] callback interface and the [`ChatTurn`] it is given, on the shared
//! client's chat module (`car_daemon_client::chat`, `Client::serve_chat`).
//!
//! This module owns only the translation, following the library's callback pattern
//! (`DaemonHandler`, `AgentTool`):
//!
//! - `CarDaemonClient.serveChat(handler)` serves the daemon's `agent.chat` on that client (a client
//!   built with `CAR_AGENT_ID` / `CAR_AGENT_TOKEN` in its environment connects as that agent);
//!   `stopServingChat()` makes later turns refused (`-32601`);
//! - the client acks each turn and calls `handler.run(turn)` on the turn's own thread (never a
//!   runtime worker, never under a lock), so it may block and may call the daemon;
//! - the turn streams through [`ChatTurn`]'s emitters, in order, up the connection the turn arrived
//!   on; `requestApproval` parks until the host decides;
//! - a `chatEvent(sessionId, kind, delta?)` (or `daemonCall("agent.chat.event", …)`) on the client
//!   serving the turn, for the turn's session, is routed into the turn by the shared client, not
//!   sent to the daemon: non-terminal kinds into the same ordered stream, the first `done` /
//!   `error` as the turn's terminal event (its `delta` becomes `text` / `error`);
//! - the turn ends with exactly one terminal event, sent by the client when `run` returns: the
//!   first `done` / `error` the handler sent through `chatEvent` (whatever `run` then returned or
//!   threw), else `done {finish_reason: "stop", text}` with the returned text, else `error {error}`
//!   for a thrown error (declared or not); a turn the host cancelled ends `done {finish_reason:
//!   "cancelled"}` whatever `run` did.

use std::sync::Arc;
use std::time::Duration;

use car_daemon_client::{ChatParams, ChatTurnContext};
use serde_json::Value;

use crate::client::CarDaemonClient;
use crate::error::CarError;

/// Runs the chat turns a [`CarDaemonClient`] serves, implemented by foreign code.
#[uniffi::export(foreign)]
pub trait ChatHandler: Send + Sync {
    /// Runs one turn and returns its final text (the turn's `done`); throwing ends the turn
    /// with `error` (the exception's message). A `done` / `error` the handler already sent
    /// with `chatEvent` wins over either.
    fn run(&self, turn: Arc<ChatTurn>) -> Result<String, CarError>;
}

/// One chat turn being served: its params, its event stream, its approvals and its
/// cancellation. Emitting after the turn ended does nothing.
#[derive(Debug, uniffi::Object)]
pub struct ChatTurn {
    turn: ChatTurnContext,
}

fn parse_json(field: &str, text: &str) -> Result<Value, CarError> {
    serde_json::from_str(text).map_err(|e| CarError::InvalidArgument {
        detail: format!("{field} is not valid JSON: {e}"),
    })
}

/// A turn's `agent.chat` params as JSON text.
fn params_json(p: &ChatParams) -> String {
    p.to_json().to_string()
}

#[uniffi::export]
impl ChatTurn {
    /// The chat session this turn belongs to.
    pub fn session_id(&self) -> String {
        self.turn.session_id().to_string()
    }

    /// The user's message.
    pub fn prompt(&self) -> String {
        self.turn.params().prompt.clone()
    }

    /// The whole `agent.chat` params: `{session_id, prompt, stream?, model?, attachments?,
    /// goal?, context?}`.
    pub fn params_json(&self) -> String {
        params_json(self.turn.params())
    }

    /// Streams `token {delta}`.
    pub fn emit_token(&self, delta: String) {
        self.turn.emit_token(&delta);
    }

    /// Streams `tool_call {tool, params?}`; `params_json` must be JSON.
    #[uniffi::method(default(params_json = None))]
    pub fn emit_tool_call(
        &self,
        tool: String,
        params_json: Option<String>,
    ) -> Result<(), CarError> {
        let params = params_json
            .map(|p| parse_json("params_json", &p))
            .transpose()?;
        self.turn.emit_tool_call(&tool, params);
        Ok(())
    }

    /// Streams `goal_evaluated {iteration, met, grounded, reason}`.
    pub fn emit_goal_evaluated(&self, iteration: u64, met: bool, grounded: bool, reason: String) {
        self.turn
            .emit_goal_evaluated(iteration, met, grounded, &reason);
    }

    /// Streams `approval_pending {approval_id, action, details?}` and blocks until the host
    /// decides (`agents.chat.approve`); `false` at once, or the moment it happens, when the
    /// turn is cancelled or loses its connection.
    #[uniffi::method(default(details_json = None))]
    pub fn request_approval(
        &self,
        approval_id: String,
        action: String,
        details_json: Option<String>,
    ) -> Result<bool, CarError> {
        let details = details_json
            .map(|d| parse_json("details_json", &d))
            .transpose()?;
        Ok(self.turn.request_approval(&approval_id, &action, details))
    }

    /// Whether the host cancelled the turn or its connection ended.
    pub fn is_cancelled(&self) -> bool {
        self.turn.is_cancelled()
    }

    /// Blocks until the turn is cancelled or `timeout_ms` passes; whether it was cancelled.
    pub fn wait_cancelled(&self, timeout_ms: u64) -> bool {
        self.turn
            .abort_signal()
            .wait(Duration::from_millis(timeout_ms))
    }
}

/// The client's chat handler for a foreign one.
struct Foreign(Arc<dyn ChatHandler>);

impl car_daemon_client::ChatHandler for Foreign {
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String> {
        let turn = Arc::new(ChatTurn { turn: turn.clone() });
        self.0.run(turn).map_err(|e| e.into_handler_error().message)
    }
}

#[uniffi::export]
impl CarDaemonClient {
    /// Serves the daemon's `agent.chat` turns on this client with `handler`, replacing any
    /// earlier one (turns in flight keep theirs).
    pub fn serve_chat(&self, handler: Arc<dyn ChatHandler>) {
        self.client().serve_chat(Foreign(handler));
    }

    /// Stops serving chat: later `agent.chat` calls are refused (`-32601`); turns in
    /// flight run to their end.
    pub fn stop_serving_chat(&self) {
        self.client().stop_serving_chat();
    }
}
