//! `multi.*`: multi-agent coordination (reference `multi` section, cookbook 04).
//!
//! Every pattern runs agents described by an [`AgentSpec`]; each agent's work is done by the
//! calling connection's agent runner through the `multi.run_agent` reverse call
//! ([`RunAgentParams`] → [`AgentOutput`]), or, when the caller registered no runner, by the
//! daemon's own agent loop on its own inference (beyond CAR). Shapes follow CAR's
//! `car_multi` serde forms as CAR's 0.58.0 client produces them; `docs/multi-agent.md` has
//! the prompts each pattern builds and the choices made where CAR is silent.
//!
//! A [`BudgetLimits`] caps one run: the daemon sums the tokens and cost each agent reports
//! and refuses to start an agent once a limit is crossed (`max_agents` is a hard cap on
//! agents started). A refused agent is not an RPC error: it appears in the result as an
//! [`AgentOutput`] whose `error` says why and whose `outcome.status` is `give_up`.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{null_default, Json, Name};
use super::proposal::Object;
use super::{op, Declaration};

fn default_max_turns() -> u32 {
    10
}

fn max_turns<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or_else(default_max_turns))
}

/// CAR's `car_multi::AgentSpec`. Only `name` is required here (the cookbook's specs carry
/// just `name`, `role` and `model`); fields CAR does not know (`role`, `model`, …) are kept
/// and passed to the agent runner as given.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct AgentSpec {
    pub name: Name,
    #[serde(default, deserialize_with = "null_default")]
    pub system_prompt: String,
    #[serde(default, deserialize_with = "null_default")]
    pub tools: Vec<String>,
    #[serde(default = "default_max_turns", deserialize_with = "max_turns")]
    pub max_turns: u32,
    #[serde(default, deserialize_with = "null_default")]
    pub metadata: Object,
    #[serde(default, deserialize_with = "null_default")]
    pub cache_control: bool,
    /// Fields beyond CAR's (`role`, `model`, …), forwarded to the runner.
    #[serde(flatten)]
    pub extra: Object,
}

impl AgentSpec {
    /// A spec with only a name and a system prompt (the daemon's derived agents: judges).
    pub fn named(name: impl Into<String>, system_prompt: impl Into<String>) -> Self {
        AgentSpec {
            name: Name(name.into()),
            system_prompt: system_prompt.into(),
            tools: Vec::new(),
            max_turns: default_max_turns(),
            metadata: Object::new(),
            cache_control: false,
            extra: Object::new(),
        }
    }

    /// The model this agent asks for: `metadata.model`, else a top-level `model`.
    pub fn model(&self) -> Option<&str> {
        self.metadata
            .get("model")
            .or_else(|| self.extra.get("model"))
            .and_then(Json::as_str)
    }
}

/// Tokens and cost an agent run reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct TokenUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

/// CAR's `AgentOutput`: one agent's answer.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct AgentOutput {
    pub name: String,
    #[serde(default)]
    pub answer: String,
    #[serde(default)]
    pub turns: u32,
    /// How many tool calls the agent made.
    #[serde(default)]
    pub tool_calls: u32,
    #[serde(default)]
    pub duration_ms: f64,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<TokenUsage>,
    /// Why an agent did not run (`{status: "give_up", summary, evidence, …}` for a budget
    /// refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Json>,
}

impl AgentOutput {
    /// A failed agent: no answer, `error` set.
    pub fn failed(name: impl Into<String>, error: impl Into<String>) -> Self {
        AgentOutput {
            name: name.into(),
            answer: String::new(),
            turns: 0,
            tool_calls: 0,
            duration_ms: 0.0,
            error: Some(error.into()),
            tokens: None,
            outcome: None,
        }
    }

    /// Whether the agent produced an answer.
    pub fn succeeded(&self) -> bool {
        self.error.is_none()
    }
}

/// CAR's `BudgetLimits`: every field optional, absent means unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct BudgetLimits {
    #[serde(default)]
    pub max_input_tokens: Option<u64>,
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    #[serde(default)]
    pub max_total_tokens: Option<u64>,
    #[serde(default)]
    pub max_cost_usd: Option<f64>,
    #[serde(default)]
    pub max_agents: Option<u32>,
}

/// Who runs a coordination's agents (beyond CAR). Absent: the caller's agent runner through
/// `multi.run_agent`, falling back to the daemon when the caller answers that call with
/// `-32601` (it registered no runner); `daemon` skips the reverse call (a raw WebSocket
/// client that does not answer reverse calls passes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunnerChoice {
    Caller,
    Daemon,
}

/// How a swarm runs its agents. `hybrid` and CAR's `debate` are the same here: every
/// agent answers in parallel, then each revises once having read the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SwarmMode {
    Parallel,
    Sequential,
    #[serde(alias = "debate")]
    Hybrid,
}

/// `multi.swarm` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SwarmParams {
    pub mode: SwarmMode,
    pub agents: Vec<AgentSpec>,
    pub task: String,
    #[serde(default)]
    pub synthesizer: Option<AgentSpec>,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SwarmResult {
    pub task: String,
    pub outputs: Vec<AgentOutput>,
    pub final_summary: String,
}

/// `multi.pipeline` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PipelineParams {
    pub stages: Vec<AgentSpec>,
    pub task: String,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PipelineResult {
    pub task: String,
    pub stages: Vec<AgentOutput>,
    pub final_answer: String,
}

