//! The rules of a policy file (`.car/policies/*.toml`, `<CAR_HOME>/policies/*.toml`) and
//! how a tool call is judged against them: pure parsing and matching, no I/O (the daemon
//! reads the files through [`crate::safe_file`] for `policy.check` and for every
//! `proposal.submit`).
//!
//! CAR's six rule kinds (cookbook "Policies"):
//! - `deny_tool = ["deploy"]`: exact tool names;
//! - `deny_keyword = ["rm -rf /"]`: substrings of the tool name or of any string in the call's
//!   params, case-insensitive;
//! - `[[deny_tool_param]] {tool, param, contains}`: the parameter, stringified (a string as is,
//!   anything else as compact JSON), contains `contains`;
//! - `[[allow_tool_param]] {tool, param, allow = [..]}`: the one allowlist: a call of `tool` is
//!   denied when the parameter is absent, when `allow` is empty, or when its value (exact,
//!   case-sensitive) is not listed;
//! - `[[deny_tool_param_matching]] {tool, param, matches}`: an unanchored regular expression over
//!   the stringified parameter (absent: no violation); a pattern that does not compile denies every
//!   call of the tool, with the compile error; the reason never quotes the matched text;
//! - `[[rate_limit_tool]] {tool, max_calls, interval_secs}`: a sliding window, kept by the caller
//!   ([`RateLimit`]): a call is denied when it would be the `max_calls + 1`-th within the trailing
//!   `interval_secs` (`max_calls = 0` denies every call).
//!
//! Other keys are ignored. A file that does not parse, a rule of the wrong shape or a field
//! missing is an error naming the file and the rule (the caller fails closed). Matching is
//! linear in the rules times the params' strings; params come from a JSON decode, whose
//! nesting serde_json already limits.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::methods::proposal_checks::PolicyFinding;

/// The largest compiled program of one `deny_tool_param_matching` pattern.
const PATTERN_BYTES: usize = 1 << 20;

/// `[[deny_tool_param]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamContains {
    pub tool: String,
    pub param: String,
    pub contains: String,
}

/// `[[allow_tool_param]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamAllow {
    pub tool: String,
    pub param: String,
    pub allow: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamMatchingFields {
    tool: String,
    param: String,
    matches: String,
}

/// `[[deny_tool_param_matching]]`, its pattern compiled once.
#[derive(Debug, Clone)]
pub struct ParamMatching {
    pub tool: String,
    pub param: String,
    pub matches: String,
    pub compiled: Result<regex::Regex, String>,
}

/// `[[rate_limit_tool]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    pub tool: String,
    pub max_calls: u32,
    pub interval_secs: f64,
}

impl RateLimit {
    /// The key of this rule's window.
    pub fn key(&self) -> String {
        format!("{}|{}|{}", self.tool, self.max_calls, self.interval_secs)
    }

    /// Whether one more call is admitted when `recent` calls were admitted within the
    /// trailing `interval_secs`.
    pub fn admits(&self, recent: usize) -> bool {
        recent < self.max_calls as usize
    }

    /// The finding for a refused call.
    pub fn finding(&self) -> PolicyFinding {
        deny(
            format!("rate_limit_tool:{}", self.tool),
            format!(
                "tool {:?} is limited to {} calls per {} s",
                self.tool, self.max_calls, self.interval_secs
            ),
        )
    }
}

/// The rules of one or more policy files.
#[derive(Debug, Default, Clone)]
pub struct PolicyRules {
    pub deny_tool: Vec<String>,
    pub deny_keyword: Vec<String>,
    pub deny_tool_param: Vec<ParamContains>,
    pub allow_tool_param: Vec<ParamAllow>,
    pub deny_tool_param_matching: Vec<ParamMatching>,
    pub rate_limit_tool: Vec<RateLimit>,
}

