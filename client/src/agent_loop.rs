//! The agent loop every binding wraps: propose → verify → execute → observe, turn after
//! turn, until the model calls the `finish` tool or the turn budget runs out.
//!
//! One run ([`Client::run_agent`]):
//! 1. the config's tool schemas (one without `parameters` takes none) and policies, plus the
//!    `finish` tool, are registered on the connection unless this connection already has exactly
//!    that schema or policy from an earlier run; a new [`Client::connection_epoch`] (after
//!    `close()` or a daemon restart, per-connection registrations are gone) starts over;
//! 2. `runs.start {agent_id, agent_name, intent: goal, outcome_description}` brackets the run;
//! 3. each turn sends `infer` in CAR's request shape (`prompt: ""`, `messages`, `tools`, `params
//!    {max_tokens, tool_choice: "auto", cache_ttl: "one_hour"}`, `cache_control: true`: a local
//!    model keeps the conversation's KV prefix for the next turn) and records it with
//!    `runs.record_model_turn`;
//! 4. the requested calls other than `finish` become a proposal of `tool_call` actions (ids = the
//!    call ids; `timeout_ms` the budget the tool's schema declares as `timeoutMs`, as in CAR's
//!    loops), checked with `verify` (an invalid proposal is observed by the model as an error
//!    result for every call, not run) and run with [`Client::execute_proposal`] and the caller's
//!    tool function;
//! 5. the model observes an assistant message with its calls and one `tool_result` message per call
//!    (`{role: "tool_result", tool_use_id, content}`, content the output as JSON text, or
//!    `{"error": …}`);
//! 6. `finish {answer?, summary?, status?}` called alone ends the run with `success` (or the CAR
//!    status it names); called beside other tools, it is refused (an error result: its answer was
//!    written before their results) and the turns go on; a turn with no call ends it with `done`
//!    and the text as summary; running out of turns ends it with `give_up`. `runs.complete {run_id,
//!    outcome}` records CAR's `AgentOutcome`, which is also returned.
//!
//! Tool functions run on the blocking pool through the client's reverse-call handling,
//! never under a lock; a `tools.cancel` for a call reaches the client's cancel handler.

use car_proto::methods::runs::AGENT_STATUSES;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::client::Client;
use crate::error::Error;
use crate::handlers::{HandlerResult, ToolCall};

/// The tool that ends a run.
pub const FINISH_TOOL: &str = "finish";

/// CAR's `AgentLoopConfig` (the fields this loop reads).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentConfig {
    #[serde(default)]
    pub agent_id: Option<String>,
    pub agent_name: String,
    /// The system prompt.
    pub identity: String,
    /// `ToolSchema`s (`{name, description?, parameters?}`).
    #[serde(default)]
    pub tool_schemas: Vec<Value>,
    /// `PolicyDefinition`s registered with the tools.
    #[serde(default)]
    pub policies: Vec<Value>,
    #[serde(default)]
    pub default_model: Option<String>,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    #[serde(default)]
    pub target_outcome: String,
    /// The `tool_choice` every turn sends (default `"auto"`). Not in CAR's config: a
    /// small local model rarely opens a call on its own, and `"required"` makes each turn
    /// a call (the grammar constrains it), `finish` included.
    #[serde(default)]
    pub tool_choice: Option<String>,
    /// The sampling temperature every turn sends (default: the model's). Not in CAR's
    /// config either; `0` makes a local model's run repeatable.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Whether the model may ask for several calls in one turn (every turn's
    /// `parallel_tool_calls`; default: the model's). Not in CAR's config either.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
}

fn default_max_tokens() -> u32 {
    1024
}
fn default_max_turns() -> u32 {
    8
}

/// CAR's `AgentMetrics`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentMetrics {
    pub turns: u32,
    pub tool_calls: u32,
    pub actions_succeeded: u32,
    pub actions_failed: u32,
}

/// CAR's `AgentOutcome`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentOutcome {
    pub run_id: Option<String>,
    /// `success`, `partial_success`, `done`, `give_up`, `timeout` or `failure`.
    pub status: String,
    pub summary: String,
    pub evidence: Vec<Value>,
    pub metrics: AgentMetrics,
    pub tools_called: Vec<String>,
    /// RFC 3339.
    pub timestamp: String,
}

