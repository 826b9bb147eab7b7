//! `declagents.*` and `discovery.*`: in-daemon declarative agents and capability routing
//! (reference `declagents`; `docs/declarative-agents.md`).
//!
//! A declarative agent is data ([`DeclarativeAgentSpec`]): an identity (system prompt), a
//! strict tool allowlist (empty means no tools), an optional deny list, a standing goal
//! (capability text), an optional deterministic goal check and scenarios. The daemon runs
//! it with its one agent loop, as the caller, in a scratch workspace of its own; there is no
//! process to spawn. Specs are files under `$CAR_HOME/declagents/` (the registry path
//! `declagents.get` reports); `declagents.register` (beyond CAR, whose agents come from its
//! coder loop) writes one, keeping the previous spec for `declagents.revert`.
//!
//! Routing ranks eligible agents by `0.7·similarity + 0.3·success_rate + 0.2·edge_weight`
//! with outcomes kept in `$CAR_HOME/routing.json`; `discovery.*` ranks declarative agents
//! and connector tools the same way under `agentdns://` identifiers.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{null_default, Name, NoParams};
use super::{
    host, json, member, op, opt, req, ArgKind::Bool, ArgKind::Float, ArgKind::Int, ArgKind::Str,
    Declaration,
};
use crate::methods::Access;

/// A declarative agent's completion contract: `check` is a shell command run in the
/// agent's scratch workspace after each pass; exit 0 means met.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct GoalCheck {
    pub check: Name,
    /// Passes at most (default 8, clamped to 1–50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
}

/// One acceptance scenario: the input, and text the output must contain.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Scenario {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub input: String,
    /// A substring the answer must contain (case-insensitive); absent: any answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
}

/// A declarative agent.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct DeclarativeAgentSpec {
    /// Letters, digits, `-` and `_` (it names the spec's file).
    pub id: Name,
    /// Display name (default: the id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The system prompt.
    #[serde(default, deserialize_with = "null_default")]
    pub identity: String,
    /// The tools it may call: built-in tools, enabled connector tools (`mcp_{slug}_{tool}`).
    /// Empty means none.
    #[serde(default, deserialize_with = "null_default")]
    pub tools: Vec<String>,
    /// Tools it may never call, even when allowed.
    #[serde(default, deserialize_with = "null_default")]
    pub deny_tools: Vec<String>,
    /// What the agent is for (ranked by routing beside name, identity and tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing_goal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalCheck>,
    #[serde(default, deserialize_with = "null_default")]
    pub scenarios: Vec<Scenario>,
    /// The model every turn uses (default: the daemon's default local model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Turns per pass (default 8, at most 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u32>,
    /// `auto` (default), `required` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<String>,
}

/// `declagents.register` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterParams {
    pub spec: DeclarativeAgentSpec,
}

/// `declagents.register` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RegisterReply {
    pub id: String,
    pub registry_path: String,
    /// Whether a previous spec was kept for `declagents.revert`.
    pub replaced: bool,
}

/// `{id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct IdParams {
    pub id: Name,
}

/// One `declagents.list` row.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentRow {
    pub id: String,
    pub name: String,
    /// Always `declarative`.
    pub kind: String,
    pub enabled: bool,
    pub tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalCheck>,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListReply {
    pub agents: Vec<AgentRow>,
}

/// `declagents.get` result: the spec, where it lives, and whether it runs.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct GetReply {
    #[serde(flatten)]
    pub spec: DeclarativeAgentSpec,
    pub enabled: bool,
    pub registry_path: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RemovedReply {
    pub removed: bool,
}

/// `declagents.set_enabled` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetEnabledParams {
    pub id: Name,
    pub enabled: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OkReply {
    pub ok: bool,
}

/// `declagents.revert` result: the spec now registered.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RevertReply {
    pub reverted: bool,
    pub spec: DeclarativeAgentSpec,
}

/// `declagents.invoke` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InvokeParams {
    pub id: Name,
    pub input: String,
}

/// What a goal-driven invocation did with its check.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct GoalReport {
    pub check: String,
    pub max_iterations: u32,
    /// Passes run (each followed by one check).
    pub iterations: u32,
    pub met: bool,
    /// Met by the deterministic check itself (always equal to `met` here: no model judge).
    pub grounded: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_exit_code: Option<i32>,
    pub last_reason: String,
}

/// `declagents.invoke` result (and a routed invocation's `result`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct InvokeReply {
    pub output: String,
    pub turns: u32,
    pub tool_calls: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalReport>,
    /// The model the turns ran on, when the spec names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_served: Option<String>,
    /// The run records of each pass (`runs.get_trace`).
    #[serde(default, deserialize_with = "null_default")]
    pub run_ids: Vec<String>,
}

/// `declagents.route` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RouteParams {
    pub need: String,
    #[serde(default, deserialize_with = "null_default")]
    pub invoke: bool,
    /// The delegating agent (excluded; its learned edges add to the score).
    #[serde(default)]
    pub from: Option<Name>,
    /// Agents already on the routing path (excluded; at most 4).
    #[serde(default, deserialize_with = "null_default")]
    pub visited: Vec<String>,
}

