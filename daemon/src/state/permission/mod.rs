//! The permission governor: [`classify`] (what tier an operation needs, how far it can be
//! undone, its fingerprint), the daemon-wide [`ledger`] of human decisions, the per-agent
//! [`agent_policy`], and [`Gate::decide`], the one rule `permission.evaluate`,
//! `permission.pending` and `proposal.submit` all apply (so the advisory answer and the
//! enforced one cannot differ).
//!
//! # The decision, per action
//! 1. The ledger's latest decision for the fingerprint is a rejection → `deny`.
//! 2. The session is bound to an agent: its policy for the action's tool and tier
//!    ([`agent_policy::AgentPermissions::resolve_tool`]) says `deny` → `deny`; `always_allow` →
//!    `allow` (a host-set policy is a standing approval); `require_approval` → the rules below
//!    decide.
//! 3. The latest decision is an approval recorded at or above the action's true tier → `allow` (an
//!    approval recorded for a lower tier does not cover it).
//! 4. The action needs `full_access` → `needs_approval`, whatever the session's tier.
//! 5. It needs more than the session's standing tier → `needs_approval`.
//! 6. Otherwise `allow`.
//!
//! The standing tier is per connection (default `sandbox_edit`, `permission.set_tier`);
//! the ledger and the agent policy are daemon-wide and durable. The reviewer of a recorded
//! decision is stamped by the daemon: `agent:<id>` for a session bound to an agent, else
//! `conn:<n>`.

pub mod agent_policy;
pub mod classify;
pub mod ledger;

use car_proto::methods::agent_permissions::Mode;
use car_proto::methods::permission::{PermissionDecision, RecordedDecision, Tier, Verdict};

use crate::state::session::Session;
use agent_policy::AgentPermissions;
use classify::Operation;
use ledger::ApprovalLedger;

/// What one session's evaluation consults.
#[derive(Debug, Clone, Copy)]
pub struct Gate<'a> {
    pub granted: Tier,
    pub ledger: &'a ApprovalLedger,
    /// The agent the session is bound to, and the policy store.
    pub agent: Option<(&'a AgentPermissions, &'a str)>,
}

impl<'a> Gate<'a> {
    /// The gate of `session`.
    pub fn of(
        session: &Session,
        agent_id: Option<&'a str>,
        ledger: &'a ApprovalLedger,
        policy: &'a AgentPermissions,
    ) -> Self {
        Gate {
            granted: session.permission_tier(),
            ledger,
            agent: agent_id.map(|a| (policy, a)),
        }
    }

    /// Decides one action (see the module docs).
    pub fn decide(&self, action_id: &str, op: Operation<'_>) -> PermissionDecision {
        let assessment = classify::assess(op);
        let fingerprint = classify::fingerprint(op);
        let required = assessment.tier;
        let tool = match op {
            Operation::Tool { tool, .. } => Some(tool),
            Operation::State { .. } => None,
        };
        let row = |decision: Verdict, reason: Option<String>| PermissionDecision {
            action_id: action_id.to_string(),
            fingerprint: fingerprint.clone(),
            decision,
            required,
            reversibility: assessment.reversibility,
            granted: self.granted,
            reason,
            tool: tool.map(str::to_string),
        };
        let recorded = self.ledger.latest(&fingerprint);
        if let Some(r) = recorded
            .as_ref()
            .filter(|r| r.decision == RecordedDecision::Rejected)
        {
            let why = r
                .reason
                .as_deref()
                .map(|w| format!(": {w}"))
                .unwrap_or_default();
            return row(
                Verdict::Deny,
                Some(format!("rejected by {}{why}", r.reviewer)),
            );
        }
        if let Some((policy, agent)) = self.agent {
            let (mode, source) = policy.resolve_tool(agent, tool, required);
            let source = serde_json::to_value(source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            match mode {
                Mode::Deny => {
                    return row(
                        Verdict::Deny,
                        Some(format!(
                            "agent {agent}'s permission policy denies {} ({source})",
                            required.as_str()
                        )),
                    )
                }
                Mode::AlwaysAllow => {
                    return row(
                        Verdict::Allow,
                        Some(format!(
                            "agent {agent}'s permission policy always allows {} ({source})",
                            required.as_str()
                        )),
                    )
                }
                Mode::RequireApproval => {}
            }
        }
        let mut under_scoped = None;
        if let Some(r) = recorded.filter(|r| r.decision == RecordedDecision::Approved) {
            if r.required_tier >= required {
                return row(Verdict::Allow, Some(format!("approved by {}", r.reviewer)));
            }
            under_scoped = Some(format!(
                "; the approval by {} was recorded for {}, which does not cover it",
                r.reviewer,
                r.required_tier.as_str()
            ));
        }
        let under_scoped = under_scoped.unwrap_or_default();
        if required == Tier::FullAccess {
            let why = assessment
                .why
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            return row(
                Verdict::NeedsApproval,
                Some(format!(
                    "full_access needs a human approval{why}{under_scoped}"
                )),
            );
        }
        if required > self.granted {
            return row(
                Verdict::NeedsApproval,
                Some(format!(
                    "requires {}, this session is granted {}{under_scoped}",
                    required.as_str(),
                    self.granted.as_str()
                )),
            );
        }
        row(Verdict::Allow, None)
    }
}

/// Who a recorded decision is attributed to (see the module docs).
pub fn reviewer(session: &Session) -> String {
    match session.identity().agent_id {
        Some(agent) => format!("agent:{agent}"),
        None => format!("conn:{}", session.id),
    }
}

/// The line the proposal gate puts in a blocked action's `error`.
pub fn blocked_message(d: &PermissionDecision) -> String {
    let verdict = match d.decision {
        Verdict::Deny => "denied",
        _ => "needs approval",
    };
    format!(
        "permission {verdict}: action {} (fingerprint {}) requires {}, granted {}{}",
        d.action_id,
        d.fingerprint,
        d.required.as_str(),
        d.granted.as_str(),
        d.reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    )
}

/// The gate's decision for every action, as `proposal.submit` applies it.
pub fn decisions(
    session: &crate::state::session::Session,
    state: &crate::state::ServerState,
    actions: &[crate::state::proposal::Action],
) -> Vec<car_proto::methods::permission::PermissionDecision> {
    let agent = session.identity().agent_id;
    let gate = Gate::of(
        session,
        agent.as_deref(),
        &state.access.approvals,
        &state.access.agent_permissions,
    );
    actions
        .iter()
        .map(|a| gate.decide(&a.id, a.operation()))
        .collect()
}
