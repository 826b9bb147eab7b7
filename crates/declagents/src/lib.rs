//! car-declagents: declarative agents' data and learning, without I/O beyond their own
//! files.
//!
//! Owns: the spec registry ([`registry`]), the routing learning store and its ranking
//! math ([`routing`]), need-to-capability similarity ([`similarity`]), standing chat
//! goals ([`goals`]) and goal suggestion ([`suggest`]). Must not: run agents, models or
//! commands (the daemon runs an agent with its one agent loop and its goal checks as
//! confined commands), or touch sockets.
//!
//! The spec types are the contract's (`car_proto::methods::declagents`); [`validate`] is
//! the rule every registered spec passes.

pub mod goals;
pub mod registry;
pub mod routing;
pub mod similarity;
pub mod suggest;

use car_proto::methods::declagents::DeclarativeAgentSpec;

/// Turns per pass at most.
pub const MAX_TURNS: u32 = 64;
/// Turns per pass when the spec names none.
pub const DEFAULT_TURNS: u32 = 8;
/// Tools an allowlist may name at most.
pub const MAX_TOOLS: usize = 256;
/// Scenarios a spec may hold at most.
pub const MAX_SCENARIOS: usize = 64;
/// The longest identity or standing goal (bytes).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Writes `value` as JSON to `path` atomically (temp file and rename, mode 0600), creating
/// its directory: how every store of this crate saves.
pub fn save_json(path: &std::path::Path, value: &impl serde::Serialize) -> Result<(), String> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    car_proto::safe_file::write_atomic(path, &bytes, 0o600)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Checks a spec, naming the offending field (`spec.<field>`).
pub fn validate(spec: &DeclarativeAgentSpec) -> Result<(), String> {
    let id = spec.id.as_str();
    if id.len() > 128
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "spec.id: {id:?} must be at most 128 letters, digits, '-' or '_'"
        ));
    }
    if spec.identity.len() > MAX_TEXT_BYTES
        || spec
            .standing_goal
            .as_ref()
            .is_some_and(|g| g.len() > MAX_TEXT_BYTES)
    {
        return Err(format!(
            "spec.identity: identity and standing_goal are at most {MAX_TEXT_BYTES} bytes each"
        ));
    }
    for (field, list) in [("tools", &spec.tools), ("deny_tools", &spec.deny_tools)] {
        if list.len() > MAX_TOOLS {
            return Err(format!("spec.{field}: at most {MAX_TOOLS} names"));
        }
        if let Some((i, name)) = list
            .iter()
            .enumerate()
            .find(|(_, n)| n.is_empty() || n.len() > 256 || n.chars().any(char::is_whitespace))
        {
            return Err(format!("spec.{field}[{i}]: {name:?} is not a tool name"));
        }
    }
    if let Some(turns) = spec.max_turns {
        if turns == 0 || turns > MAX_TURNS {
            return Err(format!(
                "spec.max_turns: must be 1–{MAX_TURNS}, got {turns}"
            ));
        }
    }
    if let Some(goal) = &spec.goal {
        goals::checked(&goal.check).map_err(|e| format!("spec.goal.{e}"))?;
        if goal.max_iterations == Some(0) {
            return Err("spec.goal.max_iterations: must be at least 1".into());
        }
    }
    if let Some(t) = spec.temperature {
        if !t.is_finite() || !(0.0..=2.0).contains(&t) {
            return Err(format!("spec.temperature: must be 0–2, got {t}"));
        }
    }
    if let Some(choice) = &spec.tool_choice {
        if !["auto", "required", "none"].contains(&choice.as_str()) {
            return Err(format!(
                "spec.tool_choice: must be auto, required or none, got {choice:?}"
            ));
        }
    }
    if spec.scenarios.len() > MAX_SCENARIOS {
        return Err(format!("spec.scenarios: at most {MAX_SCENARIOS}"));
    }
    if let Some(i) = spec
        .scenarios
        .iter()
        .position(|s| s.input.trim().is_empty())
    {
        return Err(format!("spec.scenarios[{i}].input: must not be empty"));
    }
    Ok(())
}

/// The tools a spec may call: its allowlist minus its deny list, in allowlist order.
pub fn allowed_tools(spec: &DeclarativeAgentSpec) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    spec.tools
        .iter()
        .filter(|t| !spec.deny_tools.contains(t) && seen.insert(t.as_str()))
        .cloned()
        .collect()
}

/// The display name (the id when the spec names none).
pub fn display_name(spec: &DeclarativeAgentSpec) -> String {
    spec.name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| spec.id.to_string())
}

/// What routing compares a need with: name, identity, standing goal and tools.
pub fn capability_text(spec: &DeclarativeAgentSpec) -> String {
    let mut text = display_name(spec);
    for part in [Some(&spec.identity), spec.standing_goal.as_ref()]
        .into_iter()
        .flatten()
    {
        text.push_str(". ");
        text.push_str(part);
    }
    let tools = allowed_tools(spec);
    if !tools.is_empty() {
        text.push_str(". Tools: ");
        text.push_str(&tools.join(", ").replace('_', " "));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> DeclarativeAgentSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn validation_names_the_field() {
        let bad = [
            (json!({"id": "a b"}), "spec.id"),
            (json!({"id": "a", "tools": ["ok", ""]}), "spec.tools[1]"),
            (json!({"id": "a", "max_turns": 0}), "spec.max_turns"),
            (
                json!({"id": "a", "goal": {"check": " "}}),
                "spec.goal.check",
            ),
            (
                json!({"id": "a", "tool_choice": "always"}),
                "spec.tool_choice",
            ),
            (
                json!({"id": "a", "scenarios": [{"input": ""}]}),
                "spec.scenarios[0].input",
            ),
            (json!({"id": "a", "temperature": 9.0}), "spec.temperature"),
        ];
        for (v, field) in bad {
            let e = validate(&spec(v.clone())).unwrap_err();
            assert!(e.starts_with(field), "{v}: {e}");
        }
        assert!(validate(&spec(
            json!({"id": "ok-1_x", "tools": null, "scenarios": null})
        ))
        .is_ok());
    }

    #[test]
    fn the_allowlist_is_strict_and_the_deny_list_wins() {
        let s = spec(
            json!({"id": "a", "tools": ["read_file", "write_file", "read_file"], "deny_tools": ["write_file"]}),
        );
        assert_eq!(allowed_tools(&s), ["read_file"]);
        assert!(allowed_tools(&spec(json!({"id": "a"}))).is_empty());
        assert!(capability_text(&s).contains("read file"));
    }
}
