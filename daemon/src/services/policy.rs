//! `policy.*`: the connection's policies (at most [`MAX_POLICIES`]), checked before every
//! tool-call attempt of a proposal.
//!
//! Rules: `deny_tool {target}`, `deny_tool_param {target, key, pattern}` (a regular
//! expression, at most 4 KiB, compiled within the per-pattern program and DFA-cache limits
//! of `crate::pattern_budget`, which also bounds the total per daemon) and `require_state
//! {key, value}`. A field that does not apply to the rule is refused, naming it. Policies are
//! kept in registration order and a name registered again appends another policy under
//! it (CAR's rule), so `policy.unregister` removes every policy of that name and says how
//! many. `session_id` scopes a policy to proposals run under that execution session.

use car_proto::errors::RpcError;
use car_proto::methods::policy::{
    self as m, ListParams, ListReply, PolicyDefinition, PolicySummary, RegisterReply, Scope,
    UnregisterParams, UnregisterReply,
};
use regex::RegexBuilder;

use crate::handler::{Call, Routes};
use crate::runtime::{Policy, Rule};

pub const MAX_POLICIES: usize = 1024;
const MAX_PATTERN_BYTES: usize = 4096;

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Register, _, _>(register_policy)
        .add::<m::Unregister, _, _>(unregister)
        .add::<m::List, _, _>(list);
}

/// Checks a definition; `what` prefixes field names in messages (`""` or `policies[2].`).
pub fn policy(
    def: PolicyDefinition,
    what: &str,
    budget: &crate::pattern_budget::PatternBudget,
) -> Result<Policy, RpcError> {
    let bad = |detail: String| RpcError::invalid_params(format!("{what}{detail}"));
    let rule_name = def.rule.clone();
    let forbid = |fields: &[(&str, bool)]| -> Result<(), RpcError> {
        match fields.iter().find(|(_, present)| *present) {
            Some((f, _)) => Err(bad(format!("{f}: does not apply to rule {rule_name}"))),
            None => Ok(()),
        }
    };
    let need = |field: &str, v: Option<String>| {
        v.filter(|s| !s.is_empty())
            .ok_or_else(|| bad(format!("{field}: is required for rule {}", def.rule)))
    };
    let rule = match def.rule.as_str() {
        "deny_tool" => {
            forbid(&[
                ("key", def.key.is_some()),
                ("pattern", def.pattern.is_some()),
                ("value", def.value.is_some()),
            ])?;
            Rule::DenyTool {
                target: need("target", def.target)?,
            }
        }
        "deny_tool_param" => {
            forbid(&[("value", def.value.is_some())])?;
            let pattern = need("pattern", def.pattern)?;
            if pattern.len() > MAX_PATTERN_BYTES {
                return Err(bad(format!(
                    "pattern: is longer than {MAX_PATTERN_BYTES} bytes"
                )));
            }
            let target = need("target", def.target)?;
            let key = need("key", def.key)?;
            let pattern = RegexBuilder::new(&pattern)
                .size_limit(crate::pattern_budget::PROGRAM_BYTES)
                .dfa_size_limit(crate::pattern_budget::DFA_BYTES)
                .build()
                .map_err(|e| bad(format!("pattern: is not a valid regular expression: {e}")))?;
            let reservation = budget.reserve().ok_or_else(|| {
                RpcError::internal(
                    "server busy: the daemon holds as many policy patterns as its regex budget allows",
                )
                .with_data(serde_json::json!({"reason": "pattern_budget"}))
            })?;
            Rule::DenyToolParam {
                target,
                key,
                pattern,
                reservation,
            }
        }
        "require_state" => {
            forbid(&[
                ("target", def.target.is_some()),
                ("pattern", def.pattern.is_some()),
            ])?;
            Rule::RequireState {
                key: need("key", def.key)?,
                value: def
                    .value
                    .ok_or_else(|| bad("value: is required for rule require_state".into()))?,
            }
        }
        other => {
            return Err(bad(format!(
                "rule: must be deny_tool, deny_tool_param or require_state, got {other:?}"
            )))
        }
    };
    Ok(Policy {
        name: def.name.into_string(),
        rule,
        session_id: def.session_id.filter(|s| !s.is_empty()),
    })
}

/// Adds policies to the connection, all or nothing; returns the new total.
pub fn install(call: &Call, policies: Vec<Policy>) -> Result<usize, RpcError> {
    call.session.runtime(|rt| {
        if rt.policies.len() + policies.len() > MAX_POLICIES {
            return Err(RpcError::invalid_params(format!(
                "a connection may hold at most {MAX_POLICIES} policies"
            )));
        }
        rt.policies.extend(policies);
        Ok(rt.policies.len())
    })
}

async fn register_policy(call: Call, def: PolicyDefinition) -> Result<RegisterReply, RpcError> {
    let policy = policy(def, "", &call.state.patterns)?;
    let reply = RegisterReply {
        registered: policy.name.clone(),
        scope: Scope::of(policy.session_id.as_deref()),
    };
    install(&call, vec![policy])?;
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
