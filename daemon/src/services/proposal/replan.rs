//! The replan loop of `proposal.submit` (`replan.set_config`, contract in
//! `car_proto::methods::replan`).
//!
//! One submission runs its proposal; when the run stops on an action that failed (with
//! `replan_on_rejected`, or was rejected) and replans are left, the run's state writes are
//! undone (newest first, `state.rolled_back`), and the submitting connection is asked for a
//! replacement through the reverse call `proposal.replan`:
//!
//! ```json
//! {"proposal_id": "...", "replan": 1, "max_replans": 2,
//!  "failed": {"action_id": "a", "tool": "t", "status": "failed", "error": "...", "parameters": {}},
//!  "results": [ActionResult...], "proposal": {the proposal that stopped}}
//! ```
//!
//! It answers `{"proposal": {...}}` to run that instead (after `delay_ms`), or `null` to
//! stop. A replacement that does not parse, or (with `verify_before_execute`, the default)
//! does not verify, spends a replan and is reported back in the next callback as the
//! failure. The loop ends with the last run's result (`replans` counts the replanned runs):
//! when a run does not stop, when the replans are spent (`replan.exhausted`), when the client
//! declines, or when it cannot replan (an error answer, e.g. `-32601` from a client with no
//! handler: `replan.unavailable`). A terminal tool error ends the loop too: it has already
//! rolled back and halted the session.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::proposal::ProposalResult;
use car_proto::methods::replan::{ReplanConfig, REPLAN_CALLBACK};
use serde_json::{json, Map, Value};

use super::exec::{Execution, Status};
use super::{admission, analyse};
use crate::handler::Call;
use crate::state::proposal::{self as model, Action, ActionKind, FailureBehavior};
use crate::state::session::ReverseCallError;

static NEXT_PROPOSAL: AtomicU64 = AtomicU64::new(1);

/// What every run of one submission shares.
pub(super) struct Submission<'a> {
    pub call: &'a Call,
    pub session_id: String,
    pub tenant: Option<String>,
    pub run_id: Option<String>,
    pub file_rules: std::sync::Arc<Result<car_proto::policy_rules::PolicyRules, String>>,
    pub scope: Option<Map<String, Value>>,
}

/// The action that stopped a run, as the callback reports it.
fn stopping_failure(
    result: &ProposalResult,
    actions: &[Action],
    config: &ReplanConfig,
) -> Option<Value> {
    if result.results.iter().any(|r| r.terminal) {
        return None;
    }
    result.results.iter().zip(actions).find_map(|(r, a)| {
        let stops = match r.status {
            Status::Failed => true,
            Status::Rejected => config.replan_on_rejected,
            _ => false,
        } && a.failure_behavior != FailureBehavior::Skip;
        stops.then(|| {
            let (tool, parameters) = match &a.kind {
                ActionKind::ToolCall { tool, parameters } => {
                    (Some(tool.clone()), Value::Object(parameters.clone()))
                }
                _ => (None, Value::Null),
            };
            json!({"action_id": r.action_id, "tool": tool, "status": r.status,
                   "error": r.error, "parameters": parameters})
        })
    })
}

