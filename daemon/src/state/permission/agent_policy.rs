//! [`AgentPermissions`]: the durable per-agent approval policy behind
//! `agent_permissions.*`.
//!
//! # File
//! `CAR_HOME/agent-permissions.json`, mode 0600, rewritten atomically (temp + rename)
//! after every change: `{default: TierPosture, agents: {<id>: TierPosture}, tools:
//! {<agent_id>: {<tool>: mode}}, grants: [Grant…]}`. Missing: the Balanced default and
//! nothing else. A file that does not parse is moved aside to
//! `agent-permissions.json.corrupt-<ms>` (logged) and the policy starts from Balanced. A
//! `default` missing a tier is completed from Balanced, so the default is always fully
//! specified.
//!
//! # Presets
//! - `cautious`: `read_only` always_allow, `sandbox_edit` require_approval, `full_access` deny;
//! - `balanced` (the default): always_allow, require_approval, require_approval;
//! - `trusting`: always_allow, always_allow, require_approval.
//!
//! # Resolution
//! For an agent at a tier: the agent's override → the default → `require_approval`.
//! For an agent running a tool at a tier ([`AgentPermissions::resolve_tool`]): the
//! agent's override for that tool wins, except that an `always_allow` override (a grant)
//! covers the tool only up to its grant's tier — above it, resolution continues with the
//! agent and the default, so granting `shell` does not grant `shell` running `rm -rf /`.
//!
//! # Grants
//! A grant is the durable record of an `always_allow` tool override: `set_tool` with
//! `always_allow` creates one (replacing an earlier grant for that agent and tool; its tier
//! is the call's `tier`, else the tier the tool's name classifies to); `set_tool` with
//! another mode, `reset_tool` and `revoke_grant` remove it, and revoking a grant removes
//! its override. Overrides and grants are reconciled at load (an `always_allow` override
//! without a grant gets one; a grant without its override is dropped).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::errors::RpcError;
use car_proto::methods::agent_permissions::{Grant, Mode, Policy, Preset, Source, TierPosture};
use car_proto::methods::permission::Tier;
use serde::{Deserialize, Serialize};

/// Agents with an override at most; tool overrides per agent at most.
pub const MAX_AGENTS: usize = 10_000;
pub const MAX_TOOLS_PER_AGENT: usize = 1_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Stored {
    #[serde(default)]
    default: TierPosture,
    #[serde(default)]
    agents: BTreeMap<String, TierPosture>,
    #[serde(default)]
    tools: BTreeMap<String, BTreeMap<String, Mode>>,
    #[serde(default)]
    grants: Vec<Grant>,
}

impl Stored {
    fn fresh() -> Self {
        Stored {
            default: Preset::Balanced.posture(),
            ..Default::default()
        }
    }

    /// Completes the default and makes grants and `always_allow` overrides agree.
    fn reconcile(&mut self) -> bool {
        let before = self.clone();
        let balanced = Preset::Balanced.posture();
        for tier in Tier::ALL {
            if self.default.get(tier).is_none() {
                self.default.set(tier, balanced.get(tier));
            }
        }
        self.agents.retain(|_, p| !p.is_empty());
        self.tools.retain(|_, t| !t.is_empty());
        let tools = &self.tools;
        self.grants.retain(|g| {
            tools.get(&g.agent_id).and_then(|t| t.get(&g.tool)) == Some(&Mode::AlwaysAllow)
        });
        let mut seen = std::collections::BTreeSet::new();
        self.grants
            .retain(|g| seen.insert((g.agent_id.clone(), g.tool.clone())));
        for (agent, tools) in &self.tools {
            for (tool, mode) in tools {
                if *mode == Mode::AlwaysAllow && !seen.contains(&(agent.clone(), tool.clone())) {
                    self.grants.push(new_grant(agent, tool, None, None));
                }
            }
        }
        *self != before
    }

    fn policy(&self) -> Policy {
        Policy {
            default: self.default,
            agents: self.agents.clone(),
            tools: self.tools.clone(),
        }
    }

    fn grant(&self, agent: &str, tool: &str) -> Option<&Grant> {
        self.grants
            .iter()
            .find(|g| g.agent_id == agent && g.tool == tool)
    }
}

