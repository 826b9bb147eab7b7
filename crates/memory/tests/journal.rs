//! The snapshot + journal durable form: replay after a crash (no `flush_all`), torn and
//! corrupt journals, compaction, group commit counted by appends, the unchanged snapshot
//! format and the exact snapshot length the graph keeps.

use car_memory::journal::journal_path;
use car_memory::{FactInput, FactKind, Graph, MemoryStore, Outcome, Scope, SkillInput};
use std::path::{Path, PathBuf};

fn fact(subject: &str, body: &str) -> car_memory::NewFact {
    FactInput::new(subject, body).validate().unwrap()
}

fn fact_id(id: &str, subject: &str, body: &str) -> car_memory::NewFact {
    FactInput::new(subject, body)
        .fact_id(id)
        .validate()
        .unwrap()
}

fn skill(name: &str, code: &str) -> car_memory::SkillInput {
    SkillInput {
        name: name.into(),
        code: code.into(),
        platform: "browser".into(),
        task_keywords: vec!["sign in".into()],
        ..SkillInput::default()
    }
    .validate()
    .unwrap()
}

/// Everything a scope holds: its facts and its skills.
fn contents(g: &Graph) -> (Vec<car_memory::Fact>, Vec<car_memory::Skill>) {
    (
        g.facts().into_iter().cloned().collect(),
        g.list_skills(None),
    )
}

fn shared(dir: &Path) -> PathBuf {
    dir.join("shared.json")
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Applies one of every kind of mutation to the shared scope.
async fn every_kind_of_mutation(store: &MemoryStore) {
    let s = Scope::Shared;
    store
        .add_fact(&s, fact_id("a", "editor", "tabs"))
        .await
        .unwrap();
    store
        .add_fact(&s, fact_id("b", "deploys", "never on friday"))
        .await
        .unwrap();
    store
        .add_fact(&s, fact("retry policy", "retry three times"))
        .await
        .unwrap();
    store
        .add_fact(&s, fact_id("a", "editor", "four spaces"))
        .await
        .unwrap();
    store.delete(&s, "b").await.unwrap();
    store
        .add_fact(&s, fact_id("dup1", "same", "text"))
        .await
        .unwrap();
    store
        .add_fact(&s, fact_id("dup2", "same", "text"))
        .await
        .unwrap();
    let merged = store.consolidate(&s).await.unwrap();
    assert_eq!(merged.removed_count, 1, "{merged:?}");
    store
        .mutate(&s, |g| Ok(g.record_injection("a")))
        .await
        .unwrap();
    store
        .ingest_skill(&s, skill("login", "click()"))
        .await
        .unwrap();
    let mut next = skill("login2", "type()");
    next.supersedes = Some("login".into());
    store.ingest_skill(&s, next).await.unwrap();
    store
        .report_outcome(&s, "login2", Outcome::Fail)
        .await
        .unwrap();
}

#[tokio::test]
async fn every_mutation_survives_a_drop_without_flush_all_through_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    every_kind_of_mutation(&store).await;
    let before = store.read(&Scope::Shared, contents).await.unwrap();
    assert_eq!(
        before
            .0
            .iter()
            .find(|f| f.fact_id == "a")
            .unwrap()
            .injections,
        1
    );
    let stats = store.flush_stats(&Scope::Shared).await.unwrap();
    assert_eq!(
        stats.compactions, 1,
        "only the scope's first write: {stats:?}"
    );
    assert!(stats.journal_appends >= 10, "{stats:?}");
    let first = std::fs::read(shared(dir.path())).unwrap();
    drop(store);
    assert_eq!(names(dir.path()), ["shared.json", "shared.json.journal"]);
    let json: serde_json::Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(
        json["facts"].as_array().unwrap().len(),
        1,
        "the snapshot is the first write"
    );

    let reopened = MemoryStore::open(dir.path()).await.unwrap();
    let after = reopened.read(&Scope::Shared, contents).await.unwrap();
    assert_eq!(after, before);
    assert!(
        after.0.iter().all(|f| f.fact_id != "b"),
        "the delete is replayed"
    );
    assert_eq!(after.1[0].superseded_by.as_deref(), Some("login2"));
    assert_eq!(after.1[1].fail_count, 1);
}

