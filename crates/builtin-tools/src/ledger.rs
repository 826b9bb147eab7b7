//! The read-before-edit guard: what one session has read.
//!
//! The daemon keeps one [`ReadLedger`] per session and passes it to every
//! [`crate::Workspace::execute`] call of that session. It uses interior mutability (a
//! mutex), so it is shared as `&ReadLedger` and is `Send + Sync`.
//!
//! # Contract
//!
//! - `read_file` records, per file (keyed by its canonical physical path), a fingerprint of the
//!   content it read (length and SHA-256) and which line ranges were returned. A read whose
//!   fingerprint differs from the recorded one starts the record afresh.
//! - Creating a file that does not exist needs no read.
//! - Modifying an existing file needs a record whose fingerprint equals the file's current content,
//!   else `Refused(not_read)` (no record) or `Refused(stale)` (changed on disk since).
//! - A targeted `edit_file` (no `replace_all`, `old_text` matching exactly once) needs any read of
//!   the file, a single page included.
//! - Overwrite (`write_file`), append (`write_file` with `append`) and `edit_file` with
//!   `replace_all` need every line read: one full read, or pages that together cover every line;
//!   else `Refused(partial_read)`. An empty file is fully read by any read.
//! - After a successful write or edit the ledger is updated to the new content, so the session can
//!   keep working on a file it just wrote without reading it back: writes and appends leave it
//!   fully read; an edit keeps the coverage it had (full stays full, a partial read stays partial,
//!   with its recorded ranges unchanged).
//! - Modifications are serialized process-wide, check to ledger update, so concurrent modifications
//!   of one file cannot lose each other's changes (the later one is `stale`).
//! - At most [`MAX_LEDGER_FILES`] files are remembered; beyond that the least recently touched
//!   record is dropped (that file then needs reading again).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use sha2::{Digest, Sha256};

use crate::error::{RefusalReason, ToolError};

/// Serializes every modification (write_file, edit_file) in the process, so the guard's
/// check, the write and the ledger update happen as one step: two concurrent edits of the
/// same file (parallel tool calls, or two sessions) cannot both pass the check against the
/// same content and silently lose one another's change; the second sees `stale`.
static MUTATIONS: Mutex<()> = Mutex::new(());

/// Holds the process-wide modification lock (see [`MUTATIONS`]) until dropped.
pub(crate) fn serialize_mutations() -> MutexGuard<'static, ()> {
    MUTATIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many files one ledger remembers.
pub const MAX_LEDGER_FILES: usize = 4096;

/// What a session has read; see the module docs for the contract.
#[derive(Debug, Default)]
pub struct ReadLedger {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    files: HashMap<PathBuf, Entry>,
    tick: u64,
}

#[derive(Debug, Clone)]
struct Entry {
    fingerprint: Fingerprint,
    total_lines: usize,
    /// Half-open line ranges `[start, end)` returned by reads, sorted and merged.
    ranges: Vec<(usize, usize)>,
    touched: u64,
}

impl Entry {
    fn fully_read(&self) -> bool {
        self.total_lines == 0
            || self
                .ranges
                .first()
                .is_some_and(|&(s, e)| s == 0 && e >= self.total_lines)
    }
}

/// The identity of a file's content: its length and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    len: u64,
    digest: [u8; 32],
}

impl Fingerprint {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        Fingerprint {
            len: bytes.len() as u64,
            digest: Sha256::digest(bytes).into(),
        }
    }
}

/// What a modification needs from the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Any read (a targeted, unique `edit_file`).
    AnyRead,
    /// Every line read (overwrite, append, `replace_all`).
    FullRead,
}

impl ReadLedger {
    /// An empty ledger (nothing read yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many files are remembered.
    pub fn len(&self) -> usize {
        self.lock().files.len()
    }

