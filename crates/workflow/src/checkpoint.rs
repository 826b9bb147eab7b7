//! Paused runs on disk (`CAR_HOME/workflow-runs`).
//!
//! One file per paused run, `<run_id>.json`, written atomically (a `0600` temp file in the
//! same `0700` directory, then a rename) so a crash never leaves half a checkpoint. A
//! resume claims a run by renaming it to `<run_id>.claimed`: the rename is atomic, so of
//! two concurrent resumes exactly one gets the file; the other sees "no resumable run".
//! Invalid resume input renames the claim back. A finished resume deletes the claimed
//! file; a run that pauses again writes a fresh `<run_id>.json` first. `list_paused` reads
//! only `*.json`, so claimed (in-flight) runs are not listed, and skips files it cannot
//! decode with a warning. Run ids are 32 lowercase hex digits and anything else is refused
//! before it reaches a path. File I/O is synchronous: checkpoints are small.
//!
//! Every read and write goes through `car_proto::safe_file`, the one safe-file API the
//! daemon's crates share: a checkpoint or dedup seen-set is opened without following a
//! final symlink and without blocking on a FIFO, only a regular file is read, and at most
//! [`MAX_FILE_BYTES`] of it; a write over that cap is refused (it could not be read back);
//! writes are `safe_file::write_atomic` (exact mode `0600`, `O_EXCL` temp file, fsync,
//! rename, directory fsync).

use std::fs;
use std::path::{Path, PathBuf};

use car_proto::safe_file::{self, ReadLimits};

use crate::model::{Object, Workflow};
use crate::WorkflowError;

pub use car_proto::methods::workflow::Checkpoint;

/// The workflow a checkpoint carries, as the model (the checkpoint holds the manifest).
pub(crate) fn workflow_of(cp: &Checkpoint) -> Result<Workflow, WorkflowError> {
    serde_json::from_value(serde_json::Value::Object(cp.workflow.clone())).map_err(|e| {
        WorkflowError::Store(format!(
            "checkpoint {}: its workflow does not decode: {e}",
            cp.run_id
        ))
    })
}

/// The manifest of `wf`, as a checkpoint carries it.
pub(crate) fn manifest_of(wf: &Workflow) -> Result<Object, WorkflowError> {
    match serde_json::to_value(wf) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(WorkflowError::Store(
            "a workflow encodes as a non-object".into(),
        )),
        Err(e) => Err(WorkflowError::Store(format!("encoding the workflow: {e}"))),
    }
}

/// One `workflow.list_paused` entry.
pub use car_proto::methods::workflow::PausedRow as PausedSummary;

/// Where paused runs (and dedup seen-sets) live.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    dedup_dir: PathBuf,
}

