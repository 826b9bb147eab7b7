//! Confinement of `memory.persist` / `memory.load` paths to the memory directory.
//!
//! Owns the one rule deciding which caller paths may be written or read. It must not read
//! or write file contents; it only inspects path components (with `symlink_metadata` and
//! `canonicalize` on components that exist). Opening the file it returns is left to
//! `car_proto::safe_file`, which never follows a symlink at the final component and
//! opens only regular files, and to [`crate::snapshot::write_atomic`], which writes a
//! fresh `O_EXCL` temp file and renames it over the target.
//!
//! # Rule
//! - The path must be non-empty and free of NUL bytes.
//! - No `..` component anywhere (even one that would stay inside): refusing is simpler to reason
//!   about than normalising.
//! - A relative path resolves under the memory directory. An absolute path is accepted only when it
//!   lies inside the memory directory (as given or canonicalised).
//! - The path is **fully resolved** before anything is decided: starting from the canonical memory
//!   directory, each typed component that exists is followed (a symlink is replaced by its
//!   canonical target, a dangling one is refused); the first component that does not exist ends the
//!   walk and it and every later component are appended as typed (they cannot be symlinks yet). A
//!   component that exists but cannot be inspected (permission, not a directory) is refused. The
//!   result is what [`resolve`] returns, so the caller opens the very path that was judged, with no
//!   symlink left in it at check time.
//! - The resolved path must lie strictly inside the canonical memory directory (a symlink whose
//!   target is outside is refused), and must not be the directory itself.
//! - The resolved path, taken relative to the canonical memory directory, must not name a file the
//!   store manages: `shared.json` and its temp and corrupt siblings (`shared.json.*`, `.car-tmp-*`
//!   at the top level), or anything under (or being) `memory-namespaces/` or `agents/`. The same
//!   test is applied to the path as typed. Names are compared case-insensitively (Unicode upper-
//!   then lower-casing, so the long `ſ` matches `s`; trailing dots and spaces are ignored, as
//!   Windows does), because the memory directory may live on a case-insensitive file system where
//!   `SHARED.JSON` *is* `shared.json`. So `alias/shared.json` with `alias -> .` is refused, as are
//!   `SHARED.JSON`, `Agents/x.json` and `Memory-Namespaces/…`. **(beyond)** Without this, a
//!   connection in one namespace could overwrite or read another namespace's graph through
//!   persist/load, defeating scope isolation.
//!
//! What this rule cannot see is left to the open: a symlink planted at the final component
//! after the check is refused by `O_NOFOLLOW` on load and replaced (never followed) by the
//! rename on persist; a hard link onto a managed file is refused by `memory.load` (it reads
//! only files with a single link) and harmless to persist (the rename replaces the name,
//! not the shared inode). A directory component swapped for a symlink between the check
//! and the open (a race with a local user who can already write in `CAR_HOME`) is outside
//! this threat model; persist re-resolves after creating missing directories to keep that
//! window short.

use crate::error::ConfineError;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// The shared graph's file name inside the memory directory.
pub const SHARED_FILE: &str = "shared.json";
/// The directory of namespace graphs.
pub const NAMESPACES_DIR: &str = "memory-namespaces";
/// The directory of agent graphs.
pub const AGENTS_DIR: &str = "agents";
/// The prefix of [`crate::snapshot::write_atomic`]'s temp files (`car_proto::safe_file`'s).
pub const TEMP_PREFIX: &str = car_proto::safe_file::TEMP_PREFIX;

const MANAGED: &str = "is a snapshot file the memory store manages";

fn refuse(path: &str, reason: &str) -> ConfineError {
    ConfineError {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Resolves a caller's path against `memory_dir` under the rule in the module docs. The
/// directory must exist. The returned path is fully resolved (no symlink in it when it was
/// checked) and strictly inside the canonical memory directory.
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
    let mut parts: Vec<&OsStr> = Vec::new();
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
        return Err(refuse(requested, MANAGED));
    }

    let resolved = walk(&root, &parts).map_err(|reason| refuse(requested, reason))?;
    let inside: Vec<&OsStr> = match resolved.strip_prefix(&root) {
        Ok(rel) => rel.iter().collect(),
        Err(_) => {
            return Err(refuse(
                requested,
                "escapes the memory directory through a symlink",
            ))
        }
    };
    if inside.is_empty() {
        return Err(refuse(
            requested,
            "must name a file inside the memory directory",
        ));
    }
    if is_managed(&inside) {
        return Err(refuse(
            requested,
            "resolves through a symlink to a snapshot file the memory store manages",
        ));
    }
    Ok(resolved)
}

