//! [`SecretStore`]: the operations behind `secret.*`, over the files of one directory.

use std::fmt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use car_proto::redact::Redacted;
use serde::Serialize;

use crate::activity::Activity;
use crate::error::{Result, SecretError};
use crate::fsutil;
use crate::names::{validate_value, SecretId, MAX_VALUE_BYTES, TEMP_PREFIX};

/// The store directory's name under `CAR_HOME`.
pub const STORE_DIR: &str = "secrets";

/// One entry of `secret.list`: a name, never a value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct SecretName {
    pub service: String,
    pub key: String,
    /// `Some(true)` for a private regular file the store would read; `None` for an entry
    /// that is present but that `get` would refuse (a link, a loose mode, another owner).
    pub exists: Option<bool>,
}

/// The result of `secret.status`: metadata, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretStatus {
    /// The canonical service and key (after the default and the `openrouter` alias).
    pub service: String,
    pub key: String,
    pub exists: bool,
    /// Length of the value in bytes, when it exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// When the value was last written (file mtime), ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at_ms: Option<u64>,
}

/// The secret store: one `0600` file per secret in a `0700` directory (see the crate docs).
///
/// `Send + Sync`; share it in an `Arc` and call it from blocking threads. Writes and
/// deletes are serialised by a per-store mutex; reads take no lock (renames are atomic).
pub struct SecretStore {
    dir: PathBuf,
    uid: u32,
    write_lock: Mutex<()>,
    activity: Arc<Activity>,
}

