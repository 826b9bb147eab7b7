//! [`AgentLoop`]: CAR's agent loop for Swift and Kotlin, on the shared Rust loop
//! (`car_daemon_client::Client::run_agent`: tools and `finish` registered unless the
//! connection already has them, `runs.start` / `runs.complete` around the run, `infer`
//! with tools, `verify` then `proposal.submit`, observations linked to their calls, CAR's
//! `AgentOutcome`).
//!
//! This module owns only the translation, exactly as the Python binding's `run_agent` does:
//!
//! - [`AgentLoopConfig`] is CAR's `AgentLoopConfig` without its callables, typed; its structured
//!   fields (`toolSchemasJson`, `policiesJson`) are JSON text like every other structured value of
//!   this library, checked before anything is sent (`InvalidArgument`);
//! - the callables are the [`AgentTool`]s the loop is built with, by tool name. Each call of the
//!   run goes to the tool it names, on the runtime's blocking pool (never a tokio worker, never
//!   under a lock: the tool map is immutable), with the call's parameters and its `call_json`; the
//!   JSON it returns is what the model observes. A thrown error (declared or not), a result that is
//!   not JSON, or a name no tool has fails that action: the model observes the error and the run
//!   goes on;
//! - [`AgentOutcome`] is CAR's `AgentOutcome`, with `evidence` as JSON text.
//!
//! `run` is synchronous like every export: it blocks its caller's thread (never a runtime
//! worker; see `tokio_runtime::block_on`) until the run ends.

use std::collections::HashMap;
use std::sync::Arc;

use car_daemon_client::{HandlerError, HandlerResult, ToolCall};
use car_proto::errors::INTERNAL_ERROR;
use serde_json::Value;

use crate::client::CarDaemonClient;
use crate::error::CarError;
use crate::tokio_runtime;

/// CAR's `AgentLoopConfig` without its callables (the tools are the loop's).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct AgentLoopConfig {
    pub agent_name: String,
    /// The system prompt.
    pub identity: String,
    /// The run's agent id (`runs.start`); `agentName` when absent.
    #[uniffi(default = None)]
    pub agent_id: Option<String>,
    /// A JSON array of CAR `ToolSchema`s (`{name, description?, parameters?}`); `finish` is
    /// added by the loop.
    #[uniffi(default = "[]")]
    pub tool_schemas_json: String,
    /// A JSON array of CAR `PolicyDefinition`s registered with the tools.
    #[uniffi(default = "[]")]
    pub policies_json: String,
    /// The model every turn asks for; the daemon's routing when absent.
    #[uniffi(default = None)]
    pub default_model: Option<String>,
    #[uniffi(default = 1024)]
    pub max_tokens: u32,
    #[uniffi(default = 8)]
    pub max_turns: u32,
    /// `runs.start`'s `outcome_description`.
    #[uniffi(default = "")]
    pub target_outcome: String,
    /// Not in CAR's config: the `tool_choice` every turn sends (`"auto"` when absent);
    /// small local models want `"required"`.
    #[uniffi(default = None)]
    pub tool_choice: Option<String>,
    /// Not in CAR's config: every turn's sampling temperature (the model's when absent);
    /// `0` makes a local model's run repeatable.
    #[uniffi(default = None)]
    pub temperature: Option<f32>,
    /// Not in CAR's config: whether the model may ask for several calls in one turn (the
    /// model's default when absent).
    #[uniffi(default = None)]
    pub parallel_tool_calls: Option<bool>,
}

impl AgentLoopConfig {
    /// The shared loop's config; `InvalidArgument` naming the field when a JSON field is
    /// not a JSON array of objects.
    fn to_shared(&self) -> Result<car_daemon_client::AgentConfig, CarError> {
        Ok(car_daemon_client::AgentConfig {
            agent_id: self.agent_id.clone(),
            agent_name: self.agent_name.clone(),
            identity: self.identity.clone(),
            tool_schemas: json_objects("toolSchemasJson", &self.tool_schemas_json)?,
            policies: json_objects("policiesJson", &self.policies_json)?,
            default_model: self.default_model.clone(),
            max_tokens: self.max_tokens,
            max_turns: self.max_turns,
            target_outcome: self.target_outcome.clone(),
            tool_choice: self.tool_choice.clone(),
            temperature: self.temperature,
            parallel_tool_calls: self.parallel_tool_calls,
            seed: None,
        })
    }
}

fn json_objects(field: &str, text: &str) -> Result<Vec<Value>, CarError> {
    let invalid = |detail: String| CarError::InvalidArgument {
        detail: format!("AgentLoopConfig: {field} {detail}"),
    };
    let value: Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("is not valid JSON: {e}")))?;
    match value {
        Value::Array(items) if items.iter().all(Value::is_object) => Ok(items),
        other => Err(invalid(format!(
            "must be a JSON array of objects, got {other}"
        ))),
    }
}

/// CAR's `AgentMetrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, uniffi::Record)]
pub struct AgentMetrics {
    pub turns: u32,
    pub tool_calls: u32,
    pub actions_succeeded: u32,
    pub actions_failed: u32,
}

