//! The rules of a policy file (`.car/policies/*.toml`, `<CAR_HOME>/policies/*.toml`) and
//! how a tool call is judged against them: pure parsing and matching, no I/O (the daemon's
//! `policy.check` reads the files through [`crate::safe_file`]).
//!
//! A file holds CAR's declarative rules `deny_tool = ["WebFetch"]` (exact tool names) and
//! `deny_keyword = ["rm -rf /"]` (substrings of the tool name or of any string in the
//! call's params, case-insensitive); other keys are ignored. A file that does not parse, or
//! a rule that is not a list of strings, is an error naming the file (the caller fails
//! closed). Matching is linear in the rules times the params' strings; params come from a
//! JSON decode, whose nesting serde_json already limits.

use serde_json::{Map, Value};

use crate::methods::proposal_checks::PolicyFinding;

/// The rules of one or more policy files.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PolicyRules {
    pub deny_tool: Vec<String>,
    pub deny_keyword: Vec<String>,
}

impl PolicyRules {
    /// Parses one file's text; `file` names it in errors (`a.toml: deny_tool must be a
    /// list of strings`).
    pub fn parse(text: &str, file: &str) -> Result<PolicyRules, String> {
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| format!("{file}: {}", e.message()))?;
        Ok(PolicyRules {
            deny_tool: string_list(&table, "deny_tool", file)?,
            deny_keyword: string_list(&table, "deny_keyword", file)?,
        })
    }

    /// Adds `other`'s rules (files of one directory are read in name order).
    pub fn extend(&mut self, other: PolicyRules) {
        self.deny_tool.extend(other.deny_tool);
        self.deny_keyword.extend(other.deny_keyword);
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.deny_tool.len() + self.deny_keyword.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The findings of a call of `tool` with `params` (empty when it clears every rule).
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

/// Every string in `value`, for keyword matching.
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
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
            findings.push(PolicyFinding {
                source: "policy_rules".into(),
                rule: format!("deny_tool:{denied}"),
                severity: "deny".into(),
                reason: format!("tool {tool:?} is denied by policy"),
            });
        }
    }
    let params = Value::Object(params.clone());
    let mut texts = vec![tool];
    strings(&params, &mut texts);
    for keyword in &rules.deny_keyword {
        let needle = keyword.to_lowercase();
        if !needle.is_empty() && texts.iter().any(|t| t.to_lowercase().contains(&needle)) {
            findings.push(PolicyFinding {
                source: "policy_rules".into(),
                rule: format!("deny_keyword:{keyword}"),
                severity: "deny".into(),
                reason: format!("the call contains the denied keyword {keyword:?}"),
            });
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
}
