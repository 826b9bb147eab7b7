//! API keys for remote providers: which keys an endpoint may use, and where they are read.
//!
//! Owns: the rules for naming a key (below), resolving an env var to a key from the
//! process environment first and then from `CAR_HOME/env` (`NAME=value` lines), and
//! [`KeySource`], the by-name description of a key that errors carry. Must not touch:
//! logging or error messages that could carry the key: callers only ever report the key's
//! *name*, and the value stays inside [`Redacted`].
//!
//! Which key an endpoint may use (the daemon sends it as a Bearer token to whatever URL was
//! registered, so the name must not reach arbitrary daemon environment such as
//! `AWS_SECRET_ACCESS_KEY` or `CAR_AUTH_TOKEN`):
//! - `api_key_env` must match [`API_KEY_ENV_RULE`], `^[A-Z][A-Z0-9_]*_API_KEY$`;
//! - or `api_key_secret` names a secret-store entry, `service/key` or bare `key`: non-empty, at
//!   most [`MAX_SECRET_NAME_BYTES`] bytes, no control characters, neither part empty. The daemon
//!   resolves it (see `EngineConfig::secret_lookup`).
//!
//! Registration refuses names that break these rules. A registry entry written before the
//! env rule existed still loads, but its endpoint refuses to send that key
//! (`InferenceError::ApiKeyEnvRefused`) until it is registered again.
//!
//! The env file is read on every lookup so a key added or rotated there applies to the next
//! request without restarting the daemon. Lines may start with `export `, values may be
//! wrapped in single or double quotes, and `#` starts a comment line.

use std::path::Path;

use car_proto::redact::Redacted;

use crate::error::{InferenceError, Result};

/// The pattern an `api_key_env` name must match.
pub const API_KEY_ENV_RULE: &str = "^[A-Z][A-Z0-9_]*_API_KEY$";
/// Longest `api_key_secret` name, in bytes.
pub const MAX_SECRET_NAME_BYTES: usize = 512;
/// What a key is replaced with wherever provider text could echo it.
pub const REDACTED: &str = "[redacted]";

/// Where an endpoint's key comes from, by name only (never the value): for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// No key is registered; requests carry no `Authorization` header.
    None,
    /// An env var (or `CAR_HOME/env` line) matching [`API_KEY_ENV_RULE`].
    Env(String),
    /// A secret-store entry (`service/key` or `key`).
    Secret(String),
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeySource::None => f.write_str("the request (no api key is registered)"),
            KeySource::Env(var) => write!(f, "the api key from env var {var}"),
            KeySource::Secret(name) => write!(f, "the api key from secret {name}"),
        }
    }
}

