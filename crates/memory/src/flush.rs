//! One flush of one scope: deciding, under the graph lock, between a journal append and a
//! compaction, then writing it.
//!
//! Owns what the store's per-scope flush lock guards ([`Durable`]: the version on disk, the
//! open journal, the "next flush must compact" flag and the write counters) and the
//! blocking write itself. The policy is in [`crate::store`]'s module docs. It must not
//! await or decide which scope to flush; the store calls [`Durable::write`] from
//! `spawn_blocking` with the flush lock held.

use crate::error::MemoryError;
use crate::journal::{self, Journal};
use crate::snapshot;
use crate::store::Versioned;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

/// Counters of one scope's writes since it was loaded (for tests and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushStats {
    /// Journal appends, each followed by one `fdatasync`.
    pub journal_appends: u64,
    /// Full snapshot writes.
    pub compactions: u64,
    /// The journal's current length in bytes (0: none).
    pub journal_bytes: u64,
}

/// What is on disk for one scope; the store's flush lock guards it.
#[derive(Debug)]
pub(crate) struct Durable {
    /// The highest version known to be on disk.
    version: u64,
    journal: Journal,
    /// A write failed (or was interrupted): the next flush writes a full snapshot.
    needs_compaction: bool,
    stats: FlushStats,
}

/// What one flush writes, decided under the graph lock.
enum Plan {
    Nothing,
    Append { records: Vec<u8>, snapshot_len: u64 },
    Compact(Vec<u8>),
}

impl Durable {
    pub(crate) fn new(journal: Journal) -> Self {
        Self {
            version: 0,
            journal,
            needs_compaction: false,
            stats: FlushStats::default(),
        }
    }

    pub(crate) fn stats(&self) -> FlushStats {
        FlushStats {
            journal_bytes: self.journal.len(),
            ..self.stats
        }
    }

    /// Whether a flush up to `version` (with `compact`: into the snapshot) has nothing to do.
    pub(crate) fn is_settled(&self, version: u64, compact: bool) -> bool {
        self.version >= version && !self.needs_compaction && (!compact || self.journal.len() == 0)
    }

    /// Writes every change made to `graph` so far: appended to the journal, or (with
    /// `compact`, after a failure, after `memory.load`, when the scope has no snapshot yet,
    /// or when the journal would outgrow its limit) as a full snapshot at `path`. Blocks.
    pub(crate) fn write(
        &mut self,
        path: &Path,
        graph: &Mutex<Versioned>,
        cap: u64,
        compact: bool,
    ) -> Result<(), MemoryError> {
        let (plan, written) = {
            // A poisoned lock still guards a usable graph (see `ScopeState::lock`).
            let mut cell = graph.lock().unwrap_or_else(PoisonError::into_inner);
            let changes = std::mem::take(&mut cell.graph.changes);
            let full = compact
                || changes.replaced
                || self.needs_compaction
                || !self.journal.has_snapshot();
            let plan = if full {
                Plan::Compact(snapshot::encode(&cell.graph))
            } else if changes.is_empty() {
                Plan::Nothing
            } else {
                let records = journal::encode_changes(&cell.graph, &changes);
                if self.journal.wants_compaction(records.len() as u64, cap) {
                    Plan::Compact(snapshot::encode(&cell.graph))
                } else {
                    Plan::Append {
                        records,
                        snapshot_len: cell.graph.encoded_len(),
                    }
                }
            };
            (plan, cell.version)
        };
        // From here until success the changes taken live only in memory: a failure leaves
        // `needs_compaction` set, so the next flush writes them all.
        self.needs_compaction = true;
        match plan {
            Plan::Nothing => {}
            Plan::Append {
                records,
                snapshot_len,
            } => {
                let len = usize::try_from(snapshot_len).unwrap_or(usize::MAX);
                snapshot::check_write_size(path, len, cap)?;
                if let Err(e) = self.journal.append(&records) {
                    self.journal.forget_file();
                    return Err(e);
                }
                self.stats.journal_appends += 1;
            }
            Plan::Compact(bytes) => {
                snapshot::check_write_size(path, bytes.len(), cap)?;
                snapshot::write_atomic(path, &bytes)?;
                self.journal.compacted(&bytes)?;
                self.stats.compactions += 1;
            }
        }
        self.needs_compaction = false;
        self.version = written;
        Ok(())
    }
}
