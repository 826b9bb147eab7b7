//! The proposal executor: runs a verified plan level by level, independent actions of a
//! level concurrently, calling tools back on the submitting connection.
//!
//! Per action: dependencies must have succeeded (else `skipped`); a tool call is checked
//! against the policies before **every** attempt (a violation → `rejected`, naming the
//! policy, and the tool is never called); each attempt is one `tools.execute` reverse call
//! with `{action_id, tool, parameters, timeout_ms, attempt, request_id, session_id}`.
//! An attempt ends when the client answers, when the action's `timeout_ms` runs out, when
//! the daemon's own wait (`timeout_ms` + 5 s grace, or `CAR_TOOL_TIMEOUT`) runs out, or when
//! the whole handler is abandoned at its deadline; the last three send the `tools.cancel`
//! notification `{request_id, action_id, reason}`.
//!
//! Failure behaviour: `retry` tries again (attempts count from 1) until `max_retries` are
//! spent; then, like `abort`, the failure stops the proposal — actions of later levels are
//! `skipped` (with the reason in `error`; the event is `action.aborted`). `skip` records the
//! failure and lets independent work continue. An error with `data.terminal = true` stops retries,
//! rolls back this proposal's state writes (newest first), marks the result terminal, and halts the
//! session until reconnect or a host's `session.clear_halt`; a halted session's later proposals are
//! `rejected` whole.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Map, Value};

use super::callback::Attempt;
use crate::handler::Call;
use car_proto::methods::proposal::{ProposalCost, ProposalResult};

use crate::state::proposal::{Action, ActionKind, FailureBehavior};
use crate::state::session::Session;
use crate::state::store::NewEvent;

/// Added to an action's `timeout_ms` for the daemon's own callback wait.
pub const CALLBACK_GRACE: Duration = Duration::from_secs(5);

pub use car_proto::methods::proposal::{ActionResult, ActionStatus as Status};

/// CAR's event kind for an action that ended with `status`.
fn event_kind(status: Status) -> &'static str {
    match status {
        Status::Succeeded => "action_succeeded",
        Status::Failed => "action_failed",
        Status::Rejected => "action_rejected",
        Status::Skipped => "action_skipped",
    }
}

/// A result for `action` that ended now, with nothing run yet.
pub(super) fn result_of(action: &Action, status: Status, error: Option<String>) -> ActionResult {
    ActionResult::new(&action.id, status, error)
}

/// CAR's `error_class` for a failed or rejected action.
fn error_class(r: &ActionResult) -> Option<&'static str> {
    match r.status {
        Status::Succeeded | Status::Skipped => None,
        Status::Rejected => Some("rejected_by_policy"),
        Status::Failed => Some(match r.error.as_deref() {
            Some(e) if e.contains("timed out") || e.contains("timeout") => "timeout",
            Some(_) => "tool_error",
            None => "unknown",
        }),
    }
}

/// One proposal run.
#[derive(Debug)]
pub struct Execution<'a> {
    pub call: &'a Call,
    pub proposal_id: String,
    pub session_id: String,
    /// The daemon's callback wait when an action declares no `timeout_ms`.
    pub tool_timeout: Duration,
    /// The run the proposal is recorded under (its callbacks are withdrawn when it is
    /// cancelled).
    pub run_id: Option<String>,
    /// The policy files' rules, read when the proposal was submitted; the error of the
    /// first file that could not be read or parsed (then every tool call is refused).
    pub file_rules: std::sync::Arc<Result<car_proto::policy_rules::PolicyRules, String>>,
    /// The state partition the proposal reads and writes (`scope.tenantId`; `None`: the
    /// default one).
    pub tenant: Option<String>,
}

/// Undo journal entry: (action index, key, previous value).
pub(super) type Undo = (usize, String, Option<Value>);

