//! The action classifier: the tier an operation needs and, independently, how far it can
//! be undone. Both are keyword heuristics over the operation's shape; the tables below are
//! this daemon's (docs/protocol-choices.md, "Permission tiers").
//!
//! # Tier (`read_only` < `sandbox_edit` < `full_access`)
//! The highest tier any of five signals implies, each matched against the part of the
//! action that carries the evidence — nothing scans arbitrary parameter values for common
//! words (a URL containing `http`, a message containing `send`, a search for "release
//! notes" escalate nothing):
//! 1. **Tool name**, split into whole segments at `_`, `-`, `.`, `/`, spaces and camelCase
//!    boundaries (`sendEmail` → `send`, `email`): a segment of [`FULL_ACCESS_NAMES`] →
//!    `full_access`; else one of [`EDIT_NAMES`] → `sandbox_edit`; else one of [`READ_NAMES`] →
//!    `read_only`; a name with no known segment → `sandbox_edit` (what a session may do by default,
//!    so an unknown tool runs but a `read_only` session asks).
//! 2. **Command line**: the string values (or string arrays) of keys named `command`, `cmd`,
//!    `args`, `argv` or `flags`, at any depth, read as one token stream per object (split at white
//!    space and shell separators, a path token also as its base name): a keyword or keyword
//!    sequence of [`COMMAND_KEYWORDS`] → `full_access`.
//! 3. **Parameter key names** that name a credential, at any depth: a key whose last segment is one
//!    of [`CREDENTIAL_WORDS`], or whose last two are `<qualifier> key` with the qualifier in
//!    [`KEY_QUALIFIERS`] (`api_key`, `db_password`, `auth.token`, `secretAccessKey`) →
//!    `full_access`. The value is opaque and never read. `max_tokens`, `token_count`, `secret_name`
//!    and a state `key` do not match.
//! 4. **Declared target paths**: the string values of keys whose last segment is one of
//!    [`PATH_KEYS`], when the path is a credential store ([`sensitive_path`]: a `.ssh` or `.gnupg`
//!    component, `.aws/credentials`, `.kube/config`, `.netrc`, `/etc/shadow`, SSH private key
//!    names, `.env`, `*.pem`, `*.key`, …) → `full_access`.
//! 5. **Always-dangerous phrases** anywhere in the string values (lower-cased, white space
//!    collapsed, preceded by a non-alphanumeric character or the start): [`DANGEROUS`] (`drop
//!    table`, `delete from`, `rm -rf`, `git reset`, …) → `full_access`.
//!
//! A `state_write` / `state_delete` action needs `sandbox_edit`.
//!
//! # Reversibility (`reversible` < `compensable` < `irreversible`)
//! Classified from the tool name on its own axis, not from the tier: the worst of its
//! known segments ([`IRREVERSIBLE_NAMES`], [`COMPENSABLE_NAMES`], or [`READ_NAMES`] →
//! `reversible`); a name with no known segment → `irreversible`; an always-dangerous
//! phrase in the parameters → `irreversible`. `read_secret` is `full_access` and
//! `reversible`; `db_insert` is `sandbox_edit` and `compensable`. State actions are
//! `reversible` (the daemon journals the previous value).
//!
//! # Fingerprint
//! The SHA-256 hex of the canonical JSON (keys sorted, no white space) of `{"tool",
//! "parameters"}` for a tool call, and of `{"type", "key"}` for a state action: the same
//! operation has the same fingerprint whatever its action id or proposal.

use car_proto::methods::permission::{Reversibility, Tier};
use serde_json::{json, Map, Value};

mod tables;
pub use tables::*;

/// What the classifier found for one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assessment {
    pub tier: Tier,
    pub reversibility: Reversibility,
    /// The strongest signal, for reasons (`tool name segment "send"`).
    pub why: Option<String>,
}

/// One operation, as the classifier sees it.
#[derive(Debug, Clone, Copy)]
pub enum Operation<'a> {
    Tool {
        tool: &'a str,
        parameters: &'a Map<String, Value>,
    },
    /// `state_write` or `state_delete`.
    State { action_type: &'a str, key: &'a str },
}

/// Splits a name into lower-case segments (see the module docs).
pub fn segments(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        let boundary = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            });
        if boundary && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn any_in(segs: &[String], table: &[&str]) -> Option<String> {
    segs.iter().find(|s| table.contains(&s.as_str())).cloned()
}

/// The tool-name signal alone (what a grant covers by default).
pub fn name_tier(tool: &str) -> Tier {
    name_signal(&segments(tool)).0
}

fn name_signal(segs: &[String]) -> (Tier, Option<String>) {
    if let Some(s) = any_in(segs, FULL_ACCESS_NAMES) {
        (Tier::FullAccess, Some(format!("tool name segment {s:?}")))
    } else if any_in(segs, EDIT_NAMES).is_some() {
        (Tier::SandboxEdit, None)
    } else if any_in(segs, READ_NAMES).is_some() {
        (Tier::ReadOnly, None)
    } else {
        (Tier::SandboxEdit, None)
    }
}

fn name_reversibility(segs: &[String]) -> Reversibility {
    if any_in(segs, IRREVERSIBLE_NAMES).is_some() {
        Reversibility::Irreversible
    } else if any_in(segs, COMPENSABLE_NAMES).is_some() {
        Reversibility::Compensable
    } else if any_in(segs, READ_NAMES).is_some() {
        Reversibility::Reversible
    } else {
        Reversibility::Irreversible
    }
}

