//! [`ApprovalLedger`]: the daemon-wide, durable record of human permission decisions
//! (`permission.approve` / `permission.reject`), keyed by operation fingerprint.
//!
//! # File
//! `CAR_HOME/approvals.jsonl`: one `ApprovalRecord` JSON object per line, mode 0600,
//! appended and `fsync`ed before the method answers (opened with `O_NOFOLLOW`, so a planted
//! symbolic link is refused). Read once at startup: a line that does not parse is skipped
//! (logged), and the latest record of each fingerprint wins.
//!
//! # Bound and compaction
//! At most [`MAX_RECORDS`] fingerprints are kept; past that the oldest decisions are
//! dropped (forgetting an approval only asks again; forgetting a rejection leaves the
//! operation needing approval, never allowed). Superseded lines are compacted away: at
//! load whenever the file holds more lines than live records, and at run time once it holds
//! twice [`MAX_RECORDS`] lines — the file is rewritten atomically (temp + rename) with one
//! line per live record, oldest first.
//!
//! Every decision is visible to every connection as soon as it is recorded; evaluation
//! reads the latest record of a fingerprint ([`ApprovalLedger::latest`]).

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::errors::RpcError;
use car_proto::methods::permission::ApprovalRecord;

/// Fingerprints kept at most.
pub const MAX_RECORDS: usize = 10_000;

#[derive(Debug, Default)]
struct Inner {
    /// fingerprint → (order recorded, record).
    latest: HashMap<String, (u64, ApprovalRecord)>,
    next: u64,
    /// Lines in the file.
    lines: usize,
}

impl Inner {
    fn insert(&mut self, record: ApprovalRecord) {
        self.next += 1;
        self.latest
            .insert(record.fingerprint.clone(), (self.next, record));
        while self.latest.len() > MAX_RECORDS {
            let oldest = self
                .latest
                .iter()
                .min_by_key(|(_, (n, _))| *n)
                .map(|(fp, _)| fp.clone());
            match oldest {
                Some(fp) => self.latest.remove(&fp),
                None => break,
            };
        }
    }

    fn ordered(&self) -> Vec<&ApprovalRecord> {
        let mut rows: Vec<&(u64, ApprovalRecord)> = self.latest.values().collect();
        rows.sort_by_key(|(n, _)| *n);
        rows.into_iter().map(|(_, r)| r).collect()
    }
}

#[derive(Debug)]
pub struct ApprovalLedger {
    path: PathBuf,
    inner: Mutex<Inner>,
}

impl ApprovalLedger {
    /// Loads `CAR_HOME/approvals.jsonl` (see the module docs).
    pub fn open(state_root: &Path) -> Self {
        let path = state_root.join("approvals.jsonl");
        let mut inner = Inner::default();
        match crate::state::state_file::read(&path) {
            Ok(None) => {}
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "cannot read the approval ledger; starting empty")
            }
            Ok(Some(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                let mut skipped = 0usize;
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    inner.lines += 1;
                    match serde_json::from_str::<ApprovalRecord>(line) {
                        Ok(record) => inner.insert(record),
                        Err(_) => skipped += 1,
                    }
                }
                if skipped > 0 {
                    tracing::warn!(path = %path.display(), skipped, "approval ledger lines that do not parse were skipped");
                }
            }
        }
        let ledger = ApprovalLedger {
            path,
            inner: Mutex::new(inner),
        };
        {
            let mut inner = ledger.lock();
            if inner.lines > inner.latest.len() {
                if let Err(e) = ledger.compact(&mut inner) {
                    tracing::warn!(error = %e.message, "could not compact the approval ledger");
                }
            }
            tracing::info!(records = inner.latest.len(), "approval ledger loaded");
        }
        ledger
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("approval ledger lock")
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The latest decision recorded for `fingerprint`.
    pub fn latest(&self, fingerprint: &str) -> Option<ApprovalRecord> {
        self.lock().latest.get(fingerprint).map(|(_, r)| r.clone())
    }

    /// How many fingerprints have a decision.
    pub fn len(&self) -> usize {
        self.lock().latest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn compact(&self, inner: &mut Inner) -> Result<(), RpcError> {
        let mut text = String::new();
        for record in inner.ordered() {
            text.push_str(&serde_json::to_string(record).map_err(RpcError::internal)?);
            text.push('\n');
        }
        crate::state::auth::write_private_file(&self.path, &text)
            .map_err(|e| RpcError::internal(format!("cannot rewrite the approval ledger: {e}")))?;
        inner.lines = inner.latest.len();
        tracing::info!(records = inner.lines, "approval ledger compacted");
        Ok(())
    }

    /// Appends `record` durably, then makes it the fingerprint's latest decision. Blocks on
    /// the file (call it off the async workers).
    pub fn record(&self, record: ApprovalRecord) -> Result<ApprovalRecord, RpcError> {
        let line = serde_json::to_string(&record).map_err(RpcError::internal)? + "\n";
        let mut inner = self.lock();
        let failed = |e: std::io::Error| {
            tracing::error!(path = %self.path.display(), error = %e, "cannot append to the approval ledger");
            RpcError::internal(format!("cannot record the decision: {e}"))
        };
        if let Some(dir) = self.path.parent() {
            crate::state::auth::ensure_private_dir(dir)
                .map_err(|e| RpcError::internal(format!("cannot record the decision: {e}")))?;
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(failed)?;
        file.write_all(line.as_bytes()).map_err(failed)?;
        file.sync_data().map_err(failed)?;
        inner.lines += 1;
        inner.insert(record.clone());
        if inner.lines >= 2 * MAX_RECORDS {
            if let Err(e) = self.compact(&mut inner) {
                tracing::warn!(error = %e.message, "could not compact the approval ledger");
            }
        }
        Ok(record)
    }
}
