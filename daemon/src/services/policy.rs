//! `policy.*`: the connection's policies (at most [`MAX_POLICIES`](registration::MAX_POLICIES)),
//! checked before every tool-call attempt of a proposal.
//!
//! Rules: `deny_tool {target}`, `deny_tool_param {target, key, pattern}` (a regular
//! expression, at most 4 KiB, compiled within the per-pattern program and DFA-cache limits
//! of `crate::state::pattern_budget`, which also bounds the total per daemon), `require_state
//! {key, value}` and `deny_connector {target}` (every `mcp_{target}_*` tool of MCP connector
//! `target`, CAR's rule). A field that does not apply to the rule is refused, naming it. Policies
//! are kept in registration order and a name registered again appends another policy under
//! it (CAR's rule), so `policy.unregister` removes every policy of that name and says how
//! many. `session_id` scopes a policy to proposals run under that execution session.

use car_proto::errors::RpcError;
use car_proto::methods::policy::{
    self as m, ListParams, ListReply, PolicyDefinition, PolicySummary, RegisterReply, Scope,
    UnregisterParams, UnregisterReply,
};

use crate::handler::{Call, Routes};
use crate::state::registration;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Register, _, _>(register_policy)
        .add::<m::Unregister, _, _>(unregister)
        .add::<m::List, _, _>(list);
}

async fn register_policy(call: Call, def: PolicyDefinition) -> Result<RegisterReply, RpcError> {
    let policy = registration::policy(def, "", &call.state.access.patterns)?;
    let reply = RegisterReply {
        registered: policy.name.clone(),
        scope: Scope::of(policy.session_id.as_deref()),
    };
    registration::install_policies(&call.session, vec![policy])?;
    Ok(reply)
}

async fn unregister(call: Call, p: UnregisterParams) -> Result<UnregisterReply, RpcError> {
    let session = p.session_id.filter(|s| !s.is_empty());
    let removed = call.session.runtime(|rt| {
        let before = rt.policies.len();
        rt.policies
            .retain(|policy| !(policy.name == p.name.as_str() && policy.session_id == session));
        before - rt.policies.len()
    });
    Ok(UnregisterReply {
        unregistered: p.name.into_string(),
        removed: removed as u64,
        scope: Scope::of(session.as_deref()),
    })
}

async fn list(call: Call, p: ListParams) -> Result<ListReply, RpcError> {
    let session = p.session_id.filter(|s| !s.is_empty());
    let policies = call.session.runtime(|rt| {
        rt.policies
            .iter()
            .filter(|policy| session.is_none() || policy.session_id == session)
            .map(|policy| PolicySummary {
                name: policy.name.clone(),
                description: policy.description(),
            })
            .collect()
    });
    Ok(ListReply {
        policies,
        scope: Scope::of(session.as_deref()),
    })
}
