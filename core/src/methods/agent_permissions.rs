//! `agent_permissions.*`: the durable per-agent approval policy (reference
//! "agent_permissions.*"), stored at `CAR_HOME/agent-permissions.json`.
//!
//! For each agent and each tier the policy says `always_allow`, `require_approval` or
//! `deny`. Resolution for an agent and a tier: the agent's override → the default
//! posture → `require_approval` (the floor). Per-tool overrides (beyond the reference's
//! published text, named in CAR's manifest) win over both, and a grant is the record of an
//! `always_allow` tool override: it covers the tool up to its `tier`. Every mutation
//! answers the whole updated policy. The presets, the grant rule and how the proposal gate
//! consults the policy are the daemon's (docs/protocol-choices.md, "Agent permissions").

use crate::methods::{Access, Resource};
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::{Name, NoParams};
use super::permission::Tier;
use super::{host, op, Declaration};

/// What the policy says for one tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    AlwaysAllow,
    RequireApproval,
    Deny,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::AlwaysAllow => "always_allow",
            Mode::RequireApproval => "require_approval",
            Mode::Deny => "deny",
        }
    }
}

/// CAR's `TierPosture`: a mode per tier; an absent tier falls through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct TierPosture {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_edit: Option<Mode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_access: Option<Mode>,
}

impl TierPosture {
    pub fn get(&self, tier: Tier) -> Option<Mode> {
        match tier {
            Tier::ReadOnly => self.read_only,
            Tier::SandboxEdit => self.sandbox_edit,
            Tier::FullAccess => self.full_access,
        }
    }

    pub fn set(&mut self, tier: Tier, mode: Option<Mode>) {
        match tier {
            Tier::ReadOnly => self.read_only = mode,
            Tier::SandboxEdit => self.sandbox_edit = mode,
            Tier::FullAccess => self.full_access = mode,
        }
    }

    pub fn is_empty(&self) -> bool {
        Tier::ALL.iter().all(|t| self.get(*t).is_none())
    }
}

/// A default posture preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// Reads run; edits ask; consequential actions are denied.
    Cautious,
    /// Reads run; edits and consequential actions ask (the default).
    Balanced,
    /// Reads and edits run; consequential actions ask.
    Trusting,
}

impl Preset {
    pub fn posture(self) -> TierPosture {
        use Mode::*;
        let (read_only, sandbox_edit, full_access) = match self {
            Preset::Cautious => (AlwaysAllow, RequireApproval, Deny),
            Preset::Balanced => (AlwaysAllow, RequireApproval, RequireApproval),
            Preset::Trusting => (AlwaysAllow, AlwaysAllow, RequireApproval),
        };
        TierPosture {
            read_only: Some(read_only),
            sandbox_edit: Some(sandbox_edit),
            full_access: Some(full_access),
        }
    }
}

/// The whole policy, as `get` and every mutation answer it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Policy {
    /// Fully specified.
    pub default: TierPosture,
    /// Sparse per-agent overrides.
    pub agents: BTreeMap<String, TierPosture>,
    /// Additive: per-tool overrides, `{agent_id: {tool: mode}}`.
    pub tools: BTreeMap<String, BTreeMap<String, Mode>>,
}

/// `{agent_id, mode, tier?}`: one tier, or every tier when `tier` is absent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetParams {
    pub agent_id: Name,
    pub mode: Mode,
    #[serde(default)]
    pub tier: Option<Tier>,
}

/// `{preset}` or `{tier, mode}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SetDefaultParams {
    #[serde(default)]
    pub preset: Option<Preset>,
    #[serde(default)]
    pub tier: Option<Tier>,
    #[serde(default)]
    pub mode: Option<Mode>,
}

/// `{agent_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct AgentParams {
    pub agent_id: Name,
}

/// `{agent_id, tier}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateParams {
    pub agent_id: Name,
    pub tier: Tier,
}

/// `evaluate` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateReply {
    pub agent_id: String,
    pub tier: Tier,
    pub mode: Mode,
    /// The agent has its own mode for this tier.
    pub has_override: bool,
}

/// `{agent_id, tool, mode, tier?, reason?}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SetToolParams {
    pub agent_id: Name,
    pub tool: Name,
    pub mode: Mode,
    /// For `always_allow`: the highest tier the grant covers (default: the tier the tool's
    /// name classifies to).
    #[serde(default)]
    pub tier: Option<Tier>,
    /// Kept on the grant.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `{agent_id, tool}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ToolParams {
    pub agent_id: Name,
    pub tool: Name,
}