/// Whether a key names a credential (signal 3).
pub fn credential_key(key: &str) -> bool {
    let segs = segments(key);
    match segs.as_slice() {
        [] => false,
        [.., last] if CREDENTIAL_WORDS.contains(&last.as_str()) => true,
        [.., qualifier, last] => last == "key" && KEY_QUALIFIERS.contains(&qualifier.as_str()),
        _ => false,
    }
}

/// Whether a path names a credential store (signal 4).
pub fn sensitive_path(path: &str) -> bool {
    let p = path.replace('\\', "/").to_lowercase();
    let components: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
    if components
        .iter()
        .any(|c| matches!(*c, ".ssh" | ".gnupg" | ".password-store" | "keychains"))
    {
        return true;
    }
    const SUFFIXES: &[&str] = &[
        ".aws/credentials",
        ".aws/config",
        ".kube/config",
        ".docker/config.json",
        ".config/gh/hosts.yml",
        "etc/shadow",
        "etc/gshadow",
        "etc/sudoers",
    ];
    if SUFFIXES.iter().any(|s| p.ends_with(s)) {
        return true;
    }
    let Some(base) = components.last() else {
        return false;
    };
    matches!(
        *base,
        "id_rsa"
            | "id_dsa"
            | "id_ecdsa"
            | "id_ed25519"
            | "authorized_keys"
            | ".netrc"
            | ".pgpass"
            | ".git-credentials"
            | ".npmrc"
            | ".pypirc"
            | ".env"
    ) || base.starts_with(".env.")
        || [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx"]
            .iter()
            .any(|ext| base.ends_with(ext))
}

/// Command-line tokens: split at white space, quotes and shell separators; a path token
/// also yields its base name.
fn command_tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || ";|&()<>`'\"$".contains(c)) {
        if raw.is_empty() {
            continue;
        }
        let t = raw.to_lowercase();
        match t.rsplit_once('/') {
            Some((_, base)) if !base.is_empty() => tokens.push(base.to_string()),
            _ => tokens.push(t),
        }
    }
    tokens
}

fn command_keyword(tokens: &[String]) -> Option<String> {
    COMMAND_KEYWORDS.iter().find_map(|kw| {
        tokens
            .windows(kw.len())
            .any(|w| w.iter().zip(kw.iter()).all(|(a, b)| a == b))
            .then(|| kw.join(" "))
    })
}

fn strings_of<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings_of(v, out)),
        _ => {}
    }
}

fn dangerous_phrase(text: &str) -> Option<&'static str> {
    let normalized = text
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    DANGEROUS.iter().copied().find(|phrase| {
        normalized.match_indices(phrase).any(|(at, _)| {
            normalized[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric())
        })
    })
}

/// Walks the parameters for signals 2–5; the first `full_access` reason found.
fn parameter_signal(map: &Map<String, Value>) -> (Option<String>, bool) {
    let mut command = Vec::new();
    for key in COMMAND_KEYS {
        let found = map.iter().find(|(k, _)| k.eq_ignore_ascii_case(key));
        if let Some((_, v)) = found {
            strings_of(v, &mut command);
        }
    }
    let tokens: Vec<String> = command.iter().flat_map(|s| command_tokens(s)).collect();
    let mut reason = command_keyword(&tokens).map(|kw| format!("command keyword {kw:?}"));
    let mut dangerous = false;
    for (key, value) in map {
        if credential_key(key) {
            reason.get_or_insert_with(|| format!("parameter key {key:?} names a credential"));
            continue;
        }
        let is_path_key = segments(key)
            .last()
            .is_some_and(|s| PATH_KEYS.contains(&s.as_str()));
        let mut texts = Vec::new();
        strings_of(value, &mut texts);
        for text in texts {
            if is_path_key && sensitive_path(text) {
                reason.get_or_insert_with(|| format!("target path {text:?} is a credential store"));
            }
            if let Some(phrase) = dangerous_phrase(text) {
                dangerous = true;
                reason.get_or_insert_with(|| format!("dangerous phrase {phrase:?}"));
            }
        }
        let nested: Vec<&Map<String, Value>> = match value {
            Value::Object(m) => vec![m],
            Value::Array(items) => items.iter().filter_map(Value::as_object).collect(),
            _ => Vec::new(),
        };
        for m in nested {
            let (r, d) = parameter_signal(m);
            dangerous |= d;
            if let Some(r) = r {
                reason.get_or_insert(r);
            }
        }
    }
    (reason, dangerous)
}

/// Classifies one operation (see the module docs).
pub fn assess(op: Operation<'_>) -> Assessment {
    match op {
        Operation::State { .. } => Assessment {
            tier: Tier::SandboxEdit,
            reversibility: Reversibility::Reversible,
            why: None,
        },
        Operation::Tool { tool, parameters } => {
            let segs = segments(tool);
            let (name_tier, name_why) = name_signal(&segs);
            let (param_why, dangerous) = parameter_signal(parameters);
            let (tier, why) = match (name_why, param_why) {
                (Some(w), _) => (Tier::FullAccess, Some(w)),
                (None, Some(w)) => (Tier::FullAccess, Some(w)),
                (None, None) => (name_tier, None),
            };
            let reversibility = if dangerous {
                Reversibility::Irreversible
            } else {
                name_reversibility(&segs)
            };
            Assessment {
                tier,
                reversibility,
                why,
            }
        }
    }
}

/// The operation's fingerprint (see the module docs).
pub fn fingerprint(op: Operation<'_>) -> String {
    let subject = match op {
        Operation::Tool { tool, parameters } => json!({"tool": tool, "parameters": parameters}),
        Operation::State { action_type, key } => json!({"type": action_type, "key": key}),
    };
    car_proto::schema::digest(&subject)
}

#[cfg(test)]
mod tests;