fn finish_schema() -> Value {
    json!({
        "name": FINISH_TOOL,
        "description": "End the task: give the user your answer, built from what the other tools returned. Call it once, alone, when the task is done or cannot be done.",
        "parameters": {"type": "object", "properties": {
            "answer": {"type": "string", "description": "Your answer, stating the result."}
        }, "required": ["answer"]}
    })
}

/// The per-call budget a tool's schema declares (`timeoutMs`, as CAR's loops read it, or
/// `timeout_ms`); the daemon's default applies without one.
fn timeout_of(schemas: &[Value], name: &Value) -> Option<u64> {
    let schema = schemas.iter().find(|s| &s["name"] == name)?;
    schema["timeoutMs"]
        .as_u64()
        .or_else(|| schema["timeout_ms"].as_u64())
}

/// A `ToolSchema` without `parameters` takes no arguments: `{"type": "object"}` is sent
/// for it, since a model's tool list needs a JSON Schema object per tool.
fn with_parameters(mut schema: Value) -> Value {
    if let Some(map) = schema.as_object_mut() {
        if map.get("parameters").is_none_or(Value::is_null) {
            map.insert(
                "parameters".into(),
                json!({"type": "object", "properties": {}}),
            );
        }
    }
    schema
}

/// CAR's `ChatTurnResult`: the reply and the run that recorded the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub text: String,
    pub run_id: Option<String>,
}

impl Client {
    /// Runs `config`'s agent on `goal` (see the module docs); `tool_fn` serves the tool
    /// calls. `max_turns` overrides the config's.
    pub async fn run_agent<F>(
        &self,
        config: &AgentConfig,
        goal: &str,
        max_turns: Option<u32>,
        tool_fn: F,
    ) -> Result<AgentOutcome, Error>
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
    {
        let conversation = vec![json!({"role": "user", "content": goal})];
        self.run_loop(config, goal, conversation, None, max_turns, tool_fn)
            .await
    }

    /// One chat turn (CAR's `run_chat_turn`): the loop on a conversation the caller keeps
    /// (`messages`: `{role: "user" | "assistant", content}` turns, the newest user turn
    /// last), recorded as a run whose intent is that last user turn; the reply is the
    /// model's text (or `finish`'s answer) once it stops calling tools. `requested_model`
    /// overrides the config's model for this turn.
    pub async fn run_chat_turn<F>(
        &self,
        config: &AgentConfig,
        messages: &[Value],
        requested_model: Option<&str>,
        tool_fn: F,
    ) -> Result<ChatTurn, Error>
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
    {
        let intent = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .ok_or_else(|| {
                Error::InvalidArgument("messages: needs a user turn with text content".into())
            })?
            .to_string();
        for (i, m) in messages.iter().enumerate() {
            if !matches!(m["role"].as_str(), Some("user" | "assistant"))
                || !m["content"].is_string()
            {
                return Err(Error::InvalidArgument(format!(
                    "messages[{i}]: expected {{role: \"user\" | \"assistant\", content: string}}, got {m}"
                )));
            }
        }
        let outcome = self
            .run_loop(
                config,
                &intent,
                messages.to_vec(),
                requested_model,
                None,
                tool_fn,
            )
            .await?;
        Ok(ChatTurn {
            text: outcome.summary,
            run_id: outcome.run_id,
        })
    }

