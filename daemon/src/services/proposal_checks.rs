//! `policy.check {tool, params?, cwd?}`: judges one tool call before it runs (CAR's MCP
//! `policy_check`, the tool a host's `PreToolUse` hook calls).
//!
//! Rules come from two places:
//! - **policy files**: every `*.toml` in `<CAR_HOME>/policies/` and in `<cwd>/.car/policies/`
//!   (neither is walked upward), where `cwd` is the caller's (`car-mcp` sends its own) or, when
//!   absent, the daemon's working directory (CAR's "under the server's working directory"). A file
//!   holds CAR's declarative rules `deny_tool = ["WebFetch"]` (exact tool names) and `deny_keyword
//!   = ["rm -rf /"]` (substrings of the tool name or of any string in `params`, case-insensitive);
//!   other keys are ignored. A file that cannot be read or parsed, or a rule that is not a list of
//!   strings, makes the answer `deny` with `basis: "policy_load_failed"` (failing open on a typo
//!   would enforce nothing while reporting a clean result);
//! - **this connection's policies** (`policy.register`), judged against its state as a proposal's
//!   tool call would be.
//!
//! `basis` is `policy_load_failed`, `denied_by_rule`, `passed_rules` (rules ran and the
//! call cleared them) or `no_rules_configured` (nothing was loaded: the allow reviewed
//! nothing). CAR also applies a stateless egress inspector; this daemon has none, so every
//! finding comes from a rule (documented in docs/protocol-choices.md, "Sibling endpoints, static
//! checks and MCP (issue 16)").

use std::path::{Path, PathBuf};

use car_proto::errors::RpcError;
use car_proto::methods::proposal_checks::{
    self as m, PolicyCheckParams, PolicyCheckReply, PolicyFinding, PolicySource,
};
use car_proto::policy_rules::PolicyRules;
use car_proto::safe_file::{self, ReadLimits};

use crate::handler::{Call, Routes};

/// Largest policy file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most policy files read per directory.
const MAX_FILES: usize = 64;

pub fn register(routes: &mut Routes) {
    routes.add::<m::Check, _, _>(check);
}

/// Reads a directory's rules; `Ok(None)` when it does not exist.
///
/// Every file is opened through `car_proto::safe_file` (regular files only, never through a
/// final symlink, never blocking on a FIFO, at most [`MAX_FILE_BYTES`] read), because the
/// directory is the caller's: a `.car/policies/x.toml` that is a FIFO or a link to
/// `/dev/zero` is refused at once and the answer fails closed. The listing stops after
/// [`MAX_FILES`] `*.toml` names, so a huge directory costs no more than a full one.
fn load_dir(dir: &Path) -> Result<Option<PolicyRules>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        if path.extension().is_some_and(|x| x == "toml") {
            if files.len() == MAX_FILES {
                return Err(format!(
                    "{}: more than {MAX_FILES} policy files",
                    dir.display()
                ));
            }
            files.push(path);
        }
    }
    files.sort();
    let mut rules = PolicyRules::default();
    for file in files {
        let text = safe_file::read_text(&file, ReadLimits::cap(MAX_FILE_BYTES))
            .map_err(|e| format!("{}: {e}", file.display()))?;
        rules.extend(PolicyRules::parse(&text, &file.display().to_string())?);
    }
    Ok(Some(rules))
}