#[tokio::test]
async fn a_torn_last_record_is_dropped_and_the_journal_stays_appendable() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    for i in 0..3 {
        store
            .add_fact(&Scope::Shared, fact("torn", &format!("fact {i}")))
            .await
            .unwrap();
    }
    drop(store);
    let journal = journal_path(&shared(dir.path()));
    let whole = std::fs::read(&journal).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(br#"{"put_fact":{"fact_id":"half","subj"#);
    std::fs::write(&journal, &torn).unwrap();

    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 3);
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        whole,
        "truncated to whole lines"
    );
    store
        .add_fact(&Scope::Shared, fact("torn", "fact 3"))
        .await
        .unwrap();
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 4);
}

#[tokio::test]
async fn a_torn_header_is_a_journal_that_never_was() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_path(&shared(dir.path()));
    std::fs::write(&journal, br#"{"journal":1,"ba"#).unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 0);
    assert!(!journal.exists(), "removed");
    store
        .add_fact(&Scope::Shared, fact("a", "b"))
        .await
        .unwrap();
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 1);
}

#[tokio::test]
async fn a_corrupt_record_keeps_what_precedes_it_and_moves_the_journal_aside() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact_id("first", "in", "snapshot"))
        .await
        .unwrap();
    store
        .add_fact(&Scope::Shared, fact_id("kept", "a", "b"))
        .await
        .unwrap();
    store
        .add_fact(&Scope::Shared, fact_id("lost", "c", "d"))
        .await
        .unwrap();
    drop(store);
    let journal = journal_path(&shared(dir.path()));
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "header and two records: {text}");
    let bad = format!(
        "{}\n{}\n{}\n",
        lines[0], lines[1], r#"{"put_fact":{"fact_id":"x"}}"#
    );
    std::fs::write(&journal, &bad).unwrap();

    let store = MemoryStore::open(dir.path()).await.unwrap();
    let ids: Vec<String> = store
        .read(&Scope::Shared, |g| {
            g.facts().iter().map(|f| f.fact_id.clone()).collect()
        })
        .await
        .unwrap();
    assert_eq!(ids, ["first", "kept"]);
    let files = names(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(
        files[0], "shared.json",
        "the recovered graph is the snapshot"
    );
    assert!(
        files[1].starts_with("shared.json.journal.corrupt-"),
        "{files:?}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(&files[1])).unwrap(),
        bad
    );
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 2);
}

#[tokio::test]
async fn a_journal_older_than_its_snapshot_is_not_replayed() {
    // A crash after compaction renamed the new snapshot but before it removed the journal.
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("first", "write"))
        .await
        .unwrap();
    store
        .add_fact(&Scope::Shared, fact_id("x", "editor", "tabs"))
        .await
        .unwrap();
    let journal = journal_path(&shared(dir.path()));
    let old_journal = std::fs::read(&journal).unwrap();
    store
        .add_fact(&Scope::Shared, fact_id("x", "editor", "spaces"))
        .await
        .unwrap();
    store.flush_all().await.unwrap();
    assert!(!journal.exists(), "compaction removes the journal");
    drop(store);
    std::fs::write(&journal, &old_journal).unwrap();

    let store = MemoryStore::open(dir.path()).await.unwrap();
    let body = store
        .read(&Scope::Shared, |g| g.fact("x").unwrap().body.clone())
        .await
        .unwrap();
    assert_eq!(body, "spaces", "the older state is not brought back");
    assert!(!journal.exists());
    assert!(names(dir.path())
        .iter()
        .any(|n| n.starts_with("shared.json.journal.corrupt-")));
}

#[tokio::test]
async fn compaction_keeps_everything_removes_the_journal_and_writes_the_persist_format() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    every_kind_of_mutation(&store).await;
    let before = store.read(&Scope::Shared, contents).await.unwrap();
    store.flush_all().await.unwrap();
    assert_eq!(names(dir.path()), ["shared.json"]);
    let stats = store.flush_stats(&Scope::Shared).await.unwrap();
    assert_eq!(
        (stats.compactions, stats.journal_bytes),
        (2, 0),
        "the first write and flush_all: {stats:?}"
    );
    store.flush_all().await.unwrap();
    assert_eq!(
        store.flush_stats(&Scope::Shared).await.unwrap().compactions,
        2,
        "nothing new: no third write"
    );

    // The compacted snapshot is byte for byte what memory.persist writes.
    assert_eq!(
        store.persist(&Scope::Shared, "export.json").await.unwrap(),
        3
    );
    let snapshot = std::fs::read(shared(dir.path())).unwrap();
    assert_eq!(
        snapshot,
        std::fs::read(dir.path().join("export.json")).unwrap()
    );
    let json: serde_json::Value = serde_json::from_slice(&snapshot).unwrap();
    assert_eq!(json["version"], 1);
    assert!(json["facts"].is_array() && json["skills"].is_array());
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.read(&Scope::Shared, contents).await.unwrap(), before);
}

