//! [`Supervision`]: the supervisors subscribed with `supervision.subscribe` and the
//! intents parked on their decisions (reference "supervision"; the service is
//! `services::supervision`, the gate's caller `services::proposal::admission`).
//!
//! # Rules
//! - A connection subscribes with a [`Filter`]; subscribing again replaces it; the subscription
//!   ends with `supervision.unsubscribe` or when the connection closes.
//! - With no supervisor, [`Supervision::admit`] returns at once after one atomic read.
//! - Otherwise a proposal that matches at least one live supervisor's filter becomes an intent:
//!   sent as a `supervision.intent` notification to every matching supervisor, and parked until one
//!   of them decides, oldest first in `supervision.pending`.
//! - A filter matches an intent when each given part matches (an empty list counts as not given):
//!   `tools` — an action calls one of them; `sessions` — the intent's execution session id is one
//!   of them; `min_reversibility` — the intent's reversibility (the worst of its actions') is that
//!   or worse.
//! - Who may decide an intent: a subscribed connection that was sent it or whose current filter
//!   matches it (so a supervisor that reconnects and subscribes again can answer what it left
//!   parked). Anyone else is told the intent is unknown.
//! - Never the submitter (issue 24; CAR lets any subscriber decide, the agent itself included): an
//!   intent is not sent to, listed for or decidable by the connection that submitted it, nor by any
//!   connection bound to the same agent. A decision from one is refused (`-32603`, `data.reason:
//!   "self_decision"`). When only the submitter's own subscriptions match, the proposal is
//!   unsupervised, exactly as with no supervisor: an agent gains nothing by supervising itself.
//! - The first decision wins; the intent is then gone (a second one is an error, as is one for an
//!   intent that timed out). Disconnecting releases nothing: parked intents wait out their timeout
//!   and are rejected (fail-closed).
//! - At most [`MAX_PARKED`] intents are parked; past that a proposal is refused at once (`-32603`,
//!   `data.reason: "supervision_full"`) rather than admitted.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::supervision::{Decision, DecisionKind, Filter, SupervisionIntent};
use serde_json::json;
use tokio::sync::oneshot;

use crate::state::session::Session;

/// Intents parked at most.
pub const MAX_PARKED: usize = 10_000;

#[derive(Debug)]
struct Supervisor {
    session: Weak<Session>,
    /// The agent the supervising connection is bound to.
    agent_id: Option<String>,
    filter: Filter,
}

/// Who submitted a proposal: its connection and the agent it is bound to.
#[derive(Debug, Clone, Default)]
pub struct Submitter {
    pub session_id: u64,
    pub agent_id: Option<String>,
}

impl Submitter {
    fn is(&self, session_id: u64, agent_id: Option<&str>) -> bool {
        session_id == self.session_id
            || agent_id.is_some_and(|a| self.agent_id.as_deref() == Some(a))
    }
}

#[derive(Debug)]
struct Parked {
    intent: SupervisionIntent,
    submitter: Submitter,
    /// The supervisors it was sent to.
    notified: Vec<u64>,
    decide: oneshot::Sender<Decision>,
}

#[derive(Debug, Default)]
struct Inner {
    supervisors: BTreeMap<u64, Supervisor>,
    /// Oldest first.
    parked: Vec<Parked>,
}

/// How an intent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No supervisor's filter matched: nothing was parked.
    Unsupervised,
    Allowed(String),
    Denied {
        intent_id: String,
        reason: String,
    },
    Escalated {
        intent_id: String,
        reason: String,
    },
    TimedOut(String),
}

#[derive(Debug, Default)]
pub struct Supervision {
    subscribed: AtomicUsize,
    next: AtomicU64,
    inner: Mutex<Inner>,
}

/// Whether `filter` matches `intent` (see the module docs).
pub fn matches(filter: &Filter, intent: &SupervisionIntent) -> bool {
    let given = |list: &Option<Vec<String>>| list.as_ref().filter(|l| !l.is_empty()).cloned();
    if let Some(tools) = given(&filter.tools) {
        let hit = intent
            .actions
            .iter()
            .any(|a| a.tool.as_ref().is_some_and(|t| tools.contains(t)));
        if !hit {
            return false;
        }
    }
    if let Some(sessions) = given(&filter.sessions) {
        if !intent
            .session_id
            .as_ref()
            .is_some_and(|s| sessions.contains(s))
        {
            return false;
        }
    }
    filter
        .min_reversibility
        .is_none_or(|min| intent.reversibility >= min)
}