async fn check(call: Call, p: PolicyCheckParams) -> Result<PolicyCheckReply, RpcError> {
    if p.tool.trim().is_empty() {
        return Err(RpcError::invalid_params("tool: must not be empty"));
    }
    let mut dirs = vec![call.state.daemon.state_root.join("policies")];
    let cwd = match &p.cwd {
        Some(cwd) if !Path::new(cwd).is_absolute() => {
            return Err(RpcError::invalid_params(format!(
                "cwd: must be an absolute path, got {cwd:?}"
            )));
        }
        Some(cwd) => Some(PathBuf::from(cwd)),
        None => std::env::current_dir().ok(),
    };
    if let Some(cwd) = cwd {
        dirs.push(cwd.join(".car").join("policies"));
    }
    let params = p.params.unwrap_or_default();
    let mut findings = Vec::new();
    let mut sources = Vec::new();
    let mut rules_loaded = 0;
    let mut load_failed = false;
    for dir in dirs {
        let loaded = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || load_dir(&dir)
        })
        .await
        .map_err(|e| RpcError::internal(format!("reading policy files: {e}")))?;
        let path = dir.display().to_string();
        match loaded {
            Ok(None) => sources.push(PolicySource {
                path,
                exists: false,
                rules: 0,
                error: None,
            }),
            Ok(Some(rules)) => {
                let count = rules.len();
                rules_loaded += count;
                findings.extend(rules.findings(&p.tool, &params));
                sources.push(PolicySource {
                    path,
                    exists: true,
                    rules: count,
                    error: None,
                });
            }
            Err(error) => {
                load_failed = true;
                sources.push(PolicySource {
                    path,
                    exists: true,
                    rules: 0,
                    error: Some(error),
                });
            }
        }
    }
    let session_id = call.session.label();
    let (registered, violation) = call.session.runtime(|rt| {
        let state = rt.partition(None).cloned().unwrap_or_default();
        (
            rt.policies.len(),
            crate::state::per_connection::violation_in(
                &rt.policies,
                &session_id,
                &p.tool,
                &params,
                &state,
            ),
        )
    });
    rules_loaded += registered;
    if let Some((name, why)) = violation {
        findings.push(PolicyFinding {
            source: "session_policy".into(),
            rule: name,
            severity: "deny".into(),
            reason: why,
        });
    }
    let (decision, basis) = if load_failed {
        ("deny", "policy_load_failed")
    } else if !findings.is_empty() {
        ("deny", "denied_by_rule")
    } else if rules_loaded == 0 {
        ("allow", "no_rules_configured")
    } else {
        ("allow", "passed_rules")
    };
    Ok(PolicyCheckReply {
        decision: decision.into(),
        basis: basis.into(),
        tool: p.tool,
        findings,
        rules_loaded,
        policy_sources: sources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_load_and_match() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load_dir(&dir.path().join("absent")).unwrap().is_none());
        std::fs::write(
            dir.path().join("rules.toml"),
            "deny_tool = [\"WebFetch\"]\ndeny_keyword = [\"rm -rf /\"]\nother = 1\n",
        )
        .unwrap();
        let rules = load_dir(dir.path()).unwrap().unwrap();
        let none = serde_json::Map::new();
        assert_eq!(rules.findings("WebFetch", &none).len(), 1);
        assert!(rules.findings("Read", &none).is_empty());
        let params = serde_json::json!({"command": "sudo RM -RF / now"});
        let found = rules.findings("Bash", params.as_object().unwrap());
        assert_eq!(found[0].rule, "deny_keyword:rm -rf /");
    }

    #[test]
    fn bad_files_fail_closed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.toml"), "deny_tool = [").unwrap();
        assert!(load_dir(dir.path()).unwrap_err().contains("a.toml"));
        std::fs::write(dir.path().join("a.toml"), "deny_tool = \"WebFetch\"").unwrap();
        assert!(load_dir(dir.path())
            .unwrap_err()
            .contains("deny_tool must be a list of strings"));
    }

    #[cfg(unix)]
    #[test]
    fn devices_fifos_links_and_oversize_files_are_refused_without_reading() {
        for (name, make) in [
            ("zero", "dev"),
            ("urandom", "dev"),
            ("fifo", "fifo"),
            ("big", "big"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join(format!("{name}.toml"));
            match make {
                "dev" => std::os::unix::fs::symlink(format!("/dev/{name}"), &file).unwrap(),
                "fifo" => mkfifo(&file),
                _ => std::fs::write(&file, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap(),
            }
            let err = load_dir(dir.path()).unwrap_err();
            assert!(err.contains(&format!("{name}.toml")), "{err}");
        }
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_FILES {
            std::fs::write(dir.path().join(format!("{i}.toml")), "").unwrap();
        }
        assert!(load_dir(dir.path()).unwrap_err().contains("more than"));
    }

    #[cfg(unix)]
    fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }
}