fn new_grant(agent: &str, tool: &str, tier: Option<Tier>, reason: Option<String>) -> Grant {
    Grant {
        grant_id: format!(
            "grant-{}-{}",
            car_proto::clock::now_ms(),
            &crate::state::auth::mint_token()[..8]
        ),
        agent_id: agent.to_string(),
        tool: tool.to_string(),
        tier: tier.unwrap_or_else(|| super::classify::name_tier(tool)),
        created_at: car_proto::clock::now_rfc3339(),
        reason,
    }
}

#[derive(Debug)]
pub struct AgentPermissions {
    path: PathBuf,
    inner: Mutex<Stored>,
}

impl AgentPermissions {
    /// Loads `CAR_HOME/agent-permissions.json` (see the module docs).
    pub fn open(state_root: &Path) -> Self {
        let path = state_root.join("agent-permissions.json");
        let mut stored = match crate::state::state_file::read(&path) {
            Ok(None) => Stored::fresh(),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot read the agent permission policy; using the balanced default");
                Stored::fresh()
            }
            Ok(Some(bytes)) => match serde_json::from_slice::<Stored>(&bytes) {
                Ok(s) => s,
                Err(e) => {
                    let aside =
                        path.with_extension(format!("json.corrupt-{}", car_proto::clock::now_ms()));
                    tracing::error!(path = %path.display(), error = %e, aside = %aside.display(), "the agent permission policy does not parse; moved aside, using the balanced default");
                    let _ = std::fs::rename(&path, &aside);
                    Stored::fresh()
                }
            },
        };
        let changed = stored.reconcile();
        let this = AgentPermissions {
            path,
            inner: Mutex::new(stored),
        };
        if changed && this.path.exists() {
            let inner = this.lock();
            if let Err(e) = this.persist(&inner) {
                tracing::warn!(error = %e.message, "could not rewrite the reconciled agent permission policy");
            }
        }
        this
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Stored> {
        self.inner.lock().expect("agent permissions lock")
    }

    fn persist(&self, stored: &Stored) -> Result<(), RpcError> {
        let text = serde_json::to_string_pretty(stored).map_err(RpcError::internal)?;
        crate::state::auth::write_private_file(&self.path, &text).map_err(|e| {
            tracing::error!(error = %e, "cannot save the agent permission policy");
            RpcError::internal(format!("cannot save the agent permission policy: {e}"))
        })
    }

    /// Applies `change` to a copy, saves it, then keeps it (a failed save changes nothing).
    fn update(
        &self,
        change: impl FnOnce(&mut Stored) -> Result<(), RpcError>,
    ) -> Result<Policy, RpcError> {
        let mut inner = self.lock();
        let mut next = inner.clone();
        change(&mut next)?;
        next.reconcile();
        if next != *inner {
            self.persist(&next)?;
            *inner = next;
        }
        Ok(inner.policy())
    }

    pub fn policy(&self) -> Policy {
        self.lock().policy()
    }

    /// Sets `agent`'s mode for `tier`, or for every tier.
    pub fn set(&self, agent: &str, mode: Mode, tier: Option<Tier>) -> Result<Policy, RpcError> {
        self.update(|s| {
            if !s.agents.contains_key(agent) && s.agents.len() >= MAX_AGENTS {
                return Err(RpcError::internal(format!(
                    "the agent permission policy is full ({MAX_AGENTS} agents)"
                )));
            }
            let posture = s.agents.entry(agent.to_string()).or_default();
            match tier {
                Some(t) => posture.set(t, Some(mode)),
                None => Tier::ALL.iter().for_each(|t| posture.set(*t, Some(mode))),
            }
            Ok(())
        })
    }

    pub fn set_default_preset(&self, preset: Preset) -> Result<Policy, RpcError> {
        self.update(|s| {
            s.default = preset.posture();
            Ok(())
        })
    }

    pub fn set_default_tier(&self, tier: Tier, mode: Mode) -> Result<Policy, RpcError> {
        self.update(|s| {
            s.default.set(tier, Some(mode));
            Ok(())
        })
    }

