//! `permission.*`: the permission-tier safety governor (reference "permission.*").
//!
//! Every action of a proposal is classified into the tier it needs (`read_only` <
//! `sandbox_edit` < `full_access`) and, independently, how far it can be undone
//! (`reversible` < `compensable` < `irreversible`). Each connection holds a standing tier
//! (default `sandbox_edit`); `permission.evaluate` judges each action against it and the
//! daemon-wide approval ledger (`CAR_HOME/approvals.jsonl`), and `proposal.submit` asks the
//! same question before anything runs. The classifier's tables, the fingerprint and the
//! decision rule are the daemon's (`daemon/src/permission/`, docs/protocol-choices.md,
//! "Permission tiers").

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Json, Name, NoParams};
use super::member::{field, member, ReturnKind};
use super::{agent, host, op, Declaration};

/// An object-valued JSON field.
pub type Object = serde_json::Map<String, Json>;

/// A permission tier, ordered `read_only` < `sandbox_edit` < `full_access`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    ReadOnly,
    SandboxEdit,
    FullAccess,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::ReadOnly, Tier::SandboxEdit, Tier::FullAccess];

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::ReadOnly => "read_only",
            Tier::SandboxEdit => "sandbox_edit",
            Tier::FullAccess => "full_access",
        }
    }
}

/// How far an action can be undone, ordered by severity.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Reversibility {
    Reversible,
    Compensable,
    Irreversible,
}

impl Reversibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Reversibility::Reversible => "reversible",
            Reversibility::Compensable => "compensable",
            Reversibility::Irreversible => "irreversible",
        }
    }

    /// A declared label; an unrecognised one sorts as the most severe.
    pub fn from_label(label: &str) -> Self {
        match label {
            "reversible" => Reversibility::Reversible,
            "compensable" => Reversibility::Compensable,
            _ => Reversibility::Irreversible,
        }
    }
}

/// The gate's verdict for one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    NeedsApproval,
    Deny,
}

/// `{granted_tier}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TierReply {
    pub granted_tier: Tier,
}

/// `permission.set_tier` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetTierParams {
    pub tier: Tier,
}

/// `permission.classify` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ClassifyParams {
    /// CAR's `ActionProposal`.
    pub proposal: Object,
}

/// One action's classification.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Classification {
    pub action_id: String,
    /// `null` for a state action.
    pub tool: Option<String>,
    pub required_tier: Tier,
    /// The classifier's answer (not the action's declared field).
    pub reversibility: Reversibility,
    /// The action declares `reversibility: "compensable"` and carries no `compensation`.
    pub missing_compensation: bool,
}

/// `permission.classify` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ClassifyReply {
    pub classifications: Vec<Classification>,
    /// The worst *declared* `reversibility` of the actions (an action that declares none
    /// counts as `irreversible`; no actions is `reversible`).
    pub declared_rollback_contract: Reversibility,
}

/// `permission.evaluate` / `permission.pending` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateParams {
    pub proposal: Object,
    /// CAR's governed-skill ceiling; accepted and not applied (this daemon keeps no
    /// skill deployment tiers).
    #[serde(default)]
    pub skill: Option<String>,
}

/// One action's decision.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PermissionDecision {
    pub action_id: String,
    /// What `permission.approve` / `permission.reject` take.
    pub fingerprint: String,
    pub decision: Verdict,
    /// The tier the action needs.
    pub required: Tier,
    pub reversibility: Reversibility,
    /// The session's standing tier.
    pub granted: Tier,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Additive: the action's tool (absent for a state action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// `permission.evaluate` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateReply {
    pub decisions: Vec<PermissionDecision>,
}

/// `permission.pending` result: the `needs_approval` decisions only.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct PendingReply {
    pub pending: Vec<PermissionDecision>,
}

/// `permission.approve` / `permission.reject` params: `{fingerprint, required_tier}` (from
/// a prior decision) or `{action}` (classified here).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct RecordParams {
    #[serde(default)]
    pub fingerprint: Option<Name>,
    /// Needed with `fingerprint`; an approval is honoured only at or above the action's
    /// true tier, so an under-scoped one cannot widen access.
    #[serde(default)]
    pub required_tier: Option<Tier>,
    /// One action of a proposal (`{id, type, tool, parameters, …}`).
    #[serde(default)]
    pub action: Option<Object>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Kept with the record as given.
    #[serde(default)]
    pub evidence: Option<Json>,
}

/// A recorded human decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecordedDecision {
    Approved,
    Rejected,
}

/// CAR's `ApprovalRecord`: one line of `CAR_HOME/approvals.jsonl`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct ApprovalRecord {
    pub fingerprint: String,
    pub decision: RecordedDecision,
    pub required_tier: Tier,
    /// Stamped by the daemon: `agent:<id>` for a session bound to an agent, else
    /// `conn:<n>`.
    pub reviewer: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Json>,
    /// RFC 3339, UTC.
    pub recorded_at: String,
}

crate::method!(
    /// `permission.get_tier` → `{granted_tier}`.
    GetTier = op("permission.get_tier", "this connection's standing permission tier");
    access: Access::daemon();
    NoParams => TierReply;
    member("permission_get_tier", &[], field("granted_tier", ReturnKind::Text))
);
crate::method!(
    /// `permission.set_tier {tier}` → `{granted_tier}`.
    SetTier = host("permission.set_tier", "set this connection's standing permission tier");
    access: Access::daemon();
    SetTierParams => TierReply
);
crate::method!(
    /// `permission.classify {proposal}` → `{classifications, declared_rollback_contract}`.
    Classify = op("permission.classify", "the tier and reversibility each action of a proposal needs");
    access: Access::daemon();
    ClassifyParams => ClassifyReply
);
crate::method!(
    /// `permission.evaluate {proposal, skill?}` → `{decisions}`.
    Evaluate = agent("permission.evaluate", "judge each action of a proposal against this connection's tier and the approval ledger");
    access: Access::daemon();
    EvaluateParams => EvaluateReply
);
crate::method!(
    /// `permission.pending {proposal, skill?}` → `{pending}`.
    Pending = agent("permission.pending", "the actions of a proposal that need a human approval");
    access: Access::owned(Resource::Approvals);
    EvaluateParams => PendingReply
);
crate::method!(
    /// `permission.approve` → the stored `ApprovalRecord`.
    Approve = host("permission.approve", "record a durable approval of an operation on the daemon's approval ledger");
    access: Access::owned(Resource::Approvals);
    RecordParams => ApprovalRecord
);
crate::method!(
    /// `permission.reject` → the stored `ApprovalRecord`.
    Reject = host("permission.reject", "record a durable rejection of an operation on the daemon's approval ledger");
    access: Access::owned(Resource::Approvals);
    RecordParams => ApprovalRecord
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<GetTier>(),
    Declaration::of::<SetTier>(),
    Declaration::of::<Classify>(),
    Declaration::of::<Evaluate>(),
    Declaration::of::<Pending>(),
    Declaration::of::<Approve>(),
    Declaration::of::<Reject>(),
];
