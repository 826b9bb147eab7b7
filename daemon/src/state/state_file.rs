//! Reading the daemon's own state files (`agents.json`, `agent-permissions.json`,
//! `approvals.jsonl`, `run/agents-wanted.json`, token files) and operator-named token
//! files (`--auth-token-file`).
//!
//! Owns the caps and the one rule: every such read goes through `car_proto::safe_file`, so
//! a symlink, FIFO or device planted at one of these names is refused at once (never
//! followed, never blocking startup) and no read is unbounded. Writes are
//! [`crate::state::auth::write_private_file`]'s. Must not decide what a file means.

use std::path::Path;

use car_proto::safe_file::{self, ReadLimits, SafeFileError};

/// The most bytes of one state file read: 256 MiB, far beyond the largest the daemon
/// writes (each file's own row limits keep it to tens of MiB), so a real file is never
/// refused and a planted one cannot make the daemon buffer without bound.
pub const MAX_STATE_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The most bytes of a token file read (a token is 64 hex digits).
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// A state file's bytes; `Ok(None)` when it does not exist.
pub fn read(path: &Path) -> Result<Option<Vec<u8>>, SafeFileError> {
    match safe_file::read(path, ReadLimits::cap(MAX_STATE_FILE_BYTES)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// A token file's text, trimmed (not found is an error: a caller expected it).
pub fn read_token(path: &Path) -> Result<String, SafeFileError> {
    safe_file::read_text(path, ReadLimits::cap(MAX_TOKEN_FILE_BYTES))
        .map(|text| text.trim().to_owned())
}