    /// Whether nothing has been recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (as if the session had read nothing).
    pub fn clear(&self) {
        self.lock().files.clear();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters (each update is one insert), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that lines `[start, end)` of a file with `total_lines` lines were returned.
    pub(crate) fn record_read(
        &self,
        key: &Path,
        fingerprint: Fingerprint,
        total_lines: usize,
        start: usize,
        end: usize,
    ) {
        let mut inner = self.lock();
        let tick = inner.next_tick();
        let mut entry = match inner.files.remove(key) {
            Some(e) if e.fingerprint == fingerprint => e,
            _ => Entry {
                fingerprint,
                total_lines,
                ranges: Vec::new(),
                touched: tick,
            },
        };
        entry.touched = tick;
        if end > start {
            entry.ranges.push((start, end));
            entry.ranges = merge(std::mem::take(&mut entry.ranges));
        }
        inner.insert(key.to_path_buf(), entry);
    }

    /// Records that the session wrote the whole content of a file (create, overwrite,
    /// append): it is now fully read.
    pub(crate) fn record_write(&self, key: &Path, fingerprint: Fingerprint, total_lines: usize) {
        let mut inner = self.lock();
        let tick = inner.next_tick();
        inner.files.remove(key);
        inner.insert(
            key.to_path_buf(),
            Entry {
                fingerprint,
                total_lines,
                ranges: vec![(0, total_lines)],
                touched: tick,
            },
        );
    }

    /// Records an edit: the new content's fingerprint, keeping the coverage kind.
    pub(crate) fn record_edit(&self, key: &Path, fingerprint: Fingerprint, total_lines: usize) {
        let mut inner = self.lock();
        let tick = inner.next_tick();
        let Some(old) = inner.files.remove(key) else {
            return;
        };
        let ranges = if old.fully_read() {
            vec![(0, total_lines)]
        } else {
            old.ranges
        };
        inner.insert(
            key.to_path_buf(),
            Entry {
                fingerprint,
                total_lines,
                ranges,
                touched: tick,
            },
        );
    }

    /// Checks the guard for modifying the existing file `key` whose current content has
    /// `current` as fingerprint. `display` names it in messages.
    pub(crate) fn check(
        &self,
        key: &Path,
        current: &Fingerprint,
        need: Need,
        display: &str,
    ) -> Result<(), ToolError> {
        let inner = self.lock();
        let Some(entry) = inner.files.get(key) else {
            return Err(ToolError::refused(
                RefusalReason::NotRead,
                format!(
                    "`{display}` already exists and has not been read in this session; read it \
                     with read_file before modifying it"
                ),
            ));
        };
        if entry.fingerprint != *current {
            return Err(ToolError::refused(
                RefusalReason::Stale,
                format!(
                    "`{display}` changed on disk since it was last read; read it again before \
                     modifying it"
                ),
            ));
        }
        if need == Need::FullRead && !entry.fully_read() {
            let seen: usize = entry.ranges.iter().map(|(s, e)| e - s).sum();
            return Err(ToolError::refused(
                RefusalReason::PartialRead,
                format!(
                    "only {seen} of the {} lines of `{display}` were read; overwriting, \
                     appending and replace_all need every line read (read_file without offset, \
                     or pages covering the whole file)",
                    entry.total_lines
                ),
            ));
        }
        Ok(())
    }
}

impl Inner {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn insert(&mut self, key: PathBuf, entry: Entry) {
        if self.files.len() >= MAX_LEDGER_FILES {
            if let Some(oldest) = self
                .files
                .iter()
                .min_by_key(|(_, e)| e.touched)
                .map(|(k, _)| k.clone())
            {
                self.files.remove(&oldest);
            }
        }
        self.files.insert(key, entry);
    }
}

/// Sorts and merges overlapping or adjacent half-open ranges.
fn merge(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_covers_adjacent_pages() {
        assert_eq!(merge(vec![(10, 20), (0, 10)]), vec![(0, 20)]);
        assert_eq!(merge(vec![(0, 5), (6, 9), (3, 6)]), vec![(0, 9)]);
        assert_eq!(merge(vec![(0, 2), (4, 6)]), vec![(0, 2), (4, 6)]);
    }

    #[test]
    fn pages_add_up_to_a_full_read() {
        let ledger = ReadLedger::new();
        let key = Path::new("/k");
        let fp = Fingerprint::of(b"a\nb\nc\n");
        ledger.record_read(key, fp.clone(), 3, 0, 2);
        assert_eq!(
            ledger
                .check(key, &fp, Need::FullRead, "k")
                .unwrap_err()
                .reason(),
            Some(RefusalReason::PartialRead)
        );
        ledger.check(key, &fp, Need::AnyRead, "k").unwrap();
        ledger.record_read(key, fp.clone(), 3, 2, 3);
        ledger.check(key, &fp, Need::FullRead, "k").unwrap();
        let other = Fingerprint::of(b"changed");
        assert_eq!(
            ledger
                .check(key, &other, Need::AnyRead, "k")
                .unwrap_err()
                .reason(),
            Some(RefusalReason::Stale)
        );
        // A read of different content starts afresh.
        ledger.record_read(key, other.clone(), 1, 0, 0);
        assert!(ledger.check(key, &other, Need::FullRead, "k").is_err());
    }

    #[test]
    fn eviction_keeps_the_bound() {
        let ledger = ReadLedger::new();
        for i in 0..MAX_LEDGER_FILES + 3 {
            let key = PathBuf::from(format!("/f{i}"));
            ledger.record_write(&key, Fingerprint::of(b""), 0);
        }
        assert_eq!(ledger.len(), MAX_LEDGER_FILES);
        let first = Path::new("/f0");
        assert!(ledger
            .check(first, &Fingerprint::of(b""), Need::AnyRead, "f0")
            .is_err());
    }
}
