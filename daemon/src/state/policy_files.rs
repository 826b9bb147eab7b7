//! The policy files: every `*.toml` of `<CAR_HOME>/policies/` and of `<cwd>/.car/policies/`
//! (neither walked upward), read for `policy.check` and at the start of every
//! `proposal.submit` (`cwd` the daemon's working directory there), and the per-connection
//! windows of their `rate_limit_tool` rules. The rules themselves are
//! `car_proto::policy_rules`'.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use car_proto::methods::proposal_checks::PolicyFinding;
use car_proto::policy_rules::{PolicyRules, RateLimit};
use car_proto::safe_file::{self, ReadLimits};

/// Largest policy file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most policy files read per directory.
const MAX_FILES: usize = 64;

/// Reads a directory's rules; `Ok(None)` when it does not exist.
///
/// Every file is opened through `car_proto::safe_file` (regular files only, never through a
/// final symlink, never blocking on a FIFO, at most [`MAX_FILE_BYTES`] read), because the
/// directory is the caller's: a `.car/policies/x.toml` that is a FIFO or a link to
/// `/dev/zero` is refused at once and the answer fails closed. The listing stops after
/// [`MAX_FILES`] `*.toml` names, so a huge directory costs no more than a full one.
pub fn load_dir(dir: &Path) -> Result<Option<PolicyRules>, String> {
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

/// The directories a daemon-run proposal reads: `<state_root>/policies` and
/// `<cwd>/.car/policies`.
pub fn dirs(state_root: &Path, cwd: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = vec![state_root.join("policies")];
    if let Some(cwd) = cwd {
        dirs.push(cwd.join(".car").join("policies"));
    }
    dirs
}

/// Every rule of `dirs`, merged; the first directory that cannot be read, or file that does
/// not parse, is the error (the caller fails closed).
pub fn load_all(dirs: &[PathBuf]) -> Result<PolicyRules, String> {
    let mut rules = PolicyRules::default();
    for dir in dirs {
        if let Some(found) = load_dir(dir)? {
            rules.extend(found);
        }
    }
    Ok(rules)
}

/// The sliding windows of one connection's `rate_limit_tool` rules, by rule.
pub type RateWindows = BTreeMap<String, VecDeque<Instant>>;

/// Admits one call of `tool` under `limits` at `now`: each rule of the tool whose window has
/// room records the call (budget is consumed at admission); each that is full refuses it,
/// and a refused call takes no slot of that rule.
pub fn admit_rates(
    windows: &mut RateWindows,
    limits: &[RateLimit],
    tool: &str,
    now: Instant,
) -> Vec<PolicyFinding> {
    let mut refused = Vec::new();
    for limit in limits.iter().filter(|l| l.tool == tool) {
        let window = windows.entry(limit.key()).or_default();
        let span = Duration::from_secs_f64(limit.interval_secs);
        while window
            .front()
            .is_some_and(|t| now.duration_since(*t) >= span)
        {
            window.pop_front();
        }
        if limit.admits(window.len()) {
            window.push_back(now);
        } else {
            refused.push(limit.finding());
        }
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_window_refuses_without_taking_a_slot_and_frees_as_calls_age() {
        let limits = vec![RateLimit {
            tool: "send".into(),
            max_calls: 2,
            interval_secs: 10.0,
        }];
        let mut w = RateWindows::new();
        let t0 = Instant::now();
        assert!(admit_rates(&mut w, &limits, "send", t0).is_empty());
        assert!(admit_rates(&mut w, &limits, "send", t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(
            admit_rates(&mut w, &limits, "send", t0 + Duration::from_secs(2)).len(),
            1
        );
        assert!(admit_rates(&mut w, &limits, "other", t0).is_empty());
        // The first call ages out at t0 + 10 s: one more is admitted.
        assert!(admit_rates(&mut w, &limits, "send", t0 + Duration::from_secs(10)).is_empty());
        assert_eq!(
            admit_rates(&mut w, &limits, "send", t0 + Duration::from_secs(10)).len(),
            1
        );
        let zero = vec![RateLimit {
            max_calls: 0,
            ..limits[0].clone()
        }];
        assert_eq!(
            admit_rates(&mut RateWindows::new(), &zero, "send", t0).len(),
            1
        );
    }

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
