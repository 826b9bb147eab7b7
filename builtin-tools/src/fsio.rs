//! File system primitives used after [`crate::confine`] has located a physical path.
//!
//! - Every open of a file passes `O_NOFOLLOW` on unix, so a final component that is (or
//!   became) a symlink fails to open instead of being followed. Opens of existing files
//!   also pass `O_NONBLOCK`, so a FIFO cannot make a tool hang; only regular files are
//!   then read or written.
//! - New files and temp files are created with `create_new` (`O_CREAT|O_EXCL`), which never
//!   follows or reuses an existing name.
//! - `replace_atomically` writes a temp file in the target's own directory, syncs it and
//!   renames it over the target; readers see the old or the new content, never a mix.
//! - `create_parent_dirs` creates missing directories one component at a time with
//!   `create_dir` (which does not follow a symlink at the name it creates) and checks that
//!   every existing component is a real directory, not a symlink.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{RefusalReason, ToolError};

/// Adds `O_NOFOLLOW` to `opts` on unix (a no-op elsewhere).
fn no_follow(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW);
    }
    opts
}

/// Adds `O_NOFOLLOW | O_NONBLOCK` on unix, for opening files that should already exist.
/// `O_NONBLOCK` changes nothing for regular files, but makes opening a FIFO that appeared
/// at the path return at once instead of blocking until a peer opens it (the file type is
/// then checked and refused).
fn no_follow_no_block(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    opts
}

/// Maps the error of an `O_NOFOLLOW` open: `ELOOP` means the final component is a symlink.
fn open_error(action: &str, display: &str, err: &std::io::Error) -> ToolError {
    #[cfg(unix)]
    if err.raw_os_error() == Some(libc::ELOOP) {
        return ToolError::refused(
            RefusalReason::SymlinkEscape,
            format!("`{display}` is a symbolic link; refusing to follow it"),
        );
    }
    ToolError::io(action, display, err)
}

/// Opens an existing file for reading without following a final symlink.
pub(crate) fn open_read(physical: &Path, display: &str) -> Result<File, ToolError> {
    no_follow_no_block(OpenOptions::new().read(true))
        .open(physical)
        .map_err(|e| open_error("open", display, &e))
}

/// Reads the whole regular file at `physical`, refusing files over `max_bytes`.
pub(crate) fn read_bounded(
    physical: &Path,
    display: &str,
    max_bytes: u64,
) -> Result<Vec<u8>, ToolError> {
    let file = open_read(physical, display)?;
    let meta = file
        .metadata()
        .map_err(|e| ToolError::io("inspect", display, &e))?;
    if meta.is_dir() {
        return Err(ToolError::failed(format!(
            "`{display}` is a directory; use list_dir to see its entries"
        )));
    }
    if !meta.is_file() {
        return Err(ToolError::failed(format!(
            "`{display}` is not a regular file"
        )));
    }
    if meta.len() > max_bytes {
        return Err(ToolError::failed(format!(
            "`{display}` is {} bytes, over this tool's {max_bytes}-byte limit",
            meta.len()
        )));
    }
    let mut buf = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // `take` bounds the read even if the file grows while being read.
    file.take(max_bytes + 1)
        .read_to_end(&mut buf)
        .map_err(|e| ToolError::io("read", display, &e))?;
    if buf.len() as u64 > max_bytes {
        return Err(ToolError::failed(format!(
            "`{display}` grew past the {max_bytes}-byte limit while being read"
        )));
    }
    Ok(buf)
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

/// Creates a new file at `physical` (which must not exist) holding `bytes`.
pub(crate) fn create_new_file(
    physical: &Path,
    display: &str,
    bytes: &[u8],
) -> Result<(), ToolError> {
    let mut file = no_follow(OpenOptions::new().write(true).create_new(true))
        .open(physical)
        .map_err(|e| open_error("create", display, &e))?;
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
    let mut file = no_follow_no_block(OpenOptions::new().append(true))
        .open(physical)
        .map_err(|e| open_error("open", display, &e))?;
    let meta = file
        .metadata()
        .map_err(|e| ToolError::io("inspect", display, &e))?;
    if !meta.is_file() {
        return Err(ToolError::failed(format!(
            "`{display}` is not a regular file"
        )));
    }
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| ToolError::io("append to", display, &e))
}

/// Replaces the file at `physical` with `bytes` via a temp file in the same directory and a
/// rename. The existing file's permissions are carried over when it exists.
pub(crate) fn replace_atomically(
    physical: &Path,
    display: &str,
    bytes: &[u8],
) -> Result<(), ToolError> {
    let parent = physical
        .parent()
        .ok_or_else(|| ToolError::failed(format!("`{display}` has no parent directory")))?;
    let name = physical
        .file_name()
        .ok_or_else(|| ToolError::failed(format!("`{display}` has no file name")))?;
    let permissions = fs::symlink_metadata(physical).ok().map(|m| m.permissions());
    let (tmp_path, mut tmp) = create_temp(parent, &name.to_string_lossy(), display)?;
    let result = (|| {
        if let Some(p) = permissions {
            tmp.set_permissions(p)?;
        }
        tmp.write_all(bytes)?;
        tmp.sync_all()?;
        drop(tmp);
        fs::rename(&tmp_path, physical)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(ToolError::io("write", display, &e));
    }
    // Make the rename durable; failure here does not undo the write, so it is ignored.
    if let Ok(dir) = File::open(parent) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A fresh hidden temp file next to the target (`.NAME.car-tmp.PID.N`), made with
/// `create_new` so it never reuses or follows an existing name.
fn create_temp(parent: &Path, name: &str, display: &str) -> Result<(PathBuf, File), ToolError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let stem: String = name.chars().take(100).collect();
    for _ in 0..16 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = parent.join(format!(
            ".{stem}.car-tmp.{}.{n}.{nanos}",
            std::process::id()
        ));
        match no_follow(OpenOptions::new().write(true).create_new(true)).open(&path) {
            Ok(f) => return Ok((path, f)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ToolError::io("create a temporary file for", display, &e)),
        }
    }
    Err(ToolError::failed(format!(
        "cannot create a temporary file for `{display}`"
    )))
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