/// `{agent_id, tool, tier?}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateToolParams {
    pub agent_id: Name,
    pub tool: Name,
    /// Default: the tier the tool's name classifies to.
    #[serde(default)]
    pub tier: Option<Tier>,
}

/// Where a resolved mode came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Tool,
    Agent,
    Default,
    Floor,
}

/// `evaluate_tool` result.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluateToolReply {
    pub agent_id: String,
    pub tool: String,
    pub tier: Tier,
    pub mode: Mode,
    pub source: Source,
}

/// A durable "always allow this agent to run this tool" record.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
pub struct Grant {
    pub grant_id: String,
    pub agent_id: String,
    pub tool: String,
    /// The highest tier the grant covers: an action of the tool that classifies above it
    /// is not covered.
    pub tier: Tier,
    /// RFC 3339, UTC.
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `{agent_id?}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ListGrantsParams {
    #[serde(default)]
    pub agent_id: Option<Name>,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ListGrantsReply {
    /// Oldest first.
    pub grants: Vec<Grant>,
}

/// `{grant_id}`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RevokeGrantParams {
    pub grant_id: Name,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct RevokeGrantReply {
    pub revoked: bool,
}

crate::method!(
    /// `agent_permissions.get` → `{default, agents, tools}`.
    Get = op("agent_permissions.get", "the per-agent approval policy");
    access: Access::owned(Resource::Agents);
    NoParams => Policy
);
crate::method!(
    /// `agent_permissions.set` → the policy.
    Set = host("agent_permissions.set", "set an agent's mode for one tier, or for every tier");
    access: Access::owned(Resource::Agents);
    SetParams => Policy
);
crate::method!(
    /// `agent_permissions.set_default` → the policy.
    SetDefault = host("agent_permissions.set_default", "set the default posture from a preset, or one tier of it");
    access: Access::owned(Resource::Agents);
    SetDefaultParams => Policy
);
crate::method!(
    /// `agent_permissions.reset` → the policy.
    Reset = host("agent_permissions.reset", "drop an agent's tier override so it follows the default");
    access: Access::owned(Resource::Agents);
    AgentParams => Policy
);
crate::method!(
    /// `agent_permissions.evaluate` → `{agent_id, tier, mode, has_override}`.
    Evaluate = op("agent_permissions.evaluate", "the mode that applies to an agent at a tier");
    access: Access::owned(Resource::Agents);
    EvaluateParams => EvaluateReply
);
crate::method!(
    /// `agent_permissions.set_tool` → the policy (an `always_allow` records a grant).
    SetTool = host("agent_permissions.set_tool", "set an agent's mode for one tool (always_allow records a grant)");
    access: Access::owned(Resource::Agents);
    SetToolParams => Policy
);
crate::method!(
    /// `agent_permissions.reset_tool` → the policy.
    ResetTool = host("agent_permissions.reset_tool", "drop an agent's override for one tool (and its grant)");
    access: Access::owned(Resource::Agents);
    ToolParams => Policy
);
crate::method!(
    /// `agent_permissions.evaluate_tool` → `{agent_id, tool, tier, mode, source}`.
    EvaluateTool = host("agent_permissions.evaluate_tool", "the mode that applies to an agent running one tool");
    access: Access::owned(Resource::Agents);
    EvaluateToolParams => EvaluateToolReply
);
crate::method!(
    /// `agent_permissions.list_grants {agent_id?}` → `{grants}`.
    ListGrants = host("agent_permissions.list_grants", "the durable always-allow grants, oldest first");
    access: Access::owned(Resource::Agents);
    ListGrantsParams => ListGrantsReply
);
crate::method!(
    /// `agent_permissions.revoke_grant {grant_id}` → `{revoked}`.
    RevokeGrant = host("agent_permissions.revoke_grant", "revoke one grant (its tool override goes with it)");
    access: Access::owned(Resource::Agents);
    RevokeGrantParams => RevokeGrantReply
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Get>(),
    Declaration::of::<Set>(),
    Declaration::of::<SetDefault>(),
    Declaration::of::<Reset>(),
    Declaration::of::<Evaluate>(),
    Declaration::of::<SetTool>(),
    Declaration::of::<ResetTool>(),
    Declaration::of::<EvaluateTool>(),
    Declaration::of::<ListGrants>(),
    Declaration::of::<RevokeGrant>(),
];
