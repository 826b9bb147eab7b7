//! `verify.simulate`, `verify.equivalent`, `verify.optimize` and `policy.check`: the static
//! checks CAR offers its MCP clients as `simulate`, `equivalent`, `optimize` and
//! `policy_check`, served here as daemon methods so the MCP tools are thin adapters (ours:
//! CAR's WebSocket reference has only `verify` and `verify.monte_carlo`).
//!
//! All four read their input and run nothing. Shapes follow CAR's MCP cookbook
//! (`07-mcp-server.md`): `equivalent` carries `tier: "sampled"`, `states_tested` and
//! `used_default_states`; `optimize` returns the rewritten proposal and `pruned` per action;
//! `policy_check` returns `decision`, `basis`, `findings`, `rules_loaded` and
//! `policy_sources`.

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::Json;
use super::member::{json, member, whole};
use super::proposal::Object;
use super::{op, Declaration};

/// `verify.simulate` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SimulateParams {
    pub proposal: Object,
    /// The state to start from (default: empty).
    #[serde(default)]
    pub initial_state: Option<Object>,
}

/// `verify.simulate` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SimulateReply {
    /// The state after every action the dependency graph lets run, from declared effects.
    pub final_state: Object,
    /// Action ids level by level.
    pub execution_levels: Vec<Vec<String>>,
    /// Actions that contribute nothing: blocked by a structural problem or by an action
    /// they depend on that was itself blocked.
    pub blocked: Vec<String>,
}

/// `verify.equivalent` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EquivalentParams {
    pub proposal_a: Object,
    pub proposal_b: Object,
    /// Start states to probe (at most 256); absent or `[]`: `{}` and `{x: 1, y: 2}`.
    #[serde(default)]
    pub test_states: Option<Vec<Object>>,
}

/// Where two proposals' final states differ.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Divergence {
    /// Index into the probed states.
    pub state_index: usize,
    pub key: String,
    /// The key's value after `proposal_a` (`null`: absent).
    pub a: Json,
    pub b: Json,
}

/// `verify.equivalent` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EquivalentReply {
    pub equivalent: bool,
    /// Always `sampled`: `true` means no probed state separated them.
    pub tier: String,
    pub states_tested: usize,
    pub used_default_states: bool,
    /// The first differing keys, per state (at most 32 in all).
    pub divergences: Vec<Divergence>,
}

/// `verify.optimize` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OptimizeParams {
    pub proposal: Object,
}

/// What `verify.optimize` dropped from one action.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Pruned {
    pub action_id: String,
    /// The `state_dependencies` entries removed (keys no action of the proposal writes).
    pub removed: Vec<String>,
}

/// `verify.optimize` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct OptimizeReply {
    /// The proposal with those entries removed; everything else unchanged.
    pub proposal: Object,
    pub pruned: Vec<Pruned>,
}

/// `policy.check` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyCheckParams {
    pub tool: String,
    #[serde(default)]
    pub params: Option<Object>,
    /// The working directory whose `.car/policies/` is consulted (not walked upward);
    /// absent: the daemon's own. `car-mcp` sends its own.
    #[serde(default)]
    pub cwd: Option<String>,
}

/// One rule that matched in `policy.check`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyFinding {
    /// `policy_rules` (a policy file) or `session_policy` (`policy.register`).
    pub source: String,
    /// `deny_tool:<tool>`, `deny_keyword:<keyword>`, or the registered policy's name.
    pub rule: String,
    /// `deny`.
    pub severity: String,
    pub reason: String,
}

/// One policy directory `policy.check` consulted.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicySource {
    pub path: String,
    pub exists: bool,
    pub rules: usize,
    /// Why a file in it could not be used (then the decision is `deny`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `policy.check` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PolicyCheckReply {
    /// `allow` or `deny`.
    pub decision: String,
    /// `no_rules_configured`, `passed_rules`, `denied_by_rule` or `policy_load_failed`.
    pub basis: String,
    pub tool: String,
    pub findings: Vec<PolicyFinding>,
    pub rules_loaded: usize,
    pub policy_sources: Vec<PolicySource>,
}

crate::method!(
    /// `verify.simulate` → the final state from declared effects.
    Simulate = op("verify.simulate", "predict the state a proposal leaves behind from its declared effects, running nothing");
    access: Access::daemon();
    SimulateParams => SimulateReply;
    member("simulate_proposal", &[whole("params_json")], json())
);
crate::method!(
    /// `verify.equivalent` → whether two proposals leave the same state on sampled states.
    Equivalent = op("verify.equivalent", "whether two proposals leave the same state behind on sampled start states");
    access: Access::daemon();
    EquivalentParams => EquivalentReply;
    member("equivalent_proposals", &[whole("params_json")], json())
);
crate::method!(
    /// `verify.optimize` → the proposal without state dependencies nothing writes.
    Optimize = op("verify.optimize", "drop state dependencies naming keys no action writes, to widen execution levels");
    access: Access::daemon();
    OptimizeParams => OptimizeReply;
    member("optimize_proposal", &[whole("params_json")], json())
);
crate::method!(
    /// `policy.check` → allow/deny for a tool call, with the rules that decided it.
    Check = op("policy.check", "judge a tool call against the policy files and this connection's policies before it runs");
    access: Access::daemon();
    PolicyCheckParams => PolicyCheckReply;
    member("policy_check", &[whole("params_json")], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Simulate>(),
    Declaration::of::<Equivalent>(),
    Declaration::of::<Optimize>(),
    Declaration::of::<Check>(),
];