/// Whether `var` matches [`API_KEY_ENV_RULE`].
pub fn env_name_allowed(var: &str) -> bool {
    const SUFFIX: &str = "_API_KEY";
    var.len() > SUFFIX.len()
        && var.ends_with(SUFFIX)
        && var.starts_with(|c: char| c.is_ascii_uppercase())
        && var
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The registration check for `api_key_env` (see the module docs).
pub fn check_env_name(var: &str) -> Result<()> {
    if env_name_allowed(var) {
        return Ok(());
    }
    Err(InferenceError::invalid(
        "api_key_env",
        format!(
            "{} is refused: it must name a variable ending in _API_KEY \
             ({API_KEY_ENV_RULE}), or use api_key_secret",
            shown(var)
        ),
    ))
}

/// The registration check for `api_key_secret` (see the module docs).
pub fn check_secret_name(name: &str) -> Result<()> {
    let bad = |reason: &str| Err(InferenceError::invalid("api_key_secret", reason.to_owned()));
    if name.is_empty() {
        return bad("must not be empty");
    }
    if name.len() > MAX_SECRET_NAME_BYTES {
        return bad("longer than 512 bytes");
    }
    if name.chars().any(char::is_control) {
        return bad("must not contain control characters");
    }
    if let Some((service, key)) = name.split_once('/') {
        if service.is_empty() || key.is_empty() {
            return bad("must be service/key or key, with neither part empty");
        }
    }
    Ok(())
}

/// `var` quoted for a message, cut to 64 characters.
fn shown(var: &str) -> String {
    if var.chars().count() <= 64 {
        format!("{var:?}")
    } else {
        let head: String = var.chars().take(64).collect();
        format!("{head:?}…")
    }
}

/// Looks `var` up in the process environment, then in `env_file`. Empty values count as
/// absent. The caller checks `var` against [`API_KEY_ENV_RULE`] first.
pub fn resolve_api_key(var: &str, env_file: Option<&Path>) -> Option<Redacted<String>> {
    if let Ok(v) = std::env::var(var) {
        if !v.is_empty() {
            return Some(Redacted::new(v));
        }
    }
    let text = std::fs::read_to_string(env_file?).ok()?;
    lookup(&text, var).map(Redacted::new)
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
        let key = resolve_api_key("CAR_TEST_KEYS_ONLY_IN_FILE", Some(&file)).unwrap();
        assert_eq!(key.expose(), "from-file");
        assert_eq!(format!("{key:?}"), "[redacted]");
        assert_eq!(resolve_api_key("CAR_TEST_KEYS_ABSENT", Some(&file)), None);
        assert_eq!(resolve_api_key("CAR_TEST_KEYS_ABSENT", None), None);
    }

    #[test]
    fn only_api_key_names_are_allowed() {
        for ok in [
            "OPENAI_API_KEY",
            "A_API_KEY",
            "MY2_LLM__API_KEY",
            "X9_API_KEY",
        ] {
            assert!(env_name_allowed(ok), "{ok}");
            check_env_name(ok).unwrap();
        }
        for bad in [
            "HOME",
            "CAR_AUTH_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "aws_secret",
            "openai_api_key",
            "API_KEY",
            "_API_KEY",
            "_X_API_KEY",
            "1X_API_KEY",
            "X_API_KEY_",
            "X-Y_API_KEY",
            "X_API_KEYS",
            "",
        ] {
            assert!(!env_name_allowed(bad), "{bad:?}");
            let err = check_env_name(bad).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidParams);
            assert_eq!(
                err.to_string(),
                format!(
                    "invalid api_key_env: {bad:?} is refused: it must name a variable ending \
                     in _API_KEY (^[A-Z][A-Z0-9_]*_API_KEY$), or use api_key_secret"
                )
            );
        }
        let long = "A".repeat(10_000);
        let msg = check_env_name(&long).unwrap_err().to_string();
        assert!(msg.len() < 200, "{msg}");
    }

    #[test]
    fn secret_names_are_checked() {
        for ok in [
            "OPENAI_API_KEY",
            "openrouter",
            "svc/key",
            "my-app/team/token",
        ] {
            check_secret_name(ok).unwrap();
        }
        let long = "k".repeat(MAX_SECRET_NAME_BYTES + 1);
        for (bad, reason) in [
            ("", "must not be empty"),
            (long.as_str(), "longer than 512 bytes"),
            ("a\nb", "must not contain control characters"),
            ("a\u{7f}b", "must not contain control characters"),
            (
                "/key",
                "must be service/key or key, with neither part empty",
            ),
            (
                "svc/",
                "must be service/key or key, with neither part empty",
            ),
        ] {
            let err = check_secret_name(bad).unwrap_err();
            assert_eq!(err.to_string(), format!("invalid api_key_secret: {reason}"));
        }
        check_secret_name(&"k".repeat(MAX_SECRET_NAME_BYTES)).unwrap();
    }

    #[test]
    fn key_sources_describe_names_only() {
        assert_eq!(
            KeySource::Env("X_API_KEY".into()).to_string(),
            "the api key from env var X_API_KEY"
        );
        assert_eq!(
            KeySource::Secret("svc/k".into()).to_string(),
            "the api key from secret svc/k"
        );
        assert_eq!(
            KeySource::None.to_string(),
            "the request (no api key is registered)"
        );
    }
}
