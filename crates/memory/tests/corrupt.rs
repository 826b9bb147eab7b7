//! A corrupt snapshot on disk is moved aside with a logged warning, never silently dropped;
//! the scope starts empty and new writes work. Its own test binary, because it installs a
//! global tracing subscriber to capture the warning from the blocking loader thread.

use car_memory::{FactInput, MemoryStore, Scope};
use std::io::Write;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn corrupt_snapshot_is_moved_aside_with_a_warning() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .init();

    let dir = tempfile::tempdir().unwrap();
    let ns_dir = dir.path().join("memory-namespaces");
    std::fs::create_dir_all(&ns_dir).unwrap();
    let file = ns_dir.join("team.json");
    std::fs::write(&file, b"{\"version\": 1, \"facts\": [").unwrap();

    let store = MemoryStore::open(dir.path()).await.unwrap();
    let scope = Scope::Namespace("team".into());
    assert_eq!(
        store.fact_count(&scope).await.unwrap(),
        0,
        "the scope starts empty"
    );

    let aside: Vec<_> = std::fs::read_dir(&ns_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("team.json.corrupt-")
        })
        .collect();
    assert_eq!(aside.len(), 1, "moved aside, not deleted");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        b"{\"version\": 1, \"facts\": ["
    );

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("WARN"), "{text}");
    assert!(
        text.contains(&file.display().to_string()),
        "names the original path: {text}"
    );
    assert!(
        text.contains(&aside[0].display().to_string()),
        "names where it went: {text}"
    );

    assert_eq!(
        store
            .add_fact(&scope, FactInput::new("new", "write").validate().unwrap())
            .await
            .unwrap(),
        1
    );
    drop(store);
    let reopened = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(reopened.fact_count(&scope).await.unwrap(), 1);
    assert!(aside[0].exists(), "the corrupt copy is kept");
}
