//! `agent_permissions.*`: the per-agent approval policy over
//! [`crate::state::permission::agent_policy`] (its module docs state the file, the presets,
//! resolution and the grant rule).
//!
//! Every `agent_id` follows the agent registry's id rule
//! ([`crate::state::agent_registry::validate_id`]); the agent need not be registered (a policy
//! may be written before the agent is installed). `set_default` takes `{preset}` or
//! `{tier, mode}`, not both. `evaluate_tool` without `tier` evaluates the tier the tool's
//! name classifies to. Mutations are host-labelled (dispatch refuses other sessions) and
//! answer the whole updated policy.

use car_proto::errors::RpcError;
use car_proto::methods::agent_permissions::{
    self as m, AgentParams, EvaluateParams, EvaluateReply, EvaluateToolParams, EvaluateToolReply,
    ListGrantsParams, ListGrantsReply, Policy, RevokeGrantParams, RevokeGrantReply,
    SetDefaultParams, SetParams, SetToolParams, ToolParams,
};
use car_proto::methods::fields::NoParams;

use crate::handler::{Call, Routes};
use crate::state::agent_registry::validate_id;
use crate::state::permission::classify;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Get, _, _>(get)
        .add::<m::Set, _, _>(set)
        .add::<m::SetDefault, _, _>(set_default)
        .add::<m::Reset, _, _>(reset)
        .add::<m::Evaluate, _, _>(evaluate)
        .add::<m::SetTool, _, _>(set_tool)
        .add::<m::ResetTool, _, _>(reset_tool)
        .add::<m::EvaluateTool, _, _>(evaluate_tool)
        .add::<m::ListGrants, _, _>(list_grants)
        .add::<m::RevokeGrant, _, _>(revoke_grant);
}

fn agent(id: &str) -> Result<&str, RpcError> {
    validate_id("agent_id", id)?;
    Ok(id)
}

async fn get(call: Call, _: NoParams) -> Result<Policy, RpcError> {
    Ok(call.state.access.agent_permissions.policy())
}

async fn set(call: Call, p: SetParams) -> Result<Policy, RpcError> {
    let id = agent(&p.agent_id)?;
    let policy = call
        .state
        .access
        .agent_permissions
        .set(id, p.mode, p.tier)?;
    tracing::info!(agent = %id, mode = p.mode.as_str(), tier = p.tier.map(|t| t.as_str()).unwrap_or("all"), "agent permission set");
    Ok(policy)
}

async fn set_default(call: Call, p: SetDefaultParams) -> Result<Policy, RpcError> {
    let store = &call.state.access.agent_permissions;
    let policy = match (p.preset, p.tier, p.mode) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(RpcError::invalid_params(
                "preset: give either preset or tier and mode, not both",
            ))
        }
        (Some(preset), None, None) => store.set_default_preset(preset)?,
        (None, Some(tier), Some(mode)) => store.set_default_tier(tier, mode)?,
        (None, Some(_), None) => {
            return Err(RpcError::invalid_params("mode: is required with tier"))
        }
        (None, None, Some(_)) => {
            return Err(RpcError::invalid_params("tier: is required with mode"))
        }
        (None, None, None) => {
            return Err(RpcError::invalid_params(
                "preset: is required (or give tier and mode)",
            ))
        }
    };
    tracing::info!(default = ?policy.default, "default agent permission posture set");
    Ok(policy)
}

async fn reset(call: Call, p: AgentParams) -> Result<Policy, RpcError> {
    let id = agent(&p.agent_id)?;
    call.state.access.agent_permissions.reset(id)
}

async fn evaluate(call: Call, p: EvaluateParams) -> Result<EvaluateReply, RpcError> {
    let id = agent(&p.agent_id)?;
    let (mode, has_override) = call.state.access.agent_permissions.evaluate(id, p.tier);
    Ok(EvaluateReply {
        agent_id: id.to_string(),
        tier: p.tier,
        mode,
        has_override,
    })
}

async fn set_tool(call: Call, p: SetToolParams) -> Result<Policy, RpcError> {
    let id = agent(&p.agent_id)?;
    if p.reason.as_ref().is_some_and(|r| r.len() > 4096) {
        return Err(RpcError::invalid_params(
            "reason: is longer than 4096 bytes",
        ));
    }
    let policy = call
        .state
        .access
        .agent_permissions
        .set_tool(id, &p.tool, p.mode, p.tier, p.reason)?;
    tracing::info!(agent = %id, tool = %p.tool, mode = p.mode.as_str(), "agent tool permission set");
    Ok(policy)
}

async fn reset_tool(call: Call, p: ToolParams) -> Result<Policy, RpcError> {
    let id = agent(&p.agent_id)?;
    call.state.access.agent_permissions.reset_tool(id, &p.tool)
}

async fn evaluate_tool(call: Call, p: EvaluateToolParams) -> Result<EvaluateToolReply, RpcError> {
    let id = agent(&p.agent_id)?;
    let tier = p.tier.unwrap_or_else(|| classify::name_tier(&p.tool));
    let (mode, source) = call
        .state
        .access
        .agent_permissions
        .resolve_tool(id, Some(&p.tool), tier);
    Ok(EvaluateToolReply {
        agent_id: id.to_string(),
        tool: p.tool.into_string(),
        tier,
        mode,
        source,
    })
}

async fn list_grants(call: Call, p: ListGrantsParams) -> Result<ListGrantsReply, RpcError> {
    let id = match &p.agent_id {
        Some(a) => Some(agent(a)?),
        None => None,
    };
    Ok(ListGrantsReply {
        grants: call.state.access.agent_permissions.grants(id),
    })
}

async fn revoke_grant(call: Call, p: RevokeGrantParams) -> Result<RevokeGrantReply, RpcError> {
    let revoked = call
        .state
        .access
        .agent_permissions
        .revoke_grant(&p.grant_id)?;
    if revoked {
        tracing::info!(grant = %p.grant_id, "grant revoked");
    }
    Ok(RevokeGrantReply { revoked })
}
