//! File system primitives used after [`crate::confine`] has located a physical path.
//!
//! Every open, capped read, exclusive create and atomic replace goes through
//! `car_proto::safe_file`, the one safe-file API the daemon's crates share: opens never
//! follow a final symlink (`O_NOFOLLOW`), never block on a FIFO (`O_NONBLOCK`) and accept
//! only regular files (checked on the descriptor); reads stop at the tool's cap even if
//! the file grows; new files are `O_CREAT|O_EXCL`; a replace writes a temp file in the
//! target's own directory, fsyncs it and renames it over the target, so readers see the
//! old or the new content, never a mix. This module maps those errors to [`ToolError`]s
//! naming the workspace path, and owns `create_parent_dirs`, which creates missing
//! directories one component at a time with `create_dir` (which does not follow a symlink
//! at the name it creates) and checks that every existing component is a real directory.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::Path;

use car_proto::safe_file::{self, FileKind, ReadLimits, SafeFileError};

use crate::error::{RefusalReason, ToolError};

/// The error of a safe open or read of `display`, worded for a tool's caller.
fn file_error(action: &str, display: &str, err: SafeFileError) -> ToolError {
    match err {
        SafeFileError::Symlink => ToolError::refused(
            RefusalReason::SymlinkEscape,
            format!("`{display}` is a symbolic link; refusing to follow it"),
        ),
        SafeFileError::NotRegular(FileKind::Directory) => ToolError::failed(format!(
            "`{display}` is a directory; use list_dir to see its entries"
        )),
        SafeFileError::NotRegular(kind) => ToolError::failed(format!(
            "`{display}` is {}, not a regular file",
            kind.as_str()
        )),
        SafeFileError::TooLarge { size, cap } => ToolError::failed(format!(
            "`{display}` is {size} bytes, over this tool's {cap}-byte limit"
        )),
        SafeFileError::Grew { cap } => ToolError::failed(format!(
            "`{display}` grew past the {cap}-byte limit while being read"
        )),
        SafeFileError::Io(e) => ToolError::io(action, display, &e),
        other => ToolError::failed(format!("`{display}` {other}")),
    }
}

/// The error of an `O_NOFOLLOW` create: `ELOOP` means the final component is a symlink.
fn create_error(display: &str, err: &std::io::Error) -> ToolError {
    #[cfg(unix)]
    if err.raw_os_error() == Some(libc::ELOOP) {
        return file_error("create", display, SafeFileError::Symlink);
    }
    ToolError::io("create", display, err)
}

/// Opens an existing regular file for reading without following a final symlink.
#[cfg(test)]
pub(crate) fn open_read(physical: &Path, display: &str) -> Result<fs::File, ToolError> {
    safe_file::open_regular(physical).map_err(|e| file_error("open", display, e))
}

/// Reads the whole regular file at `physical`, refusing files over `max_bytes`.
pub(crate) fn read_bounded(
    physical: &Path,
    display: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, ToolError> {
    safe_file::read(physical, ReadLimits::cap(max_bytes))
        .map_err(|e| file_error("read", display, e))
}

/// Creates every missing directory between `root` and `parent` (both physical, `parent`
/// under `root`). Existing components must be real directories.
pub(crate) fn create_parent_dirs(
    root: &Path,
    parent: &Path,
    display: &str,
) -> Result<(), ToolError> {
    let Ok(rel) = parent.strip_prefix(root) else {
        return Err(ToolError::refused(
            RefusalReason::PathEscape,
            format!("`{display}` is not inside the workspace"),
        ));
    };
    let mut at = root.to_path_buf();
    for component in rel.components() {
        at.push(component);
        match fs::symlink_metadata(&at) {
            Ok(meta) => check_real_dir(&meta, display)?,
            Err(e) if e.kind() == ErrorKind::NotFound => match fs::create_dir(&at) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let meta = fs::symlink_metadata(&at)
                        .map_err(|e| ToolError::io("create directories for", display, &e))?;
                    check_real_dir(&meta, display)?;
                }
                Err(e) => return Err(ToolError::io("create directories for", display, &e)),
            },
            Err(e) => return Err(ToolError::io("create directories for", display, &e)),
        }
    }
    Ok(())
}

