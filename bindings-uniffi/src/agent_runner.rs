//! Running the daemon's agents from Swift and Kotlin: the [`AgentRunner`] callback
//! interface and its registration on a [`CarDaemonClient`], on the shared client's handler
//! registry (`car_daemon_client::Client::register_handler`).
//!
//! The daemon runs every `multi.*` pattern (swarm, pipeline, supervisor, map-reduce, vote,
//! tournament, subtask) and every `workflow.*` pattern stage itself, and sends each agent to
//! the calling connection as the reverse call `multi.run_agent {spec: AgentSpec, task}`,
//! expecting CAR's `AgentOutput` back (docs/multi-agent.md). This module owns only the
//! translation, following the library's callback pattern (`DaemonHandler`, `AgentTool`,
//! `ChatHandler`):
//!
//! - `CarDaemonClient.registerAgentRunner(runner)` serves `multi.run_agent` on that client
//!   (replacing any earlier runner, and any `DaemonHandler` registered for the method);
//!   `unregisterAgentRunner()` removes it, so the client answers `-32601` again and the daemon runs
//!   the agents itself on its own models (unless the call passed `runner: "caller"`, which never
//!   falls back: each agent then fails with `agent '<name>' failed: unknown method:
//!   multi.run_agent`);
//! - each call runs `runner.run(specJson, task)` on the runtime's blocking pool (never a tokio
//!   worker, never under a lock: the client clones the handler out of its registry before calling
//!   it), so the runner may block and may call back into the daemon (an `infer`, an `AgentLoop`
//!   run); the agents of a parallel pattern call it concurrently;
//! - `specJson` is the daemon's `params.spec` exactly as sent (`{name, system_prompt, tools,
//!   max_turns, metadata, cache_control, …}` with fields beyond CAR's, such as `role` or `model`,
//!   kept), `task` the agent's prompt;
//! - the returned text is the agent's `AgentOutput`: a JSON object (`{name, answer, turns,
//!   tool_calls, duration_ms, error?, tokens?}`, read by the daemon's lenient rules) or a JSON
//!   string is sent as that value; any other text (plain text, or JSON that is neither an object
//!   nor a string, such as `42`) is sent as a JSON string, which the daemon takes as the answer;
//! - a thrown error (declared `CarError` or not) becomes the reverse call's error
//!   (`CarError::into_handler_error`), which the daemon records in that agent's output (`error:
//!   "agent '<name>' failed: <detail>"`) while the pattern goes on. A thrown `DaemonRpc { code:
//!   -32601 }` declines like an unregistered runner: the daemon runs the call's remaining agents
//!   itself (unless `runner: "caller"`).

use std::sync::Arc;

use car_daemon_client::{HandlerError, HandlerResult};
use car_proto::errors::INVALID_PARAMS;
use car_proto::methods::multi::RUN_AGENT_METHOD;
use serde_json::Value;

use crate::client::CarDaemonClient;
use crate::error::CarError;

/// Runs the agents of the daemon's `multi.*` and `workflow.*` calls made on a client,
/// implemented by foreign code.
#[uniffi::export(foreign)]
pub trait AgentRunner: Send + Sync {
    /// Runs one agent: `spec_json` is its `AgentSpec` (a JSON object), `task` its prompt.
    /// Returns its `AgentOutput` as JSON (`{name, answer, turns, tool_calls, duration_ms,
    /// error?, tokens?}`), or plain text taken as the answer. Throwing fails this agent
    /// only: the daemon records the error in its output and the pattern goes on.
    fn run(&self, spec_json: String, task: String) -> Result<String, CarError>;
}

#[uniffi::export]
impl CarDaemonClient {
    /// Serves the daemon's `multi.run_agent` reverse calls on this client with `runner`,
    /// replacing any earlier one: the agents of the `multi.*` and `workflow.*` calls made
    /// on this client run there.
    pub fn register_agent_runner(&self, runner: Arc<dyn AgentRunner>) {
        self.client()
            .register_handler(RUN_AGENT_METHOD, move |params| run_agent(&*runner, &params));
    }

    /// Removes the agent runner: later `multi.run_agent` calls are answered `-32601`, and
    /// the daemon runs the agents itself (unless the call passed `runner: "caller"`).
    /// Agents in flight run to their end.
    pub fn unregister_agent_runner(&self) {
        self.client().unregister_handler(RUN_AGENT_METHOD);
    }
}

