//! `verify.simulate`, `verify.equivalent`, `verify.optimize`: reading a proposal's declared
//! effects without running anything (CAR's MCP `simulate`, `equivalent`, `optimize`).
//!
//! Simulation walks [`plan::analyze`]'s execution levels (no tools or policies are consulted:
//! only the declarations count). An action is **blocked** — contributes nothing — when it is
//! not placed in a level (a cycle or a dependency on a missing action), when an action it
//! depends on is blocked, or when a key it lists in `state_dependencies` is absent from the
//! state at that point. An unblocked action applies its `state_write` / `state_delete` and
//! its `expected_effects`, assumed to land; `failure_behavior` is not modelled (CAR's rule).
//!
//! `equivalent` compares the final states of two proposals from each probed start state
//! (default `{}` and `{x: 1, y: 2}`; `[]` means the defaults, more than 256 is `-32602`); it
//! samples, so `true` only says no probed state separated them (`tier: "sampled"`).
//! `optimize` drops each `state_dependencies` entry naming a key no action of the proposal
//! writes (its state key or `expected_effects`), leaving everything else untouched.

use std::collections::{BTreeMap, BTreeSet};

use car_proto::errors::RpcError;
use car_proto::methods::proposal::Object;
use car_proto::methods::proposal_checks::{
    self as m, Divergence, EquivalentParams, EquivalentReply, OptimizeParams, OptimizeReply,
    Pruned, SimulateParams, SimulateReply,
};
use serde_json::{json, Value};

use super::plan::{self, Category, Context, Severity};
use crate::handler::{Call, Routes};
use crate::state::proposal::{ActionKind, Proposal};

/// Most start states `verify.equivalent` probes.
pub const MAX_TEST_STATES: usize = 256;
/// Most divergences reported.
const MAX_DIVERGENCES: usize = 32;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Simulate, _, _>(simulate)
        .add::<m::Equivalent, _, _>(equivalent)
        .add::<m::Optimize, _, _>(optimize);
}