impl PolicyRules {
    /// Parses one file's text; `file` names it in errors (`a.toml: deny_tool must be a
    /// list of strings`).
    pub fn parse(text: &str, file: &str) -> Result<PolicyRules, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| format!("{file}: {}", e.message()))?;
        let matching: Vec<ParamMatchingFields> = tables(&table, "deny_tool_param_matching", file)?;
        let rate_limit_tool: Vec<RateLimit> = tables(&table, "rate_limit_tool", file)?;
        for (i, r) in rate_limit_tool.iter().enumerate() {
            if !(r.interval_secs.is_finite() && r.interval_secs > 0.0) {
                return Err(format!(
                    "{file}: rate_limit_tool[{i}].interval_secs must be a positive number"
                ));
            }
        }
        Ok(PolicyRules {
            deny_tool: string_list(&table, "deny_tool", file)?,
            deny_keyword: string_list(&table, "deny_keyword", file)?,
            deny_tool_param: tables(&table, "deny_tool_param", file)?,
            allow_tool_param: tables(&table, "allow_tool_param", file)?,
            deny_tool_param_matching: matching
                .into_iter()
                .map(|m| ParamMatching {
                    compiled: regex::RegexBuilder::new(&m.matches)
                        .size_limit(PATTERN_BYTES)
                        .build()
                        .map_err(|e| e.to_string()),
                    tool: m.tool,
                    param: m.param,
                    matches: m.matches,
                })
                .collect(),
            rate_limit_tool,
        })
    }

    /// Adds `other`'s rules (files of one directory are read in name order).
    pub fn extend(&mut self, other: PolicyRules) {
        self.deny_tool.extend(other.deny_tool);
        self.deny_keyword.extend(other.deny_keyword);
        self.deny_tool_param.extend(other.deny_tool_param);
        self.allow_tool_param.extend(other.allow_tool_param);
        self.deny_tool_param_matching
            .extend(other.deny_tool_param_matching);
        self.rate_limit_tool.extend(other.rate_limit_tool);
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.deny_tool.len()
            + self.deny_keyword.len()
            + self.deny_tool_param.len()
            + self.allow_tool_param.len()
            + self.deny_tool_param_matching.len()
            + self.rate_limit_tool.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The findings of a call of `tool` with `params` under the stateless rules (empty when
    /// it clears every one); `rate_limit_tool` is the caller's to apply.
    pub fn findings(&self, tool: &str, params: &Map<String, Value>) -> Vec<PolicyFinding> {
        file_findings(self, tool, params)
    }
}

fn string_list(table: &toml::Table, key: &str, file: &str) -> Result<Vec<String>, String> {
    match table.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{file}: {key} must be a list of strings"))
            })
            .collect(),
        Some(_) => Err(format!("{file}: {key} must be a list of strings")),
    }
}

/// An array of tables (`[[key]]`), each decoded as `T`.
fn tables<T: serde::de::DeserializeOwned>(
    table: &toml::Table,
    key: &str,
    file: &str,
) -> Result<Vec<T>, String> {
    match table.get(key) {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.clone()
                    .try_into::<T>()
                    .map_err(|e| format!("{file}: {key}[{i}]: {}", e.message()))
            })
            .collect(),
        Some(_) => Err(format!(
            "{file}: {key} must be an array of tables ([[{key}]])"
        )),
    }
}