/// Removes the parked intent however the wait ends.
struct Unpark<'a> {
    supervision: &'a Supervision,
    id: String,
}

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.supervision
            .lock()
            .parked
            .retain(|p| p.intent.id != self.id);
    }
}

impl Supervision {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("supervision lock")
    }

    /// Subscribes (or re-subscribes) `session`; answers how many supervisors there are.
    pub fn subscribe(&self, session: &Arc<Session>, filter: Filter) -> usize {
        let mut inner = self.lock();
        inner.supervisors.insert(
            session.id,
            Supervisor {
                session: Arc::downgrade(session),
                agent_id: session.identity().agent_id,
                filter,
            },
        );
        self.subscribed
            .store(inner.supervisors.len(), Ordering::SeqCst);
        tracing::info!(
            session = session.id,
            supervisors = inner.supervisors.len(),
            "supervisor subscribed"
        );
        inner.supervisors.len()
    }

    /// Whether `session_id` was subscribed.
    pub fn unsubscribe(&self, session_id: u64) -> bool {
        let mut inner = self.lock();
        let was = inner.supervisors.remove(&session_id).is_some();
        self.subscribed
            .store(inner.supervisors.len(), Ordering::SeqCst);
        if was {
            tracing::info!(session = session_id, "supervisor unsubscribed");
        }
        was
    }

    pub fn on_session_closed(&self, session_id: u64) {
        self.unsubscribe(session_id);
    }

    /// Whether `session_id` is a supervisor.
    pub fn is_subscribed(&self, session_id: u64) -> bool {
        self.lock().supervisors.contains_key(&session_id)
    }

    fn may_decide(inner: &Inner, session_id: u64, parked: &Parked) -> bool {
        inner.supervisors.get(&session_id).is_some_and(|s| {
            !parked.submitter.is(session_id, s.agent_id.as_deref())
                && (parked.notified.contains(&session_id) || matches(&s.filter, &parked.intent))
        })
    }

    /// Whether `session_id` (a supervisor) is the submitter of the parked intent
    /// `intent_id`.
    fn is_own(inner: &Inner, session_id: u64, intent_id: &str) -> bool {
        let agent = inner
            .supervisors
            .get(&session_id)
            .and_then(|s| s.agent_id.as_deref());
        inner
            .parked
            .iter()
            .any(|p| p.intent.id == intent_id && p.submitter.is(session_id, agent))
    }

    /// The parked intents `session_id` may decide, oldest first.
    pub fn pending(&self, session_id: u64) -> Vec<SupervisionIntent> {
        let inner = self.lock();
        inner
            .parked
            .iter()
            .filter(|p| Self::may_decide(&inner, session_id, p))
            .map(|p| p.intent.clone())
            .collect()
    }

    /// Delivers a decision (see the module docs for who may).
    pub fn decide(
        &self,
        session_id: u64,
        intent_id: &str,
        decision: Decision,
    ) -> Result<(), RpcError> {
        let parked = {
            let mut inner = self.lock();
            if Self::is_own(&inner, session_id, intent_id) {
                return Err(RpcError::internal(format!(
                    "permission denied: intent {intent_id:?} is this session's own proposal (or its agent's); another supervisor must decide it"
                ))
                .with_data(json!({"reason": "self_decision", "intent_id": intent_id})));
            }
            let at = inner
                .parked
                .iter()
                .position(|p| p.intent.id == intent_id && Self::may_decide(&inner, session_id, p));
            at.map(|i| inner.parked.remove(i))
        };
        let unknown = || {
            RpcError::invalid_params(format!(
                "intent_id: no parked intent {intent_id:?} for this supervisor (unknown, already decided or timed out)"
            ))
            .with_data(json!({"reason": "unknown_intent", "intent_id": intent_id}))
        };
        let parked = parked.ok_or_else(unknown)?;
        tracing::info!(session = session_id, intent = %intent_id, kind = ?decision.kind, "supervisor decided");
        // The submit may have just timed out and dropped its receiver: then the decision
        // did not land, and the supervisor hears so.
        parked.decide.send(decision).map_err(|_| unknown())
    }

    /// The gate: parks `intent` (its `id` and `created_at` are filled here) until a
    /// matching supervisor decides or `timeout` passes (see the module docs).
    pub async fn admit(
        &self,
        mut intent: SupervisionIntent,
        submitter: Submitter,
        timeout: Duration,
    ) -> Result<Outcome, RpcError> {
        if self.subscribed.load(Ordering::SeqCst) == 0 {
            return Ok(Outcome::Unsupervised);
        }
        intent.id = format!(
            "intent-{}-{}",
            self.next.fetch_add(1, Ordering::Relaxed) + 1,
            &crate::state::auth::mint_token()[..8]
        );
        intent.created_at = car_proto::clock::now_rfc3339();
        let (tx, rx) = oneshot::channel();
        let targets: Vec<Arc<Session>> = {
            let mut inner = self.lock();
            let targets: Vec<Arc<Session>> = inner
                .supervisors
                .iter()
                .filter(|(id, s)| !submitter.is(**id, s.agent_id.as_deref()))
                .filter(|(_, s)| matches(&s.filter, &intent))
                .filter_map(|(_, s)| s.session.upgrade())
                .collect();
            if targets.is_empty() {
                return Ok(Outcome::Unsupervised);
            }
            if inner.parked.len() >= MAX_PARKED {
                return Err(RpcError::internal(format!(
                    "supervision is full: {MAX_PARKED} intents are waiting for a decision"
                ))
                .with_data(json!({"reason": "supervision_full"})));
            }
            inner.parked.push(Parked {
                intent: intent.clone(),
                submitter,
                notified: targets.iter().map(|s| s.id).collect(),
                decide: tx,
            });
            targets
        };
        let _unpark = Unpark {
            supervision: self,
            id: intent.id.clone(),
        };
        let params = serde_json::to_value(&intent).unwrap_or_default();
        for session in &targets {
            session.notify("supervision.intent", &params);
        }
        tracing::info!(intent = %intent.id, proposal = %intent.proposal_id, supervisors = targets.len(), "proposal parked for supervision");
        drop(targets);
        let id = intent.id;
        Ok(match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(Decision { kind, reason })) => {
                let reason = reason.unwrap_or_default();
                match kind {
                    DecisionKind::Allow => Outcome::Allowed(id),
                    DecisionKind::Deny => Outcome::Denied {
                        intent_id: id,
                        reason,
                    },
                    DecisionKind::Escalate => Outcome::Escalated {
                        intent_id: id,
                        reason,
                    },
                }
            }
            Ok(Err(_)) | Err(_) => Outcome::TimedOut(id),
        })
    }

    /// Supervisors subscribed now.
    pub fn supervisors(&self) -> usize {
        self.subscribed.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use car_proto::methods::permission::Reversibility;
    use car_proto::methods::supervision::IntentAction;

    fn intent(tool: &str, session: &str, rev: Reversibility) -> SupervisionIntent {
        SupervisionIntent {
            id: "i".into(),
            proposal_id: "p".into(),
            source: "conn:1".into(),
            session_id: Some(session.into()),
            scope: None,
            reversibility: rev,
            created_at: String::new(),
            actions: vec![IntentAction {
                id: "a".into(),
                action_type: "tool_call".into(),
                tool: Some(tool.into()),
                reversibility: rev,
                parameter_keys: vec![],
                parameters_digest: String::new(),
            }],
        }
    }

    #[test]
    fn filters_combine_with_and_and_empty_matches_everything() {
        let i = intent("work", "sess-1", Reversibility::Compensable);
        assert!(matches(&Filter::default(), &i));
        let f = |tools: &[&str], sessions: &[&str], min: Option<Reversibility>| Filter {
            tools: Some(tools.iter().map(|s| s.to_string()).collect()),
            sessions: Some(sessions.iter().map(|s| s.to_string()).collect()),
            min_reversibility: min,
        };
        assert!(matches(&f(&[], &[], None), &i));
        assert!(matches(&f(&["work"], &["sess-1"], None), &i));
        assert!(!matches(&f(&["other"], &[], None), &i));
        assert!(!matches(&f(&[], &["sess-2"], None), &i));
        assert!(matches(&f(&[], &[], Some(Reversibility::Reversible)), &i));
        assert!(matches(&f(&[], &[], Some(Reversibility::Compensable)), &i));
        assert!(!matches(
            &f(&[], &[], Some(Reversibility::Irreversible)),
            &i
        ));
    }

    #[test]
    fn the_submitter_is_its_connection_and_every_connection_of_its_agent() {
        let agent = Submitter {
            session_id: 7,
            agent_id: Some("a".into()),
        };
        assert!(agent.is(7, Some("a")));
        assert!(
            agent.is(9, Some("a")),
            "a reconnected or second connection of the agent"
        );
        assert!(!agent.is(9, Some("b")));
        assert!(!agent.is(9, None));
        let operator = Submitter {
            session_id: 7,
            agent_id: None,
        };
        assert!(operator.is(7, None));
        assert!(
            !operator.is(8, None),
            "another unbound connection may supervise it"
        );
    }
}
