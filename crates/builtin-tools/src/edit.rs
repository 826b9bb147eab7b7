//! `edit_file`: exact text replacement in an existing UTF-8 file.
//!
//! Params: `path` (string, required), `old_text` (string, required, non-empty), `new_text`
//! (string, required, may be empty, must differ from `old_text`), `replace_all` (bool,
//! default false).
//!
//! Result: `{"path": "src/a.rs", "replacements": 1}`.
//!
//! - Matching is exact and byte-for-byte (no whitespace or line-ending normalization); occurrences
//!   are counted without overlap, left to right.
//! - Without `replace_all`, `old_text` must occur exactly once: zero occurrences fail ("not
//!   found"), more than one fail with a hint to add surrounding context or set `replace_all`. With
//!   `replace_all`, every occurrence is replaced (at least one needed).
//! - Guard ([`crate::ledger`]): the file must have been read in this session and be unchanged
//!   since; a targeted edit is licensed by any read (a single page is enough), `replace_all` needs
//!   every line read.
//! - The file is rewritten atomically (temp file + rename, permissions kept). The edited file may
//!   not grow past [`crate::write::MAX_WRITE_BYTES`].
//! - A missing file fails (create it with `write_file`).
//!
//! The daemon routes this tool through the host's approval gate before calling it.

use serde_json::{json, Value};

use crate::confine::Workspace;
use crate::error::ToolError;
use crate::fsio;
use crate::ledger::{Fingerprint, Need, ReadLedger};
use crate::params::Params;
use crate::read::line_count;
use crate::write::{read_for_guard, MAX_WRITE_BYTES};

pub(crate) fn edit_file(
    ws: &Workspace,
    params: &Params<'_>,
    ledger: &ReadLedger,
) -> Result<Value, ToolError> {
    let path = params.str_req("path")?;
    let old_text = params.str_req("old_text")?;
    let new_text = params.str_req("new_text")?;
    let replace_all = params.bool_opt("replace_all")?.unwrap_or(false);
    if old_text.is_empty() {
        return Err(ToolError::invalid("old_text", "must not be empty"));
    }
    if old_text == new_text {
        return Err(ToolError::invalid(
            "new_text",
            "is identical to old_text; nothing would change",
        ));
    }

    let _serialized = crate::ledger::serialize_mutations();
    let loc = ws.locate("path", path)?;
    if !loc.exists {
        return Err(ToolError::failed(format!(
            "`{}` not found; use write_file to create a new file",
            loc.display
        )));
    }
    let bytes = read_for_guard(&loc.physical, &loc.display)?;
    let need = if replace_all {
        Need::FullRead
    } else {
        Need::AnyRead
    };
    ledger.check(&loc.physical, &Fingerprint::of(&bytes), need, &loc.display)?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ToolError::failed(format!("`{}` is not UTF-8 text", loc.display)))?;

    let count = text.matches(old_text).count();
    if count == 0 {
        return Err(ToolError::failed(format!(
            "old_text not found in `{}`; it must match the file exactly, including whitespace \
             and indentation, and without the line-number prefixes read_file adds (read the \
             file again to copy it)",
            loc.display
        )));
    }
    if count > 1 && !replace_all {
        return Err(ToolError::failed(format!(
            "old_text occurs {count} times in `{}`; add surrounding lines to old_text so it \
             matches exactly once, or set replace_all to replace every occurrence",
            loc.display
        )));
    }
    let replaced = if replace_all { count } else { 1 };
    let new_len = (text.len() - replaced * old_text.len())
        .saturating_add(replaced.saturating_mul(new_text.len()));
    if new_len > MAX_WRITE_BYTES {
        return Err(ToolError::failed(format!(
            "the edited `{}` would be {new_len} bytes, over the {MAX_WRITE_BYTES}-byte limit",
            loc.display
        )));
    }
    let edited = if replace_all {
        text.replace(old_text, new_text)
    } else {
        text.replacen(old_text, new_text, 1)
    };

    fsio::replace_atomically(&loc.physical, &loc.display, edited.as_bytes())?;
    ledger.record_edit(
        &loc.physical,
        Fingerprint::of(edited.as_bytes()),
        line_count(edited.as_bytes()),
    );
    Ok(json!({ "path": loc.display, "replacements": replaced }))
}
