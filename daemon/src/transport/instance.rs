//! The primary-daemon rule (reference "Running a second daemon"; docs/protocol-choices.md, "State
//! root and instances").
//!
//! One daemon per state root is the **primary**: it holds an advisory lock on
//! `run/daemon.lock` and nothing answers on the shared socket. Only the primary publishes
//! the token files and binds the shared socket. Any other daemon on the same root starts
//! normally but keeps its token in memory and binds `car-server-<port>.sock`. The socket
//! probe respects a running daemon that predates the lock.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};

use car_proto::paths::Paths;

/// This process's standing among daemons sharing a state root.
#[derive(Debug)]
pub struct Instance {
    pub primary: bool,
    /// The Unix socket this daemon binds.
    pub socket: PathBuf,
    /// Held for the daemon's lifetime when primary; the OS releases it at exit.
    _lock: Option<File>,
}

/// Decides primacy for a daemon listening on TCP `port`.
pub fn claim(paths: &Paths, port: u16) -> std::io::Result<Instance> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&paths.run_dir)?;
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&paths.lock_file)?;
    let locked = match lock.try_lock() {
        Ok(()) => true,
        Err(fs::TryLockError::WouldBlock) => false,
        Err(fs::TryLockError::Error(e)) => return Err(e),
    };
    if locked && !socket_answers(&paths.shared_socket) {
        remove_stale_socket(&paths.shared_socket)?;
        return Ok(Instance {
            primary: true,
            socket: paths.shared_socket.clone(),
            _lock: Some(lock),
        });
    }
    let socket = paths.instance_socket(port);
    remove_stale_socket(&socket)?;
    Ok(Instance {
        primary: false,
        socket,
        _lock: None,
    })
}

fn socket_answers(path: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// Removes a leftover socket file; refuses to delete anything that is not a socket.
fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => fs::remove_file(path),
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
