//! The append-only journal that makes a write cost O(change), not O(graph).
//!
//! Owns the file `<snapshot>.journal` next to each scope's snapshot, its format, appending
//! with `fdatasync`, replay on load and what compaction does to it. It must not decide when
//! to flush or compact (the store does) or hold locks; every function here blocks.
//!
//! # Format
//! JSON lines. The first is a header, `{"journal":1,"base":"<hex>"}`, where `base` is the
//! SHA-256 of the snapshot file's bytes the journal continues (empty: no snapshot). Every
//! further line is one record, applied in order on top of that snapshot:
//! `{"put_fact":{…}}` / `{"del_fact":"<id>"}` / `{"put_skill":{…}}` / `{"del_skill":"<name>"}`,
//! records carrying the same fields as the snapshot's. A flush appends one record per fact
//! or skill touched since the previous flush, with its state at flush time (so N changes
//! to one fact cost one record), in one `write` followed by one `fdatasync`.
//!
//! # Crash safety
//! - A crash mid-append leaves a last line without its `\n`: nothing in it was acknowledged. Load
//!   ignores it with a warning and truncates the file back to the last whole line.
//! - Compaction writes the whole graph as the new snapshot (atomically, see
//!   [`crate::snapshot::write_atomic`]) and then removes the journal. A crash in between leaves a
//!   journal whose `base` no longer matches the snapshot: load recognises it as already contained
//!   in the snapshot and moves it aside instead of replaying it (a replay would bring back states
//!   older than the snapshot's). The same happens when the snapshot itself was moved aside as
//!   corrupt or oversize: the scope starts empty.
//! - A whole line that does not parse or validate is corruption, not a crash: the records before it
//!   are kept, the journal is moved aside (`.corrupt-<ms>`, with a warning) and the recovered graph
//!   is written as the new snapshot at once.
//!
//! # Why a journal (decision record)
//! Measured before the change (release daemon, sequential `memory.add_fact` through the raw
//! client, this 2-core machine): rewriting the full pretty snapshot on every flush cost
//! 4.6 ms per add at 500 facts and 30 ms at 8,000, linear in the graph. A journal append is
//! one `write` + one `fdatasync` whatever the graph's size; the figures at 1k / 10k / 100k
//! facts (`cargo bench -p car-server --bench memory_scale`) are in docs/benchmarks.md.
//! SQLite + FTS5, the alternative, was not benchmarked: FTS5's BM25 differs from
//! [`crate::ranking`]'s (subject weighting, normalised scores, tie-breaks), so keeping
//! results identical would still rank in Rust, and the write path gains nothing over one
//! `fdatasync` per group commit; the in-memory graph with an inverted index
//! ([`crate::fact_table`]) answers queries without a second engine.

use crate::changes::Changes;
use crate::error::MemoryError;
use crate::fact::Fact;
use crate::graph::{Entry, Graph};
use crate::skills::Skill;
use crate::snapshot;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The only journal version this crate writes and reads.
pub const JOURNAL_VERSION: u32 = 1;

/// The journal never grows past this many bytes before compaction unless the snapshot is
/// larger (see [`Journal::wants_compaction`]).
pub const MIN_COMPACTION_BYTES: u64 = 1024 * 1024;

/// Where the journal of the snapshot at `snapshot` lives: `<snapshot>.journal`.
pub fn journal_path(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".journal");
    snapshot.with_file_name(name)
}

/// The identity of a snapshot file's bytes (empty: no snapshot).
fn base_of(snapshot: Option<&[u8]>) -> String {
    snapshot.map_or_else(String::new, |b| hex::encode(Sha256::digest(b)))
}

