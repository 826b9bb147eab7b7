//! The snapshot file format and atomic file writes.
//!
//! Owns `{"version": 1, "facts": [...], "skills": [...]}`, its validation on load, the
//! default size cap on every snapshot read or written ([`MAX_SNAPSHOT_BYTES`]), the atomic
//! write and moving a corrupt or oversize file aside. It must not decide where files
//! live (the store and [`crate::confine`] do) or hold locks; how files are opened, read
//! within a cap and replaced atomically is `car_proto::safe_file`'s, the one safe-file API
//! every crate shares (regular files only, `O_NOFOLLOW | O_NONBLOCK`, capped reads, `O_EXCL`
//! temp files). Every function here blocks: call it from `spawn_blocking`, never on a tokio
//! worker.
//!
//! Writers check the cap before writing ([`check_write_size`]), so the store never writes
//! a snapshot it would refuse to read back.

use crate::error::MemoryError;
use crate::fact::{Fact, FactInput};
use crate::graph::Graph;
use crate::skills::{Skill, SkillInput};
use car_proto::clock::now_ms_u64;
use car_proto::safe_file::{self, ReadLimits, SafeFileError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The default cap on a snapshot file, read or written: 64 MiB. A graph lives wholly in
/// memory and is ranked fact by fact, so this is far beyond a useful scope (a fact is at
/// most ~100 KiB encoded; typical ones are a few hundred bytes, so hundreds of thousands
/// of facts) while keeping one `memory.load` from making the daemon buffer and parse an
/// arbitrarily large file. [`crate::MemoryStore::set_max_file_bytes`] changes it per store.
pub const MAX_SNAPSHOT_BYTES: u64 = 64 * 1024 * 1024;

/// The only snapshot version this crate writes and reads.
pub const SNAPSHOT_VERSION: u32 = 1;

#[derive(Serialize)]
struct SnapshotOut<'a> {
    version: u32,
    facts: Vec<&'a Fact>,
    skills: Vec<&'a Skill>,
}

/// Unknown fields (top level or in a record) are ignored, so snapshots written by older or
/// newer versions of this crate still load; fields added later carry serde defaults.
#[derive(Deserialize)]
struct SnapshotIn {
    version: u32,
    facts: Vec<Fact>,
    #[serde(default)]
    skills: Vec<Skill>,
}

/// Serialises a graph (facts oldest first, skills by name), pretty-printed so a person can
/// read and diff it.
pub fn encode(graph: &Graph) -> Vec<u8> {
    let snapshot = SnapshotOut {
        version: SNAPSHOT_VERSION,
        facts: graph.facts(),
        skills: graph.skills.values().collect(),
    };
    // Serialising plain structs of strings and numbers cannot fail; NaN confidences are
    // rejected at validation and on decode, so serde_json never sees a non-finite float.
    serde_json::to_vec_pretty(&snapshot).unwrap_or_default()
}

/// Parses and validates a snapshot. Every record must satisfy the same rules as a fresh
/// `add_fact` / `skill.ingest`; ids and names must be unique.
pub fn decode(bytes: &[u8]) -> Result<Graph, String> {
    let snapshot: SnapshotIn = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if snapshot.version != SNAPSHOT_VERSION {
        return Err(format!(
            "unsupported snapshot version {} (expected {SNAPSHOT_VERSION})",
            snapshot.version
        ));
    }
    for (i, f) in snapshot.facts.iter().enumerate() {
        check_fact(f).map_err(|e| format!("facts[{i}]: {e}"))?;
    }
    for (i, s) in snapshot.skills.iter().enumerate() {
        check_skill(s).map_err(|e| format!("skills[{i}]: {e}"))?;
    }
    Graph::from_records(snapshot.facts, snapshot.skills)
}

/// Checks a stored fact against the rules of a fresh `add_fact` (the snapshot and the
/// journal both use it).
pub(crate) fn check_fact(f: &Fact) -> Result<(), String> {
    FactInput {
        subject: f.subject.clone(),
        body: f.body.clone(),
        kind: Some(f.kind),
        confidence: Some(f.confidence),
        fact_id: Some(f.fact_id.clone()),
        tags: f.tags.clone(),
        source: None,
    }
    .validate()
    .map(drop)
    .map_err(|e| e.to_string())
}

