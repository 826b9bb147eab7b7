//! The one safe-file API: how every part of car-runtime opens, reads and replaces a file
//! whose path a caller (a client, an agent, a model's tool call, a policy directory) named.
//!
//! Owns: opening for reading without following a final symlink (`O_NOFOLLOW`) and without
//! blocking on a FIFO or device (`O_NONBLOCK`); refusing anything that is not a regular
//! file *after* the open (`fstat` on the descriptor, so a swap between check and open is
//! caught); reading at most a cap (the length is checked first, then the read itself stops
//! after `cap + 1` bytes, so a file that grows while being read, or a file whose reported
//! length lies, is still bounded); creating new files exclusively (`O_CREAT | O_EXCL |
//! O_NOFOLLOW`); and atomic replacement (temp file in the same directory, fsync, `rename`,
//! directory fsync).
//!
//! Must not touch: where a file may live (confinement to a workspace or state root is the
//! caller's rule), what a file contains, sockets or async runtimes. Every function blocks;
//! async callers run them on a blocking thread.
//!
//! This is the single exception to `car-proto` not touching the file system: engines
//! depend on `car-proto` only, and every engine needs the same rule.
//!
//! Why these flags: a caller-named `/dev/zero` or `/dev/urandom` reports length 0, so a
//! `metadata().len()` check followed by `read_to_string` reads forever; a FIFO blocks the
//! open itself (and so a blocking thread, and shutdown). With `O_NONBLOCK` the open
//! returns at once, the `fstat` says "not a regular file", and nothing is read.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why a safe open or read failed. `Display` completes a sentence about the file
/// (`policy.toml is 9 bytes, over the cap of 4 bytes`) and never includes its contents.
#[derive(Debug)]
pub enum SafeFileError {
    /// Opening, inspecting or reading failed (missing, permissions, I/O).
    Io(std::io::Error),
    /// The final component is a symlink, which is never followed.
    Symlink,
    /// A directory, FIFO, socket or device (named by [`FileKind`]).
    NotRegular(FileKind),
    /// A regular file with more than one hard link, where the caller asked for one.
    HardLinked(u64),
    /// The file's length is over the cap.
    TooLarge { size: u64, cap: u64 },
    /// The file grew past the cap while being read.
    Grew { cap: u64 },
    /// The bytes are not UTF-8 (text reads only).
    NotUtf8,
}

/// What a non-regular path turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Directory,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    Other,
}

impl FileKind {
    fn of(file_type: std::fs::FileType) -> FileKind {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileTypeExt;
            if file_type.is_fifo() {
                return FileKind::Fifo;
            }
            if file_type.is_socket() {
                return FileKind::Socket;
            }
            if file_type.is_char_device() {
                return FileKind::CharDevice;
            }
            if file_type.is_block_device() {
                return FileKind::BlockDevice;
            }
        }
        if file_type.is_dir() {
            FileKind::Directory
        } else {
            FileKind::Other
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Directory => "a directory",
            FileKind::Fifo => "a FIFO",
            FileKind::Socket => "a socket",
            FileKind::CharDevice => "a character device",
            FileKind::BlockDevice => "a block device",
            FileKind::Other => "not a regular file",
        }
    }
}

impl fmt::Display for SafeFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SafeFileError::Io(e) => write!(f, "{e}"),
            SafeFileError::Symlink => write!(f, "is a symlink, which is never followed here"),
            SafeFileError::NotRegular(kind) => {
                write!(f, "is {}, not a regular file", kind.as_str())
            }
            SafeFileError::HardLinked(n) => {
                write!(f, "has {n} hard links; only a file with one link is read")
            }
            SafeFileError::TooLarge { size, cap } => {
                write!(f, "is {size} bytes, over the cap of {cap} bytes")
            }
            SafeFileError::Grew { cap } => {
                write!(f, "grew past the cap of {cap} bytes while being read")
            }
            SafeFileError::NotUtf8 => write!(f, "is not UTF-8 text"),
        }
    }
}

