//! Confinement of `memory.persist` / `memory.load` paths to the memory directory.
//!
//! Owns the one rule deciding which caller paths may be written or read. It must not read
//! or write file contents; it only inspects path components (with `symlink_metadata` and
//! `canonicalize` on components that exist).
//!
//! # Rule
//! - The path must be non-empty and free of NUL bytes.
//! - No `..` component anywhere (even one that would stay inside): refusing is simpler to
//!   reason about than normalising.
//! - A relative path resolves under the memory directory. An absolute path is accepted only
//!   when it lies inside the memory directory (as given or canonicalised).
//! - Every component that already exists is checked: a symlink is followed, and if its
//!   target is outside the (canonical) memory directory the path is refused. Symlinks that
//!   stay inside are allowed.
//! - The result must name a file strictly inside the directory, not the directory itself, and
//!   not a file the store manages: `shared.json`, anything under `memory-namespaces/` or
//!   `agents/`, or their temp and corrupt siblings. **(beyond)** Without this, a connection
//!   in one namespace could overwrite or read another namespace's graph through
//!   persist/load, defeating scope isolation.
//!
//! A component created after the check (a race with a local user who can already write in
//! `CAR_HOME`) is outside this threat model.

use crate::error::ConfineError;
use std::path::{Component, Path, PathBuf};

/// The shared graph's file name inside the memory directory.
pub const SHARED_FILE: &str = "shared.json";
/// The directory of namespace graphs.
pub const NAMESPACES_DIR: &str = "memory-namespaces";
/// The directory of agent graphs.
pub const AGENTS_DIR: &str = "agents";

fn refuse(path: &str, reason: &str) -> ConfineError {
    ConfineError {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Resolves a caller's path against `memory_dir` under the rule in the module docs. The
/// directory must exist. The returned path is inside the canonical memory directory.
pub fn resolve(memory_dir: &Path, requested: &str) -> Result<PathBuf, ConfineError> {
    if requested.trim().is_empty() {
        return Err(refuse(requested, "must not be empty"));
    }
    if requested.contains('\0') {
        return Err(refuse(requested, "must not contain a NUL byte"));
    }
    let root = memory_dir.canonicalize().map_err(|e| {
        refuse(
            requested,
            &format!("cannot be checked: memory directory unavailable ({e})"),
        )
    })?;
    let path = Path::new(requested);
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(refuse(requested, "must not contain '..'"));
    }
    let relative: PathBuf = if path.is_absolute() {
        let inside = path
            .strip_prefix(&root)
            .or_else(|_| path.strip_prefix(memory_dir))
            .map_err(|_| refuse(requested, "is outside the memory directory"))?;
        inside.to_path_buf()
    } else {
        path.to_path_buf()
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            // Prefixes and roots cannot survive strip_prefix on Unix; refuse them anyway.
            _ => return Err(refuse(requested, "is outside the memory directory")),
        }
    }
    if parts.is_empty() {
        return Err(refuse(
            requested,
            "must name a file inside the memory directory",
        ));
    }
    if is_managed(&parts) {
        return Err(refuse(
            requested,
            "is a snapshot file the memory store manages",
        ));
    }

    let mut current = root.clone();
    for part in &parts {
        current.push(part);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = current
                    .canonicalize()
                    .map_err(|_| refuse(requested, "goes through a dangling symlink"))?;
                if !target.starts_with(&root) {
                    return Err(refuse(
                        requested,
                        "escapes the memory directory through a symlink",
                    ));
                }
                // Continue from the target so later components are judged where they live.
                current = target;
                if current == root {
                    continue;
                }
                let rel: Vec<&std::ffi::OsStr> = current
                    .strip_prefix(&root)
                    .map(|r| r.iter().collect())
                    .unwrap_or_default();
                if is_managed(&rel) {
                    return Err(refuse(
                        requested,
                        "is a snapshot file the memory store manages",
                    ));
                }
            }
            Ok(_) => {}
            // Everything from here on does not exist yet, so it cannot be a symlink.
            Err(_) => break,
        }
    }
    let resolved = root.join(parts.iter().collect::<PathBuf>());
    if resolved == root {
        return Err(refuse(
            requested,
            "must name a file inside the memory directory",
        ));
    }
    Ok(resolved)
}

/// True for paths (relative to the memory directory) that belong to the store.
fn is_managed(parts: &[&std::ffi::OsStr]) -> bool {
    let Some(first) = parts.first().and_then(|p| p.to_str()) else {
        return false;
    };
    if first == NAMESPACES_DIR || first == AGENTS_DIR {
        return true;
    }
    parts.len() == 1
        && (first == SHARED_FILE
            || first.starts_with(&format!("{SHARED_FILE}."))
            || first.starts_with(".snapshot-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_absolute_inside_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        assert_eq!(
            resolve(dir.path(), "backup.json").unwrap(),
            root.join("backup.json")
        );
        assert_eq!(
            resolve(dir.path(), "./exports/a.json").unwrap(),
            root.join("exports/a.json")
        );
        let abs = root.join("x.json");
        assert_eq!(resolve(dir.path(), abs.to_str().unwrap()).unwrap(), abs);
    }

    #[test]
    fn escapes_are_refused_with_the_path_named() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("../x.json", "path: \"../x.json\" must not contain '..'"),
            ("a/../../x", "path: \"a/../../x\" must not contain '..'"),
            ("a/../b", "path: \"a/../b\" must not contain '..'"),
            (
                "/etc/passwd",
                "path: \"/etc/passwd\" is outside the memory directory",
            ),
            ("", "path: \"\" must not be empty"),
            (
                ".",
                "path: \".\" must name a file inside the memory directory",
            ),
            (
                "shared.json",
                "path: \"shared.json\" is a snapshot file the memory store manages",
            ),
            (
                "agents/x.json",
                "path: \"agents/x.json\" is a snapshot file the memory store manages",
            ),
            (
                "memory-namespaces/%50.json",
                "path: \"memory-namespaces/%50.json\" is a snapshot file the memory store manages",
            ),
        ];
        for (path, message) in cases {
            assert_eq!(resolve(dir.path(), path).unwrap_err().to_string(), message);
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_escaping_are_refused_and_inside_ones_allowed() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f.json"), dir.path().join("file.json"))
            .unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("alias")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("agents"), dir.path().join("sneaky")).unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        let err = resolve(dir.path(), "out/x.json").unwrap_err().to_string();
        assert_eq!(
            err,
            "path: \"out/x.json\" escapes the memory directory through a symlink"
        );
        assert!(
            resolve(dir.path(), "file.json").is_err(),
            "a dangling or escaping file symlink"
        );
        assert!(resolve(dir.path(), "alias/x.json").is_ok());
        assert!(
            resolve(dir.path(), "sneaky/x.json").is_err(),
            "a symlink into a managed dir"
        );
    }
}
