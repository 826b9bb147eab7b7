//! The agent loop every binding wraps: [`car_agent_loop`]'s one loop (propose → verify →
//! execute → observe, `finish`, run records; the steps are in that crate's docs) over this
//! client's connection.
//!
//! [`Client::run_agent`] and [`Client::run_chat_turn`] implement the loop's
//! [`Services`] with [`Wire`]: daemon methods are calls on the connection, a verified
//! proposal runs with [`Client::execute_proposal`] and the caller's tool function, and
//! `prepare` registers the config's tool schemas and policies (the `finish` tool included)
//! unless this connection already has exactly that schema or policy from an earlier run; a
//! new [`Client::connection_epoch`] (after `close()` or a daemon restart, per-connection
//! registrations are gone) starts over. The daemon runs the same loop in-process for the
//! agents it runs itself.
//!
//! Tool functions run on the blocking pool through the client's reverse-call handling,
//! never under a lock; a `tools.cancel` for a call reaches the client's cancel handler.

pub use car_agent_loop::{AgentConfig, AgentMetrics, AgentOutcome, ChatTurn, FINISH_TOOL};
use car_agent_loop::{Services, Task};
use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::client::Client;
use crate::error::Error;
use crate::handlers::{HandlerResult, ToolCall};

/// The loop's services over a client's connection, tool calls served by `tool_fn`.
struct Wire<'c, F> {
    client: &'c Client,
    tool_fn: F,
}

impl<F> Services for Wire<'_, F>
where
    F: Fn(ToolCall) -> HandlerResult + Send + Sync + Clone + 'static,
{
    type Error = Error;

    fn prepare<'a>(
        &'a self,
        schemas: &'a [Value],
        policies: &'a [Value],
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(self.client.register_agent_tools(schemas, policies))
    }

    fn call<'a>(
        &'a self,
        method: &'static str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, Error>> {
        Box::pin(self.client.call(method, params))
    }

    fn execute(&self, proposal: Value) -> BoxFuture<'_, Result<Value, Error>> {
        Box::pin(
            self.client
                .execute_proposal(proposal, None, self.tool_fn.clone()),
        )
    }
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
        let task = Task {
            max_turns,
            ..Task::goal(goal)
        };
        let wire = Wire {
            client: self,
            tool_fn,
        };
        Ok(car_agent_loop::run(&wire, config, task).await?.outcome)
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
        let task = Task {
            goal: &intent,
            conversation: messages.to_vec(),
            model: requested_model,
            max_turns: None,
        };
        let wire = Wire {
            client: self,
            tool_fn,
        };
        let outcome = car_agent_loop::run(&wire, config, task).await?.outcome;
        Ok(ChatTurn {
            text: outcome.summary,
            run_id: outcome.run_id,
        })
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
