//! `grep_files`: regex search over the text files of a directory (or one file).
//!
//! Params: `pattern` (regex, required, at most [`MAX_PATTERN_BYTES`]), `path` (file or
//! directory, default `.`), `glob` (restricts which files are searched, see
//! [`crate::glob`]; ignored when `path` is a file), `max_results` (default
//! [`DEFAULT_GREP_RESULTS`], capped at [`MAX_GREP_RESULTS`], at least 1),
//! `case_insensitive` (bool, default false).
//!
//! Result: `{"matches": [{"path": "src/a.rs", "line": 3, "text": "fn main() {"}],
//! "truncated": false, "files_scanned": 12}`.
//!
//! - The regex uses Rust `regex` syntax (no backreferences or look-around), compiled with bounded
//!   program and DFA sizes; one that does not compile or exceeds the bounds is `InvalidParams` on
//!   `pattern`. It is matched against each line separately (without its line ending); `line` is
//!   1-based.
//! - Files are walked like `find_files` (same skip list, symlinks not followed). A file is skipped
//!   when it is over [`MAX_GREP_FILE_BYTES`] or binary (a NUL byte in its first
//!   [`BINARY_SNIFF_BYTES`]); invalid UTF-8 is read lossily. `files_scanned` counts the files
//!   actually searched.
//! - `text` is cut to [`MAX_MATCH_TEXT_CHARS`] characters (a `…` marks the cut).
//! - `truncated` is true when more matches exist than `max_results`, or the walk or the total byte
//!   budget ([`MAX_GREP_TOTAL_BYTES`]) ran out.

use std::ops::ControlFlow;
use std::path::Path;

use regex::{Regex, RegexBuilder};
use serde_json::{json, Value};

use crate::confine::{display_rel, join_display, Workspace};
use crate::error::ToolError;
use crate::fsio;
use crate::glob::Glob;
use crate::params::Params;
use crate::walk::{max_results, walk_files};

/// Longest regex accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1000;
/// Compiled program size bound for the regex.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Lazy DFA cache bound for the regex.
pub const REGEX_DFA_SIZE_LIMIT: usize = 2 << 20;
/// Default `max_results`.
pub const DEFAULT_GREP_RESULTS: usize = 50;
/// Cap on `max_results`.
pub const MAX_GREP_RESULTS: usize = 1000;
/// Files larger than this are not searched.
pub const MAX_GREP_FILE_BYTES: u64 = 1024 * 1024;
/// How much of a file's start is checked for NUL bytes.
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Longest `text` of one match, in characters.
pub const MAX_MATCH_TEXT_CHARS: usize = 500;
/// Most bytes read by one search.
pub const MAX_GREP_TOTAL_BYTES: u64 = 64 * 1024 * 1024;

/// Compiles a model-supplied regex with the crate's bounds.
pub(crate) fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, ToolError> {
    if pattern.is_empty() {
        return Err(ToolError::invalid("pattern", "must not be empty"));
    }
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(ToolError::invalid(
            "pattern",
            format!("is longer than {MAX_PATTERN_BYTES} bytes"),
        ));
    }
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_SIZE_LIMIT)
        .nest_limit(64)
        .build()
        .map_err(|e| ToolError::invalid("pattern", format!("is not a valid regex: {e}")))
}

struct Search<'a> {
    regex: &'a Regex,
    limit: usize,
    matches: Vec<Value>,
    truncated: bool,
    files_scanned: usize,
    bytes_read: u64,
}

impl Search<'_> {
    /// Searches one file; `display` is its workspace-relative path.
    fn file(&mut self, physical: &Path, display: &str, len: u64) -> ControlFlow<()> {
        if len > MAX_GREP_FILE_BYTES {
            return ControlFlow::Continue(());
        }
        if self.bytes_read + len > MAX_GREP_TOTAL_BYTES {
            self.truncated = true;
            return ControlFlow::Break(());
        }
        let Ok(bytes) = fsio::read_bounded(physical, display, MAX_GREP_FILE_BYTES) else {
            return ControlFlow::Continue(());
        };
        self.bytes_read += bytes.len() as u64;
        if bytes[..bytes.len().min(BINARY_SNIFF_BYTES)].contains(&0) {
            return ControlFlow::Continue(());
        }
        self.files_scanned += 1;
        let text = String::from_utf8_lossy(&bytes);
        for (index, line) in text.lines().enumerate() {
            if !self.regex.is_match(line) {
                continue;
            }
            if self.matches.len() == self.limit {
                self.truncated = true;
                return ControlFlow::Break(());
            }
            self.matches.push(json!({
                "path": display,
                "line": index + 1,
                "text": cut(line),
            }));
        }
        ControlFlow::Continue(())
    }
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(MAX_MATCH_TEXT_CHARS) {
        None => line.to_string(),
        Some((at, _)) => format!("{}…", &line[..at]),
    }
}

pub(crate) fn grep_files(ws: &Workspace, params: &Params<'_>) -> Result<Value, ToolError> {
    let pattern = params.str_req("pattern")?;
    let case_insensitive = params.bool_opt("case_insensitive")?.unwrap_or(false);
    let regex = compile(pattern, case_insensitive)?;
    let glob = params
        .str_opt("glob")?
        .map(|g| Glob::new("glob", g))
        .transpose()?;
    let path = params.str_opt("path")?.unwrap_or(".");
    let limit = max_results(params, DEFAULT_GREP_RESULTS, MAX_GREP_RESULTS)?;
    let loc = ws.locate_existing("path", path)?;
    let meta =
        std::fs::metadata(&loc.physical).map_err(|e| ToolError::io("inspect", &loc.display, &e))?;

    let mut search = Search {
        regex: &regex,
        limit,
        matches: Vec::new(),
        truncated: false,
        files_scanned: 0,
        bytes_read: 0,
    };
    if meta.is_file() {
        let _ = search.file(&loc.physical, &loc.display, meta.len());
    } else if meta.is_dir() {
        let capped = walk_files(&loc.physical, |entry, rel| {
            if let Some(glob) = &glob {
                let name = entry.file_name().to_string_lossy();
                if !glob.matches(&display_rel(rel), &name) {
                    return ControlFlow::Continue(());
                }
            }
            let len = entry.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
            search.file(entry.path(), &join_display(&loc.display, rel), len)
        });
        search.truncated |= capped;
    } else {
        return Err(ToolError::failed(format!(
            "`{}` is neither a file nor a directory",
            loc.display
        )));
    }
    Ok(json!({
        "matches": search.matches,
        "truncated": search.truncated,
        "files_scanned": search.files_scanned,
    }))
}