fn check_real_dir(meta: &fs::Metadata, display: &str) -> Result<(), ToolError> {
    if meta.file_type().is_symlink() {
        return Err(ToolError::refused(
            RefusalReason::SymlinkEscape,
            format!("a directory on the way to `{display}` became a symbolic link"),
        ));
    }
    if !meta.is_dir() {
        return Err(ToolError::failed(format!(
            "cannot create `{display}`: a component of its parent path is a file, not a directory"
        )));
    }
    Ok(())
}

/// Creates a new file at `physical` (which must not exist) holding `bytes` (mode 0666
/// less the umask, as any editor would).
pub(crate) fn create_new_file(
    physical: &Path,
    display: &str,
    bytes: &[u8],
) -> Result<(), ToolError> {
    let mut file =
        safe_file::create_exclusive(physical, 0o666).map_err(|e| create_error(display, &e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| ToolError::io("write", display, &e))
}

/// Appends `bytes` to the existing regular file at `physical`.
pub(crate) fn append_existing(
    physical: &Path,
    display: &str,
    bytes: &[u8],
) -> Result<(), ToolError> {
    let mut file = safe_file::open_append(physical).map_err(|e| file_error("open", display, e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| ToolError::io("append to", display, &e))
}

/// Replaces the file at `physical` with `bytes` atomically
/// (`car_proto::safe_file::write_atomic`). The existing file's permission bits are carried
/// over; a new file gets 0644.
pub(crate) fn replace_atomically(
    physical: &Path,
    display: &str,
    bytes: &[u8],
) -> Result<(), ToolError> {
    let mode = fs::symlink_metadata(physical)
        .ok()
        .filter(|m| m.is_file())
        .map_or(0o644, |m| permission_bits(&m));
    safe_file::write_atomic(physical, bytes, mode).map_err(|e| ToolError::io("write", display, &e))
}

#[cfg(unix)]
fn permission_bits(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o7777
}

#[cfg(not(unix))]
fn permission_bits(_meta: &fs::Metadata) -> u32 {
    0o644
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// The last line of defence, tested without the path checks in front of it: opens
    /// never follow a final-component symlink, and creation never goes through one.
    #[test]
    fn opens_do_not_follow_a_final_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("link");
        symlink(&target, &link).unwrap();
        let dangling = dir.path().join("dangling");
        symlink(dir.path().join("absent.txt"), &dangling).unwrap();

        assert!(matches!(
            open_read(&link, "link"),
            Err(ToolError::Refused {
                reason: RefusalReason::SymlinkEscape,
                ..
            })
        ));
        assert!(append_existing(&link, "link", b"more").is_err());
        assert!(create_new_file(&link, "link", b"new").is_err());
        assert!(create_new_file(&dangling, "dangling", b"new").is_err());
        assert!(!dir.path().join("absent.txt").exists());
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        // Atomic replace renames over the link itself, never writing into its target.
        replace_atomically(&link, "link", b"replaced").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"keep");
        assert!(!fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn parent_dirs_are_created_only_as_real_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        create_parent_dirs(&root, &root.join("a/b/c"), "a/b/c/f").unwrap();
        assert!(root.join("a/b/c").is_dir());
        let elsewhere = tempfile::tempdir().unwrap();
        symlink(elsewhere.path(), root.join("a/link")).unwrap();
        assert!(matches!(
            create_parent_dirs(&root, &root.join("a/link/d"), "a/link/d/f"),
            Err(ToolError::Refused { .. })
        ));
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        assert!(create_parent_dirs(&root, Path::new("/elsewhere"), "x").is_err());
    }
}