/// Checks a stored skill against the rules of a fresh `skill.ingest`.
pub(crate) fn check_skill(s: &Skill) -> Result<(), String> {
    SkillInput {
        name: s.name.clone(),
        code: s.code.clone(),
        ..SkillInput::default()
    }
    .validate()
    .map(drop)
    .map_err(|e| e.to_string())
}

/// Writes `bytes` to `path` atomically with `car_proto::safe_file::write_atomic` (mode
/// 0600; a new `O_EXCL` temp file in the same directory, fsync, rename, directory fsync),
/// creating the parent directory first. `rename` replaces whatever entry `path` names (a
/// symlink included) and never follows it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), MemoryError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| MemoryError::io("create directory", dir, e))?;
    safe_file::write_atomic(path, bytes, 0o600)
        .map_err(|e| MemoryError::io("write snapshot", path, e))
}

/// Refuses to write a snapshot of `len` bytes to `path` when it exceeds `cap`: it could not
/// be read back.
pub fn check_write_size(path: &Path, len: usize, cap: u64) -> Result<(), MemoryError> {
    let len = u64::try_from(len).unwrap_or(u64::MAX);
    if len <= cap {
        return Ok(());
    }
    Err(MemoryError::io(
        "write snapshot",
        path,
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the snapshot would be {len} bytes, over the cap of {cap} bytes"),
        ),
    ))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), MemoryError> {
    safe_file::sync_dir(dir).map_err(|e| MemoryError::io("fsync directory", dir, e))
}

/// Reads a file the store manages (a snapshot or journal) through `car_proto::safe_file`:
/// `Ok(None)` when it does not exist; over `cap` (on open or by growing) is
/// [`Capped::Over`], which the caller moves aside; anything else that is not a readable
/// regular file (a symlink, FIFO, device, permissions, I/O) is an error naming `what`.
pub(crate) fn read_managed(
    path: &Path,
    cap: u64,
    what: &'static str,
) -> Result<Capped, MemoryError> {
    match safe_file::read(path, ReadLimits::cap(cap)) {
        Ok(bytes) => Ok(Capped::Read(bytes)),
        Err(e) if e.is_not_found() => Ok(Capped::Missing),
        Err(e @ (SafeFileError::TooLarge { .. } | SafeFileError::Grew { .. })) => {
            Ok(Capped::Over(e.to_string()))
        }
        Err(SafeFileError::Io(e)) => Err(MemoryError::io(what, path, e)),
        Err(other) => Err(MemoryError::io(
            what,
            path,
            std::io::Error::other(other.to_string()),
        )),
    }
}

/// What [`read_managed`] found.
pub(crate) enum Capped {
    /// No file.
    Missing,
    /// The file's bytes (at most the cap).
    Read(Vec<u8>),
    /// The file is over the cap (why, as a sentence about the file).
    Over(String),
}

/// Loads a scope's own snapshot with the default cap, [`MAX_SNAPSHOT_BYTES`]; see
/// [`load_or_quarantine_with_cap`].
pub fn load_or_quarantine(path: &Path) -> Result<Graph, MemoryError> {
    load_or_quarantine_with_cap(path, MAX_SNAPSHOT_BYTES)
}

/// Loads a scope's own snapshot. A missing file is an empty graph. A file over `cap` bytes
/// (when opened, or by growing while read), or one that does not parse or validate, is
/// renamed to `<file>.corrupt-<unix-ms>`, a warning naming both paths is logged, and the
/// scope starts empty; it is never deleted. A file that cannot be read (permissions, I/O,
/// not a regular file) is an error: starting empty would overwrite it on the next write.
pub fn load_or_quarantine_with_cap(path: &Path, cap: u64) -> Result<Graph, MemoryError> {
    load_with_bytes(path, cap).map(|(graph, _)| graph)
}