/// One `multi.run_agent {spec, task}` call, served by `runner`.
fn run_agent(runner: &dyn AgentRunner, params: &Value) -> HandlerResult {
    let invalid = |detail: &str| {
        HandlerError::new(format!("invalid params: {RUN_AGENT_METHOD} {detail}"))
            .with_code(INVALID_PARAMS)
    };
    let spec = params
        .get("spec")
        .filter(|s| s.is_object())
        .ok_or_else(|| invalid("needs a spec object"))?;
    let task = params
        .get("task")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("needs a task string"))?;
    let text = runner
        .run(spec.to_string(), task.to_string())
        .map_err(CarError::into_handler_error)?;
    Ok(output_value(text))
}

/// What the daemon receives for a runner's reply: a JSON object or string as it is, any
/// other text as a JSON string (the answer).
fn output_value(text: String) -> Value {
    match serde_json::from_str::<Value>(&text) {
        Ok(value @ (Value::Object(_) | Value::String(_))) => value,
        _ => Value::String(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    /// Records what it was given and returns a fixed reply.
    struct Fixed {
        reply: Result<String, CarError>,
        seen: Mutex<Vec<(String, String)>>,
    }

    impl Fixed {
        fn new(reply: Result<String, CarError>) -> Self {
            Self {
                reply,
                seen: Mutex::new(Vec::new()),
            }
        }
    }

    impl AgentRunner for Fixed {
        fn run(&self, spec_json: String, task: String) -> Result<String, CarError> {
            self.seen.lock().unwrap().push((spec_json, task));
            self.reply.clone()
        }
    }

    fn params() -> Value {
        json!({"spec": {"name": "a", "role": "critic", "max_turns": 10}, "task": "review"})
    }

    #[test]
    fn the_runner_gets_the_spec_as_sent_and_the_task() {
        let runner = Fixed::new(Ok(r#"{"name":"a","answer":"fine"}"#.into()));
        assert_eq!(
            run_agent(&runner, &params()),
            Ok(json!({"name": "a", "answer": "fine"}))
        );
        let seen = runner.seen.lock().unwrap();
        let (spec, task) = &seen[0];
        assert_eq!(
            serde_json::from_str::<Value>(spec).unwrap(),
            params()["spec"]
        );
        assert_eq!(task, "review");
    }

    #[test]
    fn replies_that_are_not_an_object_or_a_string_are_the_answer_text() {
        for (reply, want) in [
            (
                r#"{"answer":"x","turns":2}"#,
                json!({"answer": "x", "turns": 2}),
            ),
            (r#""quoted""#, json!("quoted")),
            ("plain text", json!("plain text")),
            ("42", json!("42")),
            ("[1, 2]", json!("[1, 2]")),
            ("", json!("")),
        ] {
            let runner = Fixed::new(Ok(reply.into()));
            assert_eq!(run_agent(&runner, &params()), Ok(want), "{reply}");
        }
    }

    #[test]
    fn runner_errors_become_handler_errors() {
        let runner = Fixed::new(Err(CarError::Handler {
            detail: "model offline".into(),
            terminal: true,
        }));
        let e = run_agent(&runner, &params()).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str(), e.terminal),
            (-32000, "model offline", true)
        );
        let runner = Fixed::new(Err(CarError::DaemonRpc {
            code: -32601,
            detail: "not mine".into(),
            data_json: "null".into(),
        }));
        assert_eq!(run_agent(&runner, &params()).unwrap_err().code, -32601);
    }

    #[test]
    fn calls_without_a_spec_or_task_are_invalid_params_and_skip_the_runner() {
        let runner = Fixed::new(Ok("unused".into()));
        for (params, want) in [
            (json!({"task": "t"}), "needs a spec object"),
            (json!({"spec": "a", "task": "t"}), "needs a spec object"),
            (json!({"spec": {"name": "a"}}), "needs a task string"),
            (json!(null), "needs a spec object"),
        ] {
            let e = run_agent(&runner, &params).unwrap_err();
            assert_eq!(e.code, INVALID_PARAMS, "{params}");
            assert_eq!(
                e.message,
                format!("invalid params: multi.run_agent {want}"),
                "{params}"
            );
        }
        assert!(runner.seen.lock().unwrap().is_empty());
    }
}