/// One ranked candidate.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Candidate {
    pub id: String,
    pub name: String,
    pub score: f64,
    pub similarity: f64,
    pub success_rate: f64,
    pub edge_weight: f64,
}

/// `declagents.route` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RouteReply {
    pub chosen: String,
    /// The top 3, best first.
    pub candidates: Vec<Candidate>,
    pub next_visited: Vec<String>,
    pub invoked: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<InvokeReply>,
}

/// `declagents.route_split` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RouteSplitParams {
    pub need: String,
    #[serde(default, deserialize_with = "null_default")]
    pub invoke: bool,
    /// Subtasks at most (default 5, clamped to 1–10).
    #[serde(default)]
    pub max_subtasks: Option<u32>,
    /// `vanilla` (default) or `sad` (skill-aware: re-split with service hints).
    #[serde(default)]
    pub decomposition_mode: Option<String>,
    #[serde(default)]
    pub sad_hints: Option<u32>,
    #[serde(default)]
    pub sad_iterations: Option<u32>,
    #[serde(default)]
    pub sad_convergence_jaccard: Option<f64>,
}

/// One routed subtask.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RoutedSubtask {
    pub subtask: String,
    pub chosen: String,
    pub score: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<InvokeReply>,
}

/// `declagents.route_split` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RouteSplitReply {
    pub subtasks: Vec<RoutedSubtask>,
    pub count: u64,
    pub invoked: bool,
    pub decomposition_mode: String,
    pub rounds: u32,
    pub initial_subtasks: Vec<String>,
    pub final_subtasks: Vec<String>,
    pub hints: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint_jaccard: Option<f64>,
}

/// `discovery.route_compose` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ComposeParams {
    pub need: String,
    /// Subtasks at most (default 5, clamped to 1–10).
    #[serde(default)]
    pub max_subtasks: Option<u32>,
    /// `vanilla` (default) or `sad` (skill-aware: re-split with service hints).
    #[serde(default)]
    pub decomposition_mode: Option<String>,
    #[serde(default)]
    pub sad_hints: Option<u32>,
    #[serde(default)]
    pub sad_iterations: Option<u32>,
    #[serde(default)]
    pub sad_convergence_jaccard: Option<f64>,
    /// Candidates kept per step (default 3, clamped to 1–10).
    #[serde(default)]
    pub candidates_per_step: Option<u32>,
    /// Listwise reranking by a model: not served (`-32602` when true).
    #[serde(default, deserialize_with = "null_default")]
    pub rerank: bool,
}

/// One planned step.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PlanStep {
    pub id: String,
    pub subtask: String,
    /// The chosen service's identifier (`null` when none is available).
    pub service: Option<String>,
    /// `declagents.invoke` or `tool_call`.
    pub invoke_kind: Option<String>,
    /// The agent id or the canonical tool name.
    pub invoke_target: Option<String>,
}

/// The plan: steps in order; `edges` are `[from, to]` step ids (none: the steps are
/// independent).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Plan {
    pub steps: Vec<PlanStep>,
    pub edges: Vec<(String, String)>,
}

/// `discovery.route_compose` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ComposeReply {
    pub plan: Plan,
    /// `{mode, rounds, initial_subtasks, final_subtasks, hints, hint_jaccard?}`.
    pub decomposition: serde_json::Value,
    /// Per step id, its ranked services.
    pub candidates: BTreeMap<String, Vec<Service>>,
    pub metadata: serde_json::Value,
}

/// One agent's learned routing record.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentStats {
    pub successes: u64,
    pub failures: u64,
    pub ema_success_rate: f64,
    /// Whether it has succeeded at a need (its learned capability profile is used).
    pub learned: bool,
}

/// `declagents.routing_stats` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct StatsReply {
    pub agents: BTreeMap<String, AgentStats>,
    pub edges: BTreeMap<String, BTreeMap<String, f64>>,
}

/// One scenario's run.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ScenarioResult {
    pub name: String,
    pub passed: bool,
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `declagents.run_scenarios` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ScenariosReply {
    pub id: String,
    pub passed: u32,
    pub failed: u32,
    pub results: Vec<ScenarioResult>,
}

/// `discovery.resolve` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResolveParams {
    pub need: String,
    /// Services at most (default 5, clamped to 1–50).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One discovered service.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Service {
    /// `agentdns://…`, to pass verbatim to `discovery.report`.
    pub identifier: String,
    pub name: String,
    /// `declarative` or `connector`.
    pub kind: String,
    /// `in-daemon` or `mcp`.
    pub protocol: String,
    pub score: f64,
    pub similarity: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ResolveReply {
    pub services: Vec<Service>,
    pub count: u64,
}

/// A reported outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Failure,
}

/// `discovery.report` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReportParams {
    pub identifier: Name,
    pub outcome: Outcome,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReportReply {
    pub identifier: String,
    pub outcome: Outcome,
    pub successes: u64,
    pub failures: u64,
}

