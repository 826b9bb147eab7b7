//! Confinement: turning a model-supplied path into a location inside the workspace root.
//!
//! This is the security core of the crate. Every tool that touches the file system goes
//! through `Workspace::locate` (or `locate_existing`) before it opens anything.
//!
//! # The rule
//!
//! 1. **Root.** [`Workspace::new`] canonicalizes the root (every symlink resolved, absolute); it
//!    must exist and be a directory. All containment checks compare against this canonical root,
//!    component-wise (`/ws` does not contain `/ws2`).
//! 2. **Lexical checks** on the input string, before any file system access:
//!    - empty, longer than [`MAX_PATH_BYTES`], or containing NUL → `InvalidParams`;
//!    - any `..` component anywhere → `Refused(path_escape)`, whether or not it would stay inside
//!      (no lexical normalization is attempted);
//!    - an absolute path is accepted only if it lies under the canonical root (or under the root
//!      exactly as it was given to `Workspace::new`, for roots reached through a symlinked prefix);
//!      it is then made relative to it. Any other absolute path → `Refused(path_escape)`;
//!    - a relative path is taken relative to the root; `.` components are dropped. The result is
//!      the *requested relative path*; empty means the root itself.
//! 3. **Symlink checks.** Walking up from `root/requested`, the deepest entry that exists (by
//!    `lstat`, so a symlink counts as existing even when dangling) is canonicalized, which resolves
//!    every symlink on the way, and must lie under the canonical root, else
//!    `Refused(symlink_escape)`. If it cannot be canonicalized because a symlink in it is dangling
//!    → `Refused(dangling_symlink)` (or `symlink_escape` when the dangling target is lexically
//!    outside). The *physical path* is that canonical ancestor joined with the not-yet-existing
//!    remainder (plain names, so it cannot leave the root). Checking the deepest existing ancestor
//!    also for missing paths means an escaping symlink is refused the same way whether or not its
//!    target exists (no existence oracle outside).
//! 4. **Opening.** Tools open only the physical path. Files are opened with `O_NOFOLLOW` (see
//!    [`crate::fsio`]) so a final component swapped for a symlink after the check is not followed;
//!    new files and temp files are created with `create_new` (`O_EXCL`). Overwrites are a temp file
//!    plus `rename`, which replaces a name and never follows it. Consequence: a symlink inside the
//!    root that points to another place inside the root is usable (reads and writes go to its
//!    target); one pointing outside is refused by every tool (read, write, edit, list, find, grep).
//! 5. **Walkers** (`list_dir`, `find_files`, `grep_files`) locate their start directory by the same
//!    rule and then never follow symlinks: `list_dir` reports a symlink entry as `is_symlink: true`
//!    without following it; `find_files` and `grep_files` skip symlinks.
//!
//! # Paths in results and messages
//!
//! Every path in a result or error message is relative to the workspace root, written with
//! `/`, `.` for the root itself. Tools echo the *requested* relative path (so a file read
//! through an in-root symlink is reported under the name asked for). Absolute inputs are
//! never echoed in messages, and the absolute root never appears in any message.
//!
//! # Residual risk
//!
//! Checks are path-based and happen immediately before each open. A *concurrent* process
//! that replaces an intermediate directory with a symlink between the check and the open is
//! not defended against (that needs `openat2(RESOLVE_BENEATH)`, which std does not offer);
//! the tools themselves never create symlinks, so this requires an outside actor.

use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::error::{RefusalReason, ToolError};

/// The longest path string a tool accepts, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// A workspace root that every built-in tool is confined to. Cheap to share (`Send + Sync`).
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Canonical root.
    root: PathBuf,
    /// The root as given (made absolute), when it differs from the canonical one.
    alias: Option<PathBuf>,
}

/// Where a requested path lands. Produced by [`Workspace::locate`].
#[derive(Debug, Clone)]
pub(crate) struct Located {
    /// The requested path relative to the root, `/`-separated, `.` for the root.
    pub display: String,
    /// The absolute path with every existing component canonicalized (see module docs).
    pub physical: PathBuf,
    /// Whether the physical path exists.
    pub exists: bool,
}