#[derive(Serialize, Deserialize)]
struct Header {
    journal: u32,
    base: String,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum RecordOut<'a> {
    PutFact(&'a Fact),
    DelFact(&'a str),
    PutSkill(&'a Skill),
    DelSkill(&'a str),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RecordIn {
    PutFact(Fact),
    DelFact(String),
    PutSkill(Skill),
    DelSkill(String),
}

/// The records describing `changes` (taken from `graph`), one JSON line each.
pub(crate) fn encode_changes(graph: &Graph, changes: &Changes) -> Vec<u8> {
    let mut out = Vec::new();
    let mut line = |record: RecordOut<'_>| {
        // Records are plain strings and numbers with finite floats: this cannot fail.
        let _ = serde_json::to_writer(&mut out, &record);
        out.push(b'\n');
    };
    for id in &changes.facts {
        match graph.fact(id) {
            Some(fact) => line(RecordOut::PutFact(fact)),
            None => line(RecordOut::DelFact(id)),
        }
    }
    for name in &changes.skills {
        match graph.skills.get(name) {
            Some(skill) => line(RecordOut::PutSkill(skill)),
            None => line(RecordOut::DelSkill(name)),
        }
    }
    out
}

/// A scope's journal as the store's flush lock holds it.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: Option<File>,
    /// The journal's length on disk (0: no file).
    bytes: u64,
    /// [`base_of`] the current snapshot: the header of the next journal created.
    base: String,
    /// The current snapshot's length.
    snapshot_bytes: u64,
}

impl Journal {
    fn new(path: PathBuf, snapshot: Option<&[u8]>, bytes: u64) -> Self {
        Self {
            path,
            file: None,
            bytes,
            base: base_of(snapshot),
            snapshot_bytes: snapshot.map_or(0, |b| b.len() as u64),
        }
    }

    /// Whether the scope has a snapshot file. Until it does, the store compacts instead of
    /// appending, so a scope's first write creates its snapshot file, which tools and
    /// people look for, and the journal always continues a snapshot.
    pub(crate) fn has_snapshot(&self) -> bool {
        self.snapshot_bytes > 0
    }

    /// The journal's length on disk.
    pub(crate) fn len(&self) -> u64 {
        self.bytes
    }

    /// Whether appending `extra` more bytes should rather be a compaction: the journal
    /// would pass the larger of the snapshot's size and [`MIN_COMPACTION_BYTES`] (so each
    /// compaction's O(graph) write is paid for by at least as many journal bytes, O(1) per
    /// mutation amortised), or half the size cap (so a journal is always readable back).
    pub(crate) fn wants_compaction(&self, extra: u64, cap: u64) -> bool {
        let limit = self.snapshot_bytes.max(MIN_COMPACTION_BYTES).min(cap / 2);
        self.bytes + extra + self.header_len() > limit
    }

    fn header_len(&self) -> u64 {
        if self.bytes == 0 {
            self.header().len() as u64
        } else {
            0
        }
    }

    fn header(&self) -> Vec<u8> {
        let mut header = serde_json::to_vec(&Header {
            journal: JOURNAL_VERSION,
            base: self.base.clone(),
        })
        .unwrap_or_default();
        header.push(b'\n');
        header
    }

    /// Appends `records` (whole lines) and `fdatasync`s, creating the file with its header
    /// first if there is none. On error the file may end in a partial line: the caller must
    /// compact before appending again.
    pub(crate) fn append(&mut self, records: &[u8]) -> Result<(), MemoryError> {
        let created = self.file.is_none() && self.bytes == 0;
        let mut buf = if created { self.header() } else { Vec::new() };
        buf.extend_from_slice(records);
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(open_append(&self.path)?),
        };
        let io = |e| MemoryError::io("append to journal", &self.path, e);
        file.write_all(&buf).map_err(io)?;
        file.sync_data().map_err(io)?;
        if created {
            if let Some(dir) = self.path.parent() {
                snapshot::sync_dir(dir)?;
            }
        }
        self.bytes += buf.len() as u64;
        Ok(())
    }

    /// Called after `snapshot` was written atomically as the scope's snapshot: the journal
    /// is now contained in it and is removed.
    pub(crate) fn compacted(&mut self, snapshot: &[u8]) -> Result<(), MemoryError> {
        self.file = None;
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(MemoryError::io("remove compacted journal", &self.path, e)),
        }
        *self = Journal::new(self.path.clone(), Some(snapshot), 0);
        Ok(())
    }

    /// After a failed append: the file is dropped, so a compaction starts from a clean slate.
    pub(crate) fn forget_file(&mut self) {
        self.file = None;
    }
}

fn open_append(path: &Path) -> Result<File, MemoryError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| MemoryError::io("create directory", dir, e))?;
    }
    let mut options = OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options
        .open(path)
        .map_err(|e| MemoryError::io("open journal", path, e))
}