impl std::error::Error for SafeFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SafeFileError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl SafeFileError {
    /// Whether the file simply does not exist (callers often treat that as "empty").
    pub fn is_not_found(&self) -> bool {
        matches!(self, SafeFileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// How a read is bounded and which files it accepts.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimits {
    /// The most bytes read; a longer file is [`SafeFileError::TooLarge`].
    pub cap: u64,
    /// Refuse a regular file with more than one hard link (another of its names may be a
    /// file the daemon manages).
    pub single_link: bool,
}

impl ReadLimits {
    /// At most `cap` bytes, any link count.
    pub const fn cap(cap: u64) -> Self {
        ReadLimits {
            cap,
            single_link: false,
        }
    }

    /// Also refuse hard-linked files.
    pub const fn single_link(mut self) -> Self {
        self.single_link = true;
        self
    }
}

/// Opens `path` for reading: never follows a final symlink, never blocks on a FIFO, and
/// answers only for a regular file (checked on the opened descriptor).
pub fn open_regular(path: &Path) -> Result<File, SafeFileError> {
    open_existing(path, OpenOptions::new().read(true))
}

/// Opens the existing regular file at `path` for appending, with [`open_regular`]'s rules
/// (no final symlink, no FIFO or device, checked on the descriptor).
pub fn open_append(path: &Path) -> Result<File, SafeFileError> {
    open_existing(path, OpenOptions::new().append(true))
}

/// Opens an existing file with `options` plus `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, then
/// refuses anything but a regular file.
fn open_existing(path: &Path, options: &mut OpenOptions) -> Result<File, SafeFileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC);
    }
    let file = options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return SafeFileError::Symlink;
        }
        SafeFileError::Io(e)
    })?;
    let meta = file.metadata().map_err(SafeFileError::Io)?;
    if !meta.is_file() {
        return Err(SafeFileError::NotRegular(FileKind::of(meta.file_type())));
    }
    Ok(file)
}

/// Reads an already opened file within `limits` (the file must be regular).
pub fn read_open(file: &mut File, limits: ReadLimits) -> Result<Vec<u8>, SafeFileError> {
    let meta = file.metadata().map_err(SafeFileError::Io)?;
    if !meta.is_file() {
        return Err(SafeFileError::NotRegular(FileKind::of(meta.file_type())));
    }
    #[cfg(unix)]
    if limits.single_link {
        use std::os::unix::fs::MetadataExt;
        if meta.nlink() > 1 {
            return Err(SafeFileError::HardLinked(meta.nlink()));
        }
    }
    if meta.len() > limits.cap {
        return Err(SafeFileError::TooLarge {
            size: meta.len(),
            cap: limits.cap,
        });
    }
    read_at_most(file, limits.cap, meta.len())
}

/// Reads `reader` to its end, refusing once more than `cap` bytes arrive. `hint` sizes the
/// buffer (never beyond `cap`).
pub fn read_at_most(reader: impl Read, cap: u64, hint: u64) -> Result<Vec<u8>, SafeFileError> {
    let mut bytes = Vec::with_capacity(usize::try_from(hint.min(cap)).unwrap_or(0));
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(SafeFileError::Io)?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > cap {
        return Err(SafeFileError::Grew { cap });
    }
    Ok(bytes)
}

/// [`open_regular`] then [`read_open`]: the bytes of a caller-named regular file of at most
/// `limits.cap` bytes.
pub fn read(path: &Path, limits: ReadLimits) -> Result<Vec<u8>, SafeFileError> {
    let mut file = open_regular(path)?;
    read_open(&mut file, limits)
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, limits: ReadLimits) -> Result<String, SafeFileError> {
    String::from_utf8(read(path, limits)?).map_err(|_| SafeFileError::NotUtf8)
}

/// Creates `path` as a new file for writing with `mode`: `O_CREAT | O_EXCL | O_NOFOLLOW`,
/// so an existing file or symlink there is an error, never opened.
pub fn create_exclusive(path: &Path, mode: u32) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    }
    #[cfg(not(unix))]
    let _ = mode;
    options.open(path)
}

/// The prefix of every temp file [`write_atomic`] creates (so a directory scan can skip or
/// sweep them).
pub const TEMP_PREFIX: &str = ".car-tmp-";

/// Writes `bytes` to `path` atomically with file mode `mode` (exactly `mode`: it is set on
/// the temp file's descriptor, so the umask does not change it): a temp file (new,
/// exclusive, random name, [`TEMP_PREFIX`]) in the same directory, written and fsynced,
/// renamed over `path`, then the directory fsynced so the rename itself survives a crash.
/// The parent directory must exist; on any error the temp file is removed.
///
/// `rename` replaces whatever entry `path` names (a symlink included) and never follows
/// it, so a symlink at `path` cannot redirect the write; nor can a hard link, whose other
/// names keep the old contents.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = parent_dir(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(".tmp")
        .make_in(&dir, |p| create_exclusive(p, mode))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(&dir)
}

/// The directory `path` lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// Fsyncs a directory so a rename or create inside it survives a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