/// CAR's `AgentOutcome`: how a run ended.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct AgentOutcome {
    /// The run's id (`runs.get_trace`), absent when the daemon gave none.
    pub run_id: Option<String>,
    /// `success` (or the status `finish` named), `done` (a turn without a tool call),
    /// `give_up` (out of turns).
    pub status: String,
    /// `finish`'s summary or answer, or the last turn's text.
    pub summary: String,
    /// A JSON array of CAR `Evidence` (`{kind, description, data}`).
    pub evidence_json: String,
    pub metrics: AgentMetrics,
    /// Every tool the model called, in order, `finish` included.
    pub tools_called: Vec<String>,
    /// When the run ended (RFC 3339, UTC).
    pub timestamp: String,
}

impl From<car_daemon_client::AgentOutcome> for AgentOutcome {
    fn from(o: car_daemon_client::AgentOutcome) -> Self {
        Self {
            run_id: o.run_id,
            status: o.status,
            summary: o.summary,
            evidence_json: Value::Array(o.evidence).to_string(),
            metrics: AgentMetrics {
                turns: o.metrics.turns,
                tool_calls: o.metrics.tool_calls,
                actions_succeeded: o.metrics.actions_succeeded,
                actions_failed: o.metrics.actions_failed,
            },
            tools_called: o.tools_called,
            timestamp: o.timestamp,
        }
    }
}

/// One tool of an agent, implemented by foreign code.
#[uniffi::export(foreign)]
pub trait AgentTool: Send + Sync {
    /// Runs one call: `params_json` is the arguments the model gave (a JSON object),
    /// `call_json` the whole call `{tool, params, action_id, request_id, timeout_ms,
    /// session_id, attempt}`, `abort` set when the daemon cancels the call (its
    /// `timeout_ms` ran out). Returns the result as JSON, which the model observes.
    /// Throwing (a `CarError` or anything else) fails the action; the model observes the
    /// error.
    fn call(
        &self,
        params_json: String,
        call_json: String,
        abort: Arc<ToolAbort>,
    ) -> Result<String, CarError>;
}

/// A tool call's abort signal: set when the daemon sends `tools.cancel` for the call.
#[derive(Debug, uniffi::Object)]
pub struct ToolAbort(car_daemon_client::AbortSignal);

#[uniffi::export]
impl ToolAbort {
    /// Whether the daemon cancelled the call.
    pub fn is_aborted(&self) -> bool {
        self.0.is_aborted()
    }

    /// Blocks until the call is cancelled or `timeout_ms` passes; whether it was cancelled.
    pub fn wait(&self, timeout_ms: u64) -> bool {
        self.0.wait(std::time::Duration::from_millis(timeout_ms))
    }
}

/// Runs CAR's agent loop on a client with a fixed set of tools.
#[derive(uniffi::Object)]
pub struct AgentLoop {
    client: Arc<CarDaemonClient>,
    tools: Arc<HashMap<String, Arc<dyn AgentTool>>>,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.tools.keys().collect();
        names.sort();
        f.debug_struct("AgentLoop")
            .field("client", &self.client)
            .field("tools", &names)
            .finish()
    }
}

#[uniffi::export]
impl AgentLoop {
    /// A loop on `client` whose runs call `tools` (by tool name). Several runs, one after
    /// another or at once, may share it.
    #[uniffi::constructor]
    pub fn new(
        client: Arc<CarDaemonClient>,
        tools: HashMap<String, Arc<dyn AgentTool>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            tools: Arc::new(tools),
        })
    }

    /// Runs `config`'s agent on `goal` until the model calls `finish`, answers without a
    /// tool call, or runs out of turns (`max_turns`, else the config's), and returns the
    /// outcome recorded with `runs.complete`. Blocks the calling thread. A failing tool
    /// does not fail the run; a config that cannot be sent throws `InvalidArgument`, and a
    /// daemon or connection failure throws as any call does.
    #[uniffi::method(default(max_turns = None))]
    pub fn run(
        &self,
        config: AgentLoopConfig,
        goal: String,
        max_turns: Option<u32>,
    ) -> Result<AgentOutcome, CarError> {
        let config = config.to_shared()?;
        let tools = Arc::clone(&self.tools);
        let tool_fn = move |call: ToolCall| run_tool(&tools, call);
        let client = self.client.client();
        let outcome =
            tokio_runtime::block_on(client.run_agent(&config, &goal, max_turns, tool_fn))??;
        Ok(outcome.into())
    }
}

