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

use crate::state::policy_files::load_dir;
use car_proto::errors::RpcError;
use car_proto::methods::proposal_checks::{
    self as m, PolicyCheckParams, PolicyCheckReply, PolicyFinding, PolicySource,
};

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes.add::<m::Check, _, _>(check);
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
