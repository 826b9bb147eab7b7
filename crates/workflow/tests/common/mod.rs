//! A scripted [`StepExecutor`] for the engine tests.
//!
//! Patterns read their behaviour from `config`: `answer` (default `"ans"`), `fail: true`
//! (succeeded=false), `error` (executor error), `state` (extra keys), `sleep_ms`. With
//! `count: true` the outcome also carries `calls`: how many times that exact task has run.
//! Proposals apply their `state_write` actions; a `tool_call` of tool `fail` makes the
//! proposal fail, of tool `error` makes the executor error.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use car_proto::methods::multi::{AgentOutput, AgentSpec};
use car_workflow::{
    BoxFuture, CheckpointStore, Object, PatternKind, PatternOutcome, ProposalOutcome, StepExecutor,
    Workflow,
};
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Pattern { kind: PatternKind, task: String },
    Proposal { proposal: Value, state: Object },
}

#[derive(Debug, Default)]
pub struct Fake {
    pub calls: Mutex<Vec<Call>>,
    counts: Mutex<HashMap<String, u64>>,
}

impl Fake {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn tasks(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Pattern { task, .. } => Some(task),
                Call::Proposal { .. } => None,
            })
            .collect()
    }

    /// The `id`s of the proposals run, in order.
    pub fn proposal_ids(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Proposal { proposal, .. } => {
                    Some(proposal["id"].as_str().unwrap_or("?").to_string())
                }
                Call::Pattern { .. } => None,
            })
            .collect()
    }
}

impl StepExecutor for Fake {
    fn run_pattern<'a>(
        &'a self,
        kind: PatternKind,
        task: &'a str,
        agents: &'a [AgentSpec],
        config: &'a Object,
    ) -> BoxFuture<'a, Result<PatternOutcome, String>> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(Call::Pattern {
                kind,
                task: task.to_string(),
            });
            let calls = {
                let mut counts = self.counts.lock().unwrap();
                let n = counts.entry(task.to_string()).or_default();
                *n += 1;
                *n
            };
            if let Some(ms) = config.get("sleep_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if let Some(e) = config.get("error").and_then(Value::as_str) {
                return Err(e.to_string());
            }
            let answer = config
                .get("answer")
                .and_then(Value::as_str)
                .unwrap_or("ans");
            let mut state = config
                .get("state")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if config.get("count") == Some(&json!(true)) {
                state.insert("calls".into(), json!(calls));
            }
            let outputs = agents
                .iter()
                .map(|a| AgentOutput {
                    name: a.name.to_string(),
                    answer: answer.to_string(),
                    turns: 1,
                    tool_calls: 0,
                    duration_ms: 1.0,
                    error: None,
                    tokens: None,
                    outcome: None,
                })
                .collect();
            Ok(PatternOutcome {
                outputs,
                final_answer: answer.to_string(),
                state,
                succeeded: config.get("fail") != Some(&json!(true)),
            })
        })
    }

    fn run_proposal<'a>(
        &'a self,
        proposal: &'a Value,
        state: &'a Object,
    ) -> BoxFuture<'a, Result<ProposalOutcome, String>> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(Call::Proposal {
                proposal: proposal.clone(),
                state: state.clone(),
            });
            let mut writes = Object::new();
            let mut failed = false;
            for action in proposal["actions"].as_array().into_iter().flatten() {
                match (action["type"].as_str(), action["tool"].as_str()) {
                    (Some("state_write"), _) => {
                        let key = action["key"].as_str().unwrap_or_default().to_string();
                        writes.insert(key, action["value"].clone());
                    }
                    (Some("tool_call"), Some("error")) => return Err("executor error".into()),
                    (Some("tool_call"), Some("fail")) => failed = true,
                    _ => {}
                }
            }
            Ok(ProposalOutcome {
                result: json!({"applied": writes.len(), "id": proposal.get("id")}),
                state_writes: writes,
                succeeded: !failed,
                error: failed.then(|| "tool failed".to_string()),
            })
        })
    }
}

/// Parse a manifest, panicking on error.
pub fn wf(v: Value) -> Workflow {
    car_workflow::parse(&v).unwrap()
}

/// A store in a fresh temp dir (`<tmp>/workflow-runs`); keep the guard alive.
pub fn store() -> (tempfile::TempDir, CheckpointStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = CheckpointStore::new(tmp.path().join("workflow-runs"));
    (tmp, store)
}

/// A pattern step.
pub fn pattern(task: &str, config: Value) -> Value {
    json!({"type": "pattern", "pattern": "swarm_parallel", "task": task,
           "agents": [{"name": "w"}], "config": config})
}

/// A proposal step with one state write (`id` names it in [`Fake::proposal_ids`]).
pub fn write(id: &str, key: &str, value: Value) -> Value {
    json!({"type": "proposal", "proposal": {"id": id, "actions": [
        {"id": "w", "type": "state_write", "key": key, "value": value}]}})
}

/// A proposal step that fails (`tool: fail`).
pub fn failing(id: &str) -> Value {
    json!({"type": "proposal", "proposal": {"id": id, "actions": [
        {"id": "t", "type": "tool_call", "tool": "fail"}]}})
}

pub fn stage(id: &str, step: Value) -> Value {
    json!({"id": id, "name": format!("Stage {id}"), "step": step})
}

pub fn edge(from: &str, to: &str) -> Value {
    json!({"from": from, "to": to})
}

pub fn obj(v: Value) -> Object {
    v.as_object().unwrap().clone()
}