impl fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretStore")
            .field("dir", &self.dir)
            .field("uid", &self.uid)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// Opens (creating if needed) the store at `car_home/secrets` with fresh counters.
    /// Creates `car_home` too when it is missing. Fails with
    /// [`SecretError::StoreUnavailable`] when `secrets` is a symbolic link, not a directory
    /// or owned by another user; tightens a group/world-accessible directory to `0700`.
    pub fn open(car_home: &Path) -> Result<Self> {
        Self::open_with_activity(car_home, Arc::new(Activity::new()))
    }

    /// [`SecretStore::open`], counting attempts into `activity` (which outlives the store).
    pub fn open_with_activity(car_home: &Path, activity: Arc<Activity>) -> Result<Self> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(fsutil::DIR_MODE)
            .create(car_home)
            .map_err(|e| SecretError::io("create directory", car_home, e))?;
        let dir = car_home.join(STORE_DIR);
        let uid = fsutil::own_uid(car_home).map_err(|e| {
            SecretError::unavailable(&dir, format!("cannot learn this process's uid: {e}"))
        })?;
        fsutil::ensure_private_dir(&dir, uid)?;
        Ok(SecretStore {
            dir,
            uid,
            write_lock: Mutex::new(()),
            activity,
        })
    }

    /// The store directory (`car_home/secrets`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// This store's attempt counters.
    pub fn activity(&self) -> &Arc<Activity> {
        &self.activity
    }

    /// `secret.put`: stores `value` under (service, key), replacing any previous value.
    /// Returns the canonical id written. Refuses reserved slots.
    pub fn put(
        &self,
        service: Option<&str>,
        key: &str,
        value: &Redacted<String>,
    ) -> Result<SecretId> {
        self.activity.record_write();
        let id = SecretId::new(service, key)?;
        id.refuse_reserved()?;
        self.write(&id, value)?;
        Ok(id)
    }

    /// `secret.get`: the value, or [`SecretError::NotFound`] naming the canonical service
    /// and key. Refuses reserved slots.
    pub fn get(&self, service: Option<&str>, key: &str) -> Result<Redacted<String>> {
        self.activity.record_get();
        let id = SecretId::new(service, key)?;
        id.refuse_reserved()?;
        self.read(&id)?.ok_or_else(|| SecretError::NotFound {
            service: id.service().to_owned(),
            key: id.key().to_owned(),
        })
    }

    /// `secret.delete`: removes the secret; idempotent — `Ok(false)` when there was none.
    /// Refuses reserved slots.
    pub fn delete(&self, service: Option<&str>, key: &str) -> Result<bool> {
        self.activity.record_delete();
        let id = SecretId::new(service, key)?;
        id.refuse_reserved()?;
        self.remove(&id)
    }

    /// `secret.status`: existence, size and last-write time, never the value. An absent
    /// secret is `exists: false`, not an error. Allowed on reserved slots (metadata only).
    pub fn status(&self, service: Option<&str>, key: &str) -> Result<SecretStatus> {
        self.activity.record_status();
        let id = SecretId::new(service, key)?;
        self.ensure_dir()?;
        let meta = fsutil::stat_private_file(&self.path_of(&id), self.uid)?;
        Ok(SecretStatus {
            service: id.service().to_owned(),
            key: id.key().to_owned(),
            exists: meta.is_some(),
            bytes: meta.as_ref().map(|m| m.len()),
            updated_at_ms: meta.as_ref().and_then(fsutil::modified_ms),
        })
    }

    /// `secret.available`: true when the directory exists (or could be recreated) as a
    /// `0700` directory of this user. Never errors.
    pub fn available(&self) -> bool {
        self.activity.record_availability();
        match self.ensure_dir() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "secret store unavailable");
                false
            }
        }
    }

    /// `secret.list`: every stored name, sorted by (service, key), reserved slots included
    /// (names are metadata). Files whose names this store cannot have written, and temp
    /// files, are skipped with a warning. Counts no activity (none of the five counters
    /// is a listing).
    pub fn list(&self) -> Result<Vec<SecretName>> {
        self.ensure_dir()?;
        // Holding the write lock means any temp file seen is stale, not one in flight here.
        let _guard = self.lock();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| SecretError::io("list", &self.dir, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| SecretError::io("list", &self.dir, e))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else {
                tracing::warn!(path = %entry.path().display(), "skipping a non-UTF-8 file name in the secret store");
                continue;
            };
            let Some(id) = SecretId::from_file_name(file_name) else {
                if file_name.starts_with(TEMP_PREFIX) {
                    tracing::warn!(path = %entry.path().display(), "skipping a stale temp file in the secret store");
                    continue;
                }
                tracing::warn!(path = %entry.path().display(), "skipping a file the secret store did not name");
                continue;
            };
            let exists = match fsutil::stat_private_file(&entry.path(), self.uid) {
                Ok(Some(_)) => Some(true),
                Ok(None) => continue, // removed while listing
                Err(e) => {
                    tracing::warn!(error = %e, "listing an unusable secret file");
                    None
                }
            };
            names.push(SecretName {
                service: id.service().to_owned(),
                key: id.key().to_owned(),
                exists,
            });
        }
        names.sort();
        Ok(names)
    }

    /// Looks a secret up by reference, for inference providers configured with a secret
    /// name. Syntax (see [`SecretId::parse`]): `KEY` means service `car`; `SERVICE/KEY`
    /// splits at the first `/`; `openrouter` is the alias for `OPENROUTER_API_KEY`.
    /// `Ok(None)` when no such secret is stored. Reserved slots are refused, so a
    /// user-configured provider cannot send daemon-private credentials anywhere. Counts
    /// as a get attempt.
    pub fn resolve(&self, name: &str) -> Result<Option<Redacted<String>>> {
        self.activity.record_get();
        let id = SecretId::parse(name)?;
        id.refuse_reserved()?;
        self.read(&id)
    }

    /// Daemon-internal write: like [`SecretStore::put`] but reserved slots are allowed.
    /// Only the daemon's own auth code may call this; never route a client request here.
    pub fn put_private(&self, id: &SecretId, value: &Redacted<String>) -> Result<()> {
        self.activity.record_write();
        self.write(id, value)
    }

    /// Daemon-internal read: reserved slots allowed; `Ok(None)` when absent.
    pub fn get_private(&self, id: &SecretId) -> Result<Option<Redacted<String>>> {
        self.activity.record_get();
        self.read(id)
    }

    /// Daemon-internal delete: reserved slots allowed; `Ok(false)` when absent.
    pub fn delete_private(&self, id: &SecretId) -> Result<bool> {
        self.activity.record_delete();
        self.remove(id)
    }

    fn write(&self, id: &SecretId, value: &Redacted<String>) -> Result<()> {
        validate_value(value)?;
        self.ensure_dir()?;
        let _guard = self.lock();
        fsutil::write_atomic(&self.dir, &id.file_name(), value.expose().as_bytes())?;
        tracing::debug!(
            service = id.service(),
            key = id.key(),
            bytes = value.expose().len(),
            "secret written"
        );
        Ok(())
    }

    fn read(&self, id: &SecretId) -> Result<Option<Redacted<String>>> {
        self.ensure_dir()?;
        let path = self.path_of(id);
        let Some(bytes) = fsutil::read_private_file(&path, self.uid, MAX_VALUE_BYTES)? else {
            return Ok(None);
        };
        match String::from_utf8(bytes) {
            Ok(text) => Ok(Some(Redacted::new(text))),
            // The error's Debug would print the bytes; keep only what kind of damage.
            Err(_) => Err(SecretError::Corrupt {
                path,
                problem: "it is not valid UTF-8".into(),
            }),
        }
    }

    fn remove(&self, id: &SecretId) -> Result<bool> {
        self.ensure_dir()?;
        let _guard = self.lock();
        let removed = fsutil::remove(&self.dir, &id.file_name())?;
        tracing::debug!(
            service = id.service(),
            key = id.key(),
            removed,
            "secret deleted"
        );
        Ok(removed)
    }

    /// Re-checks (and if needed recreates or tightens) the directory before each use, so
    /// a directory swapped for a link after `open` is still refused.
    fn ensure_dir(&self) -> Result<()> {
        fsutil::ensure_private_dir(&self.dir, self.uid)
    }

    fn path_of(&self, id: &SecretId) -> PathBuf {
        self.dir.join(id.file_name())
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // The guarded data is (); a panic while holding it leaves nothing inconsistent.
        self.write_lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<SecretStore>();
        assert_send_sync::<Arc<SecretStore>>();
    }
}