    async fn run_loop<F>(
        &self,
        config: &AgentConfig,
        goal: &str,
        conversation: Vec<Value>,
        requested_model: Option<&str>,
        max_turns: Option<u32>,
        tool_fn: F,
    ) -> Result<AgentOutcome, Error>
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
    {
        let mut schemas: Vec<Value> = config
            .tool_schemas
            .iter()
            .cloned()
            .map(with_parameters)
            .collect();
        schemas.push(finish_schema());
        self.register_agent_tools(&schemas, &config.policies)
            .await?;
        let agent_id = config
            .agent_id
            .clone()
            .unwrap_or_else(|| config.agent_name.clone());
        let run = self
            .call(
                "runs.start",
                json!({"agent_id": agent_id, "agent_name": config.agent_name, "intent": goal,
                       "outcome_description": config.target_outcome}),
            )
            .await?;
        let run_id = run["run_id"].as_str().map(str::to_string);
        let mut messages = vec![
            json!({"role": "system", "content": format!("{}\n\nWhen the task is complete or you cannot proceed, call the `{FINISH_TOOL}` tool with a concise answer.", config.identity)}),
        ];
        messages.extend(conversation);
        let mut metrics = AgentMetrics::default();
        let mut tools_called = Vec::new();
        let mut evidence = Vec::new();
        let mut ending: Option<(String, String)> = None;
        for turn in 1..=max_turns.unwrap_or(config.max_turns).max(1) {
            metrics.turns = turn;
            let mut request = json!({
                "prompt": "", "messages": messages, "tools": schemas,
                "params": {"max_tokens": config.max_tokens,
                           "tool_choice": config.tool_choice.as_deref().unwrap_or("auto"),
                           "cache_ttl": "one_hour"},
                "cache_control": true,
            });
            if let Some(model) = requested_model.or(config.default_model.as_deref()) {
                request["model"] = json!(model);
            }
            if let Some(t) = config.temperature {
                request["params"]["temperature"] = json!(t);
            }
            if let Some(p) = config.parallel_tool_calls {
                request["params"]["parallel_tool_calls"] = json!(p);
            }
            let started = std::time::Instant::now();
            let answer = self.call("infer", request).await?;
            let calls = answer["tool_calls"].as_array().cloned().unwrap_or_default();
            let text = answer["text"].as_str().unwrap_or_default().to_string();
            if let Some(run_id) = &run_id {
                self.call(
                    "runs.record_model_turn",
                    json!({"run_id": run_id, "turn_index": turn, "model_id": answer["model_used"],
                           "assistant_text": text, "requested_tool_calls": calls,
                           "token_usage": answer["usage"],
                           "duration_ms": started.elapsed().as_millis() as u64}),
                )
                .await?;
            }
            if calls.is_empty() {
                ending = Some(("done".into(), text));
                break;
            }
            messages.push(json!({"role": "assistant", "content": text, "tool_calls": calls}));
            let (finish, work): (Vec<&Value>, Vec<&Value>) =
                calls.iter().partition(|c| c["name"] == FINISH_TOOL);
            let results = self
                .run_calls(&work, &schemas, &tool_fn, &mut metrics, &mut tools_called)
                .await?;
            for (call, content) in work.iter().zip(results) {
                messages.push(
                    json!({"role": "tool_result", "tool_use_id": call["id"], "content": content}),
                );
            }
            if !work.is_empty() {
                // An answer given beside other calls was written before their results: the
                // model observes them and is asked again.
                for call in &finish {
                    let content = json!({"error": format!("`{FINISH_TOOL}` was called together with other tools, before their results; call it alone once you have read them")});
                    messages.push(json!({"role": "tool_result", "tool_use_id": call["id"],
                                         "content": content.to_string()}));
                }
                continue;
            }
            if let Some(call) = finish.first() {
                metrics.tool_calls += 1;
                metrics.actions_succeeded += 1;
                tools_called.push(FINISH_TOOL.to_string());
                let args = &call["arguments"];
                let summary = args["summary"]
                    .as_str()
                    .or(args["answer"].as_str())
                    .unwrap_or_default()
                    .to_string();
                evidence.push(
                    json!({"kind": "tool_result", "description": "finish called", "data": args}),
                );
                let status = args["status"]
                    .as_str()
                    // A `finish` naming a status CAR's `AgentOutcome` lacks ends the run with
                    // `success`.
                    .filter(|s| AGENT_STATUSES.contains(s))
                    .unwrap_or("success")
                    .to_string();
                ending = Some((status, summary));
                break;
            }
        }
        let (status, summary) = ending.unwrap_or(("give_up".into(), String::new()));
        let outcome = AgentOutcome {
            run_id: run_id.clone(),
            status,
            summary,
            evidence,
            metrics,
            tools_called,
            timestamp: car_proto::clock::now_rfc3339(),
        };
        if let Some(run_id) = &run_id {
            let mut recorded = serde_json::to_value(&outcome).unwrap_or_default();
            if let Some(o) = recorded.as_object_mut() {
                o.remove("run_id");
            }
            self.call(
                "runs.complete",
                json!({"run_id": run_id, "outcome": recorded}),
            )
            .await?;
        }
        Ok(outcome)
    }