/// Follows `parts` from the canonical `root`: existing components are resolved (symlinks
/// to their canonical targets), and from the first missing one on the rest is appended.
fn walk(root: &Path, parts: &[&OsStr]) -> Result<PathBuf, &'static str> {
    let mut current = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        let next = current.join(part);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = next
                    .canonicalize()
                    .map_err(|_| "goes through a dangling symlink")?;
                if !target.starts_with(root) {
                    return Err("escapes the memory directory through a symlink");
                }
                current = target;
            }
            Ok(_) => current = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Nothing from here on exists yet, so none of it can be a symlink.
                current = next;
                current.extend(&parts[i + 1..]);
                return Ok(current);
            }
            Err(_) => return Err("cannot be checked: a component exists but cannot be inspected"),
        }
    }
    Ok(current)
}

/// Folds a file name for comparison the way a case-insensitive file system might: Unicode
/// upper- then lower-casing (so `ſ` meets `s` and the Kelvin sign meets `k`), trailing dots and
/// spaces dropped (Windows ignores them).
fn fold(name: &OsStr) -> String {
    name.to_string_lossy()
        .to_uppercase()
        .to_lowercase()
        .trim_end_matches(['.', ' '])
        .to_owned()
}

/// True for paths (relative to the memory directory) that belong to the store, compared
/// case-insensitively.
fn is_managed(parts: &[&OsStr]) -> bool {
    let Some(first) = parts.first().map(|p| fold(p)) else {
        return false;
    };
    if first == NAMESPACES_DIR || first == AGENTS_DIR {
        return true;
    }
    parts.len() == 1
        && (first == SHARED_FILE
            || first.starts_with(&format!("{SHARED_FILE}."))
            || first.starts_with(TEMP_PREFIX))
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

    #[test]
    fn managed_names_are_matched_case_insensitively() {
        let dir = tempfile::tempdir().unwrap();
        for path in [
            "SHARED.JSON",
            "Shared.Json",
            "shared.json.CORRUPT-1",
            "Agents/x.json",
            "AGENTS",
            "Memory-Namespaces/%50.json",
            "MEMORY-NAMESPACES/x.json.corrupt-2",
            ".CAR-Tmp-abc.tmp",
            "\u{17f}hared.json",
            "shared.json.",
            "shared.json ",
            "agents./x.json",
        ] {
            let err = resolve(dir.path(), path).unwrap_err();
            assert_eq!(
                err.reason, "is a snapshot file the memory store manages",
                "{path:?}"
            );
        }
        assert!(resolve(dir.path(), "shared.json.d/x.json").is_ok());
        assert!(resolve(dir.path(), "exports/shared.json").is_ok());
        assert!(resolve(dir.path(), "exports/agents/x.json").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn an_alias_of_the_root_cannot_reach_managed_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("shared.json"), b"{}").unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("alias")).unwrap();
        std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
        for path in [
            "alias/shared.json",
            "alias/SHARED.JSON",
            "alias/shared.json.corrupt-7",
            "alias/.car-tmp-x.tmp",
            "alias/agents/a.json",
            "alias/Memory-Namespaces/n.json",
            "alias/alias/shared.json",
            "sub/up/shared.json",
            "sub/up/agents/a.json",
        ] {
            let err = resolve(dir.path(), path).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "path: {path:?} resolves through a symlink to a snapshot file the memory store manages"
                )
            );
        }
        assert_eq!(
            resolve(dir.path(), "alias").unwrap_err().reason,
            "must name a file inside the memory directory"
        );
        assert_eq!(
            resolve(dir.path(), "alias/ok.json").unwrap(),
            root.join("ok.json"),
            "the fully resolved path is returned"
        );
        assert_eq!(
            resolve(dir.path(), "sub/up/sub/new/x.json").unwrap(),
            root.join("sub/new/x.json")
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_file_symlink_onto_a_managed_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("shared.json"), b"{}").unwrap();
        std::fs::write(root.join("plain.json"), b"{}").unwrap();
        std::os::unix::fs::symlink("shared.json", root.join("link.json")).unwrap();
        std::os::unix::fs::symlink("plain.json", root.join("ok-link.json")).unwrap();
        assert!(resolve(dir.path(), "link.json").is_err());
        assert_eq!(
            resolve(dir.path(), "ok-link.json").unwrap(),
            root.join("plain.json")
        );
        std::fs::write(root.join("a-file"), b"").unwrap();
        assert!(
            resolve(dir.path(), "a-file/x.json").is_err(),
            "a component that exists but cannot be walked"
        );
    }
}