/// [`load_or_quarantine_with_cap`], also returning the bytes the graph was decoded from
/// (`None` when the scope starts empty: no file, or a file moved aside), which identify
/// the snapshot a journal continues ([`crate::journal`]).
pub(crate) fn load_with_bytes(
    path: &Path,
    cap: u64,
) -> Result<(Graph, Option<Vec<u8>>), MemoryError> {
    let bytes = match read_managed(path, cap, "read snapshot")? {
        Capped::Read(bytes) => bytes,
        Capped::Missing => return Ok((Graph::new(), None)),
        Capped::Over(reason) => {
            let aside = move_aside(path)?;
            tracing::warn!(
                path = %path.display(),
                moved_to = %aside.display(),
                cap,
                %reason,
                "memory snapshot over the size cap moved aside unread; scope starts empty"
            );
            return Ok((Graph::new(), None));
        }
    };
    match decode(&bytes) {
        Ok(graph) => Ok((graph, Some(bytes))),
        Err(reason) => {
            let aside = move_aside(path)?;
            tracing::warn!(
                path = %path.display(),
                moved_to = %aside.display(),
                %reason,
                "corrupt memory snapshot moved aside; scope starts empty"
            );
            Ok((Graph::new(), None))
        }
    }
}

pub(crate) fn move_aside(path: &Path) -> Result<PathBuf, MemoryError> {
    let aside = quarantine_path(path);
    std::fs::rename(path, &aside)
        .map_err(|e| MemoryError::io("move corrupt snapshot aside", path, e))?;
    Ok(aside)
}

