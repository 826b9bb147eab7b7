//! Opening and bounded reading of snapshot files.
//!
//! Owns how the crate opens files: caller files for `memory.load` without following a
//! final symlink (`O_NOFOLLOW`), temp files for [`crate::snapshot::write_atomic`] as new
//! files only (`O_CREAT | O_EXCL | O_NOFOLLOW`), and every read bounded by a cap: the
//! opened file's length is checked first, then the read goes through
//! `Read::take(cap + 1)`, so a file that grows while being read is still bounded (more
//! than `cap` bytes is refused, never buffered). It must not decide where files live
//! ([`crate::confine`]) or what a snapshot contains ([`crate::snapshot`]). Every function
//! here blocks.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::Path;

/// Creates `path` as a new file for writing (mode 0600): `O_CREAT | O_EXCL | O_NOFOLLOW`,
/// so an existing file or symlink there is an error, never opened.
pub(crate) fn create_exclusive(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// Why a bounded read returned no bytes. `Display` completes a sentence about the file
/// (`is 9 bytes, over the cap of 4 bytes`).
#[derive(Debug)]
pub enum ReadError {
    /// Opening, inspecting or reading failed.
    Io(std::io::Error),
    /// A directory, FIFO, socket or device.
    NotAFile,
    /// A caller file with more than one hard link (its link count).
    HardLinked(u64),
    /// The file's length is over the cap.
    TooLarge {
        /// The file's length when opened.
        size: u64,
        /// The cap.
        cap: u64,
    },
    /// The file grew past the cap while being read.
    Grew {
        /// The cap.
        cap: u64,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotAFile => write!(f, "is not a regular file"),
            ReadError::HardLinked(n) => write!(
                f,
                "has {n} hard links; only a file with one link is loaded, since another of its names may be a snapshot the memory store manages"
            ),
            ReadError::TooLarge { size, cap } => {
                write!(f, "is {size} bytes, over the cap of {cap} bytes")
            }
            ReadError::Grew { cap } => {
                write!(f, "grew past the cap of {cap} bytes while being read")
            }
        }
    }
}

impl std::error::Error for ReadError {}

/// Opens `path` for reading without following a symlink at its final component
/// (`O_NOFOLLOW`; a symlink fails with an error saying so). `O_NONBLOCK` keeps a FIFO from
/// hanging the open; it has no effect on regular files.
pub fn open_no_follow(path: &Path) -> std::io::Result<File> {
    open_read(path, false).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return std::io::Error::new(e.kind(), "is a symlink, which is never followed here");
        }
        e
    })
}

/// Opens `path` for reading (`O_NONBLOCK`; `O_NOFOLLOW` unless `follow`).
pub(crate) fn open_read(path: &Path, follow: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = libc::O_NONBLOCK | if follow { 0 } else { libc::O_NOFOLLOW };
        options.custom_flags(flags);
    }
    #[cfg(not(unix))]
    let _ = follow;
    options.open(path)
}

/// Reads an opened regular file of at most `cap` bytes: its length is checked first, then
/// the read itself stops after `cap + 1` bytes.
pub fn read_capped(file: &mut File, cap: u64) -> Result<Vec<u8>, ReadError> {
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotAFile);
    }
    if meta.len() > cap {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            cap,
        });
    }
    read_at_most(file, cap, meta.len())
}

/// Reads `reader` to its end, refusing once more than `cap` bytes arrive. `hint` sizes the
/// buffer (never beyond `cap`).
fn read_at_most(reader: impl Read, cap: u64, hint: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::with_capacity(usize::try_from(hint.min(cap)).unwrap_or(0));
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(ReadError::Grew { cap });
    }
    Ok(bytes)
}

/// Reads a caller file that [`crate::confine::resolve`] returned for `memory.load`: opened with
/// `O_NOFOLLOW`, a regular file with a single hard link (another name could be a managed
/// snapshot), at most `cap` bytes.
pub fn read_caller_file(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let mut file = open_no_follow(path).map_err(ReadError::Io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().map_err(ReadError::Io)?;
        if meta.is_file() && meta.nlink() > 1 {
            return Err(ReadError::HardLinked(meta.nlink()));
        }
    }
    read_capped(&mut file, cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn open_no_follow_refuses_a_symlink_planted_after_the_check() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, b"{}").unwrap();
        let dir = tempfile::tempdir().unwrap();
        // The check passes while nothing is there...
        let target = crate::confine::resolve(dir.path(), "late.json").unwrap();
        // ...then a symlink to outside appears before the open.
        std::os::unix::fs::symlink(&secret, &target).unwrap();
        let err = open_no_follow(&target).unwrap_err();
        assert_eq!(err.raw_os_error(), None, "mapped to a clear message");
        assert_eq!(
            err.to_string(),
            "is a symlink, which is never followed here"
        );
        let err = read_caller_file(&target, 1024).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is a symlink, which is never followed here"
        );
        assert!(open_read(&target, true).is_ok(), "the link itself is fine");
    }

    #[test]
    fn reads_stop_at_the_cap_even_if_the_source_keeps_growing() {
        // An endless reader stands in for a file growing while it is read.
        let err = read_at_most(std::io::repeat(b'x'), 1024, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "grew past the cap of 1024 bytes while being read"
        );
        let exact = read_at_most(&[7u8; 1024][..], 1024, 1024).unwrap();
        assert_eq!(exact.len(), 1024, "exactly the cap is allowed");
    }

    #[test]
    fn caller_reads_refuse_oversize_files_and_non_files() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; 2048]).unwrap();
        let err = read_caller_file(&big, 1024).unwrap_err();
        assert!(matches!(
            err,
            ReadError::TooLarge {
                size: 2048,
                cap: 1024
            }
        ));
        assert_eq!(err.to_string(), "is 2048 bytes, over the cap of 1024 bytes");
        assert_eq!(read_caller_file(&big, 2048).unwrap().len(), 2048);
        let err = read_caller_file(dir.path(), 1024).unwrap_err();
        assert_eq!(err.to_string(), "is not a regular file");
        #[cfg(unix)]
        {
            std::fs::hard_link(&big, dir.path().join("twin.json")).unwrap();
            let err = read_caller_file(&big, 4096).unwrap_err();
            assert!(matches!(err, ReadError::HardLinked(2)), "{err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // A blocking open or read would hang here: no writer ever appears.
        let err = read_caller_file(&fifo, 1024).unwrap_err();
        assert_eq!(err.to_string(), "is not a regular file");
    }

    #[cfg(unix)]
    #[test]
    fn exclusive_create_never_opens_an_existing_file_or_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        for path in [&target, &link] {
            let err = create_exclusive(path).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists, "{path:?}");
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