/// Loads a scope: its snapshot (see [`snapshot::load_or_quarantine_with_cap`]), then its
/// journal replayed on top (module docs for torn, stale and corrupt journals). Files over
/// `cap` are moved aside unread.
pub(crate) fn load(path: &Path, cap: u64) -> Result<(Graph, Journal), MemoryError> {
    let (mut graph, snapshot_bytes) = snapshot::load_with_bytes(path, cap)?;
    let journal_path = journal_path(path);
    let fresh = |bytes| Journal::new(journal_path.clone(), snapshot_bytes.as_deref(), bytes);
    let bytes = match read_journal(&journal_path, cap)? {
        None => return Ok((graph, fresh(0))),
        Some(bytes) => bytes,
    };
    let outcome = replay(&mut graph, &bytes, &base_of(snapshot_bytes.as_deref()));
    graph.changes = Changes::default();
    match outcome {
        Replay::Applied { records, valid_len } => {
            if valid_len < bytes.len() {
                tracing::warn!(
                    path = %journal_path.display(),
                    torn_bytes = bytes.len() - valid_len,
                    "memory journal ends in a torn record (a crash mid-append); it was never acknowledged and is dropped"
                );
                truncate(&journal_path, valid_len as u64)?;
            }
            tracing::debug!(path = %journal_path.display(), records, "memory journal replayed");
            Ok((graph, fresh(valid_len as u64)))
        }
        Replay::Stale => {
            let aside = snapshot::move_aside(&journal_path)?;
            tracing::warn!(
                path = %journal_path.display(),
                moved_to = %aside.display(),
                "memory journal does not continue the current snapshot (left by a crash during compaction, whose snapshot contains it, or its snapshot was moved aside); moved aside, not replayed"
            );
            Ok((graph, fresh(0)))
        }
        Replay::Corrupt { line, reason } => {
            let aside = snapshot::move_aside(&journal_path)?;
            tracing::warn!(
                path = %journal_path.display(),
                moved_to = %aside.display(),
                line,
                %reason,
                "corrupt memory journal moved aside; the records before the bad line are kept and written to the snapshot"
            );
            let encoded = snapshot::encode(&graph);
            snapshot::check_write_size(path, encoded.len(), cap)?;
            snapshot::write_atomic(path, &encoded)?;
            Ok((graph, Journal::new(journal_path, Some(&encoded), 0)))
        }
    }
}

/// The journal's bytes; `None` when there is none. One over `cap` is moved aside.
fn read_journal(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, MemoryError> {
    match snapshot::read_managed(path, cap, "read journal")? {
        snapshot::Capped::Read(bytes) => Ok(Some(bytes)),
        snapshot::Capped::Missing => Ok(None),
        snapshot::Capped::Over(reason) => {
            let aside = snapshot::move_aside(path)?;
            tracing::warn!(
                path = %path.display(),
                moved_to = %aside.display(),
                cap,
                %reason,
                "memory journal over the size cap moved aside unread"
            );
            Ok(None)
        }
    }
}

fn truncate(path: &Path, len: u64) -> Result<(), MemoryError> {
    let io = |e| MemoryError::io("truncate torn journal", path, e);
    if len == 0 {
        return std::fs::remove_file(path).map_err(io);
    }
    let file = OpenOptions::new().write(true).open(path).map_err(io)?;
    file.set_len(len).map_err(io)?;
    file.sync_data().map_err(io)
}

/// What replaying a journal did.
#[derive(Debug, PartialEq)]
enum Replay {
    /// Every whole line applied; `valid_len` bytes are whole lines (the rest is torn).
    Applied { records: usize, valid_len: usize },
    /// The header names another snapshot: nothing applied.
    Stale,
    /// Line `line` (1-based) is bad; the records before it were applied.
    Corrupt { line: usize, reason: String },
}

fn replay(graph: &mut Graph, bytes: &[u8], base: &str) -> Replay {
    let mut offset = 0;
    let mut records = 0;
    for (index, chunk) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        if chunk.last() != Some(&b'\n') {
            break;
        }
        let line = &chunk[..chunk.len() - 1];
        let corrupt = |reason: String| Replay::Corrupt {
            line: index + 1,
            reason,
        };
        if index == 0 {
            match serde_json::from_slice::<Header>(line) {
                Ok(h) if h.journal != JOURNAL_VERSION => {
                    return corrupt(format!("unsupported journal version {}", h.journal))
                }
                Ok(h) if h.base != base => return Replay::Stale,
                Ok(_) => {}
                Err(e) => return corrupt(format!("header: {e}")),
            }
        } else {
            let record = match serde_json::from_slice::<RecordIn>(line) {
                Ok(record) => record,
                Err(e) => return corrupt(e.to_string()),
            };
            if let Err(reason) = apply(graph, record) {
                return corrupt(reason);
            }
            records += 1;
        }
        offset += chunk.len();
    }
    Replay::Applied {
        records,
        valid_len: offset,
    }
}

fn apply(graph: &mut Graph, record: RecordIn) -> Result<(), String> {
    match record {
        RecordIn::PutFact(fact) => {
            snapshot::check_fact(&fact)?;
            graph.insert_entry(Entry::new(fact));
        }
        RecordIn::DelFact(id) => {
            graph.remove_entry(&id);
        }
        RecordIn::PutSkill(mut skill) => {
            snapshot::check_skill(&skill)?;
            crate::skills::refresh_degraded(&mut skill);
            graph.skills.insert(skill.name.clone(), skill);
        }
        RecordIn::DelSkill(name) => {
            graph.skills.remove(&name);
        }
    }
    Ok(())
}
