//! Agent log files: opening them for a child, copytruncate rotation, and bounded tails.
//!
//! A child's stdout/stderr are the files themselves (opened `O_APPEND`, mode `0600`, in a
//! `0700` directory), not pipes, so the child keeps logging when the daemon dies.
//!
//! Rotation is copytruncate because the child holds the file descriptor: when a stream
//! file exceeds `log_max_bytes` it is copied to `.1` (after shifting `.1`→`.2`… and
//! dropping the oldest beyond `log_keep`) and truncated to zero; `O_APPEND` writers
//! continue at the new end. Lines written between the copy and the truncate are lost.
//!
//! Tails read only the current file (never rotated copies), from a backward window of at
//! most [`TAIL_SCAN_BYTES`]: a window that does not start at the file's beginning drops
//! its partial first line and always reports `more`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The most bytes of one stream file a tail scans.
pub const TAIL_SCAN_BYTES: u64 = 8 * 1024 * 1024;

/// `<logs_dir>/agents/<id>`.
pub(crate) fn agent_dir(logs_dir: &Path, id: &str) -> PathBuf {
    logs_dir.join("agents").join(id)
}

/// `(stdout.log, stderr.log)` of an agent.
pub(crate) fn stream_paths(logs_dir: &Path, id: &str) -> (PathBuf, PathBuf) {
    let dir = agent_dir(logs_dir, id);
    (dir.join("stdout.log"), dir.join("stderr.log"))
}

/// Opens both stream files for appending (creating directory and files as needed).
pub(crate) fn open_streams(logs_dir: &Path, id: &str) -> io::Result<(File, File)> {
    let dir = agent_dir(logs_dir, id);
    DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    let (out, err) = stream_paths(logs_dir, id);
    Ok((open_append(&out)?, open_append(&err)?))
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

fn rotated(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Rotates `path` when it is larger than `max_bytes`; `Ok(true)` when it did.
pub(crate) fn rotate_if_needed(path: &Path, max_bytes: u64, keep: usize) -> io::Result<bool> {
    let len = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if len <= max_bytes {
        return Ok(false);
    }
    if keep > 0 {
        match fs::remove_file(rotated(path, keep)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        for n in (1..keep).rev() {
            match fs::rename(rotated(path, n), rotated(path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let mut tmp_name = rotated(path, 1).into_os_string();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        fs::copy(path, &tmp)?;
        fs::rename(&tmp, rotated(path, 1))?;
    }
    OpenOptions::new().write(true).open(path)?.set_len(0)?;
    tracing::debug!(path = %path.display(), bytes = len, keep, "rotated log file");
    Ok(true)
}

/// One stream's page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StreamTail {
    pub lines: Vec<String>,
    /// Lines in the scanned tail.
    pub total: usize,
    pub more: bool,
}

/// The `n` lines (0: all scanned) ending `offset` lines before the end of `path`, scanning
/// at most `max_scan` trailing bytes. A missing file is an empty stream.
pub(crate) fn tail_file(
    path: &Path,
    n: usize,
    offset: usize,
    max_scan: u64,
) -> io::Result<StreamTail> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(StreamTail::default()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max_scan);
    let truncated = start > 0;
    // From one byte before the window, to know whether it starts on a line boundary.
    let from = start.saturating_sub(1);
    file.seek(SeekFrom::Start(from))?;
    let mut buf = Vec::new();
    file.take(len - from).read_to_end(&mut buf)?;
    let body: &[u8] = if truncated {
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => &buf[i + 1..],
            None => &[],
        }
    } else {
        &buf
    };
    let all = split_lines(body);
    let total = all.len();
    let end = total.saturating_sub(offset);
    let begin = if n == 0 { 0 } else { end.saturating_sub(n) };
    Ok(StreamTail {
        lines: all[begin..end].to_vec(),
        total,
        more: truncated || begin > 0,
    })
}

fn split_lines(body: &[u8]) -> Vec<String> {
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    if body.is_empty() {
        return Vec::new();
    }
    body.split(|&b| b == b'\n')
        .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(dir: &Path, count: usize) -> PathBuf {
        let path = dir.join("stdout.log");
        let text: String = (1..=count).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, text).unwrap();
        path
    }

    fn strs(tail: &StreamTail) -> Vec<&str> {
        tail.lines.iter().map(String::as_str).collect()
    }

    #[test]
    fn tail_pages_from_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = numbered(dir.path(), 10);
        let t = tail_file(&path, 3, 0, TAIL_SCAN_BYTES).unwrap();
        assert_eq!(strs(&t), ["line 8", "line 9", "line 10"]);
        assert_eq!((t.total, t.more), (10, true));
        let t = tail_file(&path, 3, 8, TAIL_SCAN_BYTES).unwrap();
        assert_eq!(strs(&t), ["line 1", "line 2"]);
        assert!(!t.more);
        let t = tail_file(&path, 0, 0, TAIL_SCAN_BYTES).unwrap();
        assert_eq!(t.lines.len(), 10);
        assert!(!t.more);
        let t = tail_file(&path, 5, 50, TAIL_SCAN_BYTES).unwrap();
        assert!(t.lines.is_empty() && !t.more);
        let t = tail_file(&dir.path().join("absent"), 5, 0, TAIL_SCAN_BYTES).unwrap();
        assert_eq!(t, StreamTail::default());
    }

    #[test]
    fn tail_keeps_unterminated_last_line_and_strips_cr() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        fs::write(&path, "a\r\nb\npartial").unwrap();
        let t = tail_file(&path, 0, 0, TAIL_SCAN_BYTES).unwrap();
        assert_eq!(strs(&t), ["a", "b", "partial"]);
    }

    #[test]
    fn bounded_scan_drops_partial_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = numbered(dir.path(), 10); // "line 1\n" … "line 10\n": 71 bytes
                                             // The last 12 bytes: "e 9\nline 10\n" → the partial "e 9" is dropped.
        let t = tail_file(&path, 0, 0, 12).unwrap();
        assert_eq!(strs(&t), ["line 10"]);
        assert_eq!((t.total, t.more), (1, true));
        // The last 15 bytes start exactly at "line 9\n": nothing partial to drop.
        let t = tail_file(&path, 0, 0, 15).unwrap();
        assert_eq!(strs(&t), ["line 9", "line 10"]);
        assert!(t.more);
    }

    #[test]
    fn rotation_shifts_and_drops_beyond_keep() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout.log");
        for round in 1..=4 {
            fs::write(&path, format!("round {round} {}\n", "x".repeat(20))).unwrap();
            assert!(rotate_if_needed(&path, 10, 2).unwrap());
            assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        }
        let read = |n| fs::read_to_string(rotated(&path, n)).unwrap();
        assert!(read(1).starts_with("round 4 "));
        assert!(read(2).starts_with("round 3 "));
        assert!(!rotated(&path, 3).exists());
        assert!(
            !rotate_if_needed(&path, 10, 2).unwrap(),
            "small file is left alone"
        );
        fs::write(&path, "y".repeat(30)).unwrap();
        assert!(rotate_if_needed(&path, 10, 0).unwrap());
        assert_eq!(fs::metadata(&path).unwrap().len(), 0);
        assert!(read(1).starts_with("round 4 "), "keep 0 only truncates");
    }
}
