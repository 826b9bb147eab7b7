//! The spec registry: one JSON file per agent under the registry directory
//! (`$CAR_HOME/declagents/<id>.json`), holding `{spec, enabled, history}`.
//!
//! - Files are read once at [`Registry::open`] (each at most [`MAX_FILE_BYTES`], through
//!   `car_proto::safe_file`, so a planted symlink or FIFO is skipped, never followed); a file that
//!   does not parse, or whose spec fails [`validate`], is skipped with a warning naming it. Every
//!   read first checks the directory's modification time and re-reads it when it changed, so a file
//!   the user drops in (or removes) while the daemon runs is picked up at the next call (an
//!   in-place edit that keeps the directory's time is not: write a new file and rename it over the
//!   old one, as editors and this registry do).
//! - Every change is written atomically (temp file and rename, mode 0600) before it is answered.
//!   Replacing a spec pushes the previous one onto `history` (at most [`HISTORY`] kept); `revert`
//!   pops it back.
//! - At most [`MAX_AGENTS`] agents.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::methods::declagents::DeclarativeAgentSpec;
use car_proto::safe_file::{self, ReadLimits};
use serde::{Deserialize, Serialize};

use crate::validate;

/// The most bytes of one registry file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most agents registered.
pub const MAX_AGENTS: usize = 256;
/// Previous specs kept per agent for `revert`.
pub const HISTORY: usize = 8;

/// One registry file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub spec: DeclarativeAgentSpec,
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Previous specs, newest last.
    #[serde(default)]
    pub history: Vec<DeclarativeAgentSpec>,
}

impl Entry {
    /// Its `declagents.list` row.
    pub fn row(&self) -> car_proto::methods::declagents::AgentRow {
        car_proto::methods::declagents::AgentRow {
            id: self.spec.id.to_string(),
            name: crate::display_name(&self.spec),
            kind: "declarative".into(),
            enabled: self.enabled,
            tools: crate::allowed_tools(&self.spec),
            goal: self.spec.goal.clone(),
            scenarios: self.spec.scenarios.clone(),
        }
    }
}

fn yes() -> bool {
    true
}

/// The registered agents.
#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// The directory's modification time at the last read.
    seen: Mutex<Option<std::time::SystemTime>>,
}

impl Registry {
    /// Opens (and reads) the registry in `dir`; a missing directory is an empty registry.
    pub fn open(dir: &Path) -> Self {
        let registry = Registry {
            dir: dir.to_path_buf(),
            entries: Mutex::new(BTreeMap::new()),
            seen: Mutex::new(None),
        };
        registry.reload();
        registry
    }

