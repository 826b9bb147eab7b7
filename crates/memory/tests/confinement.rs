//! `memory.persist` / `memory.load` cannot reach the store's own files through another
//! name (a symlink alias of the memory directory, a different letter case, a hard link),
//! and every snapshot read or written is bounded by the store's size cap.

use car_memory::{FactInput, MemoryError, MemoryStore, Scope};
use std::path::Path;

fn fact(subject: &str, body: &str) -> car_memory::NewFact {
    FactInput::new(subject, body).validate().unwrap()
}

fn ns(name: &str) -> Scope {
    Scope::Namespace(name.to_owned())
}

/// Every file under `dir`, with its bytes, sorted by path.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// A store with a graph in each kind of scope, so every managed file exists: snapshots
/// (compacted by `flush_all`) and a journal (the victim's second fact).
async fn populated(dir: &Path) -> MemoryStore {
    let store = MemoryStore::open(dir).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("shared", "daemon-wide secret"))
        .await
        .unwrap();
    store
        .add_fact(&ns("victim"), fact("victim", "namespace secret"))
        .await
        .unwrap();
    store
        .add_fact(&Scope::Agent("a1".into()), fact("agent", "agent secret"))
        .await
        .unwrap();
    store
        .add_fact(&ns("attacker"), fact("attacker", "overwrite attempt"))
        .await
        .unwrap();
    store.flush_all().await.unwrap();
    store
        .add_fact(&ns("victim"), fact("victim", "journalled secret"))
        .await
        .unwrap();
    assert!(dir.join("memory-namespaces/victim.json.journal").is_file());
    store
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_alias_of_the_memory_dir_cannot_reach_managed_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = populated(dir.path()).await;
    std::os::unix::fs::symlink(dir.path(), dir.path().join("alias")).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", dir.path().join("sub/up")).unwrap();
    let before = tree(dir.path());
    assert!(before.iter().any(|(n, _)| n == "shared.json"));

    let attacker = ns("attacker");
    for path in [
        "alias/shared.json",
        "alias/SHARED.JSON",
        "alias/memory-namespaces/victim.json",
        "alias/agents/a1.json",
        "alias/Agents/a1.json",
        "alias/shared.json.corrupt-1",
        "alias/shared.json.journal",
        "alias/memory-namespaces/victim.json.journal",
        "alias/.car-tmp-x.tmp",
        "sub/up/shared.json",
        "alias/alias/memory-namespaces/victim.json",
    ] {
        let err = store.persist(&attacker, path).await.unwrap_err();
        assert!(matches!(err, MemoryError::Path(_)), "{path}: {err}");
        assert!(err.is_invalid_params());
        assert!(
            err.to_string().starts_with(&format!("path: {path:?}")),
            "{err}"
        );
        let err = store.load(&attacker, path).await.unwrap_err();
        assert!(matches!(err, MemoryError::Path(_)), "{path}: {err}");
    }
    assert_eq!(tree(dir.path()), before, "no managed byte changed");
    assert_eq!(
        store
            .read(&attacker, |g| g.facts()[0].body.clone())
            .await
            .unwrap(),
        "overwrite attempt",
        "nothing was loaded from another scope"
    );

    // An alias to a non-managed place still works, and lands at the resolved path.
    assert_eq!(
        store.persist(&attacker, "alias/export.json").await.unwrap(),
        1
    );
    assert!(dir.path().join("export.json").is_file());
    assert_eq!(
        store.load(&ns("copy"), "alias/export.json").await.unwrap(),
        1
    );
}

#[tokio::test]
async fn mixed_case_managed_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = populated(dir.path()).await;
    let before = tree(dir.path());
    for path in [
        "SHARED.JSON",
        "Shared.json",
        "Agents/a1.json",
        "AGENTS/new.json",
        "Memory-Namespaces/victim.json",
        "MEMORY-NAMESPACES/new.json",
        "Shared.Json.corrupt-3",
        "Shared.JSON.Journal",
    ] {
        let err = store.persist(&ns("attacker"), path).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("path: {path:?} is a snapshot file the memory store manages")
        );
        let err = store.load(&ns("attacker"), path).await.unwrap_err();
        assert!(matches!(err, MemoryError::Path(_)), "{path}: {err}");
    }
    assert_eq!(tree(dir.path()), before);
}