impl CheckpointStore {
    /// Checkpoints in `dir` (the daemon passes `CAR_HOME/workflow-runs`); dedup seen-sets
    /// in its sibling `workflow-dedup`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let dir = dir.into();
        let dedup_dir = dir.parent().map_or_else(
            || PathBuf::from("workflow-dedup"),
            |p| p.join("workflow-dedup"),
        );
        CheckpointStore { dir, dedup_dir }
    }

    /// Keep dedup seen-sets in `dedup_dir` instead.
    pub fn with_dedup_dir(mut self, dedup_dir: impl Into<PathBuf>) -> Self {
        self.dedup_dir = dedup_dir.into();
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn dedup_dir(&self) -> &Path {
        &self.dedup_dir
    }

    /// Paused runs, oldest first. Claimed and undecodable checkpoints are skipped.
    pub fn list_paused(&self) -> Vec<PausedSummary> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot list workflow checkpoints");
                return Vec::new();
            }
        };
        let mut out: Vec<PausedSummary> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let path = entry.path();
                let stem = path.file_name()?.to_str()?.strip_suffix(".json")?;
                if !valid_run_id(stem) {
                    return None;
                }
                match read_checkpoint(&path) {
                    Ok(cp) => Some(PausedSummary {
                        run_id: cp.run_id,
                        paused_stage_id: cp.paused_stage_id,
                        prompt: cp.prompt,
                        created_at: cp.created_at,
                    }),
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "skipping corrupt workflow checkpoint");
                        None
                    }
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.created_at, &a.run_id).cmp(&(&b.created_at, &b.run_id)));
        out
    }

    /// The paused checkpoint of `run_id`, if one is waiting (not claimed).
    pub fn get(&self, run_id: &str) -> Option<Checkpoint> {
        if !valid_run_id(run_id) {
            return None;
        }
        read_checkpoint(&self.path(run_id, "json")).ok()
    }

    pub(crate) fn save(&self, cp: &Checkpoint) -> Result<(), WorkflowError> {
        let bytes = serde_json::to_vec_pretty(cp).map_err(|e| store_err("encode", e))?;
        write_atomic(&self.dir, &self.path(&cp.run_id, "json"), &bytes)
    }

    /// Take `run_id` for resuming: rename it to `.claimed` and decode it.
    pub(crate) fn claim(&self, run_id: &str) -> Result<Checkpoint, WorkflowError> {
        let not_resumable = || WorkflowError::NotResumable {
            run_id: run_id.to_string(),
        };
        if !valid_run_id(run_id) {
            return Err(not_resumable());
        }
        let claimed = self.path(run_id, "claimed");
        fs::rename(self.path(run_id, "json"), &claimed).map_err(|_| not_resumable())?;
        match read_checkpoint(&claimed) {
            Ok(cp) if cp.run_id == run_id => Ok(cp),
            Ok(_) => {
                self.restore(run_id);
                Err(WorkflowError::Store(format!(
                    "checkpoint {run_id} names another run"
                )))
            }
            Err(e) => {
                self.restore(run_id);
                Err(WorkflowError::Store(format!(
                    "checkpoint {run_id} is unreadable: {e}"
                )))
            }
        }
    }

    /// Give a claim back (the resume was refused).
    pub(crate) fn restore(&self, run_id: &str) {
        if let Err(e) = fs::rename(self.path(run_id, "claimed"), self.path(run_id, "json")) {
            tracing::error!(run_id, error = %e, "could not restore a claimed workflow checkpoint");
        }
    }

    /// Drop a claim (the resume finished or paused again under a fresh checkpoint).
    pub(crate) fn release(&self, run_id: &str) {
        if let Err(e) = fs::remove_file(self.path(run_id, "claimed")) {
            tracing::warn!(run_id, error = %e, "could not remove a claimed workflow checkpoint");
        }
    }

    fn path(&self, run_id: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{run_id}.{ext}"))
    }
}

/// A fresh run id: 16 random bytes as 32 hex digits.
pub(crate) fn new_run_id() -> String {
    car_proto::token::random_hex(16)
}

fn valid_run_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// The cap on one checkpoint or dedup seen-set file, read or written: 64 MiB.
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

fn read_checkpoint(path: &Path) -> Result<Checkpoint, String> {
    let bytes = read_capped(path)?.ok_or_else(|| "no such file".to_owned())?;
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// The bytes of a checkpoint-directory file (`None` when there is none), through
/// `car_proto::safe_file` with [`MAX_FILE_BYTES`]; the error is a sentence about the file.
pub(crate) fn read_capped(path: &Path) -> Result<Option<Vec<u8>>, String> {
    match safe_file::read(path, ReadLimits::cap(MAX_FILE_BYTES)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

fn store_err(what: &str, e: impl std::fmt::Display) -> WorkflowError {
    WorkflowError::Store(format!("{what}: {e}"))
}

/// Create `dir` (mode 0700) if needed.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), WorkflowError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| store_err(&format!("create {}", dir.display()), e))
}

/// Write `bytes` to `path` atomically (`car_proto::safe_file::write_atomic`, mode 0600),
/// creating `dir` first; over [`MAX_FILE_BYTES`] is refused.
pub(crate) fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), WorkflowError> {
    ensure_dir(dir)?;
    let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if len > MAX_FILE_BYTES {
        return Err(store_err(
            &format!("write {}", path.display()),
            format!("{len} bytes is over the cap of {MAX_FILE_BYTES} bytes"),
        ));
    }
    safe_file::write_atomic(path, bytes, 0o600)
        .map_err(|e| store_err(&format!("write {}", path.display()), e))
}
