//! Pid records: `<run_dir>/<id>.json`, one per live child, so a later daemon can adopt
//! children a previous one left running.
//!
//! Written atomically (`car_proto::safe_file::write_atomic`: a `0600` temp file in
//! `run_dir`, fsync, `rename`) right after a spawn
//! and removed when the supervisor sees the child gone. A record that does not parse, or
//! names a dead or different process (see `procinfo::is_same_process`), is stale and is
//! removed by the next `start`/`adopt`/`stop` of that id. Reads go through
//! `car_proto::safe_file` (no symlink, no FIFO, at most [`MAX_RECORD_BYTES`]).

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use car_proto::safe_file::{self, ReadLimits};
use serde::{Deserialize, Serialize};

/// The most bytes of a pid record read (a real one is a few hundred).
pub(crate) const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// The content of `<id>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PidRecord {
    pub pid: u32,
    pub pgid: i32,
    /// `/proc/<pid>/stat` start time (clock ticks since boot); `None` off Linux.
    pub starttime: Option<u64>,
    pub command: String,
    /// RFC 3339 millis.
    pub started_at: String,
    /// The same instant as milliseconds since the Unix epoch (for the stable-run test).
    pub started_unix_ms: u64,
}

pub(crate) fn path(run_dir: &Path, id: &str) -> PathBuf {
    run_dir.join(format!("{id}.json"))
}

/// Writes `record` for `id` atomically, creating `run_dir` (`0700`) when missing.
pub(crate) fn write(run_dir: &Path, id: &str, record: &PidRecord) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(run_dir)?;
    let mut bytes = serde_json::to_vec_pretty(record)?;
    bytes.push(b'\n');
    safe_file::write_atomic(&path(run_dir, id), &bytes, 0o600)
}

/// The record for `id`; an unreadable or malformed one is removed (logged) and `None`.
pub(crate) fn read(run_dir: &Path, id: &str) -> Option<PidRecord> {
    let file = path(run_dir, id);
    let text = match safe_file::read_text(&file, ReadLimits::cap(MAX_RECORD_BYTES)) {
        Ok(text) => text,
        Err(e) if e.is_not_found() => return None,
        Err(e) => {
            tracing::warn!(path = %file.display(), error = %e, "cannot read pid record");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(record) => Some(record),
        Err(e) => {
            tracing::warn!(path = %file.display(), error = %e, "removing malformed pid record");
            remove(run_dir, id);
            None
        }
    }
}

/// Removes the record for `id` (absent is fine).
pub(crate) fn remove(run_dir: &Path, id: &str) {
    let file = path(run_dir, id);
    match fs::remove_file(&file) {
        Ok(()) => tracing::debug!(path = %file.display(), "removed pid record"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %file.display(), error = %e, "cannot remove pid record"),
    }
}

/// Removes the record for `id` only if it still names `pid` (a newer run may own it).
pub(crate) fn remove_if_pid(run_dir: &Path, id: &str, pid: u32) {
    let file = path(run_dir, id);
    let current = fs::read_to_string(&file)
        .ok()
        .and_then(|t| serde_json::from_str::<PidRecord>(&t).ok());
    match current {
        Some(record) if record.pid != pid => {}
        _ => remove(run_dir, id),
    }
}

/// Ids that have a record (not checked for liveness).
pub(crate) fn ids(run_dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(run_dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id = name.strip_suffix(".json")?;
            (!id.starts_with('.') && !id.is_empty()).then(|| id.to_string())
        })
        .collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn sample(pid: u32) -> PidRecord {
        PidRecord {
            pid,
            pgid: i32::try_from(pid).unwrap(),
            starttime: Some(77),
            command: "/bin/sh".into(),
            started_at: "2024-01-01T00:00:00.000Z".into(),
            started_unix_ms: 1_704_067_200_000,
        }
    }

    #[test]
    fn write_read_remove() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run/agents");
        write(&run, "a1", &sample(10)).unwrap();
        let mode = fs::metadata(path(&run, "a1")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read(&run, "a1"), Some(sample(10)));
        assert_eq!(ids(&run), vec!["a1".to_string()]);
        remove_if_pid(&run, "a1", 11);
        assert!(
            read(&run, "a1").is_some(),
            "a record naming another pid is kept"
        );
        remove_if_pid(&run, "a1", 10);
        assert_eq!(read(&run, "a1"), None);
        assert!(ids(&run).is_empty());
    }

    #[test]
    fn malformed_record_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(path(dir.path(), "bad"), "{not json").unwrap();
        assert_eq!(read(dir.path(), "bad"), None);
        assert!(!path(dir.path(), "bad").exists());
    }
}
