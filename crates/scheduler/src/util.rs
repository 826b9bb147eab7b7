//! Small shared pieces: the wire's timestamps (from `car_proto::clock`), random hex, filename-safe
//! ids, and atomic owner-only file writes.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use crate::SchedulerError;

pub(crate) use car_proto::clock::{now, rfc3339};

/// `n` random lower-case hex digits.
pub(crate) fn random_hex(n: usize) -> String {
    let mut out = car_proto::token::random_hex(n.div_ceil(2));
    out.truncate(n);
    out
}

/// Whether `id` can name a file in a task or unit directory: 1–128 of `A-Za-z0-9 - _ .`,
/// not starting with `.` (so never `.`, `..` or a hidden temp file).
pub(crate) fn is_safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Refuses an id that is not [`is_safe_id`], naming `field`.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), SchedulerError> {
    if is_safe_id(id) {
        Ok(())
    } else {
        Err(SchedulerError::invalid(
            field,
            format!(
                "`{id}` is not a valid task id (1-128 of A-Z a-z 0-9 - _ ., not starting with .)"
            ),
        ))
    }
}

/// Creates `dir` (and parents) if missing; a new leaf directory gets `mode`.
pub(crate) fn ensure_dir(dir: &Path, mode: u32) -> Result<(), SchedulerError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|e| SchedulerError::io("creating directory", dir, e))
}

/// Writes `bytes` to `path` atomically with exactly `mode`
/// (`car_proto::safe_file::write_atomic`: an `O_EXCL` temp file in the same directory,
/// fsync, rename, directory fsync).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SchedulerError> {
    car_proto::safe_file::write_atomic(path, bytes, mode)
        .map_err(|e| SchedulerError::io("writing", path, e))
}