/// Every string in `value`, for keyword matching.
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// A parameter as the param rules compare it: a string as is, anything else as compact JSON.
fn stringified(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn deny(rule: String, reason: String) -> PolicyFinding {
    PolicyFinding {
        source: "policy_rules".into(),
        rule,
        severity: "deny".into(),
        reason,
    }
}

fn file_findings(
    rules: &PolicyRules,
    tool: &str,
    params: &Map<String, Value>,
) -> Vec<PolicyFinding> {
    let mut findings = Vec::new();
    for denied in &rules.deny_tool {
        if denied == tool {
            findings.push(deny(
                format!("deny_tool:{denied}"),
                format!("tool {tool:?} is denied by policy"),
            ));
        }
    }
    let whole = Value::Object(params.clone());
    let mut texts = vec![tool];
    strings(&whole, &mut texts);
    for keyword in &rules.deny_keyword {
        let needle = keyword.to_lowercase();
        if !needle.is_empty() && texts.iter().any(|t| t.to_lowercase().contains(&needle)) {
            findings.push(deny(
                format!("deny_keyword:{keyword}"),
                format!("the call contains the denied keyword {keyword:?}"),
            ));
        }
    }
    for r in rules.deny_tool_param.iter().filter(|r| r.tool == tool) {
        if let Some(v) = params.get(&r.param) {
            if stringified(v).contains(&r.contains) {
                findings.push(deny(
                    format!("deny_tool_param:{}.{}", r.tool, r.param),
                    format!("param {:?} contains denied text {:?}", r.param, r.contains),
                ));
            }
        }
    }
    for r in rules.allow_tool_param.iter().filter(|r| r.tool == tool) {
        let refused = match params.get(&r.param) {
            None => Some(format!(
                "param {:?} is absent, and only listed values are allowed",
                r.param
            )),
            Some(_) if r.allow.is_empty() => {
                Some(format!("no value of param {:?} is allowed", r.param))
            }
            Some(v) if !r.allow.contains(&stringified(v)) => Some(format!(
                "param {:?} has a value that is not allowed",
                r.param
            )),
            Some(_) => None,
        };
        if let Some(reason) = refused {
            findings.push(deny(
                format!("allow_tool_param:{}.{}", r.tool, r.param),
                reason,
            ));
        }
    }
    for r in rules
        .deny_tool_param_matching
        .iter()
        .filter(|r| r.tool == tool)
    {
        let rule = format!("deny_tool_param_matching:{}.{}", r.tool, r.param);
        match &r.compiled {
            Err(e) => findings.push(deny(
                rule,
                format!(
                    "the pattern for param {:?} does not compile, so {tool:?} is denied: {e}",
                    r.param
                ),
            )),
            Ok(pattern) => {
                if params
                    .get(&r.param)
                    .is_some_and(|v| pattern.is_match(&stringified(v)))
                {
                    findings.push(deny(
                        rule,
                        format!("param {:?} matches a denied pattern", r.param),
                    ));
                }
            }
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_rules_and_names_the_file_in_errors() {
        let rules = PolicyRules::parse(
            "deny_tool = [\"WebFetch\"]\ndeny_keyword = [\"RM -RF\"]\nother = 1",
            "a.toml",
        )
        .unwrap();
        assert_eq!(rules.len(), 2);
        let none = Map::new();
        assert_eq!(rules.findings("WebFetch", &none).len(), 1);
        assert!(rules.findings("Read", &none).is_empty());
        let params = json!({"cmd": {"nested": ["sudo rm -rf /"]}});
        let found = rules.findings("Bash", params.as_object().unwrap());
        assert_eq!(found[0].rule, "deny_keyword:RM -RF");
        assert_eq!(
            PolicyRules::parse("deny_tool = \"x\"", "b.toml").unwrap_err(),
            "b.toml: deny_tool must be a list of strings"
        );
        assert!(PolicyRules::parse("deny_tool = [", "c.toml")
            .unwrap_err()
            .starts_with("c.toml: "));
    }

    #[test]
    fn the_param_rules_deny_allow_and_match_as_cars_cookbook_says() {
        let rules = PolicyRules::parse(
            r#"
[[deny_tool_param]]
tool = "http_request"
param = "url"
contains = "169.254.169.254"

[[allow_tool_param]]
tool = "send"
param = "to"
allow = ["+15550100"]

[[deny_tool_param_matching]]
tool = "send"
param = "body"
matches = "sk-[A-Za-z0-9]{20,}"

[[deny_tool_param_matching]]
tool = "broken"
param = "x"
matches = "("

[[rate_limit_tool]]
tool = "send"
max_calls = 2
interval_secs = 60.0
"#,
            "p.toml",
        )
        .unwrap();
        assert_eq!(rules.len(), 5);
        let p = |v: serde_json::Value| v.as_object().unwrap().clone();
        let rule_of = |tool: &str, v| -> Vec<String> {
            rules
                .findings(tool, &p(v))
                .into_iter()
                .map(|f| f.rule)
                .collect()
        };
        assert_eq!(
            rule_of("http_request", json!({"url": "http://169.254.169.254/x"})),
            ["deny_tool_param:http_request.url"]
        );
        assert!(rule_of("http_request", json!({"url": "https://example.invalid"})).is_empty());
        // The allowlist fails closed: absent, unlisted; listed passes; other tools untouched.
        assert_eq!(rule_of("send", json!({})), ["allow_tool_param:send.to"]);
        assert_eq!(
            rule_of("send", json!({"to": "+1555"})),
            ["allow_tool_param:send.to"]
        );
        assert!(rule_of("send", json!({"to": "+15550100"})).is_empty());
        assert!(rule_of("other", json!({})).is_empty());
        // A match is reported without the matched text.
        let secret = "sk-abcdefghijklmnopqrstuvwxyz";
        let found = rules.findings(
            "send",
            &p(json!({"to": "+15550100", "body": format!("key {secret}")})),
        );
        assert_eq!(found.len(), 1);
        assert!(!found[0].reason.contains(secret), "{}", found[0].reason);
        // An uncompilable pattern denies the tool, naming the error.
        let found = rules.findings("broken", &Map::new());
        assert!(
            found[0].reason.contains("does not compile"),
            "{}",
            found[0].reason
        );
        let limit = &rules.rate_limit_tool[0];
        assert!(limit.admits(1) && !limit.admits(2));
    }

    #[test]
    fn a_malformed_rule_names_the_file_and_the_entry() {
        let err = PolicyRules::parse(
            "[[allow_tool_param]]\ntool = \"t\"\nparam = \"p\"\n",
            "m.toml",
        )
        .unwrap_err();
        assert!(err.starts_with("m.toml: allow_tool_param[0]: "), "{err}");
        let err = PolicyRules::parse("deny_tool_param = 3", "n.toml").unwrap_err();
        assert_eq!(
            err,
            "n.toml: deny_tool_param must be an array of tables ([[deny_tool_param]])"
        );
        let err = PolicyRules::parse(
            "[[rate_limit_tool]]\ntool = \"t\"\nmax_calls = 1\ninterval_secs = 0.0\n",
            "r.toml",
        )
        .unwrap_err();
        assert!(err.contains("rate_limit_tool[0].interval_secs"), "{err}");
    }
}
