//! The file-system primitives behind the store: the owner-only directory, atomic `0600`
//! writes, and reads that refuse anything but a private regular file of this user.
//!
//! Every function takes the expected owner uid explicitly (the store learns it once, from
//! a file it creates; see [`own_uid`]) so the ownership rules can be tested without root.

use std::fs::{self, DirBuilder, Metadata, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::UNIX_EPOCH;

use car_proto::safe_file::{self, ReadLimits, SafeFileError};

use crate::error::{Result, SecretError};

/// Mode of the store directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every secret file.
pub const FILE_MODE: u32 = 0o600;

/// The uid this process creates files as: the owner of an unnamed temp file made in
/// `near` (falling back to the system temp directory). No `unsafe` `geteuid` needed, and
/// it is exactly the owner our own secret files will have.
pub(crate) fn own_uid(near: &Path) -> io::Result<u32> {
    let probe = tempfile::tempfile_in(near).or_else(|_| tempfile::tempfile())?;
    Ok(probe.metadata()?.uid())
}

/// Makes sure `dir` is a real directory owned by `uid` with mode `0700`: creates it so when
/// absent, tightens an existing one that grants group or other access (with a warning), and
/// refuses a symbolic link, a non-directory or another user's directory.
pub(crate) fn ensure_private_dir(dir: &Path, uid: u32) -> Result<()> {
    let mut created = false;
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            match DirBuilder::new().mode(DIR_MODE).create(dir) {
                Ok(()) => created = true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(SecretError::io("create directory", dir, e)),
            }
            fs::symlink_metadata(dir).map_err(|e| SecretError::io("inspect", dir, e))?
        }
        Err(e) => return Err(SecretError::io("inspect", dir, e)),
    };
    if meta.file_type().is_symlink() {
        return Err(SecretError::unavailable(
            dir,
            "it is a symbolic link; the store will not follow it",
        ));
    }
    if !meta.is_dir() {
        return Err(SecretError::unavailable(dir, "it is not a directory"));
    }
    if meta.uid() != uid {
        return Err(SecretError::unavailable(
            dir,
            format!(
                "it is owned by uid {}, not this user (uid {uid})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode != DIR_MODE {
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)).map_err(|e| {
            SecretError::unavailable(dir, format!("cannot set its mode to 0700: {e}"))
        })?;
        if created {
            tracing::debug!(path = %dir.display(), "created secret store directory");
        } else {
            tracing::warn!(
                path = %dir.display(),
                old_mode = %format!("{mode:04o}"),
                "secret store directory had mode {mode:04o}; tightened to 0700"
            );
        }
    } else if created {
        tracing::debug!(path = %dir.display(), "created secret store directory");
    }
    Ok(())
}

/// Refuses a secret file that is not a regular file owned by `uid` with no group or other
/// permission bits.
pub(crate) fn check_private_file(path: &Path, meta: &Metadata, uid: u32) -> Result<()> {
    if meta.file_type().is_symlink() {
        return Err(SecretError::insecure(path, "it is a symbolic link"));
    }
    if !meta.is_file() {
        return Err(SecretError::insecure(path, "it is not a regular file"));
    }
    if meta.uid() != uid {
        return Err(SecretError::insecure(
            path,
            format!(
                "it is owned by uid {}, not this user (uid {uid})",
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::insecure(
            path,
            format!("it has mode {mode:04o}, readable or writable beyond its owner; expected 0600"),
        ));
    }
    Ok(())
}

/// The metadata of a secret file, or `None` when there is none. Does not follow links.
pub(crate) fn stat_private_file(path: &Path, uid: u32) -> Result<Option<Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            check_private_file(path, &meta, uid)?;
            Ok(Some(meta))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SecretError::io("inspect", path, e)),
    }
}

/// Reads a secret file's bytes, or `None` when it does not exist. Opens through
/// `car_proto::safe_file` (`O_NOFOLLOW | O_NONBLOCK`, so a planted link is refused and a
/// planted FIFO cannot hang the caller; regular files only), checks the open file's owner
/// and mode, and reads at most `cap` bytes.
pub(crate) fn read_private_file(path: &Path, uid: u32, cap: usize) -> Result<Option<Vec<u8>>> {
    let mut file = match safe_file::open_regular(path) {
        Ok(file) => file,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(SafeFileError::Symlink) => {
            return Err(SecretError::insecure(path, "it is a symbolic link"))
        }
        Err(SafeFileError::NotRegular(_)) => {
            return Err(SecretError::insecure(path, "it is not a regular file"))
        }
        Err(SafeFileError::Io(e)) => return Err(SecretError::io("open", path, e)),
        Err(other) => {
            return Err(SecretError::io(
                "open",
                path,
                io::Error::other(other.to_string()),
            ))
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| SecretError::io("inspect", path, e))?;
    check_private_file(path, &meta, uid)?;
    let cap = u64::try_from(cap).unwrap_or(u64::MAX);
    match safe_file::read_open(&mut file, ReadLimits::cap(cap)) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(SafeFileError::TooLarge { .. } | SafeFileError::Grew { .. }) => {
            Err(SecretError::Corrupt {
                path: path.to_owned(),
                problem: format!("it holds more than the {cap}-byte cap"),
            })
        }
        Err(SafeFileError::Io(e)) => Err(SecretError::io("read", path, e)),
        Err(other) => Err(SecretError::io(
            "read",
            path,
            io::Error::other(other.to_string()),
        )),
    }
}