impl Execution<'_> {
    pub(super) fn event(
        &self,
        kind: &'static str,
        action_id: Option<&str>,
        request_id: Option<&str>,
        data: Value,
    ) {
        self.call.state.data.store.record(NewEvent {
            kind,
            session_id: Some(self.session_id.clone()),
            agent_id: self.call.session.agent_id(),
            proposal_id: Some(self.proposal_id.clone()),
            action_id: action_id.map(str::to_string),
            request_id: request_id.map(str::to_string),
            data,
        });
    }

    /// Runs the plan.
    pub async fn run(&self, actions: &[Action], levels: &[Vec<usize>]) -> ProposalResult {
        self.run_journaled(actions, levels).await.0
    }

    /// Runs the plan; also returns the journal of its state writes (empty when a terminal
    /// error already rolled them back), which the replan loop undoes before a new run.
    pub(super) async fn run_journaled(
        &self,
        actions: &[Action],
        levels: &[Vec<usize>],
    ) -> (ProposalResult, Vec<Undo>) {
        self.event(
            "proposal.submitted",
            None,
            None,
            json!({"actions": actions.len(), "levels": levels.len()}),
        );
        let run_started = Instant::now();
        let mut results: Vec<Option<ActionResult>> = vec![None; actions.len()];
        let halted = self.call.session.runtime(|rt| rt.halted.clone());
        let undo: Mutex<Vec<Undo>> = Mutex::new(Vec::new());
        let mut stop: Option<String> = halted.as_ref().map(|why| format!("session halted: {why}"));
        let mut terminal = false;
        for level in levels {
            if let Some(reason) = &stop {
                let status = if halted.is_some() {
                    Status::Rejected
                } else {
                    Status::Skipped
                };
                for &i in level {
                    let r = result_of(&actions[i], status, Some(reason.clone()));
                    self.record_outcome(&actions[i], &r);
                    self.event(
                        if halted.is_some() {
                            "action.rejected"
                        } else {
                            "action.aborted"
                        },
                        Some(&actions[i].id),
                        None,
                        json!({"reason": reason}),
                    );
                    results[i] = Some(r);
                }
                continue;
            }
            let (done, journal) = (&results, &undo);
            let outcomes = join_all(level.iter().map(|&i| async move {
                let started = Instant::now();
                let mut r = self
                    .run_action(i, &actions[i], actions, done, journal)
                    .await;
                r.duration_ms = started.elapsed().as_millis() as u64;
                r.timestamp = car_proto::clock::now_rfc3339();
                r
            }))
            .await;
            for (&i, r) in level.iter().zip(outcomes) {
                self.record_outcome(&actions[i], &r);
                let failed = matches!(r.status, Status::Failed | Status::Rejected);
                if r.terminal {
                    terminal = true;
                    stop = Some(format!("action {} failed terminally", r.action_id));
                } else if failed
                    && actions[i].failure_behavior != FailureBehavior::Skip
                    && stop.is_none()
                {
                    stop = Some(format!(
                        "action {} {}",
                        r.action_id,
                        if r.status == Status::Rejected {
                            "was rejected"
                        } else {
                            "failed"
                        }
                    ));
                }
                results[i] = Some(r);
            }
        }
        let mut results: Vec<ActionResult> = results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    result_of(&actions[i], Status::Skipped, Some("not reached".into()))
                })
            })
            .collect();
        let mut undo = undo.into_inner().expect("undo lock");
        if terminal {
            self.roll_back(std::mem::take(&mut undo), &mut results);
        }
        let outputs: Map<String, Value> = results
            .iter()
            .zip(actions)
            .filter(|(r, a)| {
                r.status == Status::Succeeded && matches!(a.kind, ActionKind::ToolCall { .. })
            })
            .map(|(r, _)| (r.action_id.clone(), r.output.clone()))
            .collect();
        let errors: Vec<String> = results
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e}", r.action_id)))
            .collect();
        let final_state = self.final_state();
        let count =
            |f: &dyn Fn(&ActionResult) -> bool| results.iter().filter(|r| f(r)).count() as u32;
        let tool_calls: u32 = results
            .iter()
            .zip(actions)
            .filter(|(_, a)| matches!(a.kind, ActionKind::ToolCall { .. }))
            .map(|(r, _)| r.attempts)
            .sum();
        let cost = ProposalCost {
            tool_calls,
            actions_executed: count(&|r| matches!(r.status, Status::Succeeded | Status::Failed)),
            actions_rejected: count(&|r| r.status == Status::Rejected),
            actions_skipped: count(&|r| r.status == Status::Skipped),
            total_duration_ms: run_started.elapsed().as_millis() as u64,
            retries: results
                .iter()
                .map(|r| r.attempts.saturating_sub(1))
                .sum::<u32>(),
        };
        self.event(
            "proposal.completed",
            None,
            None,
            json!({"terminal": terminal, "errors": errors.len()}),
        );
        let result = ProposalResult {
            proposal_id: self.proposal_id.clone(),
            results,
            outputs,
            final_state,
            errors,
            cost,
            admission: None,
            replans: 0,
        };
        (result, undo)
    }

    /// The state of the proposal's partition now.
    pub(super) fn final_state(&self) -> std::collections::BTreeMap<String, Value> {
        self.call.session.runtime(|rt| {
            rt.partition(self.tenant.as_deref())
                .cloned()
                .unwrap_or_default()
        })
    }

    /// CAR's action event (`action_succeeded`, …): the tool, a digest of the parameters
    /// (never the parameters), the declared effects and, on failure, the error class.
    pub(super) fn record_outcome(&self, action: &Action, r: &ActionResult) {
        let (tool, digest) = match &action.kind {
            ActionKind::ToolCall { tool, parameters } => (
                Some(tool.as_str()),
                Some(car_proto::schema::digest(&Value::Object(
                    parameters.clone(),
                ))),
            ),
            _ => (None, None),
        };
        self.event(
            event_kind(r.status),
            Some(&action.id),
            None,
            json!({
                "tool": tool,
                "params_digest": digest,
                "expected_effects": action.expected_effects,
                "error_class": error_class(r),
                "attempts": r.attempts,
                "duration_ms": r.duration_ms,
            }),
        );
    }

    fn roll_back(&self, undo: Vec<Undo>, results: &mut [ActionResult]) {
        self.restore(&undo, results);
        let reason = format!("terminal tool error in proposal {}", self.proposal_id);
        self.call
            .session
            .runtime(|rt| rt.halted = Some(reason.clone()));
        self.event("session.halted", None, None, json!({"reason": reason}));
        tracing::warn!(session = self.call.session.id, proposal = %self.proposal_id, "session halted by a terminal tool error");
    }

    /// Undoes the journal's state writes, newest first, marking each writer's result
    /// `rolled_back` (event `state.rolled_back` per key).
    pub(super) fn restore(&self, undo: &[Undo], results: &mut [ActionResult]) {
        self.call.session.runtime(|rt| {
            let state = rt.partition_mut(self.tenant.as_deref());
            for (_, key, previous) in undo.iter().rev() {
                match previous {
                    Some(v) => state.insert(key.clone(), v.clone()),
                    None => state.remove(key),
                };
            }
        });
        for (i, key, _) in undo {
            results[*i].rolled_back = true;
            self.event(
                "state.rolled_back",
                Some(&results[*i].action_id),
                None,
                json!({"key": key}),
            );
        }
    }

    async fn run_action(
        &self,
        index: usize,
        action: &Action,
        all: &[Action],
        done: &[Option<ActionResult>],
        undo: &Mutex<Vec<Undo>>,
    ) -> ActionResult {
        for dep in &action.dependencies {
            let dep_result = all
                .iter()
                .position(|a| &a.id == dep)
                .and_then(|j| done[j].as_ref());
            match dep_result {
                Some(r) if r.status == Status::Succeeded => {}
                other => {
                    let why = format!(
                        "dependency {dep} did not succeed ({})",
                        other
                            .map(|r| format!("{:?}", r.status).to_lowercase())
                            .unwrap_or("not run".into())
                    );
                    self.event(
                        "action.skipped",
                        Some(&action.id),
                        None,
                        json!({"reason": why}),
                    );
                    return result_of(action, Status::Skipped, Some(why));
                }
            }
        }
        match &action.kind {
            ActionKind::StateWrite { key, value } => {
                let previous = self.call.session.runtime(|rt| {
                    rt.partition_mut(self.tenant.as_deref())
                        .insert(key.clone(), value.clone())
                });
                undo.lock()
                    .expect("undo lock")
                    .push((index, key.clone(), previous));
                self.event("state.written", Some(&action.id), None, json!({"key": key}));
                let mut r = result_of(action, Status::Succeeded, None);
                r.attempts = 1;
                r.state_changes.insert(key.clone(), value.clone());
                r
            }
            ActionKind::StateDelete { key } => {
                let previous = self
                    .call
                    .session
                    .runtime(|rt| rt.partition_mut(self.tenant.as_deref()).remove(key));
                undo.lock()
                    .expect("undo lock")
                    .push((index, key.clone(), previous));
                self.event("state.deleted", Some(&action.id), None, json!({"key": key}));
                let mut r = result_of(action, Status::Succeeded, None);
                r.attempts = 1;
                r.state_changes.insert(key.clone(), Value::Null);
                r
            }
            ActionKind::ToolCall { tool, parameters } => {
                let mut r = self.call_tool(action, tool, parameters).await;
                if r.status == Status::Succeeded && !action.expected_effects.is_empty() {
                    // The declared effects of a succeeded call are written like state
                    // actions (and rolled back with them).
                    let mut journal = Vec::new();
                    self.call.session.runtime(|rt| {
                        let state = rt.partition_mut(self.tenant.as_deref());
                        for (key, value) in &action.expected_effects {
                            journal.push((
                                index,
                                key.clone(),
                                state.insert(key.clone(), value.clone()),
                            ));
                        }
                    });
                    undo.lock().expect("undo lock").extend(journal);
                    r.state_changes = action.expected_effects.clone();
                }
                r
            }
        }
    }

    /// The policies' verdict on one call of `tool`: the reason when one denies it (journaled
    /// as `policy.denied`).
    pub(super) fn policy_refusal(
        &self,
        action: &Action,
        tool: &str,
        parameters: &Map<String, Value>,
    ) -> Option<String> {
        if let Some(why) = self.file_refusal(action, tool, parameters) {
            return Some(why);
        }
        let (policy, why) = self.call.session.runtime(|rt| {
            rt.policy_violation(&self.session_id, self.tenant.as_deref(), tool, parameters)
        })?;
        self.event(
            "policy.denied",
            Some(&action.id),
            None,
            json!({"policy": policy, "tool": tool, "reason": why}),
        );
        Some(why)
    }

    /// The policy files' verdict on one attempt (rate windows first: a call takes its slot
    /// when admitted, even if another rule then refuses it, as CAR's engine does).
    fn file_refusal(
        &self,
        action: &Action,
        tool: &str,
        parameters: &Map<String, Value>,
    ) -> Option<String> {
        let why = match &*self.file_rules {
            Err(e) => {
                format!("the policy files could not be loaded, so every tool call is refused: {e}")
            }
            Ok(rules) if rules.is_empty() => return None,
            Ok(rules) => {
                let mut findings = self.call.session.runtime(|rt| {
                    crate::state::policy_files::admit_rates(
                        &mut rt.rate_windows,
                        &rules.rate_limit_tool,
                        tool,
                        std::time::Instant::now(),
                    )
                });
                findings.extend(rules.findings(tool, parameters));
                let first = findings.first()?;
                format!("policy file rule {}: {}", first.rule, first.reason)
            }
        };
        self.event(
            "policy.denied",
            Some(&action.id),
            None,
            json!({"policy": "policy_files", "tool": tool, "reason": why}),
        );
        Some(why)
    }

    async fn call_tool(
        &self,
        action: &Action,
        tool: &str,
        parameters: &Map<String, Value>,
    ) -> ActionResult {
        let mut result = result_of(action, Status::Failed, None);
        // The registry is read when the action comes up: a tool unregistered (or never
        // registered) is rejected without a callback, as are parameters its schema refuses.
        let registered = self.call.session.runtime(|rt| rt.tools.get(tool).cloned());
        let refusal = match &registered {
            None => Some(format!(
                "tool {tool:?} is not registered on this connection"
            )),
            Some(t) => t.parameters.as_ref().and_then(|schema| {
                let problems = super::plan::schema_problems(schema, parameters);
                (!problems.is_empty()).then(|| format!("{tool}: {}", problems.join("; ")))
            }),
        };
        if let Some(why) = refusal {
            return self.rejected(action, tool, why, result);
        }
        if registered.as_ref().is_some_and(|t| t.builtin) {
            return self.call_builtin(action, tool, parameters, result).await;
        }
        if registered.as_ref().is_some_and(|t| t.connector.is_some()) {
            return self.call_connector(action, tool, parameters, result).await;
        }
        let descriptor = registered.expect("checked above");
        let hit = self
            .call
            .session
            .runtime(|rt| super::tool_hints::cached(rt, &descriptor, parameters));
        if let Some(output) = hit {
            self.event("tool.cached", Some(&action.id), None, json!({"tool": tool}));
            result.attempts = 0;
            return self.answered(action, None, 0, output, result);
        }
        for attempt in 1..=action.max_attempts() {
            if let Some(why) = self.policy_refusal(action, tool, parameters) {
                result.status = Status::Rejected;
                result.error = Some(why);
                return result;
            }
            let limited = self
                .call
                .session
                .runtime(|rt| super::tool_hints::rate_refusal(rt, &descriptor));
            if let Some(why) = limited {
                return self.rejected(action, tool, why, result);
            }
            self.event(
                "policy.allowed",
                Some(&action.id),
                None,
                json!({"tool": tool, "attempt": attempt}),
            );
            result.attempts = attempt;
            let request_id = Session::next_callback_id();
            let params = json!({
                "action_id": action.id,
                "tool": tool,
                "parameters": parameters,
                "timeout_ms": action.timeout_ms,
                "attempt": attempt,
                "request_id": request_id,
                "session_id": self.session_id,
            });
            self.event(
                "tool.called",
                Some(&action.id),
                Some(&request_id),
                json!({"tool": tool, "attempt": attempt}),
            );
            match self.attempt(action, tool, &request_id, &params).await {
                Attempt::Answered(output) => {
                    self.call.session.runtime(|rt| {
                        super::tool_hints::remember(rt, &descriptor, parameters, &output)
                    });
                    return self.answered(action, Some(&request_id), attempt, output, result);
                }
                Attempt::Refused(error) => {
                    let terminal = error
                        .data
                        .as_ref()
                        .and_then(|d| d.get("terminal"))
                        .and_then(Value::as_bool)
                        == Some(true);
                    self.event("tool.failed", Some(&action.id), Some(&request_id), json!({"attempt": attempt, "code": error.code, "message": error.message, "terminal": terminal}));
                    result.error = Some(error.message);
                    if terminal {
                        result.terminal = true;
                        return result;
                    }
                }
                Attempt::Cancelled(reason) => result.error = Some(reason),
                Attempt::Closed => {
                    result.error = Some("the connection closed before the tool answered".into());
                    return result;
                }
            }
            if attempt < action.max_attempts() {
                self.event(
                    "action.retry",
                    Some(&action.id),
                    None,
                    json!({"next_attempt": attempt + 1}),
                );
            }
        }
        self.exhausted(action, result)
    }

    /// The call is refused before it runs: `action.rejected` with `why`.
    fn rejected(
        &self,
        action: &Action,
        tool: &str,
        why: String,
        mut result: ActionResult,
    ) -> ActionResult {
        self.event(
            "action.rejected",
            Some(&action.id),
            None,
            json!({"tool": tool, "reason": why}),
        );
        result.status = Status::Rejected;
        result.error = Some(why);
        result
    }

    /// A tool's answer on `attempt`: `tool.answered`, and the action succeeded with it.
    pub(super) fn answered(
        &self,
        action: &Action,
        request_id: Option<&str>,
        attempt: u32,
        output: Value,
        mut result: ActionResult,
    ) -> ActionResult {
        self.event(
            "tool.answered",
            Some(&action.id),
            request_id,
            json!({"attempt": attempt}),
        );
        result.status = Status::Succeeded;
        result.output = output;
        result.error = None;
        result
    }

    /// Every attempt failed: `action.failed` with the last error.
    pub(super) fn exhausted(&self, action: &Action, result: ActionResult) -> ActionResult {
        self.event(
            "action.failed",
            Some(&action.id),
            None,
            json!({"attempts": result.attempts, "error": result.error}),
        );
        result
    }
}
