//! [`SecretGrants`]: which agent may read which secret (`secret.grant` / `secret.revoke` /
//! `secret.grants`, host-only).
//!
//! # Rules
//! - An agent session reads no secret until a host grants it one: `secret.get` and `secret.status`
//!   answer an agent only for granted `(service, key)` pairs, `secret.list` shows it only those,
//!   and `secret.put` / `secret.delete` are refused to agents outright (an agent could otherwise
//!   replace the host's API key). Operator and host sessions are unaffected. This is stricter than
//!   CAR, which labels `secret.get` an agent method with no scope (docs/security.md).
//! - Grants name the canonical secret id (`car_secrets::SecretId`: `service` defaults to `car`,
//!   `openrouter` means `OPENROUTER_API_KEY`), so an alias cannot widen or dodge one.
//! - They persist in `$CAR_HOME/secret-grants.json` (mode 0600, replaced atomically through
//!   `car_proto::safe_file`; read capped at [`MAX_FILE_BYTES`]). An unreadable or corrupt file
//!   fails closed: the daemon logs the error and starts with no grants, so agents read nothing
//!   until the host grants again. At most [`MAX_GRANTS`] grants exist.
//! - The set is small and read on every agent secret call; one mutex guards it and no callback runs
//!   under it. The file is written while the lock is held so two concurrent changes cannot persist
//!   out of order.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::errors::RpcError;
use car_proto::methods::secret::GrantRow;
use car_proto::safe_file::{self, ReadLimits};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The file under the state root.
pub const FILE_NAME: &str = "secret-grants.json";
/// The most grants the daemon keeps.
pub const MAX_GRANTS: usize = 10_000;
/// The largest grants file the daemon reads.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Default, Serialize, Deserialize)]
struct OnDisk {
    grants: Vec<GrantRow>,
}

/// The persisted grant set.
#[derive(Debug)]
pub struct SecretGrants {
    path: PathBuf,
    grants: Mutex<BTreeSet<GrantRow>>,
}

fn row(agent_id: &str, id: &car_secrets::SecretId) -> GrantRow {
    GrantRow {
        agent_id: agent_id.to_string(),
        service: id.service().to_string(),
        key: id.key().to_string(),
    }
}

impl SecretGrants {
    /// Loads `<state_root>/secret-grants.json` (absent: no grants; unreadable: no grants,
    /// logged).
    pub fn open(state_root: &Path) -> Self {
        let path = state_root.join(FILE_NAME);
        let grants = match safe_file::read(&path, ReadLimits::cap(MAX_FILE_BYTES)) {
            Ok(bytes) => match serde_json::from_slice::<OnDisk>(&bytes) {
                Ok(disk) => disk.grants.into_iter().take(MAX_GRANTS).collect(),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "secret grants file is corrupt; no agent may read a secret until the host grants again");
                    BTreeSet::new()
                }
            },
            Err(e) if e.is_not_found() => BTreeSet::new(),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "secret grants file is unreadable; no agent may read a secret until the host grants again");
                BTreeSet::new()
            }
        };
        SecretGrants {
            path,
            grants: Mutex::new(grants),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<GrantRow>> {
        self.grants.lock().expect("secret grants lock")
    }

    /// Whether `agent_id` may read `id`.
    pub fn allows(&self, agent_id: &str, id: &car_secrets::SecretId) -> bool {
        self.lock().contains(&row(agent_id, id))
    }

    /// The grants, all or one agent's, sorted.
    pub fn list(&self, agent_id: Option<&str>) -> Vec<GrantRow> {
        self.lock()
            .iter()
            .filter(|g| agent_id.is_none_or(|a| g.agent_id == a))
            .cloned()
            .collect()
    }

    /// Adds (`grant = true`) or removes a grant; answers the row and whether the set
    /// changed. Persists before answering; on a write failure the change is undone.
    pub fn change(
        &self,
        agent_id: &str,
        id: &car_secrets::SecretId,
        grant: bool,
    ) -> Result<(GrantRow, bool), RpcError> {
        let r = row(agent_id, id);
        let mut grants = self.lock();
        let changed = if grant {
            if !grants.contains(&r) && grants.len() >= MAX_GRANTS {
                return Err(RpcError::invalid_params(format!(
                    "agent_id: the daemon already holds {MAX_GRANTS} secret grants; revoke some first"
                ))
                .with_data(json!({"reason": "too_many_grants"})));
            }
            grants.insert(r.clone())
        } else {
            grants.remove(&r)
        };
        if changed {
            if let Err(e) = self.persist(&grants) {
                if grant {
                    grants.remove(&r);
                } else {
                    grants.insert(r.clone());
                }
                return Err(RpcError::internal(format!(
                    "could not save the secret grants: {e}"
                )));
            }
        }
        Ok((r, changed))
    }

    fn persist(&self, grants: &BTreeSet<GrantRow>) -> std::io::Result<()> {
        let disk = OnDisk {
            grants: grants.iter().cloned().collect(),
        };
        let bytes = serde_json::to_vec_pretty(&disk).expect("grants serialize");
        safe_file::write_atomic(&self.path, &bytes, 0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(key: &str) -> car_secrets::SecretId {
        car_secrets::SecretId::new(None, key).unwrap()
    }

    #[test]
    fn grants_persist_and_aliases_are_one_secret() {
        let dir = tempfile::tempdir().unwrap();
        let grants = SecretGrants::open(dir.path());
        assert!(!grants.allows("a", &id("openrouter")));
        let (r, changed) = grants.change("a", &id("openrouter"), true).unwrap();
        assert!(changed);
        assert_eq!(r.key, "OPENROUTER_API_KEY");
        assert!(
            !grants
                .change("a", &id("OPENROUTER_API_KEY"), true)
                .unwrap()
                .1
        );
        assert!(!grants.allows("b", &id("openrouter")));
        let reopened = SecretGrants::open(dir.path());
        assert!(reopened.allows("a", &id("OPENROUTER_API_KEY")));
        assert_eq!(reopened.list(Some("b")), vec![]);
        assert!(reopened.change("a", &id("openrouter"), false).unwrap().1);
        assert!(!SecretGrants::open(dir.path()).allows("a", &id("openrouter")));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(FILE_NAME))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "the grants file is private");
    }

    #[test]
    fn a_corrupt_or_hostile_file_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), "{not json").unwrap();
        let grants = SecretGrants::open(dir.path());
        assert!(grants.list(None).is_empty());
        std::fs::remove_file(dir.path().join(FILE_NAME)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join(FILE_NAME)).unwrap();
        assert!(SecretGrants::open(dir.path()).list(None).is_empty());
    }
}