#[cfg(unix)]
#[tokio::test]
async fn hard_links_cannot_read_or_overwrite_a_managed_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = populated(dir.path()).await;
    let shared = dir.path().join("shared.json");
    let original = std::fs::read(&shared).unwrap();
    std::fs::hard_link(&shared, dir.path().join("twin.json")).unwrap();
    let err = store.load(&ns("attacker"), "twin.json").await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("path: cannot load from \"twin.json\": has 2 hard links"),
        "{err}"
    );
    // Persist renames a new file over the name: the shared inode keeps its bytes.
    store.persist(&ns("attacker"), "twin.json").await.unwrap();
    assert_eq!(std::fs::read(&shared).unwrap(), original);
}

#[tokio::test]
async fn load_refuses_a_file_over_the_cap_naming_the_path_and_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(
        store.max_file_bytes(),
        car_memory::snapshot::MAX_SNAPSHOT_BYTES
    );
    store
        .add_fact(&Scope::Shared, fact("keep", "me"))
        .await
        .unwrap();
    store.set_max_file_bytes(4096);
    // Valid JSON padded past the cap: refused before parsing.
    let mut big = br#"{"version": 1, "facts": []}"#.to_vec();
    big.resize(5000, b' ');
    std::fs::write(dir.path().join("big.json"), &big).unwrap();
    let err = store.load(&Scope::Shared, "big.json").await.unwrap_err();
    assert!(matches!(err, MemoryError::CallerFile { .. }), "{err}");
    assert!(err.is_invalid_params());
    assert_eq!(
        err.to_string(),
        "path: cannot load from \"big.json\": is 5000 bytes, over the cap of 4096 bytes"
    );
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 1);
    store.set_max_file_bytes(5000);
    assert_eq!(store.load(&Scope::Shared, "big.json").await.unwrap(), 0);
}

#[tokio::test]
async fn writes_over_the_cap_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("small", "fits"))
        .await
        .unwrap();
    store.flush_all().await.unwrap();
    let on_disk = std::fs::read(dir.path().join("shared.json")).unwrap();
    store.set_max_file_bytes(on_disk.len() as u64 + 10);
    let err = store
        .add_fact(&Scope::Shared, fact("large", &"x".repeat(200)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, MemoryError::Io { .. }) && !err.is_invalid_params(),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("over the cap of {} bytes", on_disk.len() + 10)),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("shared.json")).unwrap(),
        on_disk,
        "the snapshot on disk is the last one that fit"
    );
    let err = store
        .persist(&Scope::Shared, "export.json")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("path: cannot persist to \"export.json\": the snapshot would be "),
        "{err}"
    );
    assert!(!dir.path().join("export.json").exists());
}

#[tokio::test]
async fn an_oversize_own_snapshot_is_moved_aside_and_the_scope_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&ns("team"), fact("a", "fact"))
        .await
        .unwrap();
    store.flush_all().await.unwrap();
    drop(store);
    let file = dir.path().join("memory-namespaces/team.json");
    let bytes = std::fs::read(&file).unwrap();

    let store = MemoryStore::open(dir.path()).await.unwrap();
    store.set_max_file_bytes(bytes.len() as u64 - 1);
    assert_eq!(store.fact_count(&ns("team")).await.unwrap(), 0);
    assert!(!file.exists());
    let aside: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(aside.len(), 1);
    assert!(aside[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("team.json.corrupt-"));
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        bytes,
        "kept, not deleted"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn load_refuses_a_fifo_and_a_directory_at_once_and_the_graph_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = populated(dir.path()).await;
    let before = store.fact_count(&Scope::Shared).await.unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe.json"))
        .status()
        .unwrap();
    assert!(made.success());
    std::fs::create_dir(dir.path().join("folder.json")).unwrap();
    // A blocking open of the FIFO would never return: no writer ever appears.
    for (path, kind) in [("pipe.json", "a FIFO"), ("folder.json", "a directory")] {
        let err = store.load(&Scope::Shared, path).await.unwrap_err();
        assert!(err.is_invalid_params(), "{path}: {err}");
        assert_eq!(
            err.to_string(),
            format!("path: cannot load from {path:?}: is {kind}, not a regular file")
        );
    }
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), before);
}