    /// Drops `agent`'s tier override (its tool overrides stay).
    pub fn reset(&self, agent: &str) -> Result<Policy, RpcError> {
        self.update(|s| {
            s.agents.remove(agent);
            Ok(())
        })
    }

    /// `(mode, has_override)` for `agent` at `tier`.
    pub fn evaluate(&self, agent: &str, tier: Tier) -> (Mode, bool) {
        let s = self.lock();
        Self::tier_mode(&s, agent, tier)
    }

    fn tier_mode(s: &Stored, agent: &str, tier: Tier) -> (Mode, bool) {
        if let Some(mode) = s.agents.get(agent).and_then(|p| p.get(tier)) {
            return (mode, true);
        }
        (s.default.get(tier).unwrap_or(Mode::RequireApproval), false)
    }

    /// Sets `agent`'s mode for `tool`; `always_allow` records a grant (see the module docs).
    pub fn set_tool(
        &self,
        agent: &str,
        tool: &str,
        mode: Mode,
        tier: Option<Tier>,
        reason: Option<String>,
    ) -> Result<Policy, RpcError> {
        self.update(|s| {
            let tools = s.tools.entry(agent.to_string()).or_default();
            if !tools.contains_key(tool) && tools.len() >= MAX_TOOLS_PER_AGENT {
                return Err(RpcError::internal(format!(
                    "agent {agent:?} has {MAX_TOOLS_PER_AGENT} tool overrides already"
                )));
            }
            tools.insert(tool.to_string(), mode);
            s.grants
                .retain(|g| !(g.agent_id == agent && g.tool == tool));
            if mode == Mode::AlwaysAllow {
                s.grants.push(new_grant(agent, tool, tier, reason));
            }
            Ok(())
        })
    }

    /// Drops `agent`'s override for `tool` (and its grant).
    pub fn reset_tool(&self, agent: &str, tool: &str) -> Result<Policy, RpcError> {
        self.update(|s| {
            if let Some(tools) = s.tools.get_mut(agent) {
                tools.remove(tool);
            }
            Ok(())
        })
    }

    /// `(mode, source)` for `agent` running `tool` at `tier` (see the module docs).
    pub fn resolve_tool(&self, agent: &str, tool: Option<&str>, tier: Tier) -> (Mode, Source) {
        let s = self.lock();
        let override_mode = tool.and_then(|t| s.tools.get(agent).and_then(|m| m.get(t)));
        let granted = |t: &str| s.grant(agent, t).is_some_and(|g| g.tier >= tier);
        match (override_mode, tool) {
            // An always_allow override covers the tool only up to its grant's tier.
            (Some(Mode::AlwaysAllow), Some(t)) if granted(t) => {
                return (Mode::AlwaysAllow, Source::Tool)
            }
            (Some(Mode::AlwaysAllow), _) | (None, _) => {}
            (Some(mode), _) => return (*mode, Source::Tool),
        }
        if let Some(mode) = s.agents.get(agent).and_then(|p| p.get(tier)) {
            return (mode, Source::Agent);
        }
        match s.default.get(tier) {
            Some(mode) => (mode, Source::Default),
            None => (Mode::RequireApproval, Source::Floor),
        }
    }

    /// The grants, oldest first, of `agent` or of everyone.
    pub fn grants(&self, agent: Option<&str>) -> Vec<Grant> {
        self.lock()
            .grants
            .iter()
            .filter(|g| agent.is_none_or(|a| g.agent_id == a))
            .cloned()
            .collect()
    }

    /// Revokes a grant and its override; false when there is no such grant.
    pub fn revoke_grant(&self, grant_id: &str) -> Result<bool, RpcError> {
        let mut found = false;
        self.update(|s| {
            if let Some(g) = s.grants.iter().find(|g| g.grant_id == grant_id).cloned() {
                found = true;
                s.grants.retain(|x| x.grant_id != grant_id);
                if let Some(tools) = s.tools.get_mut(&g.agent_id) {
                    tools.remove(&g.tool);
                }
            }
            Ok(())
        })?;
        Ok(found)
    }
}
