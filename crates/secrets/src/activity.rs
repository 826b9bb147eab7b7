//! Process-lifetime counters of secret-store operation attempts, for
//! `diagnostics.secret_store_activity`.
//!
//! Each counter is bumped when an operation *starts*, before validation, so failed and
//! refused attempts count too. The counters carry no names, paths or values.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Attempt counters. Share one (`Arc<Activity>`) for the daemon's lifetime; pass it to
/// [`crate::SecretStore::open_with_activity`] and record attempts directly when no store
/// could be opened.
#[derive(Debug, Default)]
pub struct Activity {
    get: AtomicU64,
    status: AtomicU64,
    availability: AtomicU64,
    write: AtomicU64,
    delete: AtomicU64,
}

/// The wire shape of `diagnostics.secret_store_activity`: exactly these five fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivitySnapshot {
    pub get_attempts: u64,
    pub status_attempts: u64,
    pub availability_attempts: u64,
    pub write_attempts: u64,
    pub delete_attempts: u64,
}

impl Activity {
    pub fn new() -> Self {
        Self::default()
    }

    /// A read of a value (`get`, `resolve`, the daemon-private read).
    pub fn record_get(&self) {
        self.get.fetch_add(1, Ordering::Relaxed);
    }

    /// A metadata query (`status`).
    pub fn record_status(&self) {
        self.status.fetch_add(1, Ordering::Relaxed);
    }

    /// An availability check (`available`).
    pub fn record_availability(&self) {
        self.availability.fetch_add(1, Ordering::Relaxed);
    }

    /// A write (`put`, the daemon-private write).
    pub fn record_write(&self) {
        self.write.fetch_add(1, Ordering::Relaxed);
    }

    /// A removal (`delete`, the daemon-private delete).
    pub fn record_delete(&self) {
        self.delete.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ActivitySnapshot {
        ActivitySnapshot {
            get_attempts: self.get.load(Ordering::Relaxed),
            status_attempts: self.status.load(Ordering::Relaxed),
            availability_attempts: self.availability.load(Ordering::Relaxed),
            write_attempts: self.write.load(Ordering::Relaxed),
            delete_attempts: self.delete.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_serialises_exactly_the_five_fields() {
        let a = Activity::new();
        a.record_get();
        a.record_get();
        a.record_status();
        a.record_availability();
        a.record_write();
        a.record_delete();
        a.record_delete();
        a.record_delete();
        let json = serde_json::to_value(a.snapshot()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "get_attempts": 2,
                "status_attempts": 1,
                "availability_attempts": 1,
                "write_attempts": 1,
                "delete_attempts": 3,
            })
        );
    }
}