    /// Registers the agent's tools and policies unless this connection already has them.
    async fn register_agent_tools(
        &self,
        schemas: &[Value],
        policies: &[Value],
    ) -> Result<(), Error> {
        let epoch = self.connection_epoch().await?;
        let keys = |kind: &str, items: &[Value]| -> Vec<String> {
            items.iter().map(|v| format!("{kind}:{v}")).collect()
        };
        let schema_keys = keys("tool", schemas);
        let policy_keys = keys("policy", policies);
        let registered = self.extension::<Registered>();
        let new_schemas: Vec<Value> = registered
            .missing(epoch, &schema_keys)
            .into_iter()
            .map(|i| schemas[i].clone())
            .collect();
        if !new_schemas.is_empty() {
            self.call("tools.register", Value::Array(new_schemas))
                .await?;
        }
        registered.record(epoch, schema_keys);
        for i in registered.missing(epoch, &policy_keys) {
            self.call("policy.register", policies[i].clone()).await?;
            registered.record(epoch, [policy_keys[i].clone()]);
        }
        Ok(())
    }

    /// Verifies and runs `calls` as one proposal; each call's observation as JSON text.
    async fn run_calls<F>(
        &self,
        calls: &[&Value],
        schemas: &[Value],
        tool_fn: &F,
        metrics: &mut AgentMetrics,
        tools_called: &mut Vec<String>,
    ) -> Result<Vec<String>, Error>
    where
        F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
    {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let actions: Vec<Value> = calls
            .iter()
            .map(|c| {
                let mut action = json!({"id": c["id"], "type": "tool_call", "tool": c["name"],
                            "parameters": c["arguments"], "dependencies": []});
                if let Some(budget) = timeout_of(schemas, &c["name"]) {
                    action["timeout_ms"] = json!(budget);
                }
                action
            })
            .collect();
        let proposal = json!({"actions": actions, "source": "agent_loop"});
        for c in calls {
            metrics.tool_calls += 1;
            if let Some(name) = c["name"].as_str() {
                tools_called.push(name.to_string());
            }
        }
        let verdict = self.call("verify", json!({"proposal": proposal})).await?;
        if verdict["valid"] != true {
            metrics.actions_failed += calls.len() as u32;
            let problem =
                json!({"error": "the proposal did not verify", "issues": verdict["issues"]});
            return Ok(vec![problem.to_string(); calls.len()]);
        }
        let result = self
            .execute_proposal(proposal, None, tool_fn.clone())
            .await?;
        let results = result["results"].as_array().cloned().unwrap_or_default();
        Ok(calls
            .iter()
            .map(|c| {
                let r = results
                    .iter()
                    .find(|r| r["action_id"] == c["id"])
                    .cloned()
                    .unwrap_or(Value::Null);
                if r["status"] == "succeeded" {
                    metrics.actions_succeeded += 1;
                    r["output"].to_string()
                } else {
                    metrics.actions_failed += 1;
                    json!({"error": r["error"], "status": r["status"]}).to_string()
                }
            })
            .collect())
    }
}

/// Tool schemas and policies (as canonical JSON) the agent loop registered on the
/// connection of `epoch`; a new epoch starts empty. Kept per client (an extension).
#[derive(Debug, Default)]
struct Registered(std::sync::Mutex<Registrations>);

#[derive(Debug, Default)]
struct Registrations {
    epoch: u64,
    items: std::collections::HashSet<String>,
}

impl Registered {
    /// Of `items`, those not yet registered on the connection of `epoch`.
    fn missing(&self, epoch: u64, items: &[String]) -> Vec<usize> {
        let mut done = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if done.epoch != epoch {
            *done = Registrations {
                epoch,
                items: Default::default(),
            };
        }
        (0..items.len())
            .filter(|i| !done.items.contains(&items[*i]))
            .collect()
    }

    /// Records `items` as registered on the connection of `epoch`.
    fn record(&self, epoch: u64, items: impl IntoIterator<Item = String>) {
        let mut done = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if done.epoch == epoch {
            done.items.extend(items);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_take_cars_shape_with_defaults() {
        let c: AgentConfig = serde_json::from_value(serde_json::json!({
            "agent_name": "calc", "identity": "You add.", "tools": {"ignored": true}
        }))
        .unwrap();
        assert_eq!((c.max_tokens, c.max_turns), (1024, 8));
        assert!(c.tool_schemas.is_empty() && c.default_model.is_none());
    }
}
