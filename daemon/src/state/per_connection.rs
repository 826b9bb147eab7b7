//! The per-connection runtime: key-value state (partitioned by tenant), registered tool
//! descriptors, policies, and the halt latch set by a terminal tool error.
//!
//! Everything here dies with its connection (reference "Sessions are per-connection").
//! It is plain data behind one short-lived lock in `Session`; nothing here awaits or
//! performs I/O, so the lock is never held across a reverse call.

use std::collections::BTreeMap;

use regex::Regex;
use serde::Serialize;
use serde_json::{json, Map, Value};

/// A tool the client said it can execute.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDescriptor {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returns: Option<Value>,
    pub idempotent: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_ttl_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<Value>,
    /// A built-in agent tool the daemon runs itself (`agents.register_basics`).
    #[serde(skip)]
    pub builtin: bool,
    /// An enabled MCP connector tool (the connector's slug): the daemon calls the server.
    #[serde(skip)]
    pub connector: Option<String>,
}

/// A policy rule, checked before every tool call of a proposal.
#[derive(Debug, Clone)]
pub enum Rule {
    /// The tool named `target` may not be called.
    DenyTool { target: String },
    /// `target` may not be called with parameter `key` matching `pattern` (a regex, matched
    /// against the string value, or the compact JSON of a non-string value).
    DenyToolParam {
        target: String,
        key: String,
        pattern: Regex,
        /// The pattern's share of the daemon's regex budget (`crate::state::pattern_budget`).
        reservation: std::sync::Arc<crate::state::pattern_budget::Reservation>,
    },
    /// No tool may be called unless state `key` equals `value`.
    RequireState { key: String, value: Value },
    /// No tool of MCP connector `target` (a slug) may be called: every `mcp_{target}_*`.
    DenyConnector { target: String },
}

/// A named policy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub rule: Rule,
    /// When set, the policy applies only to proposals run under this execution session.
    pub session_id: Option<String>,
}

impl Policy {
    /// The policy as `policy.list` shows it.
    pub fn to_json(&self) -> Value {
        let mut v = self.rule_json();
        if let Some(s) = &self.session_id {
            v["session_id"] = json!(s);
        }
        v
    }

    /// One sentence saying what the policy forbids (`policy.list`'s `description`).
    pub fn description(&self) -> String {
        let rule = match &self.rule {
            Rule::DenyTool { target } => format!("deny tool {target}"),
            Rule::DenyToolParam {
                target,
                key,
                pattern,
                ..
            } => format!(
                "deny tool {target} when parameter {key} matches /{}/",
                pattern.as_str()
            ),
            Rule::RequireState { key, value } => format!("require state {key} = {value}"),
            Rule::DenyConnector { target } => format!("deny every tool of connector {target}"),
        };
        match &self.session_id {
            Some(s) => format!("{rule} (session {s})"),
            None => rule,
        }
    }

    fn rule_json(&self) -> Value {
        match &self.rule {
            Rule::DenyTool { target } => {
                json!({"name": self.name, "rule": "deny_tool", "target": target})
            }
            Rule::DenyToolParam {
                target,
                key,
                pattern,
                ..
            } => json!({
                "name": self.name, "rule": "deny_tool_param", "target": target, "key": key, "pattern": pattern.as_str()
            }),
            Rule::RequireState { key, value } => {
                json!({"name": self.name, "rule": "require_state", "key": key, "value": value})
            }
            Rule::DenyConnector { target } => {
                json!({"name": self.name, "rule": "deny_connector", "target": target})
            }
        }
    }

    /// Why this policy forbids calling `tool` with `parameters` in `state`, if it does.
    pub fn violation(
        &self,
        tool: &str,
        parameters: &Map<String, Value>,
        state: &BTreeMap<String, Value>,
    ) -> Option<String> {
        match &self.rule {
            Rule::DenyTool { target } if target == tool => {
                Some(format!("policy {} denies tool {tool}", self.name))
            }
            Rule::DenyToolParam {
                target,
                key,
                pattern,
                ..
            } if target == tool => {
                let value = parameters.get(key)?;
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                pattern.is_match(&text).then(|| {
                    format!(
                        "policy {} denies tool {tool} with parameter {key} matching {}",
                        self.name,
                        pattern.as_str()
                    )
                })
            }
            Rule::RequireState { key, value } => match state.get(key) {
                Some(found) if found == value => None,
                Some(found) => Some(format!(
                    "policy {} requires state {key} = {value}, found {found}",
                    self.name
                )),
                None => Some(format!(
                    "policy {} requires state {key} = {value}, which is not set",
                    self.name
                )),
            },
            Rule::DenyConnector { target }
                if tool
                    .strip_prefix("mcp_")
                    .and_then(|rest| rest.strip_prefix(target.as_str()))
                    .is_some_and(|rest| rest.starts_with('_')) =>
            {
                Some(format!(
                    "policy {} denies every tool of connector {target}",
                    self.name
                ))
            }
            _ => None,
        }
    }
}

