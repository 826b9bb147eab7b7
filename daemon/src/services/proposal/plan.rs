//! Static analysis of a proposal (`verify`, and the gate in front of `proposal.submit`).
//!
//! Reports, without executing anything: malformed actions, duplicate ids, dependencies on
//! missing actions or on themselves, dependency cycles, tool calls to unregistered tools,
//! and policy violations. Execution levels come from a topological sort (Kahn): level 0
//! has no dependencies, level n depends only on earlier levels. Within a level, actions
//! start in listed order; policy checks are simulated in that same order against the
//! initial state with each level's state writes applied, which is exactly what the
//! executor does. Two actions of one level that write the same key (a state action or an
//! `expected_effects` entry) are a conflict `[a1, a2, key]` (a warning: the listed order
//! decides). A tool call's parameters are checked against the registered tool's
//! `parameters` schema: `required` properties present, and each present property of the
//! declared `type` (`string`, `number`, `integer`, `boolean`, `array`, `object`, `null`).
//! Every finding comes from a decision procedure over the declared inputs
//! (`tier: "decision_procedure"`), and the report carries CAR's `evidence`: which checks
//! ran, what each establishes and what it cannot.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use crate::state::per_connection::{violation_in, Policy, ToolDescriptor};
use crate::state::proposal::{Action, ActionKind, Proposal};

pub use car_proto::methods::proposal::{Category, Conflict, Severity, VerifyIssue as Issue};

/// What the analysis found.
#[derive(Debug, Clone)]
pub struct Plan {
    pub issues: Vec<Issue>,
    /// Indices into the proposal's actions, level by level.
    pub levels: Vec<Vec<usize>>,
    pub conflicts: Vec<Conflict>,
    /// The state after every level's writes and expected effects.
    pub simulated_state: BTreeMap<String, Value>,
    /// Whether any tool call was checked against a registered parameters schema.
    pub schemas_checked: bool,
}

impl Plan {
    pub fn valid(&self) -> bool {
        !self.issues.iter().any(|i| i.severity == Severity::Error)
    }

    /// The structural errors, which make a proposal impossible to run.
    pub fn structural_errors(&self) -> Vec<&Issue> {
        self.issues
            .iter()
            .filter(|i| i.severity == Severity::Error && i.category == Category::Structure)
            .collect()
    }
}

/// What the analysis checks against.
#[derive(Debug)]
pub struct Context<'a> {
    pub tools: &'a BTreeMap<String, ToolDescriptor>,
    pub policies: &'a [Policy],
    pub state: BTreeMap<String, Value>,
    pub session_id: &'a str,
}

fn error(action_id: Option<&str>, message: String) -> Issue {
    Issue {
        action_id: action_id.map(str::to_string),
        severity: Severity::Error,
        category: Category::Structure,
        message,
        tier: DECISION_PROCEDURE.to_string(),
    }
}

const DECISION_PROCEDURE: &str = "decision_procedure";

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// What `parameters` breaks of a tool's JSON Schema (required properties, declared types).
pub(super) fn schema_problems(schema: &Value, parameters: &Map<String, Value>) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !parameters.contains_key(name) {
                problems.push(format!("parameter {name:?} is required"));
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, value) in parameters {
            let Some(declared) = props.get(name).and_then(|p| p.get("type")) else {
                continue;
            };
            let ok = match declared {
                Value::String(t) => type_matches(t, value),
                Value::Array(ts) => ts
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|t| type_matches(t, value)),
                _ => true,
            };
            if !ok {
                problems.push(format!("parameter {name:?} must be of type {declared}"));
            }
        }
    }
    problems
}