crate::method!(
    /// `declagents.register {spec}` → `{id, registry_path, replaced}` (beyond CAR).
    Register = host("declagents.register", "register (or replace) a declarative agent spec");
    access: Access::daemon();
    RegisterParams => RegisterReply
);
crate::method!(
    /// `declagents.list` → `{agents}`.
    List = op("declagents.list", "the registered declarative agents");
    access: Access::daemon().observer();
    NoParams => ListReply;
    member("declagent_list", &[], json())
);
crate::method!(
    /// `declagents.get {id}` → the spec with `enabled` and `registry_path`.
    Get = op("declagents.get", "one declarative agent's spec");
    access: Access::daemon().observer();
    IdParams => GetReply;
    member("declagent_get", &[req("id", Str)], json())
);
crate::method!(
    /// `declagents.remove {id}` → `{removed}`.
    Remove = host("declagents.remove", "unregister a declarative agent");
    access: Access::daemon();
    IdParams => RemovedReply
);
crate::method!(
    /// `declagents.set_enabled {id, enabled}` → `{ok}`.
    SetEnabled = host("declagents.set_enabled", "enable or disable a declarative agent");
    access: Access::daemon();
    SetEnabledParams => OkReply
);
crate::method!(
    /// `declagents.revert {id}` → `{reverted, spec}`.
    Revert = host("declagents.revert", "restore a declarative agent's previous spec");
    access: Access::daemon();
    IdParams => RevertReply
);
crate::method!(
    /// `declagents.invoke {id, input}` → `{output, turns, tool_calls, error?, goal?}`.
    Invoke = op("declagents.invoke", "run a declarative agent on an input inside the daemon");
    access: Access::daemon();
    InvokeParams => InvokeReply;
    member("declagent_invoke", &[req("id", Str), req("input", Str)], json())
);
crate::method!(
    /// `declagents.route {need, invoke?, from?, visited?}` → the ranking (and the run).
    Route = op("declagents.route", "rank declarative agents for a need by capability and learned success");
    access: Access::daemon();
    RouteParams => RouteReply;
    member("declagent_route", &[req("need", Str), req("invoke", Bool)], json())
);
crate::method!(
    /// `declagents.route_split {need, invoke?, max_subtasks?, decomposition_mode?, …}`.
    RouteSplit = op("declagents.route_split", "split a need into subtasks with a planner model and route each to its best agent");
    access: Access::daemon();
    RouteSplitParams => RouteSplitReply;
    member("declagent_route_split", &[req("need", Str), req("invoke", Bool), opt("max_subtasks", Int), opt("decomposition_mode", Str), opt("sad_hints", Int), opt("sad_iterations", Int), opt("sad_convergence_jaccard", Float)], json())
);
crate::method!(
    /// `declagents.routing_stats` → `{agents, edges}`.
    RoutingStats = op("declagents.routing_stats", "the learned routing priors and delegation edges");
    access: Access::daemon().observer();
    NoParams => StatsReply;
    member("declagent_routing_stats", &[], json())
);
crate::method!(
    /// `declagents.run_scenarios {id}` → `{id, passed, failed, results}`.
    RunScenarios = op("declagents.run_scenarios", "run a declarative agent's stored scenarios");
    access: Access::daemon();
    IdParams => ScenariosReply;
    member("declagent_run_scenarios", &[req("id", Str)], json())
);
crate::method!(
    /// `discovery.resolve {need, limit?}` → `{services, count}`.
    Resolve = op("discovery.resolve", "rank the daemon's services (declarative agents, connector tools) for a need");
    access: Access::daemon();
    ResolveParams => ResolveReply;
    member("discovery_resolve", &[req("need", Str), opt("limit", Int)], json())
);
crate::method!(
    /// `discovery.report {identifier, outcome}` → the updated counts.
    Report = op("discovery.report", "record a discovered service's outcome for future ranking");
    access: Access::daemon().not_for_agents();
    ReportParams => ReportReply;
    member("discovery_report", &[req("identifier", Str), req("outcome", Str)], json())
);

crate::method!(
    /// `discovery.route_compose {need, …}` → a plan over the discoverable services.
    RouteCompose = op("discovery.route_compose", "decompose a need and plan which service does each step (plans only)");
    access: Access::daemon();
    ComposeParams => ComposeReply;
    member("discovery_route_compose", &[req("need", Str), opt("max_subtasks", Int), opt("decomposition_mode", Str), opt("sad_hints", Int), opt("sad_iterations", Int), opt("sad_convergence_jaccard", Float), opt("candidates_per_step", Int), opt("rerank", Bool)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Register>(),
    Declaration::of::<List>(),
    Declaration::of::<Get>(),
    Declaration::of::<Remove>(),
    Declaration::of::<SetEnabled>(),
    Declaration::of::<Revert>(),
    Declaration::of::<Invoke>(),
    Declaration::of::<Route>(),
    Declaration::of::<RouteSplit>(),
    Declaration::of::<RoutingStats>(),
    Declaration::of::<RunScenarios>(),
    Declaration::of::<Resolve>(),
    Declaration::of::<Report>(),
    Declaration::of::<RouteCompose>(),
];