#[tokio::test]
async fn the_journal_compacts_itself_before_outgrowing_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    // Half of a 64 KiB cap is the journal's limit here (below the 1 MiB floor).
    store.set_max_file_bytes(64 * 1024);
    let body = "x".repeat(1000);
    let mut largest = 0;
    for i in 0..100 {
        store
            .add_fact(
                &Scope::Shared,
                fact_id(&format!("f{}", i % 40), "subject", &body),
            )
            .await
            .unwrap();
        let stats = store.flush_stats(&Scope::Shared).await.unwrap();
        largest = largest.max(stats.journal_bytes);
    }
    let stats = store.flush_stats(&Scope::Shared).await.unwrap();
    assert!(stats.compactions >= 1, "{stats:?}");
    assert!(largest <= 32 * 1024, "journal reached {largest} bytes");
    assert_eq!(stats.journal_appends + stats.compactions, 100, "{stats:?}");
    let before = store.read(&Scope::Shared, contents).await.unwrap();
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store.set_max_file_bytes(64 * 1024);
    assert_eq!(store.read(&Scope::Shared, contents).await.unwrap(), before);
    assert_eq!(before.0.len(), 40);
}

#[tokio::test]
async fn a_load_replaces_the_graph_with_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("a", "b"))
        .await
        .unwrap();
    store.persist(&Scope::Shared, "one.json").await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("c", "d"))
        .await
        .unwrap();
    assert_eq!(store.load(&Scope::Shared, "one.json").await.unwrap(), 1);
    let stats = store.flush_stats(&Scope::Shared).await.unwrap();
    assert_eq!(
        (
            stats.compactions,
            stats.journal_appends,
            stats.journal_bytes
        ),
        (2, 1, 0),
        "the first write and the load compact: {stats:?}"
    );
    store
        .add_fact(&Scope::Shared, fact("e", "f"))
        .await
        .unwrap();
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn concurrent_writers_share_appends() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let scope = Scope::Namespace("group".into());
    store.fact_count(&scope).await.unwrap();
    let writers = (0..50).map(|i| {
        let store = store.clone();
        let scope = scope.clone();
        async move {
            store
                .add_fact(&scope, fact("writer", &format!("fact {i}")))
                .await
                .unwrap()
        }
    });
    let counts = futures_join_all(writers).await;
    assert_eq!(counts.iter().max(), Some(&50));
    let stats = store.flush_stats(&scope).await.unwrap();
    assert!(
        stats.journal_appends < 10,
        "50 concurrent writers took {} appends (each one fdatasync)",
        stats.journal_appends
    );
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(store.fact_count(&scope).await.unwrap(), 50);
}

/// Runs every future as a task on this one thread, so they contend for one flush.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + 'static,
    F::Output: 'static,
{
    let local = tokio::task::LocalSet::new();
    let handles: Vec<_> = futures.map(|f| local.spawn_local(f)).collect();
    local
        .run_until(async move {
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            out
        })
        .await
}

#[test]
fn the_kept_snapshot_length_is_exact() {
    let mut g = Graph::new();
    let check = |g: &Graph| {
        assert_eq!(
            g.encoded_len(),
            car_memory::snapshot::encode(g).len() as u64
        );
    };
    check(&g);
    g.add_fact_at(fact_id("a", "ünïcode \"quoted\"", "line\nbreak\ttab"), 1);
    check(&g);
    g.add_fact_at(
        FactInput::new("tagged", "body")
            .kind(FactKind::Constraint)
            .confidence(0.123_456_789)
            .tags(["x", "y"])
            .source("https://example.test")
            .validate()
            .unwrap(),
        12_345_678_901,
    );
    check(&g);
    g.ingest_skill_at(skill("login", "click()"), 3).unwrap();
    check(&g);
    assert!(g.record_injection("a"));
    check(&g);
    g.add_fact_at(fact_id("a", "replaced", "shorter"), 5);
    check(&g);
    g.delete("a");
    check(&g);
    g.consolidate();
    check(&g);
}
