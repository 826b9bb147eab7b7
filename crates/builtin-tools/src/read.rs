//! `read_file`: one page of a UTF-8 text file, line-numbered.
//!
//! Params: `path` (string, required), `offset` (0-based first line, default 0), `limit`
//! (lines, default and maximum [`MAX_PAGE_LINES`], at least 1).
//!
//! Result:
//! ```json
//! {"path": "src/a.rs", "content": "     1\tfn main() {}", "size_bytes": 13,
//!  "total_lines": 1, "offset": 0, "lines_returned": 1,
//!  "truncated": {"next_offset": 2000, "reason": "max_lines"},   // only if lines remain
//!  "lines_cut": 1}                                              // only if any line was cut
//! ```
//! - `content` is `cat -n` style: each line is its 1-based number right-aligned in six columns, a
//!   tab, then the line (without its `\n` / `\r\n`), lines joined with `\n`.
//! - Lines are what [`str::lines`] yields: a final newline does not start another line; an empty
//!   file has 0 lines.
//! - A page stops at the requested `limit` (reason `limit`), at [`MAX_PAGE_LINES`] (`max_lines`) or
//!   before `content` would pass [`MAX_PAGE_BYTES`] (`max_bytes`), always returning at least one
//!   line. `truncated` is present exactly when lines remain after the page; `next_offset` is the
//!   `offset` for the next page.
//! - A line longer than [`MAX_LINE_CHARS`] characters is cut and marked; `lines_cut` counts them.
//!   The ledger still counts such a line as read.
//! - Files over [`MAX_READ_FILE_BYTES`] and non-UTF-8 files fail. An `offset` at or past the end of
//!   a non-empty file is `InvalidParams` on `offset`.
//! - The page is recorded in the session's [`ReadLedger`].

use serde_json::{json, Value};

use crate::confine::Workspace;
use crate::error::ToolError;
use crate::fsio;
use crate::ledger::{Fingerprint, ReadLedger};
use crate::params::Params;

/// Largest file `read_file` (and `edit_file`, `write_file`'s guard) will load.
pub const MAX_READ_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Most lines in one page.
pub const MAX_PAGE_LINES: usize = 2000;
/// Most bytes of `content` in one page.
pub const MAX_PAGE_BYTES: usize = 256 * 1024;
/// Longest line shown whole, in characters.
pub const MAX_LINE_CHARS: usize = 2000;

pub(crate) fn read_file(
    ws: &Workspace,
    params: &Params<'_>,
    ledger: &ReadLedger,
) -> Result<Value, ToolError> {
    let path = params.str_req("path")?;
    let offset = params.usize_opt("offset")?.unwrap_or(0);
    let requested_limit = params.usize_opt("limit")?;
    if requested_limit == Some(0) {
        return Err(ToolError::invalid("limit", "must be at least 1"));
    }
    let limit = requested_limit
        .unwrap_or(MAX_PAGE_LINES)
        .min(MAX_PAGE_LINES);

    let loc = ws.locate_existing("path", path)?;
    let bytes = fsio::read_bounded(&loc.physical, &loc.display, MAX_READ_FILE_BYTES)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        ToolError::failed(format!(
            "`{}` is not UTF-8 text (a binary file?); read_file only reads UTF-8",
            loc.display
        ))
    })?;
    let total_lines = text.lines().count();
    if offset > 0 && offset >= total_lines {
        return Err(ToolError::invalid(
            "offset",
            format!(
                "{offset} is past the end of `{}`, which has {total_lines} lines (offsets are \
                 0-based)",
                loc.display
            ),
        ));
    }

    let mut content = String::new();
    let mut returned = 0usize;
    let mut cut = 0usize;
    let mut stop_reason = None;
    for (index, line) in text.lines().enumerate().skip(offset) {
        if returned == limit {
            stop_reason = Some(if requested_limit.is_some_and(|l| l <= MAX_PAGE_LINES) {
                "limit"
            } else {
                "max_lines"
            });
            break;
        }
        let (shown, was_cut) = cut_line(line);
        let formatted = format!("{:>6}\t{}", index + 1, shown);
        let extra = formatted.len() + usize::from(returned > 0);
        if returned > 0 && content.len() + extra > MAX_PAGE_BYTES {
            stop_reason = Some("max_bytes");
            break;
        }
        if returned > 0 {
            content.push('\n');
        }
        content.push_str(&formatted);
        returned += 1;
        cut += usize::from(was_cut);
    }

    ledger.record_read(
        &loc.physical,
        Fingerprint::of(&bytes),
        total_lines,
        offset,
        offset + returned,
    );

    let mut out = json!({
        "path": loc.display,
        "content": content,
        "size_bytes": bytes.len(),
        "total_lines": total_lines,
        "offset": offset,
        "lines_returned": returned,
    });
    if let Some(reason) = stop_reason {
        out["truncated"] = json!({ "next_offset": offset + returned, "reason": reason });
    }
    if cut > 0 {
        out["lines_cut"] = json!(cut);
    }
    Ok(out)
}

/// The line as shown: whole, or its first [`MAX_LINE_CHARS`] characters and a marker.
fn cut_line(line: &str) -> (std::borrow::Cow<'_, str>, bool) {
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => (line.into(), false),
        Some((at, _)) => {
            let total = line.chars().count();
            (
                format!("{}… [line cut: {total} characters in all]", &line[..at]).into(),
                true,
            )
        }
    }
}

/// The number of lines [`str::lines`] would yield for `bytes`, counted on bytes.
pub(crate) fn line_count(bytes: &[u8]) -> usize {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
    newlines + usize::from(bytes.last().is_some_and(|&b| b != b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_count_matches_str_lines() {
        for s in ["", "\n", "a", "a\n", "a\nb", "a\r\nb\r\n", "\n\n", "x\n\ny"] {
            assert_eq!(line_count(s.as_bytes()), s.lines().count(), "{s:?}");
        }
    }

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let long = "é".repeat(MAX_LINE_CHARS + 5);
        let (shown, cut) = cut_line(&long);
        assert!(cut);
        assert!(shown.starts_with(&"é".repeat(MAX_LINE_CHARS)));
        assert!(shown.contains(&format!("{} characters", MAX_LINE_CHARS + 5)));
        assert_eq!(cut_line("short"), ("short".into(), false));
    }
}