/// One call of a run, served by the tool it names.
fn run_tool(tools: &HashMap<String, Arc<dyn AgentTool>>, call: ToolCall) -> HandlerResult {
    let Some(tool) = tools.get(&call.tool) else {
        return Err(HandlerError::new(format!(
            "no AgentTool named {} was given to this AgentLoop",
            call.tool
        )));
    };
    let abort = Arc::new(ToolAbort(call.abort.clone()));
    let text = tool
        .call(
            call.params.to_string(),
            call.to_call_json().to_string(),
            abort,
        )
        .map_err(CarError::into_handler_error)?;
    serde_json::from_str(&text).map_err(|e| {
        HandlerError::new(format!(
            "tool {} returned a result that is not JSON: {e}",
            call.tool
        ))
        .with_code(INTERNAL_ERROR)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> AgentLoopConfig {
        AgentLoopConfig {
            agent_name: "calc".into(),
            identity: "You add.".into(),
            agent_id: None,
            tool_schemas_json: r#"[{"name":"add"}]"#.into(),
            policies_json: "[]".into(),
            default_model: Some("m".into()),
            max_tokens: 64,
            max_turns: 4,
            target_outcome: "the sum".into(),
            tool_choice: None,
            temperature: None,
            parallel_tool_calls: None,
        }
    }

    #[test]
    fn configs_become_the_shared_loops_and_bad_json_is_refused() {
        let shared = config().to_shared().unwrap();
        assert_eq!(shared.tool_schemas, vec![json!({"name": "add"})]);
        assert_eq!(
            (
                shared.max_tokens,
                shared.max_turns,
                shared.agent_name.as_str()
            ),
            (64, 4, "calc")
        );
        for (schemas, policies, want) in [
            (
                "[{",
                "[]",
                "AgentLoopConfig: toolSchemasJson is not valid JSON: ",
            ),
            (
                r#"{"name":"add"}"#,
                "[]",
                r#"AgentLoopConfig: toolSchemasJson must be a JSON array of objects, got {"name":"add"}"#,
            ),
            (
                "[]",
                r#"["deny"]"#,
                r#"AgentLoopConfig: policiesJson must be a JSON array of objects, got ["deny"]"#,
            ),
        ] {
            let bad = AgentLoopConfig {
                tool_schemas_json: schemas.into(),
                policies_json: policies.into(),
                ..config()
            };
            let err = bad.to_shared().unwrap_err();
            assert!(
                matches!(&err, CarError::InvalidArgument { detail } if detail.starts_with(want)),
                "{err:?}"
            );
        }
    }

    struct Fixed(Result<String, CarError>);
    impl AgentTool for Fixed {
        fn call(
            &self,
            params_json: String,
            call_json: String,
            _abort: Arc<ToolAbort>,
        ) -> Result<String, CarError> {
            let call: Value = serde_json::from_str(&call_json).unwrap();
            assert_eq!(call["params"].to_string(), params_json);
            self.0.clone()
        }
    }

    #[test]
    fn calls_go_to_the_named_tool_and_its_failures_fail_the_action() {
        let mut tools: HashMap<String, Arc<dyn AgentTool>> = HashMap::new();
        tools.insert("ok".into(), Arc::new(Fixed(Ok(r#"{"sum":5}"#.into()))));
        tools.insert("garbage".into(), Arc::new(Fixed(Ok("five".into()))));
        let broken = CarError::Handler {
            detail: "the adder is broken".into(),
            terminal: true,
        };
        tools.insert("broken".into(), Arc::new(Fixed(Err(broken))));
        let call = |tool: &str| {
            let params = json!({"tool": tool, "parameters": {"a": 2}, "action_id": "c1"});
            run_tool(
                &tools,
                ToolCall::from_request(&json!("cb-1"), &params).unwrap(),
            )
        };
        assert_eq!(call("ok"), Ok(json!({"sum": 5})));
        let e = call("garbage").unwrap_err();
        assert_eq!(e.code, INTERNAL_ERROR);
        assert!(
            e.message
                .starts_with("tool garbage returned a result that is not JSON: "),
            "{}",
            e.message
        );
        let e = call("broken").unwrap_err();
        assert_eq!(
            (e.message.as_str(), e.terminal),
            ("the adder is broken", true)
        );
        let e = call("nobody").unwrap_err();
        assert_eq!(
            e.message,
            "no AgentTool named nobody was given to this AgentLoop"
        );
    }

    #[test]
    fn outcomes_keep_every_field() {
        let shared = car_daemon_client::AgentOutcome {
            run_id: Some("run-1".into()),
            status: "success".into(),
            summary: "the sum is 5".into(),
            evidence: vec![json!({"kind": "tool_result"})],
            metrics: car_daemon_client::AgentMetrics {
                turns: 2,
                tool_calls: 2,
                actions_succeeded: 1,
                actions_failed: 1,
            },
            tools_called: vec!["add".into(), "finish".into()],
            timestamp: "2024-01-01T00:00:00Z".into(),
        };
        let o = AgentOutcome::from(shared);
        assert_eq!(o.evidence_json, r#"[{"kind":"tool_result"}]"#);
        assert_eq!(
            (
                o.metrics.turns,
                o.metrics.actions_succeeded,
                o.metrics.actions_failed
            ),
            (2, 1, 1)
        );
        assert_eq!(
            (
                o.run_id.as_deref(),
                o.tools_called.len(),
                o.timestamp.as_str()
            ),
            (Some("run-1"), 2, "2024-01-01T00:00:00Z")
        );
    }
}