/// Atomically replaces `dir/name` with `bytes` through `car_proto::safe_file::write_atomic`:
/// a temp file created in `dir` with `O_CREAT|O_EXCL|O_NOFOLLOW` and exactly mode `0600`
/// from the start, written, fsynced, renamed over the target, then `dir` fsynced. The
/// temp file is removed on any failure.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let target = dir.join(name);
    safe_file::write_atomic(&target, bytes, FILE_MODE)
        .map_err(|e| SecretError::io("write", &target, e))
}

/// Removes `dir/name`; `false` when it did not exist. Fsyncs `dir` after a removal.
pub(crate) fn remove(dir: &Path, name: &str) -> Result<bool> {
    let path = dir.join(name);
    match fs::remove_file(&path) {
        Ok(()) => {
            sync_dir(dir)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(SecretError::io("remove", &path, e)),
    }
}

/// Fsyncs a directory so a rename or unlink in it survives a crash.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    safe_file::sync_dir(dir).map_err(|e| SecretError::io("fsync directory", dir, e))
}

/// Milliseconds since the Unix epoch of a file's last modification.
pub(crate) fn modified_ms(meta: &Metadata) -> Option<u64> {
    let since = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since.as_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn own_uid_is_the_owner_of_new_files() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = own_uid(tmp.path()).unwrap();
        fs::write(tmp.path().join("f"), "x").unwrap();
        assert_eq!(fs::metadata(tmp.path().join("f")).unwrap().uid(), uid);
        assert_eq!(
            fs::read_dir(tmp.path()).unwrap().count(),
            1,
            "the probe leaves nothing behind"
        );
    }

    #[test]
    fn foreign_owner_is_refused_for_the_dir_and_for_files() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = own_uid(tmp.path()).unwrap();
        let other = uid.wrapping_add(1);
        let dir = tmp.path().join("secrets");
        ensure_private_dir(&dir, uid).unwrap();
        let err = ensure_private_dir(&dir, other).unwrap_err();
        assert_eq!(err.reason(), "store_unavailable");
        assert!(
            err.to_string().contains(&format!("owned by uid {uid}")),
            "{err}"
        );

        write_atomic(&dir, "car~k", b"v").unwrap();
        assert!(read_private_file(&dir.join("car~k"), uid, 10)
            .unwrap()
            .is_some());
        let err = read_private_file(&dir.join("car~k"), other, 10).unwrap_err();
        assert_eq!(err.reason(), "insecure_file");
        assert!(err.to_string().contains("not this user"), "{err}");
        let err = stat_private_file(&dir.join("car~k"), other).unwrap_err();
        assert_eq!(err.reason(), "insecure_file");
    }

    #[test]
    fn a_file_in_place_of_the_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = own_uid(tmp.path()).unwrap();
        let dir = tmp.path().join("secrets");
        fs::write(&dir, "").unwrap();
        let err = ensure_private_dir(&dir, uid).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn reads_refuse_loose_modes_fifos_and_oversized_files() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = own_uid(tmp.path()).unwrap();
        let dir = tmp.path().join("secrets");
        ensure_private_dir(&dir, uid).unwrap();
        assert_eq!(mode(&dir), 0o700);

        write_atomic(&dir, "f", b"0123456789").unwrap();
        assert_eq!(mode(&dir.join("f")), 0o600);
        assert_eq!(
            read_private_file(&dir.join("f"), uid, 10).unwrap().unwrap(),
            b"0123456789"
        );
        let err = read_private_file(&dir.join("f"), uid, 9).unwrap_err();
        assert_eq!(err.reason(), "corrupt");
        assert!(!err.to_string().contains("0123"), "{err}");

        for loose in [0o640, 0o604, 0o620] {
            fs::set_permissions(dir.join("f"), Permissions::from_mode(loose)).unwrap();
            let err = read_private_file(&dir.join("f"), uid, 10).unwrap_err();
            assert_eq!(err.reason(), "insecure_file", "{loose:o}");
        }

        let fifo = dir.join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status();
        if let Ok(status) = status {
            assert!(status.success());
            fs::set_permissions(&fifo, Permissions::from_mode(0o600)).unwrap();
            let err = read_private_file(&fifo, uid, 10).unwrap_err();
            assert!(err.to_string().contains("not a regular file"), "{err}");
        }

        assert!(read_private_file(&dir.join("absent"), uid, 10)
            .unwrap()
            .is_none());
        assert!(stat_private_file(&dir.join("absent"), uid)
            .unwrap()
            .is_none());
    }

    #[test]
    fn writes_leave_no_temp_file_and_replace_links_rather_than_follow_them() {
        let tmp = tempfile::tempdir().unwrap();
        let uid = own_uid(tmp.path()).unwrap();
        let dir = tmp.path().join("secrets");
        ensure_private_dir(&dir, uid).unwrap();
        let victim = tmp.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        symlink(&victim, dir.join("f")).unwrap();
        write_atomic(&dir, "f", b"new").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        assert!(fs::symlink_metadata(dir.join("f")).unwrap().is_file());
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["f"]);

        // A failed rename (the target is a directory) cleans its temp file up.
        fs::create_dir(dir.join("d")).unwrap();
        fs::write(dir.join("d").join("x"), "").unwrap();
        assert_eq!(write_atomic(&dir, "d", b"v").unwrap_err().reason(), "io");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);

        assert!(remove(&dir, "f").unwrap());
        assert!(!remove(&dir, "f").unwrap());
    }
}
