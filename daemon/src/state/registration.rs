//! Turning a caller's tool and policy definitions into the connection's runtime entries,
//! with the per-connection caps ([`MAX_TOOLS`], [`MAX_POLICIES`]): the one path
//! `tools.register`, `policy.register`, `session.init` and `agents.*` share (so no service
//! imports another to install a tool or a policy).

use car_proto::errors::RpcError;
use car_proto::methods::policy::PolicyDefinition;
use car_proto::methods::tools::ToolDefinition;
use regex::RegexBuilder;
use serde_json::Value;

pub use crate::state::per_connection::ToolDescriptor;
use crate::state::per_connection::{Policy, Rule};
use crate::state::session::Session;

/// Most tools one connection may hold.
pub const MAX_TOOLS: usize = 4096;
/// Most policies one connection may hold.
pub const MAX_POLICIES: usize = 1024;
const MAX_PATTERN_BYTES: usize = 4096;

/// Checks definitions (`what` names the field in messages: `tools` inside `session.init`,
/// `""` when the definitions are the params themselves).
pub fn tool_descriptors(
    defs: Vec<ToolDefinition>,
    what: &str,
) -> Result<Vec<ToolDescriptor>, RpcError> {
    if defs.len() > MAX_TOOLS {
        let field = if what.is_empty() { "params" } else { what };
        return Err(RpcError::invalid_params(format!(
            "{field}: has {} tools, at most {MAX_TOOLS}",
            defs.len()
        )));
    }
    defs.into_iter()
        .enumerate()
        .map(|(i, d)| {
            let name = d.name.into_string();
            if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(RpcError::invalid_params(format!(
                    "{what}[{i}].name: must not contain white space, got {name:?}"
                )));
            }
            if let Some(limit) = &d.rate_limit {
                tool_rate_limit(&name, limit)
                    .map_err(|e| RpcError::invalid_params(format!("{what}[{i}].rate_limit{e}")))?;
            }
            Ok(ToolDescriptor {
                name,
                description: d.description,
                parameters: d.parameters.map(Value::Object),
                returns: d.returns.map(Value::Object),
                idempotent: d.idempotent.unwrap_or(false),
                cache_ttl_secs: d.cache_ttl_secs,
                rate_limit: d.rate_limit,
                builtin: false,
                connector: None,
            })
        })
        .collect()
}

/// A tool's `rate_limit` hint (`{max_calls, interval_secs}`, CAR's shape) as a rate rule; the
/// error is the rest of the field path and why (`.interval_secs: …`).
pub fn tool_rate_limit(
    tool: &str,
    limit: &Value,
) -> Result<car_proto::policy_rules::RateLimit, String> {
    let field = |k: &str| limit.get(k).filter(|v| !v.is_null());
    let max_calls = field("max_calls")
        .ok_or(".max_calls: required")?
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or(".max_calls: must be a whole number of calls")?;
    let interval_secs = field("interval_secs")
        .ok_or(".interval_secs: required")?
        .as_f64()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0 * 366.0)
        .ok_or(".interval_secs: must be a positive number of seconds (at most a year)")?;
    Ok(car_proto::policy_rules::RateLimit {
        tool: tool.to_string(),
        max_calls,
        interval_secs,
    })
}

/// The built-in agent tools as registry entries (the daemon runs them itself).
pub fn builtin_descriptors() -> Vec<ToolDescriptor> {
    car_builtin_tools::descriptors()
        .into_iter()
        .map(|d| ToolDescriptor {
            name: d.name.to_string(),
            description: Some(d.description.to_string()),
            parameters: Some(d.parameters),
            returns: None,
            idempotent: !d.mutating,
            cache_ttl_secs: None,
            rate_limit: None,
            builtin: true,
            connector: None,
        })
        .collect()
}

/// Adds tools to the connection's registry, all or nothing; returns the new total.
pub fn install_tools(session: &Session, tools: Vec<ToolDescriptor>) -> Result<usize, RpcError> {
    session.runtime(|rt| {
        let new = tools
            .iter()
            .filter(|t| !rt.tools.contains_key(&t.name))
            .count();
        if rt.tools.len() + new > MAX_TOOLS {
            return Err(RpcError::invalid_params(format!(
                "a connection may register at most {MAX_TOOLS} tools"
            )));
        }
        for t in tools {
            rt.tools.insert(t.name.clone(), t);
        }
        Ok(rt.tools.len())
    })
}

/// Checks a definition; `what` prefixes field names in messages (`""` or `policies[2].`).
pub fn policy(
    def: PolicyDefinition,
    what: &str,
    budget: &crate::state::pattern_budget::PatternBudget,
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
                .size_limit(crate::state::pattern_budget::PROGRAM_BYTES)
                .dfa_size_limit(crate::state::pattern_budget::DFA_BYTES)
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
        "deny_connector" => {
            forbid(&[
                ("key", def.key.is_some()),
                ("pattern", def.pattern.is_some()),
                ("value", def.value.is_some()),
            ])?;
            Rule::DenyConnector {
                target: need("target", def.target)?,
            }
        }
        other => {
            return Err(bad(format!(
                "rule: must be deny_tool, deny_tool_param, require_state or deny_connector, got {other:?}"
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
pub fn install_policies(session: &Session, policies: Vec<Policy>) -> Result<usize, RpcError> {
    session.runtime(|rt| {
        if rt.policies.len() + policies.len() > MAX_POLICIES {
            return Err(RpcError::invalid_params(format!(
                "a connection may hold at most {MAX_POLICIES} policies"
            )));
        }
        rt.policies.extend(policies);
        Ok(rt.policies.len())
    })
}