/// The runtime data of one connection.
#[derive(Debug, Default)]
pub struct Runtime {
    /// `None` is the default partition; proposals read and write it.
    state: BTreeMap<Option<String>, BTreeMap<String, Value>>,
    pub tools: BTreeMap<String, ToolDescriptor>,
    /// In registration order; a name may cover several policies (CAR appends).
    pub policies: Vec<Policy>,
    /// Set by a terminal tool error; `proposal.submit` then runs nothing.
    pub halted: Option<String>,
    /// The windows of the policy files' `rate_limit_tool` rules (per connection, as CAR's).
    pub rate_windows: crate::state::policy_files::RateWindows,
    /// The windows of registered tools' `rate_limit` hints.
    pub tool_rate_windows: crate::state::policy_files::RateWindows,
    /// Answers of tools registered with `cache_ttl_secs`: key → (good until, output).
    pub tool_cache: std::collections::HashMap<String, (std::time::Instant, Value)>,
    /// `replan.set_config`: the replan loop of this connection's proposals.
    pub replan: car_proto::methods::replan::ReplanConfig,
}

impl Runtime {
    pub fn partition(&self, tenant: Option<&str>) -> Option<&BTreeMap<String, Value>> {
        self.state.get(&tenant.map(str::to_string))
    }

    pub fn partition_mut(&mut self, tenant: Option<&str>) -> &mut BTreeMap<String, Value> {
        self.state.entry(tenant.map(str::to_string)).or_default()
    }

    /// Replaces partition `tenant` with `state` (a workflow stage's private partition).
    pub fn seed_partition(&mut self, tenant: &str, state: BTreeMap<String, Value>) {
        self.state.insert(Some(tenant.to_string()), state);
    }

    /// Removes partition `tenant`, returning what it held.
    pub fn take_partition(&mut self, tenant: &str) -> BTreeMap<String, Value> {
        self.state
            .remove(&Some(tenant.to_string()))
            .unwrap_or_default()
    }

    pub fn get(&self, tenant: Option<&str>, key: &str) -> Option<&Value> {
        self.partition(tenant).and_then(|p| p.get(key))
    }

    /// The default partition as a JSON object.
    pub fn snapshot(&self, tenant: Option<&str>) -> Value {
        Value::Object(
            self.partition(tenant)
                .map(|p| p.clone().into_iter().collect())
                .unwrap_or_default(),
        )
    }

    /// The first policy violation for a tool call under execution session `session_id`,
    /// if any (policies in registration order), checked against the state of partition
    /// `tenant` (`None`: the default one).
    pub fn policy_violation(
        &self,
        session_id: &str,
        tenant: Option<&str>,
        tool: &str,
        parameters: &Map<String, Value>,
    ) -> Option<(String, String)> {
        let empty = BTreeMap::new();
        let state = self.partition(tenant).unwrap_or(&empty);
        violation_in(&self.policies, session_id, tool, parameters, state)
    }
}

/// The first violation among `policies` for a tool call in `state`.
pub fn violation_in(
    policies: &[Policy],
    session_id: &str,
    tool: &str,
    parameters: &Map<String, Value>,
    state: &BTreeMap<String, Value>,
) -> Option<(String, String)> {
    policies
        .iter()
        .filter(|p| p.session_id.as_deref().is_none_or(|s| s == session_id))
        .find_map(|p| {
            p.violation(tool, parameters, state)
                .map(|why| (p.name.clone(), why))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn rules() {
        let mut rt = Runtime::default();
        rt.policies.push(Policy {
            name: "a".into(),
            rule: Rule::DenyTool {
                target: "rm".into(),
            },
            session_id: None,
        });
        rt.policies.push(Policy {
            name: "b".into(),
            rule: Rule::DenyToolParam {
                target: "shell".into(),
                key: "cmd".into(),
                pattern: Regex::new("^sudo").unwrap(),
                reservation: crate::state::pattern_budget::PatternBudget::default()
                    .reserve()
                    .unwrap(),
            },
            session_id: None,
        });
        assert_eq!(
            rt.policy_violation("s1", None, "rm", &params(json!({})))
                .unwrap()
                .0,
            "a"
        );
        assert!(rt
            .policy_violation("s1", None, "shell", &params(json!({"cmd": "ls"})))
            .is_none());
        assert_eq!(
            rt.policy_violation("s1", None, "shell", &params(json!({"cmd": "sudo ls"})))
                .unwrap()
                .0,
            "b"
        );
        assert!(rt
            .policy_violation("s1", None, "shell", &params(json!({})))
            .is_none());
        rt.policies.push(Policy {
            name: "c".into(),
            rule: Rule::RequireState {
                key: "mode".into(),
                value: json!("live"),
            },
            session_id: Some("s1".into()),
        });
        assert!(rt
            .policy_violation("s1", None, "ls", &params(json!({})))
            .unwrap()
            .1
            .contains("not set"));
        assert!(
            rt.policy_violation("s2", None, "ls", &params(json!({})))
                .is_none(),
            "scoped to s1"
        );
        rt.partition_mut(None).insert("mode".into(), json!("live"));
        assert!(rt
            .policy_violation("s1", None, "ls", &params(json!({})))
            .is_none());
    }
}