/// The `state_dependencies` of action `index` in the raw proposal (non-strings ignored).
fn state_dependencies(raw: &Object, index: usize) -> Vec<String> {
    raw.get("actions")
        .and_then(Value::as_array)
        .and_then(|actions| actions.get(index))
        .and_then(|a| a.get("state_dependencies"))
        .and_then(Value::as_array)
        .map(|deps| {
            deps.iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The outcome of simulating one proposal from one state.
struct Simulation {
    state: BTreeMap<String, Value>,
    levels: Vec<Vec<String>>,
    blocked: Vec<String>,
}

fn run(proposal: &Proposal, raw: &Object, initial: BTreeMap<String, Value>) -> Simulation {
    let tools = BTreeMap::new();
    let analysed = plan::analyze(
        proposal,
        Context {
            tools: &tools,
            policies: &[],
            state: BTreeMap::new(),
            session_id: "",
        },
    );
    let structural: BTreeSet<String> = analysed
        .issues
        .iter()
        .filter(|i| i.severity == Severity::Error && i.category == Category::Structure)
        .filter_map(|i| i.action_id.clone())
        .collect();
    let placed: BTreeSet<usize> = analysed.levels.iter().flatten().copied().collect();
    let mut blocked: BTreeSet<String> = BTreeSet::new();
    for (i, action) in proposal.actions.iter().enumerate() {
        if let Ok(a) = action {
            if !placed.contains(&i) || structural.contains(&a.id) {
                blocked.insert(a.id.clone());
            }
        }
    }
    let mut state = initial;
    let mut levels = Vec::new();
    for level in &analysed.levels {
        let mut ids = Vec::new();
        for &i in level {
            let Ok(a) = &proposal.actions[i] else {
                continue;
            };
            ids.push(a.id.clone());
            let unmet = state_dependencies(raw, i)
                .iter()
                .any(|key| !state.contains_key(key));
            if blocked.contains(&a.id)
                || unmet
                || a.dependencies.iter().any(|d| blocked.contains(d))
            {
                blocked.insert(a.id.clone());
                continue;
            }
            match &a.kind {
                ActionKind::StateWrite { key, value } => {
                    state.insert(key.clone(), value.clone());
                }
                ActionKind::StateDelete { key } => {
                    state.remove(key);
                }
                ActionKind::ToolCall { .. } => {}
            }
            for (key, value) in &a.expected_effects {
                state.insert(key.clone(), value.clone());
            }
        }
        levels.push(ids);
    }
    // Listed order, for a stable answer.
    let blocked = proposal
        .actions
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .filter(|a| blocked.contains(&a.id))
        .map(|a| a.id.clone())
        .collect();
    Simulation {
        state,
        levels,
        blocked,
    }
}

fn to_object(state: BTreeMap<String, Value>) -> Object {
    state.into_iter().collect()
}

async fn simulate(_: Call, p: SimulateParams) -> Result<SimulateReply, RpcError> {
    let proposal = crate::state::proposal::parse_whole(p.proposal.clone())?;
    let initial = p.initial_state.unwrap_or_default().into_iter().collect();
    let sim = run(&proposal, &p.proposal, initial);
    Ok(SimulateReply {
        final_state: to_object(sim.state),
        execution_levels: sim.levels,
        blocked: sim.blocked,
    })
}

fn default_states() -> Vec<Object> {
    vec![
        Object::new(),
        json!({"x": 1, "y": 2})
            .as_object()
            .cloned()
            .expect("an object literal"),
    ]
}

/// A proposal error re-pointed at the field that held the proposal.
fn renamed(mut e: RpcError, field: &str) -> RpcError {
    e.message = e.message.replacen("proposal", field, 1);
    e
}

async fn equivalent(_: Call, p: EquivalentParams) -> Result<EquivalentReply, RpcError> {
    let a = crate::state::proposal::parse_whole(p.proposal_a.clone())
        .map_err(|e| renamed(e, "proposal_a"))?;
    let b = crate::state::proposal::parse_whole(p.proposal_b.clone())
        .map_err(|e| renamed(e, "proposal_b"))?;
    let given = p.test_states.filter(|s| !s.is_empty());
    if let Some(states) = &given {
        if states.len() > MAX_TEST_STATES {
            return Err(RpcError::invalid_params(format!(
                "test_states: at most {MAX_TEST_STATES} states, got {}",
                states.len()
            )));
        }
    }
    let used_default_states = given.is_none();
    let states = given.unwrap_or_else(default_states);
    let mut divergences = Vec::new();
    let mut equivalent = true;
    for (state_index, start) in states.iter().enumerate() {
        let start: BTreeMap<String, Value> = start.clone().into_iter().collect();
        let left = run(&a, &p.proposal_a, start.clone()).state;
        let right = run(&b, &p.proposal_b, start).state;
        if left == right {
            continue;
        }
        equivalent = false;
        let keys: BTreeSet<&String> = left.keys().chain(right.keys()).collect();
        for key in keys {
            let (x, y) = (left.get(key), right.get(key));
            if x != y && divergences.len() < MAX_DIVERGENCES {
                divergences.push(Divergence {
                    state_index,
                    key: key.clone(),
                    a: x.cloned().unwrap_or(Value::Null),
                    b: y.cloned().unwrap_or(Value::Null),
                });
            }
        }
    }
    Ok(EquivalentReply {
        equivalent,
        tier: "sampled".to_string(),
        states_tested: states.len(),
        used_default_states,
        divergences,
    })
}

async fn optimize(_: Call, p: OptimizeParams) -> Result<OptimizeReply, RpcError> {
    let proposal = crate::state::proposal::parse_whole(p.proposal.clone())?;
    let written: BTreeSet<String> = proposal
        .actions
        .iter()
        .filter_map(|a| a.as_ref().ok())
        .flat_map(|a| a.written_keys().into_iter().map(str::to_string))
        .collect();
    let mut rewritten = p.proposal;
    let mut pruned = Vec::new();
    if let Some(actions) = rewritten.get_mut("actions").and_then(Value::as_array_mut) {
        for (i, action) in actions.iter_mut().enumerate() {
            let Some(deps) = action
                .get_mut("state_dependencies")
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            let mut removed = Vec::new();
            deps.retain(|d| match d.as_str() {
                Some(key) if !written.contains(key) => {
                    removed.push(key.to_string());
                    false
                }
                _ => true,
            });
            if !removed.is_empty() {
                let action_id = proposal.actions[i]
                    .as_ref()
                    .map(|a| a.id.clone())
                    .unwrap_or_default();
                pruned.push(Pruned { action_id, removed });
            }
        }
    }
    Ok(OptimizeReply {
        proposal: rewritten,
        pruned,
    })
}
