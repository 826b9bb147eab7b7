//! `list_dir`, `find_files`, and the directory walk shared with `grep_files`.
//!
//! Skip list (applied to every entry below the starting directory, never to the starting
//! directory itself, so `list_dir {"path": ".github"}` works): names starting with `.`, and
//! [`SKIPPED_NAMES`]. Symlinks are never followed.
//!
//! `list_dir {path?: "."}` →
//! `{"path": "src", "entries": [{"name", "path", "is_dir", "is_symlink", "size_bytes"}],
//! "truncated": false}`: non-recursive, sorted by name; `size_bytes` is the file length
//! (0 for directories and symlinks); a symlink is reported with `is_symlink: true`,
//! `is_dir: false`, and is not followed. At most [`MAX_LIST_ENTRIES`] entries; at most
//! [`MAX_LIST_SCAN`] directory entries are looked at.
//!
//! `find_files {pattern, path?: ".", max_results?}` → `{"files": ["src/a.rs"], "truncated":
//! false}`: regular files (not symlinks) under `path` matching the glob (see
//! [`crate::glob`]), in walk order (depth first, names sorted). `max_results` defaults to
//! [`DEFAULT_FIND_RESULTS`], is capped at [`MAX_FIND_RESULTS`] and must be at least 1.
//! `truncated` is true when more files matched or the walk hit its bounds.
//!
//! Walk bounds: at most [`MAX_WALK_ENTRIES`] entries visited and [`MAX_WALK_DEPTH`] levels
//! deep. Unreadable directories are skipped silently. File names that are not UTF-8 are
//! shown lossily. Every path in a result is relative to the workspace root (the requested
//! `path` joined with the walk-relative part).

use std::ffi::OsStr;
use std::fs;
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Value};
use walkdir::{DirEntry, WalkDir};

use crate::confine::{join_display, Workspace};
use crate::error::ToolError;
use crate::glob::Glob;
use crate::params::Params;

/// Names skipped by every walker besides dotfiles.
pub const SKIPPED_NAMES: [&str; 3] = ["node_modules", "__pycache__", "target"];
/// Most entries `list_dir` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Most directory entries `list_dir` looks at.
pub const MAX_LIST_SCAN: usize = 100_000;
/// Default `max_results` of `find_files`.
pub const DEFAULT_FIND_RESULTS: usize = 200;
/// Cap on `max_results` of `find_files`.
pub const MAX_FIND_RESULTS: usize = 2000;
/// Most entries one walk visits.
pub const MAX_WALK_ENTRIES: usize = 200_000;
/// Deepest level one walk descends to.
pub const MAX_WALK_DEPTH: usize = 64;

/// Whether a directory entry name is skipped by the walkers.
pub(crate) fn is_skipped(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with('.') || SKIPPED_NAMES.contains(&name.as_ref())
}

/// Reads an optional positive `max_results`, defaulting and capping it.
pub(crate) fn max_results(
    params: &Params<'_>,
    default: usize,
    cap: usize,
) -> Result<usize, ToolError> {
    match params.usize_opt("max_results")? {
        None => Ok(default),
        Some(0) => Err(ToolError::invalid("max_results", "must be at least 1")),
        Some(n) => Ok(n.min(cap)),
    }
}

/// Walks the regular files under `start` (a located physical directory), calling `visit`
/// with each entry and its path relative to `start`. Returns true when the walk stopped at
/// [`MAX_WALK_ENTRIES`].
pub(crate) fn walk_files(
    start: &Path,
    mut visit: impl FnMut(&DirEntry, &Path) -> ControlFlow<()>,
) -> bool {
    let walker = WalkDir::new(start)
        .follow_links(false)
        .max_depth(MAX_WALK_DEPTH)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !is_skipped(e.file_name()));
    for (visited, entry) in walker.enumerate() {
        if visited >= MAX_WALK_ENTRIES {
            return true;
        }
        let Ok(entry) = entry else { continue };
        // With follow_links(false) a symlink reports as a symlink, never as a file.
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(start) else {
            continue;
        };
        if visit(&entry, rel).is_break() {
            break;
        }
    }
    false
}

pub(crate) fn list_dir(ws: &Workspace, params: &Params<'_>) -> Result<Value, ToolError> {
    let path = params.str_opt("path")?.unwrap_or(".");
    let loc = ws.locate_existing("path", path)?;
    let meta =
        fs::metadata(&loc.physical).map_err(|e| ToolError::io("inspect", &loc.display, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::failed(format!(
            "`{}` is not a directory; use read_file to read a file",
            loc.display
        )));
    }
    let reader =
        fs::read_dir(&loc.physical).map_err(|e| ToolError::io("list", &loc.display, &e))?;
    let mut truncated = false;
    let mut found = Vec::new();
    for (scanned, entry) in reader.enumerate() {
        if scanned >= MAX_LIST_SCAN {
            truncated = true;
            break;
        }
        let Ok(entry) = entry else { continue };
        if is_skipped(&entry.file_name()) {
            continue;
        }
        // DirEntry::file_type does not follow symlinks.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let size = if kind.is_file() {
            entry.metadata().map(|m| m.len()).unwrap_or(0)
        } else {
            0
        };
        found.push((entry.file_name(), kind.is_dir(), kind.is_symlink(), size));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    if found.len() > MAX_LIST_ENTRIES {
        found.truncate(MAX_LIST_ENTRIES);
        truncated = true;
    }
    let entries: Vec<Value> = found
        .into_iter()
        .map(|(name, is_dir, is_symlink, size)| {
            json!({
                "name": name.to_string_lossy(),
                "path": join_display(&loc.display, Path::new(&name)),
                "is_dir": is_dir,
                "is_symlink": is_symlink,
                "size_bytes": size,
            })
        })
        .collect();
    Ok(json!({ "path": loc.display, "entries": entries, "truncated": truncated }))
}

pub(crate) fn find_files(ws: &Workspace, params: &Params<'_>) -> Result<Value, ToolError> {
    let pattern = params.str_req("pattern")?;
    let glob = Glob::new("pattern", pattern)?;
    let path = params.str_opt("path")?.unwrap_or(".");
    let limit = max_results(params, DEFAULT_FIND_RESULTS, MAX_FIND_RESULTS)?;
    let loc = ws.locate_existing("path", path)?;
    if !loc.physical.is_dir() {
        return Err(ToolError::failed(format!(
            "`{}` is not a directory",
            loc.display
        )));
    }
    let mut files = Vec::new();
    let mut truncated = false;
    let walk_capped = walk_files(&loc.physical, |entry, rel| {
        let rel_str = crate::confine::display_rel(rel);
        let name = entry.file_name().to_string_lossy();
        if glob.matches(&rel_str, &name) {
            if files.len() == limit {
                truncated = true;
                return ControlFlow::Break(());
            }
            files.push(join_display(&loc.display, rel));
        }
        ControlFlow::Continue(())
    });
    Ok(json!({ "files": files, "truncated": truncated || walk_capped }))
}