/// Analyses `proposal` (see the module docs).
pub fn analyze(proposal: &Proposal, ctx: Context<'_>) -> Plan {
    let mut issues = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut actions: Vec<(usize, &Action)> = Vec::new();
    for (i, entry) in proposal.actions.iter().enumerate() {
        match entry {
            Err(m) => issues.push(error(
                m.action_id.as_deref(),
                m.error
                    .message
                    .trim_start_matches("invalid params: ")
                    .to_string(),
            )),
            Ok(a) if index.contains_key(a.id.as_str()) => issues.push(error(
                Some(&a.id),
                format!("duplicate action id {:?} (proposal.actions[{i}])", a.id),
            )),
            Ok(a) => {
                index.insert(&a.id, i);
                actions.push((i, a));
            }
        }
    }
    // Dependencies that cannot be satisfied exclude the action (and, transitively, its
    // dependents) from the levels.
    let mut blocked: HashMap<usize, bool> = HashMap::new();
    let mut schemas_checked = false;
    for (i, a) in &actions {
        for dep in &a.dependencies {
            if dep == &a.id {
                issues.push(error(
                    Some(&a.id),
                    format!("action {:?} depends on itself", a.id),
                ));
                blocked.insert(*i, true);
            } else if !index.contains_key(dep.as_str()) {
                issues.push(error(
                    Some(&a.id),
                    format!("action {:?} depends on missing action {dep:?}", a.id),
                ));
                blocked.insert(*i, true);
            }
        }
        if let ActionKind::ToolCall { tool, parameters } = &a.kind {
            match ctx.tools.get(tool) {
                None => issues.push(Issue {
                    category: Category::Tool,
                    ..error(
                        Some(&a.id),
                        format!(
                            "action {:?} calls unknown tool {tool:?}; register it with tools.register",
                            a.id
                        ),
                    )
                }),
                Some(descriptor) => {
                    if let Some(schema) = &descriptor.parameters {
                        schemas_checked = true;
                        for problem in schema_problems(schema, parameters) {
                            issues.push(Issue {
                                category: Category::Tool,
                                ..error(
                                    Some(&a.id),
                                    format!("action {:?} ({tool}): {problem}", a.id),
                                )
                            });
                        }
                    }
                }
            }
        }
    }
    // Kahn's algorithm over the runnable actions.
    let runnable: Vec<(usize, &Action)> = actions
        .iter()
        .copied()
        .filter(|(i, _)| !blocked.contains_key(i))
        .collect();
    let mut remaining: HashMap<usize, usize> = runnable
        .iter()
        .map(|(i, a)| {
            (
                *i,
                a.dependencies
                    .iter()
                    .filter(|d| index.contains_key(d.as_str()))
                    .count(),
            )
        })
        .collect();
    let mut dependents: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, a) in &runnable {
        for d in &a.dependencies {
            if let Some(&j) = index.get(d.as_str()) {
                dependents.entry(j).or_default().push(*i);
            }
        }
    }
    let mut levels: Vec<Vec<usize>> = Vec::new();
    let mut ready: Vec<usize> = runnable
        .iter()
        .filter(|(i, _)| remaining[i] == 0)
        .map(|(i, _)| *i)
        .collect();
    let mut placed = 0usize;
    while !ready.is_empty() {
        ready.sort_unstable();
        placed += ready.len();
        let mut next = Vec::new();
        for &i in &ready {
            for &j in dependents.get(&i).map(Vec::as_slice).unwrap_or(&[]) {
                if let Some(n) = remaining.get_mut(&j) {
                    *n -= 1;
                    if *n == 0 {
                        next.push(j);
                    }
                }
            }
        }
        levels.push(std::mem::replace(&mut ready, next));
    }
    if placed < runnable.len() {
        let mut stuck: Vec<&str> = runnable
            .iter()
            .filter(|(i, _)| !levels.iter().flatten().any(|p| p == i))
            .map(|(_, a)| a.id.as_str())
            .collect();
        stuck.sort_unstable();
        let listed = stuck.join(", ");
        for id in &stuck {
            issues.push(error(
                Some(id),
                format!("action {id:?} is in, or depends on, a dependency cycle among: {listed}"),
            ));
        }
    }
    let all = |i: usize| {
        proposal.actions[i]
            .as_ref()
            .expect("placed actions are well-formed")
    };
    // Policy simulation and conflicts, level by level in listed order.
    let mut state = ctx.state;
    let mut conflicts = Vec::new();
    for level in &levels {
        let mut keys: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for &i in level {
            let a = all(i);
            match &a.kind {
                ActionKind::ToolCall { tool, parameters } => {
                    if let Some((_, why)) =
                        violation_in(ctx.policies, ctx.session_id, tool, parameters, &state)
                    {
                        issues.push(Issue {
                            category: Category::Policy,
                            ..error(Some(&a.id), why)
                        });
                    }
                }
                ActionKind::StateWrite { key, value } => {
                    state.insert(key.clone(), value.clone());
                }
                ActionKind::StateDelete { key } => {
                    state.remove(key);
                }
            }
            if let ActionKind::ToolCall { .. } = &a.kind {
                for (key, value) in &a.expected_effects {
                    state.insert(key.clone(), value.clone());
                }
            }
            for key in a.written_keys() {
                keys.entry(key).or_default().push(a.id.clone());
            }
        }
        for (key, ids) in keys {
            if ids.len() > 1 {
                issues.push(Issue {
                    action_id: Some(ids[0].clone()),
                    severity: Severity::Warning,
                    category: Category::Conflict,
                    message: format!("actions {} write state key {key:?} in the same level; listed order decides", ids.join(", ")),
                    tier: DECISION_PROCEDURE.to_string(),
                });
                for (n, first) in ids.iter().enumerate() {
                    for second in &ids[n + 1..] {
                        conflicts.push(Conflict(first.clone(), second.clone(), key.to_string()));
                    }
                }
            }
        }
    }
    Plan {
        issues,
        levels,
        conflicts,
        simulated_state: state,
        schemas_checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::proposal::parse;
    use serde_json::json;

    fn plan(actions: Value, tools: &[&str]) -> Plan {
        let tools: BTreeMap<String, ToolDescriptor> = tools
            .iter()
            .map(|t| {
                (
                    t.to_string(),
                    ToolDescriptor {
                        name: t.to_string(),
                        description: None,
                        parameters: None,
                        returns: None,
                        idempotent: false,
                        cache_ttl_secs: None,
                        rate_limit: None,
                        builtin: false,
                        connector: None,
                    },
                )
            })
            .collect();
        let policies = Vec::new();
        let p = parse(&json!({"actions": actions})).unwrap();
        analyze(
            &p,
            Context {
                tools: &tools,
                policies: &policies,
                state: BTreeMap::new(),
                session_id: "s",
            },
        )
    }

    fn ids(p: &Plan, actions: &Value) -> Vec<Vec<String>> {
        p.levels
            .iter()
            .map(|l| {
                l.iter()
                    .map(|&i| actions[i]["id"].as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn diamond_levels() {
        let actions = json!([
            {"id": "d", "type": "tool_call", "tool": "t", "dependencies": ["b", "c"]},
            {"id": "b", "type": "tool_call", "tool": "t", "dependencies": ["a"]},
            {"id": "c", "type": "tool_call", "tool": "t", "dependencies": ["a"]},
            {"id": "a", "type": "tool_call", "tool": "t"}
        ]);
        let p = plan(actions.clone(), &["t"]);
        assert!(p.valid(), "{:?}", p.issues);
        assert_eq!(
            ids(&p, &actions),
            vec![vec!["a"], vec!["b", "c"], vec!["d"]]
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let actions = json!([
            {"id": "a", "type": "tool_call", "tool": "nope"},
            {"id": "a", "type": "state_delete", "key": "k"},
            {"id": "b", "type": "state_delete", "key": "k", "dependencies": ["zzz"]},
            {"id": "c", "type": "state_delete", "key": "k", "dependencies": ["d"]},
            {"id": "d", "type": "state_delete", "key": "k", "dependencies": ["c"]},
            {"id": "e", "type": "state_delete", "key": "k", "dependencies": ["e"]},
            {"id": "f", "type": "bogus"},
            {"id": "w1", "type": "state_write", "key": "x", "value": 1},
            {"id": "w2", "type": "state_write", "key": "x", "value": 2}
        ]);
        let p = plan(actions, &["t"]);
        assert!(!p.valid());
        let text: Vec<String> = p
            .issues
            .iter()
            .map(|i| format!("{:?}: {}", i.action_id, i.message))
            .collect();
        let has = |needle: &str| {
            assert!(
                text.iter().any(|t| t.contains(needle)),
                "{needle} not in {text:#?}"
            )
        };
        has("unknown tool \"nope\"");
        has("duplicate action id \"a\"");
        has("missing action \"zzz\"");
        has("depends on itself");
        has("dependency cycle among: c, d");
        has("type: unknown variant");
        assert_eq!(
            p.conflicts,
            vec![Conflict("w1".into(), "w2".into(), "x".into())]
        );
    }
}
