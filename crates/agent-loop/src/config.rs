//! The loop's inputs and outputs in CAR's shapes: `AgentLoopConfig` (the fields the loop
//! reads), `AgentOutcome` with its `AgentMetrics`, `ChatTurnResult`, and what a run
//! spent ([`Spend`], beyond CAR: the daemon's runner reports it to a coordination budget).

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// The sampling seed every turn sends (default: the model's). Not in CAR's config.
    #[serde(default)]
    pub seed: Option<u32>,
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

/// CAR's `ChatTurnResult`: the reply and the run that recorded the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTurn {
    pub text: String,
    pub run_id: Option<String>,
}

/// What a run's model turns spent, summed from each `infer` reply's `usage` and
/// `cost_usd`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Input tokens: uncached prompt plus cache reads.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The priced turns' cost in USD.
    pub cost_usd: f64,
    /// Turns whose model has no price (`cost_usd: null`): their cost is unknown, not 0.
    pub unpriced_turns: u32,
}

impl Spend {
    /// Adds one `infer` reply's `usage` and `cost_usd`.
    pub fn add(&mut self, reply: &Value) {
        let usage = &reply["usage"];
        let n = |k: &str| usage[k].as_u64().unwrap_or(0);
        // `prompt_tokens` is the uncached part; a cache read was input too.
        let input = if usage.get("prompt_tokens").is_some() {
            n("prompt_tokens") + n("cache_read_input_tokens")
        } else {
            n("input_tokens")
        };
        self.input_tokens = self.input_tokens.saturating_add(input);
        self.output_tokens = self.output_tokens.saturating_add(
            usage["output_tokens"]
                .as_u64()
                .unwrap_or(n("completion_tokens")),
        );
        match reply["cost_usd"].as_f64() {
            Some(c) if c.is_finite() && c >= 0.0 => self.cost_usd += c,
            _ => self.unpriced_turns += 1,
        }
    }
}

/// One run's result: CAR's outcome and what it spent.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub outcome: AgentOutcome,
    pub spend: Spend,
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
        assert!(c.tool_schemas.is_empty() && c.default_model.is_none() && c.seed.is_none());
    }
}
