//! Daemon credentials: minting tokens, publishing them as `0600` files, comparing them in
//! constant time, and removing them on shutdown.
//!
//! Files are written atomically (docs/protocol-choices.md, "State root and instances"): a temp file
//! is created `0600` with `O_EXCL` in the target directory, written, synced and renamed over the
//! target. A pre-existing symlink, or a file owned by another user, at the target is refused — the
//! daemon will not follow a planted link into someone else's file. The token directory is
//! created `0700`; an existing one that group or others can read is tightened to `0700`,
//! and one that is a symlink or another user's is refused.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use car_proto::redact::Redacted;
pub use car_proto::token::{mint_token, tokens_match};

/// The daemon's credentials while auth is on (`Debug` shows neither).
#[derive(Debug, Clone)]
pub struct Credentials {
    pub token: Redacted<String>,
    pub host_token: Redacted<String>,
    /// The dashboard's read-only token (served by the dashboard's `GET /auth-token`, never
    /// written to disk): a host's visibility, limited to the methods declared `observer`
    /// (`car_proto::methods::observer_methods`).
    pub dashboard_token: Redacted<String>,
}

/// Why a credential file could not be published.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("refusing to write {0}: it is a symbolic link")]
    Symlink(PathBuf),
    #[error("refusing to write {0}: it is owned by uid {1}, not this user")]
    ForeignOwner(PathBuf, u32),
    #[error("refusing to write {0}: it is not a regular file")]
    NotAFile(PathBuf),
    #[error("refusing to use {0}: it is not a directory")]
    NotADir(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TokenFileError + '_ {
    move |source| TokenFileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::geteuid()
    }
}

/// Checks that `path` is absent or a regular file this user owns.
fn check_target(path: &Path) -> Result<(), TokenFileError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(path)(e)),
        Ok(meta) if meta.file_type().is_symlink() => Err(TokenFileError::Symlink(path.into())),
        Ok(meta) if !meta.file_type().is_file() => Err(TokenFileError::NotAFile(path.into())),
        Ok(meta) if meta.uid() != current_uid() => {
            Err(TokenFileError::ForeignOwner(path.into(), meta.uid()))
        }
        Ok(_) => Ok(()),
    }
}

/// Creates `dir` `0700` if missing; an existing one must be a real directory owned by this
/// user, and one that group or others can enter or read is tightened to `0700` (logged).
pub fn ensure_private_dir(dir: &Path) -> Result<(), TokenFileError> {
    use std::os::unix::fs::PermissionsExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))?;
    let meta = fs::symlink_metadata(dir).map_err(io_err(dir))?;
    if meta.file_type().is_symlink() {
        return Err(TokenFileError::Symlink(dir.into()));
    }
    if !meta.is_dir() {
        return Err(TokenFileError::NotADir(dir.into()));
    }
    if meta.uid() != current_uid() {
        return Err(TokenFileError::ForeignOwner(dir.into(), meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{mode:o}"), "tightening a credential directory that group or others could read to 0700");
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(dir))?;
    }
    Ok(())
}

/// Atomically writes `contents` to `path` with mode `0600` (see the module docs) through
/// `car_proto::safe_file::write_atomic`, after refusing a target that is a symlink or not
/// a regular file (the rename would replace, never follow, one planted later).
pub fn write_private_file(path: &Path, contents: &str) -> Result<(), TokenFileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_private_dir(dir)?;
    check_target(path)?;
    car_proto::safe_file::write_atomic(path, contents.as_bytes(), 0o600).map_err(io_err(path))
}

/// Removes `path` if it still holds `contents` (a newer daemon's file is left alone).
pub fn remove_if_ours(path: &Path, contents: &str) {
    match crate::state::state_file::read(path) {
        Ok(Some(found)) if found == contents.as_bytes() => {
            if let Err(e) = fs::remove_file(path) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove credential file");
            }
        }
        Ok(Some(_)) => {
            tracing::info!(path = %path.display(), "credential file was replaced by another daemon; left in place")
        }
        Ok(None) | Err(_) => {}
    }
}

/// Reads a supplied token file, trims it and deletes the file (docs/protocol-choices.md, "State
/// root and instances").
pub fn take_token_file(path: &Path) -> Result<String, String> {
    let token = crate::state::state_file::read_token(path)
        .map_err(|e| format!("cannot read --auth-token-file {}: {e}", path.display()))?;
    if let Err(e) = fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %e, "could not delete the token file after reading it");
    }
    if token.is_empty() {
        return Err(format!("--auth-token-file {} is empty", path.display()));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn writes_0600_atomically_and_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("auth-token");
        write_private_file(&path, "one").unwrap();
        write_private_file(&path, "two").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(path.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep").unwrap();
        let link = dir.path().join("sub").join("host-token");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(
            write_private_file(&link, "x"),
            Err(TokenFileError::Symlink(_))
        ));
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep");
        // No temp files are left behind.
        assert_eq!(fs::read_dir(path.parent().unwrap()).unwrap().count(), 2);
        remove_if_ours(&path, "other");
        assert!(path.exists());
        remove_if_ours(&path, "two");
        assert!(!path.exists());
    }

    #[test]
    fn token_file_is_trimmed_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        fs::write(&path, "  abc \n").unwrap();
        assert_eq!(take_token_file(&path).unwrap(), "abc");
        assert!(!path.exists());
        fs::write(&path, " \n").unwrap();
        assert!(take_token_file(&path).unwrap_err().contains("empty"));
    }
}