impl Workspace {
    /// Confines tools to `root`, which must exist and be a directory. The root is
    /// canonicalized once, here.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, ToolError> {
        let given = root.as_ref();
        let canonical = fs::canonicalize(given)
            .map_err(|e| ToolError::failed(format!("workspace root cannot be resolved: {e}")))?;
        if !canonical.is_dir() {
            return Err(ToolError::failed("workspace root is not a directory"));
        }
        let absolute = if given.is_absolute() {
            Some(given.to_path_buf())
        } else {
            std::env::current_dir().ok().map(|d| d.join(given))
        };
        let alias = absolute
            .filter(|a| !a.components().any(|c| matches!(c, Component::ParentDir)))
            .map(|a| a.components().collect::<PathBuf>())
            .filter(|a| *a != canonical);
        Ok(Workspace {
            root: canonical,
            alias,
        })
    }

    /// The canonical workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Step 2 of the rule: the requested path relative to the root.
    fn lexical(&self, field: &str, input: &str) -> Result<PathBuf, ToolError> {
        if input.is_empty() {
            return Err(ToolError::invalid(field, "must not be empty"));
        }
        if input.contains('\0') {
            return Err(ToolError::invalid(
                field,
                "must not contain a NUL character",
            ));
        }
        if input.len() > MAX_PATH_BYTES {
            return Err(ToolError::invalid(
                field,
                format!("is longer than {MAX_PATH_BYTES} bytes"),
            ));
        }
        let path = Path::new(input);
        let shown = if path.is_absolute() {
            "the absolute path given".to_string()
        } else {
            format!("`{input}`")
        };
        if path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(ToolError::refused(
                RefusalReason::PathEscape,
                format!(
                    "{shown} contains `..`, which is not allowed; use a path relative to the \
                     workspace root without `..`"
                ),
            ));
        }
        let tail = if path.is_absolute() {
            path.strip_prefix(&self.root)
                .ok()
                .or_else(|| self.alias.as_ref().and_then(|a| path.strip_prefix(a).ok()))
                .ok_or_else(|| {
                    ToolError::refused(
                        RefusalReason::PathEscape,
                        "the absolute path given is outside the workspace; use a path \
                         relative to the workspace root",
                    )
                })?
        } else {
            path
        };
        let mut rel = PathBuf::new();
        for c in tail.components() {
            match c {
                Component::Normal(name) => rel.push(name),
                Component::CurDir => {}
                Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                    return Err(ToolError::refused(
                        RefusalReason::PathEscape,
                        format!("{shown} is not a path inside the workspace"),
                    ));
                }
            }
        }
        Ok(rel)
    }

    /// Applies the whole rule (steps 2 and 3) to `input`, the value of parameter `field`.
    pub(crate) fn locate(&self, field: &str, input: &str) -> Result<Located, ToolError> {
        let rel = self.lexical(field, input)?;
        let display = display_rel(&rel);
        let mut existing = self.root.join(&rel);
        let mut rest: Vec<OsString> = Vec::new();
        loop {
            match fs::symlink_metadata(&existing) {
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    if existing == self.root {
                        return Err(ToolError::failed("the workspace root no longer exists"));
                    }
                    match existing.file_name() {
                        Some(name) => rest.push(name.to_os_string()),
                        None => return Err(ToolError::io("resolve", &display, &e)),
                    }
                    existing.pop();
                }
                Err(e) => return Err(ToolError::io("resolve", &display, &e)),
            }
        }
        let canonical = match fs::canonicalize(&existing) {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(self.dangling(&existing, &display));
            }
            Err(e) => return Err(ToolError::io("resolve", &display, &e)),
        };
        if !canonical.starts_with(&self.root) {
            return Err(escape(&display));
        }
        let exists = rest.is_empty();
        let mut physical = canonical;
        for name in rest.into_iter().rev() {
            physical.push(name);
        }
        Ok(Located {
            display,
            physical,
            exists,
        })
    }

    /// [`Workspace::locate`], then requires the path to exist (`Failed` "not found").
    pub(crate) fn locate_existing(&self, field: &str, input: &str) -> Result<Located, ToolError> {
        let loc = self.locate(field, input)?;
        if !loc.exists {
            return Err(ToolError::failed(format!("`{}` not found", loc.display)));
        }
        Ok(loc)
    }

    /// `existing` was found by `lstat` but does not canonicalize: a dangling symlink (on it
    /// or on a link chain through it). Classify by where its target points, lexically.
    fn dangling(&self, existing: &Path, display: &str) -> ToolError {
        let inside = fs::read_link(existing).ok().and_then(|target| {
            let base = if target.is_absolute() {
                PathBuf::new()
            } else {
                fs::canonicalize(existing.parent()?).ok()?
            };
            let mut out = base;
            for c in target.components() {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            Some(out.starts_with(&self.root))
        });
        match inside {
            Some(true) => ToolError::refused(
                RefusalReason::DanglingSymlink,
                format!(
                    "`{display}` goes through a symbolic link whose target does not exist; \
                     refusing to follow it"
                ),
            ),
            _ => escape(display),
        }
    }
}

fn escape(display: &str) -> ToolError {
    ToolError::refused(
        RefusalReason::SymlinkEscape,
        format!("`{display}` resolves through a symbolic link to a location outside the workspace"),
    )
}

/// A root-relative path as shown to the model: `/`-separated, `.` for the root.
pub(crate) fn display_rel(rel: &Path) -> String {
    let parts: Vec<String> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// `base` (a display path) joined with `rel` (relative to it) as a display path.
pub(crate) fn join_display(base: &str, rel: &Path) -> String {
    let tail = display_rel(rel);
    match (base, tail.as_str()) {
        (".", t) => t.to_string(),
        (b, ".") => b.to_string(),
        (b, t) => format!("{b}/{t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_joins() {
        assert_eq!(display_rel(Path::new("")), ".");
        assert_eq!(display_rel(Path::new("a/b")), "a/b");
        assert_eq!(join_display(".", Path::new("a/b")), "a/b");
        assert_eq!(join_display("src", Path::new("x.rs")), "src/x.rs");
        assert_eq!(join_display("src", Path::new("")), "src");
    }

    #[test]
    fn lexical_rules() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        assert_eq!(ws.lexical("path", "./a/./b").unwrap(), PathBuf::from("a/b"));
        assert_eq!(ws.lexical("path", ".").unwrap(), PathBuf::new());
        let abs = ws.root().join("x/y");
        assert_eq!(
            ws.lexical("path", abs.to_str().unwrap()).unwrap(),
            PathBuf::from("x/y")
        );
        for bad in ["a/../b", "..", "/etc/passwd"] {
            let err = ws.lexical("path", bad).unwrap_err();
            assert_eq!(err.reason(), Some(RefusalReason::PathEscape), "{bad}");
        }
        let err = ws.lexical("path", "/etc/passwd").unwrap_err();
        assert!(!err.to_string().contains("/etc"), "{err}");
        for bad in ["", "a\0b"] {
            assert!(matches!(
                ws.lexical("path", bad),
                Err(ToolError::InvalidParams { .. })
            ));
        }
    }
}