    /// Where agent `id`'s file lives.
    pub fn path_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn dir_time(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.dir).and_then(|m| m.modified()).ok()
    }

    /// Re-reads the directory when its modification time changed since the last read.
    fn refresh(&self) {
        let now = self.dir_time();
        let changed = *self.seen.lock().expect("seen lock") != now;
        if changed {
            self.reload();
        }
    }

    /// Re-reads every file in the directory.
    pub fn reload(&self) {
        *self.seen.lock().expect("seen lock") = self.dir_time();
        let mut found = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(&self.dir) {
            for item in dir.flatten() {
                let path = item.path();
                if path.extension().and_then(|e| e.to_str()) != Some("json") {
                    continue;
                }
                if found.len() >= MAX_AGENTS {
                    tracing::warn!(dir = %self.dir.display(), "more than {MAX_AGENTS} declarative agents; the rest are ignored");
                    break;
                }
                match read_entry(&path) {
                    Ok(entry) => {
                        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                        if stem != entry.spec.id.as_str() {
                            tracing::warn!(file = %path.display(), id = %entry.spec.id, "declarative agent file is not named after its id; skipped");
                            continue;
                        }
                        found.insert(entry.spec.id.to_string(), entry);
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), error = %e, "declarative agent file skipped")
                    }
                }
            }
        }
        *self.entries.lock().expect("registry lock") = found;
    }

    /// Every entry, by id.
    pub fn entries(&self) -> Vec<Entry> {
        self.refresh();
        self.entries
            .lock()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }

    pub fn get(&self, id: &str) -> Option<Entry> {
        self.refresh();
        self.entries.lock().expect("registry lock").get(id).cloned()
    }

    /// Registers `spec` (replacing an agent of the same id, whose spec goes to its
    /// history); answers whether it replaced one.
    pub fn register(&self, spec: DeclarativeAgentSpec) -> Result<bool, String> {
        validate(&spec)?;
        self.refresh();
        let id = spec.id.to_string();
        let mut entries = self.entries.lock().expect("registry lock");
        if !entries.contains_key(&id) && entries.len() >= MAX_AGENTS {
            return Err(format!(
                "spec.id: at most {MAX_AGENTS} declarative agents may be registered"
            ));
        }
        let entry = match entries.get(&id) {
            Some(old) => {
                let mut history = old.history.clone();
                history.push(old.spec.clone());
                let excess = history.len().saturating_sub(HISTORY);
                history.drain(..excess);
                Entry {
                    spec,
                    enabled: old.enabled,
                    history,
                }
            }
            None => Entry {
                spec,
                enabled: true,
                history: Vec::new(),
            },
        };
        let replaced = entries.contains_key(&id);
        self.write(&id, &entry)?;
        entries.insert(id, entry);
        Ok(replaced)
    }

    /// Removes agent `id` (its file too); answers whether it existed.
    pub fn remove(&self, id: &str) -> Result<bool, String> {
        let mut entries = self.entries.lock().expect("registry lock");
        if entries.remove(id).is_none() {
            return Ok(false);
        }
        match std::fs::remove_file(self.path_of(id)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(format!("cannot remove {}: {e}", self.path_of(id).display())),
        }
    }

    /// Enables or disables agent `id`; `None` when there is no such agent.
    pub fn set_enabled(&self, id: &str, enabled: bool) -> Result<Option<()>, String> {
        self.change(id, |entry| {
            entry.enabled = enabled;
            Ok(())
        })
    }

    /// Restores agent `id`'s previous spec; `None` when there is no such agent.
    pub fn revert(&self, id: &str) -> Result<Option<DeclarativeAgentSpec>, String> {
        self.change(id, |entry| {
            let previous = entry
                .history
                .pop()
                .ok_or_else(|| format!("id: agent {id:?} has no previous spec to revert to"))?;
            entry.spec = previous.clone();
            Ok(previous)
        })
    }

    fn change<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut Entry) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        let mut entries = self.entries.lock().expect("registry lock");
        let Some(entry) = entries.get(id) else {
            return Ok(None);
        };
        let mut changed = entry.clone();
        let out = f(&mut changed)?;
        self.write(id, &changed)?;
        entries.insert(id.to_string(), changed);
        Ok(Some(out))
    }

    fn write(&self, id: &str, entry: &Entry) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        crate::save_json(&self.path_of(id), entry)
    }
}

fn read_entry(path: &Path) -> Result<Entry, String> {
    let bytes =
        safe_file::read(path, ReadLimits::cap(MAX_FILE_BYTES)).map_err(|e| e.to_string())?;
    let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    validate(&entry.spec)?;
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(id: &str, identity: &str) -> DeclarativeAgentSpec {
        serde_json::from_value(json!({"id": id, "identity": identity})).unwrap()
    }

    #[test]
    fn specs_persist_and_revert_to_the_previous_one() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path());
        assert!(!reg.register(spec("a", "one")).unwrap());
        assert!(reg.register(spec("a", "two")).unwrap());
        reg.set_enabled("a", false).unwrap().unwrap();
        let reopened = Registry::open(dir.path());
        let entry = reopened.get("a").unwrap();
        assert_eq!(
            (entry.spec.identity.as_str(), entry.enabled),
            ("two", false)
        );
        assert_eq!(reopened.revert("a").unwrap().unwrap().identity, "one");
        assert!(reopened
            .revert("a")
            .unwrap_err()
            .contains("no previous spec"));
        assert_eq!(
            Registry::open(dir.path()).get("a").unwrap().spec.identity,
            "one"
        );
        assert!(reopened.remove("a").unwrap());
        assert!(!reopened.remove("a").unwrap());
        assert!(Registry::open(dir.path()).entries().is_empty());
        // A file dropped in later is seen at the next read.
        std::fs::write(
            dir.path().join("late.json"),
            serde_json::to_vec(&json!({"spec": {"id": "late"}})).unwrap(),
        )
        .unwrap();
        assert!(reopened.get("late").is_some());
    }

    #[test]
    fn bad_files_are_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("junk.json"), b"{not json").unwrap();
        std::fs::write(
            dir.path().join("other.json"),
            serde_json::to_vec(&json!({"spec": {"id": "mismatch"}})).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("bad id.json"),
            serde_json::to_vec(&json!({"spec": {"id": "bad id"}})).unwrap(),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.json")).unwrap();
        std::fs::write(
            dir.path().join("ok.json"),
            serde_json::to_vec(&json!({"spec": {"id": "ok"}})).unwrap(),
        )
        .unwrap();
        let reg = Registry::open(dir.path());
        let ids: Vec<String> = reg
            .entries()
            .iter()
            .map(|e| e.spec.id.to_string())
            .collect();
        assert_eq!(ids, ["ok"]);
    }
}
