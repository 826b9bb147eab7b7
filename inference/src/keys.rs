//! API key lookup for remote providers.
//!
//! Owns: resolving the env var named in a registration to a key, from the process
//! environment first and then from `CAR_HOME/env` (`NAME=value` lines). Must not touch:
//! logging or error messages that could carry the key: callers only ever report the
//! variable's *name*.
//!
//! The file is read on every lookup so a key added or rotated there applies to the next
//! request without restarting the daemon. Lines may start with `export `, values may be
//! wrapped in single or double quotes, and `#` starts a comment line.

use std::path::Path;

/// Looks `var` up in the process environment, then in `env_file`. Empty values count as
/// absent.
pub fn resolve_api_key(var: &str, env_file: Option<&Path>) -> Option<String> {
    if let Ok(v) = std::env::var(var) {
        if !v.is_empty() {
            return Some(v);
        }
    }
    let text = std::fs::read_to_string(env_file?).ok()?;
    lookup(&text, var)
}

fn lookup(text: &str, var: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if name.trim() != var {
            continue;
        }
        let value = value.trim();
        let value = ['"', '\'']
            .iter()
            .find_map(|q| value.strip_prefix(*q).and_then(|v| v.strip_suffix(*q)))
            .unwrap_or(value);
        if !value.is_empty() {
            return Some(value.to_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_env_file_lines() {
        let text = "# comment\nOTHER=x\nexport MY_KEY = \"sk-123\"\n";
        assert_eq!(lookup(text, "MY_KEY").as_deref(), Some("sk-123"));
        assert_eq!(lookup("A='q'\n", "A").as_deref(), Some("q"));
        assert_eq!(lookup("A=\n", "A"), None);
        assert_eq!(lookup("garbage\n", "A"), None);
    }

    #[test]
    fn reads_the_file_when_the_env_lacks_the_var() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("env");
        std::fs::write(&file, "CAR_TEST_KEYS_ONLY_IN_FILE=from-file\n").unwrap();
        assert_eq!(
            resolve_api_key("CAR_TEST_KEYS_ONLY_IN_FILE", Some(&file)).as_deref(),
            Some("from-file")
        );
        assert_eq!(resolve_api_key("CAR_TEST_KEYS_ABSENT", Some(&file)), None);
        assert_eq!(resolve_api_key("CAR_TEST_KEYS_ABSENT", None), None);
    }
}
