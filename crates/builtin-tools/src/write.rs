//! `write_file`: create, overwrite or append to a file.
//!
//! Params: `path` (string, required), `content` (string, required, at most
//! [`MAX_WRITE_BYTES`] bytes), `append` (bool, default false).
//!
//! Result: `{"path": "notes/a.md", "bytes_written": 12, "created": true}`.
//!
//! - **New file** (nothing at `path`): missing parent directories are created, inside the root only
//!   (each one checked, see [`crate::fsio`]); the file is created with `create_new`. No prior read
//!   is needed. `append` on a missing file creates it the same way.
//! - **Existing file, overwrite**: the read-before-edit guard needs every line read and no change
//!   since ([`crate::ledger`]); the new content is written to a temp file in the same directory and
//!   renamed over the old one (atomic; permissions carried over).
//! - **Existing file, append**: same guard; the bytes are appended in place (not atomic).
//! - A directory or other non-regular file at `path` fails. The root itself fails.
//!
//! The daemon routes this tool through the host's approval gate before calling it; this
//! crate does not ask for approval itself.

use std::fs;

use serde_json::{json, Value};

use crate::confine::Workspace;
use crate::error::{RefusalReason, ToolError};
use crate::fsio;
use crate::ledger::{Fingerprint, Need, ReadLedger};
use crate::params::Params;
use crate::read::{line_count, MAX_READ_FILE_BYTES};

/// Largest `content` accepted, in bytes.
pub const MAX_WRITE_BYTES: usize = 16 * 1024 * 1024;

pub(crate) fn write_file(
    ws: &Workspace,
    params: &Params<'_>,
    ledger: &ReadLedger,
) -> Result<Value, ToolError> {
    let path = params.str_req("path")?;
    let content = params.str_req("content")?;
    let append = params.bool_opt("append")?.unwrap_or(false);
    if content.len() > MAX_WRITE_BYTES {
        return Err(ToolError::invalid(
            "content",
            format!(
                "is {} bytes, over the {MAX_WRITE_BYTES}-byte limit",
                content.len()
            ),
        ));
    }
    let _serialized = crate::ledger::serialize_mutations();
    let loc = ws.locate("path", path)?;
    if loc.display == "." {
        return Err(ToolError::failed(
            "`.` is the workspace root directory, not a file",
        ));
    }

    let created = if loc.exists {
        let current = read_for_guard(&loc.physical, &loc.display)?;
        ledger.check(
            &loc.physical,
            &Fingerprint::of(&current),
            Need::FullRead,
            &loc.display,
        )?;
        let new_content = if append {
            fsio::append_existing(&loc.physical, &loc.display, content.as_bytes())?;
            let mut all = current;
            all.extend_from_slice(content.as_bytes());
            all
        } else {
            fsio::replace_atomically(&loc.physical, &loc.display, content.as_bytes())?;
            content.as_bytes().to_vec()
        };
        ledger.record_write(
            &loc.physical,
            Fingerprint::of(&new_content),
            line_count(&new_content),
        );
        false
    } else {
        if let Some(parent) = loc.physical.parent() {
            fsio::create_parent_dirs(ws.root(), parent, &loc.display)?;
        }
        fsio::create_new_file(&loc.physical, &loc.display, content.as_bytes())?;
        ledger.record_write(
            &loc.physical,
            Fingerprint::of(content.as_bytes()),
            line_count(content.as_bytes()),
        );
        true
    };

    Ok(json!({
        "path": loc.display,
        "bytes_written": content.len(),
        "created": created,
    }))
}

/// The current content of an existing file about to be modified, for the guard's
/// fingerprint comparison. A file too large to read whole cannot have been fully read.
pub(crate) fn read_for_guard(
    physical: &std::path::Path,
    display: &str,
) -> Result<Vec<u8>, ToolError> {
    let meta = fs::symlink_metadata(physical).map_err(|e| ToolError::io("inspect", display, &e))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!("`{display}` is a directory")));
    }
    if !meta.is_file() {
        return Err(ToolError::failed(format!(
            "`{display}` is not a regular file"
        )));
    }
    if meta.len() > MAX_READ_FILE_BYTES {
        return Err(ToolError::refused(
            RefusalReason::PartialRead,
            format!(
                "`{display}` is larger than read_file's {MAX_READ_FILE_BYTES}-byte limit, so it \
                 cannot have been read with read_file; refusing to modify it"
            ),
        ));
    }
    fsio::read_bounded(physical, display, MAX_READ_FILE_BYTES)
}
