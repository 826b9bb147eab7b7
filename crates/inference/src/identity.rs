//! Model identity: `{id, sha256, size}` and the streaming hash that computes it.
//!
//! Owns: hashing weights files into a `ModelIdentity` (the `infer.model-identity.v1` /
//! `models.catalog-identity.v1` shape, declared in the contract). Must not touch: the registry file
//! or any engine.

use std::io::Read;
use std::path::Path;

use car_proto::safe_file::{open_regular, SafeFileError};
use sha2::{Digest, Sha256};

use crate::error::{InferenceError, Result};

pub use car_proto::methods::inference::ModelIdentity;

/// Streams `path` through SHA-256 in 1 MiB chunks and returns `(hex digest, size)`.
/// The file is opened with `car_proto::safe_file::open_regular`: a FIFO or device is
/// refused (`invalid path`) without a read.
pub fn hash_file(path: &Path) -> Result<(String, u64)> {
    let mut file = open_regular(path).map_err(|e| match e {
        SafeFileError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            InferenceError::WeightsMissing {
                path: path.to_path_buf(),
            }
        }
        SafeFileError::Io(e) => InferenceError::io(path, e),
        other => InferenceError::invalid("path", format!("{} {other}", path.display())),
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1024 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| InferenceError::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(hasher.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_known_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w");
        std::fs::write(&p, b"abc").unwrap();
        let (h, n) = hash_file(&p).unwrap();
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(n, 3);
    }

    #[test]
    fn missing_file_is_not_found() {
        let err = hash_file(Path::new("/nonexistent/w.gguf")).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
    }
}
