//! `policy.*`: rules checked before every tool call of a proposal (and reported by
//! `verify`). Rules: `deny_tool {target}`, `deny_tool_param {target, key, pattern}` where
//! `pattern` is a regular expression (Rust `regex` syntax, at most 4 KiB, compiled with a
//! size limit so a hostile pattern cannot exhaust memory), and `require_state {key, value}`.
//! A policy may be scoped to one execution session with `session_id`.

use car_proto::errors::RpcError;
use regex::RegexBuilder;
use serde_json::{json, Value};

use super::params::Params;
use crate::dispatch::{Call, HandlerFuture};
use crate::runtime::{Policy, Rule};

/// Most policies one connection may hold.
pub const MAX_POLICIES: usize = 1024;
const MAX_PATTERN_BYTES: usize = 4096;

/// Parses one policy object; `what` names it in errors (`params`, `policies[2]`).
pub fn parse_policy(value: &Value, what: &str) -> Result<Policy, RpcError> {
    let p = if what == "params" {
        Params::new(value.clone())?
    } else {
        Params::element(value, what)?
    };
    let p = p.only(&[
        "name",
        "rule",
        "target",
        "key",
        "pattern",
        "value",
        "session_id",
    ])?;
    let name = p.str("name")?;
    let rule_name = p.str("rule")?;
    let session_id = p.opt_str("session_id")?;
    let path = |f: &str| {
        if what == "params" {
            f.to_string()
        } else {
            format!("{what}.{f}")
        }
    };
    let forbid = |fields: &[&str]| -> Result<(), RpcError> {
        match fields.iter().find(|f| p.has(f)) {
            Some(f) => Err(RpcError::invalid_params(format!(
                "{} does not apply to rule {rule_name}",
                path(f)
            ))),
            None => Ok(()),
        }
    };
    let rule = match rule_name.as_str() {
        "deny_tool" => {
            forbid(&["key", "pattern", "value"])?;
            Rule::DenyTool {
                target: p.str("target")?,
            }
        }
        "deny_tool_param" => {
            forbid(&["value"])?;
            let pattern = p.str("pattern")?;
            if pattern.len() > MAX_PATTERN_BYTES {
                return Err(RpcError::invalid_params(format!(
                    "{} is longer than {MAX_PATTERN_BYTES} bytes",
                    path("pattern")
                )));
            }
            let pattern = RegexBuilder::new(&pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| {
                    RpcError::invalid_params(format!(
                        "{} is not a valid regular expression: {e}",
                        path("pattern")
                    ))
                })?;
            Rule::DenyToolParam {
                target: p.str("target")?,
                key: p.str("key")?,
                pattern,
            }
        }
        "require_state" => {
            forbid(&["target", "pattern"])?;
            Rule::RequireState {
                key: p.str("key")?,
                value: p.required_value("value")?.clone(),
            }
        }
        other => {
            return Err(RpcError::invalid_params(format!(
                "{} must be deny_tool, deny_tool_param or require_state, got {other:?}",
                path("rule")
            )))
        }
    };
    Ok(Policy {
        name,
        rule,
        session_id,
    })
}

/// Installs validated policies (replacing same-named ones); refuses to exceed the cap.
pub fn install(call: &Call, policies: Vec<Policy>) -> Result<usize, RpcError> {
    call.session.runtime(|rt| {
        let new = policies
            .iter()
            .filter(|p| !rt.policies.contains_key(&p.name))
            .count();
        if rt.policies.len() + new > MAX_POLICIES {
            return Err(RpcError::invalid_params(format!(
                "a connection may hold at most {MAX_POLICIES} policies"
            )));
        }
        for p in policies {
            rt.policies.insert(p.name.clone(), p);
        }
        Ok(rt.policies.len())
    })
}

/// `policy.register {name, rule, …}` → `{registered: name, count}`.
pub fn register(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let policy = parse_policy(&params, "params")?;
        let name = policy.name.clone();
        let count = install(&call, vec![policy])?;
        Ok(json!({"registered": name, "count": count}))
    })
}

/// `policy.unregister {name}` → how many were removed (0 or 1).
pub fn unregister(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        let name = Params::new(params)?.only(&["name"])?.str("name")?;
        Ok(json!(call.session.runtime(|rt| usize::from(
            rt.policies.remove(&name).is_some()
        ))))
    })
}

/// `policy.list` → policies sorted by name.
pub fn list(call: Call, params: Value) -> HandlerFuture {
    Box::pin(async move {
        Params::new(params)?.only(&[])?;
        Ok(call.session.runtime(|rt| {
            json!(rt
                .policies
                .values()
                .map(Policy::to_json)
                .collect::<Vec<_>>())
        }))
    })
}