impl Submission<'_> {
    fn execution(&self, proposal_id: String) -> Execution<'_> {
        Execution {
            call: self.call,
            proposal_id,
            session_id: self.session_id.clone(),
            tool_timeout: self.call.state.daemon.config.tool_timeout,
            run_id: self.run_id.clone(),
            file_rules: self.file_rules.clone(),
            tenant: self.tenant.clone(),
        }
    }

    /// One run: analyse, refuse structural errors (`-32602`), admit, execute. Returns the
    /// result, the undo journal and the actions.
    async fn run_once(
        &self,
        raw: Map<String, Value>,
        strict_verify: bool,
    ) -> Result<(ProposalResult, Vec<super::exec::Undo>, Vec<Action>), RpcError> {
        let proposal = model::parse_whole(raw.clone())?;
        let plan = analyse(
            self.call,
            &proposal,
            None,
            &self.session_id,
            self.tenant.as_deref(),
        );
        let refuse = |issues: Vec<&super::plan::Issue>| {
            RpcError::invalid_params(format!("proposal is not runnable: {}", issues[0].message))
                .with_data(json!({"issues": issues}))
        };
        let structural = plan.structural_errors();
        if !structural.is_empty() {
            return Err(refuse(structural));
        }
        if strict_verify && !plan.issues.is_empty() {
            return Err(refuse(plan.issues.iter().collect()));
        }
        let (id, actions) = proposal.strict()?;
        let proposal_id = id.unwrap_or_else(|| {
            format!(
                "prop-{}-{}",
                std::process::id(),
                NEXT_PROPOSAL.fetch_add(1, Ordering::Relaxed)
            )
        });
        let execution = self.execution(proposal_id);
        let refusal =
            admission::admit(self.call, &raw, &actions, &execution, self.scope.as_ref()).await?;
        Ok(match refusal {
            Some(refusal) => (execution.refused(&actions, refusal), Vec::new(), actions),
            None => {
                let (result, undo) = execution.run_journaled(&actions, &plan.levels).await;
                (result, undo, actions)
            }
        })
    }

    /// Runs `raw`, replanning as `config` says; returns the proposal that ran last and its
    /// result.
    pub async fn run_with_replans(
        &self,
        raw: Map<String, Value>,
        config: &ReplanConfig,
    ) -> Result<(Value, ProposalResult), RpcError> {
        let (mut last, mut undo, mut actions) = self.run_once(raw.clone(), false).await?;
        let mut last_raw = raw;
        let mut replans = 0u32;
        let mut pending_failure = None;
        loop {
            let failure = match pending_failure.take() {
                Some(f) => f,
                None => match stopping_failure(&last, &actions, config) {
                    Some(f) => f,
                    None => break,
                },
            };
            let exec = self.execution(last.proposal_id.clone());
            if replans >= config.max_replans {
                if config.max_replans > 0 {
                    exec.event(
                        "replan.exhausted",
                        None,
                        None,
                        json!({"replans": replans, "failed": failure}),
                    );
                }
                break;
            }
            exec.restore(&std::mem::take(&mut undo), &mut last.results);
            last.final_state = exec.final_state();
            let replan = replans + 1;
            exec.event(
                "replan.requested",
                None,
                None,
                json!({"replan": replan, "failed": failure}),
            );
            let params = json!({
                "proposal_id": last.proposal_id,
                "replan": replan,
                "max_replans": config.max_replans,
                "failed": failure,
                "results": last.results,
                "proposal": last_raw,
            });
            let answer = self
                .call
                .session
                .call_client(REPLAN_CALLBACK, &params, exec.tool_timeout)
                .await;
            let replacement = match answer {
                Ok(Ok(Value::Null)) => break,
                Ok(Ok(Value::Object(mut o))) => match o.remove("proposal") {
                    Some(Value::Object(p)) => Ok(p),
                    Some(Value::Null) | None => break,
                    Some(other) => Err(format!(
                        "the proposal.replan answer's proposal must be an object, got {other}"
                    )),
                },
                Ok(Ok(other)) => Err(format!(
                    "the proposal.replan answer must be {{proposal}} or null, got {other}"
                )),
                Ok(Err(e)) => {
                    exec.event(
                        "replan.unavailable",
                        None,
                        None,
                        json!({"code": e.code, "message": e.message}),
                    );
                    break;
                }
                Err(e) => {
                    exec.event(
                        "replan.unavailable",
                        None,
                        None,
                        json!({"message": match e {
                            ReverseCallError::TimedOut(d) => format!(
                                "the client did not answer {REPLAN_CALLBACK} within {}s",
                                d.as_secs()
                            ),
                            ReverseCallError::Closed => "the connection closed".to_string(),
                        }}),
                    );
                    break;
                }
            };
            // Every answer other than "stop" spends a replan, so a client cannot loop us.
            replans = replan;
            let replacement = match replacement {
                Ok(p) => p,
                Err(error) => {
                    pending_failure = Some(json!({ "error": error }));
                    continue;
                }
            };
            if config.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(config.delay_ms)).await;
            }
            match self
                .run_once(replacement.clone(), config.verify_first())
                .await
            {
                Ok((result, journal, acts)) => {
                    (last, undo, actions) = (result, journal, acts);
                    last_raw = replacement;
                }
                Err(e) => {
                    pending_failure = Some(json!({"error": e.message, "data": e.data}));
                }
            }
        }
        last.replans = replans;
        Ok((Value::Object(last_raw), last))
    }
}