/// `multi.supervisor` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SupervisorParams {
    pub workers: Vec<AgentSpec>,
    pub supervisor: AgentSpec,
    pub task: String,
    #[serde(default)]
    pub max_rounds: Option<u32>,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SupervisorResult {
    pub task: String,
    pub rounds: Vec<Vec<AgentOutput>>,
    pub supervisor_feedback: Vec<String>,
    pub final_answer: String,
    pub approved: bool,
}

/// `multi.map_reduce` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MapReduceParams {
    pub mapper: AgentSpec,
    pub reducer: AgentSpec,
    pub items: Vec<String>,
    pub task: String,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MapReduceResult {
    pub task: String,
    pub map_outputs: Vec<AgentOutput>,
    pub reduced_answer: String,
}

/// `multi.vote` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct VoteParams {
    pub agents: Vec<AgentSpec>,
    pub task: String,
    #[serde(default)]
    pub synthesizer: Option<AgentSpec>,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct VoteResult {
    pub task: String,
    pub votes: Vec<AgentOutput>,
    pub winner: String,
    pub agreement_ratio: f64,
}

/// `multi.tournament` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TournamentParams {
    pub competitors: Vec<AgentSpec>,
    pub judge: AgentSpec,
    pub task: String,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

/// One pairwise judgement of a tournament.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct MatchResult {
    pub round: u32,
    pub a: String,
    pub b: String,
    pub winner: String,
    pub rationale: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TournamentResult {
    pub task: String,
    pub candidates: Vec<AgentOutput>,
    pub matches: Vec<MatchResult>,
    pub winner_name: String,
    pub winner_answer: String,
    /// Competitors best → worst by elimination round.
    pub ranking: Vec<String>,
}

/// `multi.subtask` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubtaskParams {
    pub main: AgentSpec,
    pub task: String,
    #[serde(default)]
    pub budget: Option<BudgetLimits>,
    #[serde(default)]
    pub runner: Option<RunnerChoice>,
}

/// One sub-agent the main agent spawned.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubtaskRecord {
    pub name: String,
    pub task: String,
    pub tools: Vec<String>,
    pub output: AgentOutput,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubtaskResult {
    pub task: String,
    pub final_answer: String,
    pub subtasks: Vec<SubtaskRecord>,
}

/// `multi.run_agent` reverse-call params (daemon → the caller's agent runner).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RunAgentParams {
    pub spec: AgentSpec,
    pub task: String,
}

crate::method!(
    /// `multi.swarm` → `{task, outputs, final_summary}`.
    Swarm = op("multi.swarm", "run agents on one task in parallel, in sequence or as a debate")
        ;
    access: Access::daemon();
    SwarmParams => SwarmResult
);
crate::method!(
    /// `multi.pipeline` → `{task, stages, final_answer}`.
    Pipeline = op("multi.pipeline", "run agents in sequence, each reading the previous agents' findings")
        ;
    access: Access::daemon();
    PipelineParams => PipelineResult
);
crate::method!(
    /// `multi.supervisor` → `{task, rounds, supervisor_feedback, final_answer, approved}`.
    Supervisor = op("multi.supervisor", "run workers in rounds until a supervisor agent approves")
        ;
    access: Access::daemon();
    SupervisorParams => SupervisorResult
);
crate::method!(
    /// `multi.map_reduce` → `{task, map_outputs, reduced_answer}`.
    MapReduce = op("multi.map_reduce", "run a mapper agent per item in parallel, then a reducer over their answers")
        ;
    access: Access::daemon();
    MapReduceParams => MapReduceResult
);
crate::method!(
    /// `multi.vote` → `{task, votes, winner, agreement_ratio}`.
    Vote = op("multi.vote", "let agents answer independently and take the majority (or a synthesizer's pick)")
        ;
    access: Access::daemon();
    VoteParams => VoteResult
);
crate::method!(
    /// `multi.tournament` → `{task, candidates, matches, winner_name, winner_answer, ranking}`.
    Tournament = op("multi.tournament", "rank competitors by single-elimination pairwise judging")
        ;
    access: Access::daemon();
    TournamentParams => TournamentResult
);
crate::method!(
    /// `multi.subtask` → `{task, final_answer, subtasks}`.
    Subtask = op("multi.subtask", "run an agent that may hand subsets of its tools to sub-agents")
        ;
    access: Access::daemon();
    SubtaskParams => SubtaskResult
);

/// Declared so its shapes are in `server.schema`; the daemon sends it, never serves it.
pub const RUN_AGENT_METHOD: &str = "multi.run_agent";

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Swarm>(),
    Declaration::of::<Pipeline>(),
    Declaration::of::<Supervisor>(),
    Declaration::of::<MapReduce>(),
    Declaration::of::<Vote>(),
    Declaration::of::<Tournament>(),
    Declaration::of::<Subtask>(),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cookbook_spec_keeps_its_extra_fields() {
        let spec: AgentSpec = serde_json::from_value(
            serde_json::json!({"name": "critic", "role": "find weaknesses", "model": "m1"}),
        )
        .unwrap();
        assert_eq!(spec.max_turns, 10);
        assert_eq!(spec.model(), Some("m1"));
        let back = serde_json::to_value(&spec).unwrap();
        assert_eq!(back["role"], "find weaknesses");
        assert_eq!(back["system_prompt"], "");
    }

    #[test]
    fn debate_is_hybrid() {
        let m: SwarmMode = serde_json::from_value(serde_json::json!("debate")).unwrap();
        assert_eq!(m, SwarmMode::Hybrid);
    }
}
