//! The task store: one JSON file per task in a directory the daemon chooses.
//!
//! ```text
//! <tasks_dir>/                 0700, created on first write
//!     9946d03a-b.json          0600: a prompt task, CAR's exact shape (no `kind`)
//!     backup-3f09a1.json       0600: a command task, `"kind": "command"`
//!     .tmp-XXXXXX              an in-flight write
//! ```
//!
//! A file whose `kind` is `"command"` is a [`CommandTask`]; any other is a prompt
//! [`Task`]. Writes are atomic (temp file, fsync, rename, directory fsync), so a reader sees
//! the old or the new task, never a mix. Ids are checked to be filename-safe before they
//! become paths.
//!
//! Read-modify-write cycles take a per-id async lock ([`TaskStore::lock`]) shared by all
//! clones of one store: construct one `TaskStore` per directory and clone it into the
//! prompt runner, the daemon timers and the OS scheduler. Separate stores on one directory
//! (e.g. two processes) only get atomic writes, not serialised cycles.
//! File I/O is synchronous; task files are small.

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::command::CommandTask;
use crate::command::CommandTaskExt as _;
use crate::task::Task;
use crate::util::{check_id, ensure_dir, write_atomic};
use crate::SchedulerError;

/// A decoded task file.
#[derive(Debug, Clone, PartialEq)]
pub enum StoredTask {
    /// A `scheduler.*` prompt task.
    Prompt(Task),
    /// A `tasks.*` command task.
    Command(CommandTask),
}

impl StoredTask {
    /// The task's id.
    pub fn id(&self) -> &str {
        match self {
            StoredTask::Prompt(t) => &t.id,
            StoredTask::Command(t) => &t.id,
        }
    }
}

type LockMap = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// Task files under one directory. Cheap to clone; clones share their locks.
#[derive(Debug, Clone)]
pub struct TaskStore {
    dir: PathBuf,
    locks: Arc<LockMap>,
}

impl TaskStore {
    /// A store over `dir`. No I/O: the directory is created (0700) on the first write.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            locks: Arc::default(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of task `id` (which must be filename-safe).
    pub fn path_of(&self, id: &str) -> Result<PathBuf, SchedulerError> {
        check_id("id", id)?;
        Ok(self.dir.join(format!("{id}.json")))
    }

    /// Serialises read-modify-write cycles on task `id` among clones of this store.
    pub async fn lock(&self, id: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            map.entry(id.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// Loads task `id`; `None` if there is no such file.
    pub fn load(&self, id: &str) -> Result<Option<StoredTask>, SchedulerError> {
        let path = self.path_of(id)?;
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SchedulerError::io("reading", &path, e)),
        };
        decode_file(&path, &bytes).map(Some)
    }

    /// Loads prompt task `id`; `None` if missing or a command task.
    pub fn load_prompt(&self, id: &str) -> Result<Option<Task>, SchedulerError> {
        Ok(match self.load(id)? {
            Some(StoredTask::Prompt(t)) => Some(t),
            _ => None,
        })
    }

    /// Loads command task `id`; `None` if missing or a prompt task.
    pub fn load_command(&self, id: &str) -> Result<Option<CommandTask>, SchedulerError> {
        Ok(match self.load(id)? {
            Some(StoredTask::Command(t)) => Some(t),
            _ => None,
        })
    }

    /// Writes a prompt task atomically (0600).
    pub fn save_prompt(&self, task: &Task) -> Result<(), SchedulerError> {
        self.save(
            &task.id,
            &serde_json::to_value(task).expect("task serialises"),
        )
    }

    /// Writes a command task atomically (0600), with `"kind": "command"`.
    pub fn save_command(&self, task: &CommandTask) -> Result<(), SchedulerError> {
        self.save(&task.id, &task.to_stored_json())
    }

    fn save(&self, id: &str, value: &serde_json::Value) -> Result<(), SchedulerError> {
        let path = self.path_of(id)?;
        ensure_dir(&self.dir, 0o700)?;
        let mut bytes = serde_json::to_vec_pretty(value).expect("json serialises");
        bytes.push(b'\n');
        write_atomic(&path, &bytes, 0o600)
    }

    /// Deletes task `id`; whether a file was there.
    pub fn delete(&self, id: &str) -> Result<bool, SchedulerError> {
        let path = self.path_of(id)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(SchedulerError::io("deleting", &path, e)),
        }
    }

    /// Every decodable task, sorted by id. A missing directory is empty; an unreadable one
    /// is an error; an unreadable or corrupt file is skipped with a warning.
    pub fn list(&self) -> Result<Vec<StoredTask>, SchedulerError> {
        let mut out = Vec::new();
        for path in self.files()? {
            match fs::read(&path)
                .map_err(|e| SchedulerError::io("reading", &path, e))
                .and_then(|b| decode_file(&path, &b))
            {
                Ok(task) => out.push(task),
                Err(e) => tracing::warn!(error = %e, "skipping task file"),
            }
        }
        out.sort_by(|a, b| a.id().cmp(b.id()));
        Ok(out)
    }

    /// The `*.json` task files (not temp files). Missing directory: none.
    pub(crate) fn files(&self) -> Result<Vec<PathBuf>, SchedulerError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SchedulerError::io("listing", &self.dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| SchedulerError::io("listing", &self.dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(id) = name.strip_suffix(".json") {
                if crate::util::is_safe_id(id) {
                    out.push(entry.path());
                }
            }
        }
        Ok(out)
    }
}

fn decode_file(path: &Path, bytes: &[u8]) -> Result<StoredTask, SchedulerError> {
    let corrupt = |message: String| SchedulerError::Corrupt {
        path: path.to_owned(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    let task = if value.get("kind").and_then(|k| k.as_str()) == Some("command") {
        StoredTask::Command(serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?)
    } else {
        StoredTask::Prompt(serde_json::from_value(value).map_err(|e| corrupt(e.to_string()))?)
    };
    // The file name is the id; a file whose content claims another id is not trusted.
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    if stem.as_deref() != Some(task.id()) {
        return Err(corrupt(format!("holds id `{}`", task.id())));
    }
    Ok(task)
}