fn quarantine_path(path: &Path) -> PathBuf {
    let ms = now_ms_u64();
    let mut n = 0u32;
    loop {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".corrupt-{ms}"));
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let candidate = path.with_file_name(name);
        if !candidate.exists() {
            return candidate;
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fact::FactKind;
    use crate::skills::Outcome;

    fn sample() -> Graph {
        let mut g = Graph::new();
        g.add_fact_at(
            FactInput::new("subj", "body\nline two")
                .fact_id("f1")
                .kind(FactKind::Unknown)
                .confidence(0.25)
                .tags(["a", "b"])
                .source("https://example.test")
                .validate()
                .unwrap(),
            7,
        );
        g.ingest_skill_at(
            SkillInput {
                name: "login".into(),
                code: "click()".into(),
                platform: "browser".into(),
                persona: "ops".into(),
                url_pattern: "https://x.test/*".into(),
                task_keywords: vec!["sign in".into()],
                description: "logs in".into(),
                supersedes: None,
            }
            .validate()
            .unwrap(),
            8,
        )
        .unwrap();
        g.report_outcome("login", Outcome::Fail).unwrap();
        g
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let g = sample();
        let back = decode(&encode(&g)).unwrap();
        assert_eq!(back.facts(), g.facts());
        assert_eq!(back.list_skills(None), g.list_skills(None));
        let json: serde_json::Value = serde_json::from_slice(&encode(&g)).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["facts"][0]["kind"], "unknown");
        assert_eq!(json["skills"][0]["fail_count"], 1);
        assert_eq!(json["skills"][0]["degraded"], false);
        assert!(json["skills"][0].get("recent_outcomes").is_none());
    }

    #[test]
    fn older_snapshots_load_and_their_degraded_flag_follows_the_rule() {
        // Written under the old recent-window rule: it carries `recent_outcomes`, unknown
        // extra fields, a flag the current rule disagrees with, and no `degraded` at all.
        let text = r#"{
            "version": 1,
            "written_by": "car-memory 0.1",
            "facts": [{"fact_id": "x", "subject": "s", "body": "b", "kind": "fact",
                       "confidence": 1, "created_ms": 1, "updated_ms": 1, "extra": true}],
            "skills": [
                {"name": "a", "code": "c", "platform": "", "persona": "", "url_pattern": "",
                 "task_keywords": [], "description": "", "success_count": 0, "fail_count": 3,
                 "recent_outcomes": ["fail", "fail", "fail"], "degraded": false,
                 "created_ms": 1, "updated_ms": 2, "future_field": {"x": 1}},
                {"name": "b", "code": "c", "platform": "", "persona": "", "url_pattern": "",
                 "task_keywords": [], "description": "", "success_count": 7, "fail_count": 5,
                 "recent_outcomes": ["fail", "success"], "degraded": true,
                 "created_ms": 1, "updated_ms": 2},
                {"name": "c", "code": "c", "platform": "", "persona": "", "url_pattern": "",
                 "task_keywords": [], "description": "", "created_ms": 1, "updated_ms": 2}
            ]
        }"#;
        let g = decode(text.as_bytes()).unwrap();
        assert_eq!(g.fact_count(), 1);
        let stats: Vec<_> = g
            .list_skills(None)
            .into_iter()
            .map(|s| (s.name, s.success_count, s.fail_count, s.degraded))
            .collect();
        assert_eq!(
            stats,
            [
                ("a".to_owned(), 0, 3, true),
                ("b".to_owned(), 7, 5, false),
                ("c".to_owned(), 0, 0, false)
            ]
        );
        let again: serde_json::Value = serde_json::from_slice(&encode(&g)).unwrap();
        assert!(
            again.get("written_by").is_none(),
            "unknown fields are not kept"
        );
        assert!(again["skills"][0].get("recent_outcomes").is_none());
    }

    #[test]
    fn invalid_snapshots_are_refused_with_reasons() {
        let cases = [
            (
                r#"{"version":2,"facts":[],"skills":[]}"#,
                "unsupported snapshot version 2",
            ),
            (r#"{"version":1}"#, "missing field `facts`"),
            (r#"not json"#, "expected"),
            (
                r#"{"version":1,"facts":[{"fact_id":"x","subject":"","body":"b","kind":"fact","confidence":1,"created_ms":1,"updated_ms":1}]}"#,
                "facts[0]: subject: must not be empty",
            ),
            (
                r#"{"version":1,"facts":[{"fact_id":"x","subject":"s","body":"b","kind":"fact","confidence":3,"created_ms":1,"updated_ms":1}]}"#,
                "facts[0]: confidence: must be between 0 and 1",
            ),
        ];
        for (text, expected) in cases {
            let err = decode(text.as_bytes()).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/shared.json");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["shared.json"]);
    }

    #[test]
    fn corrupt_file_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.json");
        std::fs::write(&path, b"{broken").unwrap();
        let g = load_or_quarantine(&path).unwrap();
        assert_eq!(g.fact_count(), 0);
        assert!(!path.exists());
        let aside: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(aside.len(), 1);
        assert!(aside[0].starts_with("shared.json.corrupt-"), "{aside:?}");
        assert_eq!(
            std::fs::read(dir.path().join(&aside[0])).unwrap(),
            b"{broken"
        );
        assert_eq!(
            load_or_quarantine(&path).unwrap().fact_count(),
            0,
            "missing is empty"
        );
    }

    #[test]
    fn oversize_writes_are_refused_naming_the_cap() {
        let err = check_write_size(Path::new("/m/shared.json"), 11, 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "write snapshot /m/shared.json: the snapshot would be 11 bytes, over the cap of 10 bytes"
        );
        assert!(!err.is_invalid_params());
        assert!(check_write_size(Path::new("x"), 10, 10).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn atomic_write_replaces_a_symlink_instead_of_following_it() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim.json");
        std::fs::write(&victim, b"untouched").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
    }

    use std::io::Write;

    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_oversize_own_snapshot_is_moved_aside_unread_with_a_warning() {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .finish();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.json");
        let bytes = encode(&sample());
        std::fs::write(&path, &bytes).unwrap();
        let cap = bytes.len() as u64 - 1;
        let g = tracing::subscriber::with_default(subscriber, || {
            load_or_quarantine_with_cap(&path, cap).unwrap()
        });
        assert_eq!(g.fact_count(), 0, "not loaded, although it is valid");
        assert!(!path.exists());
        let aside: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(aside.len(), 1);
        assert_eq!(std::fs::read(&aside[0]).unwrap(), bytes, "kept intact");
        let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert!(
            text.contains("WARN") && text.contains("over the size cap"),
            "{text}"
        );
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains(&aside[0].display().to_string()), "{text}");
        assert!(
            text.contains(&format!("over the cap of {cap} bytes")),
            "{text}"
        );
        // Within the cap it loads normally.
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            load_or_quarantine_with_cap(&path, bytes.len() as u64)
                .unwrap()
                .fact_count(),
            1
        );
    }
}
