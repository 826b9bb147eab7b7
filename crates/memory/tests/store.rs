//! The durable store: scopes, file names, restart survival, group-committed concurrency,
//! persist/load confinement and round trips.

use car_memory::{FactInput, FactKind, MemoryError, MemoryStore, Outcome, Scope, SkillInput};
use std::path::Path;

fn fact(subject: &str, body: &str) -> car_memory::NewFact {
    FactInput::new(subject, body).validate().unwrap()
}

/// Everything a scope holds: its facts and its skills.
fn snapshot(g: &car_memory::Graph) -> (Vec<car_memory::Fact>, Vec<car_memory::Skill>) {
    (
        g.facts().into_iter().cloned().collect(),
        g.list_skills(None),
    )
}

fn ns(name: &str) -> Scope {
    Scope::Namespace(name.to_owned())
}

/// Whether a scope's state is on disk under `snapshot`'s name: its snapshot or its journal.
fn scope_file_exists(snapshot: &Path) -> bool {
    snapshot.is_file() || car_memory::journal::journal_path(snapshot).is_file()
}

/// How many facts a store opened on a copy of `dir` (as after a crash: nothing flushed at
/// exit) finds in the shared scope.
async fn durable_count(dir: &Path) -> usize {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
    }
    let store = MemoryStore::open(copy.path()).await.unwrap();
    store.fact_count(&Scope::Shared).await.unwrap()
}

#[tokio::test]
async fn scopes_are_isolated_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(
        store
            .add_fact(&Scope::Shared, fact("shared", "one"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .add_fact(&ns("Proj/A"), fact("ns", "two"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .add_fact(&ns("Proj/A"), fact("ns", "three"))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .add_fact(&Scope::Agent("agent-7".into()), fact("agent", "four"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.fact_count(&ns("proj/a")).await.unwrap(),
        0,
        "case matters"
    );
    assert!(store
        .query(&Scope::Shared, "three", 5)
        .await
        .unwrap()
        .is_empty());

    // File names follow the namespace encoding; case-only differences get different files.
    assert!(scope_file_exists(&dir.path().join("shared.json")));
    assert!(scope_file_exists(
        &dir.path().join("memory-namespaces/%50roj%2f%41.json")
    ));
    assert!(scope_file_exists(&dir.path().join("agents/agent-7.json")));
    assert!(!scope_file_exists(
        &dir.path().join("memory-namespaces/proj%2fa.json")
    ));
    store
        .add_fact(&ns("proj/a"), fact("lower", "five"))
        .await
        .unwrap();
    assert!(scope_file_exists(
        &dir.path().join("memory-namespaces/proj%2fa.json")
    ));

    drop(store);
    let reopened = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(reopened.fact_count(&Scope::Shared).await.unwrap(), 1);
    assert_eq!(reopened.fact_count(&ns("Proj/A")).await.unwrap(), 2);
    assert_eq!(reopened.fact_count(&ns("proj/a")).await.unwrap(), 1);
    assert_eq!(
        reopened
            .fact_count(&Scope::Agent("agent-7".into()))
            .await
            .unwrap(),
        1
    );
    let hits = reopened.query(&ns("Proj/A"), "three", 5).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].body, "three");
}

#[tokio::test]
async fn bad_scope_names_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let err = store.fact_count(&ns("")).await.unwrap_err();
    assert_eq!(err.to_string(), "memory_namespace: must not be empty");
    let err = store
        .fact_count(&Scope::Agent("A".repeat(100)))
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with("agent_id: is too long"),
        "{err}"
    );
    assert!(err.is_invalid_params());
}

#[tokio::test]
async fn every_mutation_is_on_disk_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(
            &Scope::Shared,
            FactInput::new("a", "b").fact_id("x").validate().unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(durable_count(dir.path()).await, 1);
    store
        .add_fact(&Scope::Shared, fact("c", "d"))
        .await
        .unwrap();
    assert_eq!(durable_count(dir.path()).await, 2);
    assert_eq!(
        store.delete(&Scope::Shared, "x").await.unwrap(),
        car_memory::DeleteReport {
            id: "x".into(),
            deleted: true,
            kind: Some(car_memory::DeletedKind::Fact(FactKind::Pattern)),
            fact_count: 1
        }
    );
    assert_eq!(durable_count(dir.path()).await, 1);
    let before = store.flush_stats(&Scope::Shared).await.unwrap();
    assert_eq!(
        (before.compactions, before.journal_appends),
        (1, 2),
        "the first write creates the snapshot, the others append: {before:?}"
    );
    let again = store.delete(&Scope::Shared, "x").await.unwrap();
    assert_eq!(
        serde_json::to_value(&again).unwrap(),
        serde_json::json!({"id": "x", "deleted": false, "kind": null, "fact_count": 1}),
        "an unknown id is not an error"
    );
    assert_eq!(durable_count(dir.path()).await, 1);
    assert_eq!(
        store.flush_stats(&Scope::Shared).await.unwrap(),
        before,
        "a no-op delete writes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_never_lose_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let scope = ns("load/test");
    let mut connections = tokio::task::JoinSet::new();
    for conn in 0..8 {
        let store = store.clone();
        let scope = scope.clone();
        connections.spawn(async move {
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..500 {
                let store = store.clone();
                let scope = scope.clone();
                calls.spawn(async move {
                    let input = FactInput::new(
                        format!("connection {conn}"),
                        format!("fact number {i} from connection {conn}"),
                    );
                    store
                        .add_fact(&scope, input.validate().unwrap())
                        .await
                        .unwrap()
                });
            }
            let mut max = 0;
            while let Some(count) = calls.join_next().await {
                max = max.max(count.unwrap());
            }
            max
        });
    }
    let mut max = 0;
    while let Some(count) = connections.join_next().await {
        max = max.max(count.unwrap());
    }
    assert_eq!(max, 4000);
    // Group commit, counted rather than timed: 4,000 concurrent writes share far fewer
    // journal appends (each one `fdatasync`) than there are writes.
    let stats = store.flush_stats(&scope).await.unwrap();
    assert!(
        stats.journal_appends + stats.compactions < 4000,
        "4,000 writes took {} appends and {} snapshot writes",
        stats.journal_appends,
        stats.compactions
    );
    drop(store);

    let reopened = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(reopened.fact_count(&scope).await.unwrap(), 4000);
}

#[tokio::test]
async fn persist_and_load_round_trip_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let a = ns("a");
    let input = FactInput::new("deploys", "never on friday")
        .fact_id("f1")
        .kind(FactKind::Constraint)
        .confidence(0.75)
        .tags(["release", "ops"])
        .source("postmortem-12");
    store.add_fact(&a, input.validate().unwrap()).await.unwrap();
    store.add_fact(&a, fact("other", "fact")).await.unwrap();
    let skill = SkillInput {
        name: "login".into(),
        code: "fill(); submit()".into(),
        platform: "browser".into(),
        persona: "ops".into(),
        url_pattern: "https://admin.example.test/*".into(),
        task_keywords: vec!["sign in".into()],
        description: "logs into the admin console".into(),
        supersedes: None,
    };
    store
        .ingest_skill(&a, skill.validate().unwrap())
        .await
        .unwrap();
    store
        .report_outcome(&a, "login", Outcome::Fail)
        .await
        .unwrap();

    assert_eq!(store.persist(&a, "exports/a.json").await.unwrap(), 2);
    assert!(dir.path().join("exports/a.json").is_file());

    let b = ns("b");
    store.add_fact(&b, fact("to be", "replaced")).await.unwrap();
    assert_eq!(store.load(&b, "exports/a.json").await.unwrap(), 2);
    let original = store.read(&a, snapshot).await.unwrap();
    let loaded = store.read(&b, snapshot).await.unwrap();
    assert_eq!(original, loaded, "every field survives the round trip");

    // Load is durable: b's own snapshot now holds the loaded graph.
    drop(store);
    let reopened = MemoryStore::open(dir.path()).await.unwrap();
    let after = reopened.read(&b, snapshot).await.unwrap();
    assert_eq!(after, original);
}

#[tokio::test]
async fn traversal_is_refused_and_writes_nothing_outside() {
    let parent = tempfile::tempdir().unwrap();
    let memory = parent.path().join("memory");
    let store = MemoryStore::open(&memory).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("a", "b"))
        .await
        .unwrap();
    let outside = parent.path().join("escaped.json");
    let attempts = [
        "../escaped.json".to_owned(),
        "sub/../../escaped.json".to_owned(),
        outside.to_str().unwrap().to_owned(),
        "/tmp/car-memory-escape.json".to_owned(),
        "shared.json".to_owned(),
        "memory-namespaces/x.json".to_owned(),
        String::new(),
    ];
    for path in &attempts {
        let err = store.persist(&Scope::Shared, path).await.unwrap_err();
        assert!(matches!(err, MemoryError::Path(_)), "{path}: {err}");
        assert!(err.is_invalid_params());
        assert!(
            err.to_string().starts_with(&format!("path: {path:?}")),
            "{err}"
        );
        let err = store.load(&Scope::Shared, path).await.unwrap_err();
        assert!(matches!(err, MemoryError::Path(_)), "{path}: {err}");
    }
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(parent.path(), memory.join("link")).unwrap();
        let err = store
            .persist(&Scope::Shared, "link/escaped.json")
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "path: \"link/escaped.json\" escapes the memory directory through a symlink"
        );
    }
    assert!(!outside.exists());
    assert!(!Path::new("/tmp/car-memory-escape.json").exists());
    let names: Vec<String> = std::fs::read_dir(parent.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["memory"]);
}

#[tokio::test]
async fn loading_a_bad_file_is_a_precise_error_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    store
        .add_fact(&Scope::Shared, fact("keep", "me"))
        .await
        .unwrap();
    let err = store
        .load(&Scope::Shared, "missing.json")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("path: cannot load from \"missing.json\": "),
        "{err}"
    );
    std::fs::write(
        dir.path().join("bad.json"),
        br#"{"version": 9, "facts": []}"#,
    )
    .unwrap();
    let err = store.load(&Scope::Shared, "bad.json").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "path: cannot load from \"bad.json\": unsupported snapshot version 9 (expected 1)"
    );
    assert!(err.is_invalid_params());
    assert_eq!(store.fact_count(&Scope::Shared).await.unwrap(), 1);
    std::fs::create_dir(dir.path().join("a-dir")).unwrap();
    let err = store.persist(&Scope::Shared, "a-dir").await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("path: cannot persist to \"a-dir\""),
        "{err}"
    );
}

#[tokio::test]
async fn build_context_and_consolidate_through_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let s = Scope::Shared;
    store
        .add_fact(
            &s,
            FactInput::new("main", "never push to main")
                .kind(FactKind::Constraint)
                .validate()
                .unwrap(),
        )
        .await
        .unwrap();
    store
        .add_fact(&s, fact("ci", "ci caches the cargo registry"))
        .await
        .unwrap();
    store
        .add_fact(&s, fact("CI", "CI caches the cargo registry!"))
        .await
        .unwrap();
    let report = store.consolidate(&s).await.unwrap();
    assert_eq!((report.removed_count, report.fact_count), (1, 2));
    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert_eq!(
        store.fact_count(&s).await.unwrap(),
        2,
        "consolidation is durable"
    );
    let block = store
        .build_context(
            &s,
            "cargo caching",
            car_memory::validate_window(None).unwrap(),
        )
        .await
        .unwrap();
    assert!(block.text.starts_with("## Constraints"));
    assert!(
        block.text.contains("never push to main")
            && block.text.contains("caches the cargo registry")
    );
    assert!(block.used_tokens <= block.budget_tokens);
    store.flush_all().await.unwrap();
}

/// One axis per marker word; deterministic.
struct Markers;

impl car_memory::Embedder for Markers {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        Ok(texts
            .iter()
            .map(|t| {
                ["kitten", "puppy"]
                    .iter()
                    .map(|m| t.matches(m).count() as f32)
                    .chain([0.05])
                    .collect()
            })
            .collect())
    }
    fn model_id(&self) -> &str {
        "markers"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_query_blends_embeddings_computed_outside_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let s = Scope::Shared;
    store
        .add_fact(
            &s,
            FactInput::new("pets", "adopted a kitten")
                .fact_id("k")
                .validate()
                .unwrap(),
        )
        .await
        .unwrap();
    store
        .add_fact(
            &s,
            FactInput::new("pets", "adopted a puppy")
                .fact_id("p")
                .validate()
                .unwrap(),
        )
        .await
        .unwrap();
    let lexical = store.query(&s, "pets puppy", 2).await.unwrap();
    assert_eq!(lexical[0].fact_id, "p");
    let tie = store.query(&s, "pets", 2).await.unwrap();
    assert_eq!(tie[0].confidence, tie[1].confidence, "lexically a tie");

    store.set_embedder(Some(std::sync::Arc::new(Markers)));
    let blended = store.query(&s, "pets kitten", 2).await.unwrap();
    assert_eq!(blended[0].fact_id, "k");
    assert!(blended[0].confidence > blended[1].confidence);
    let block = store.build_context(&s, "kitten", 8192).await.unwrap();
    assert!(block.text.find("kitten").unwrap() < block.text.find("puppy").unwrap_or(usize::MAX));
}

/// The daemon spawns handlers with `tokio::spawn`, so every store future must be `Send`.
#[tokio::test]
async fn store_futures_are_send() {
    fn send<T: Send>(t: T) -> T {
        t
    }
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let s = Scope::Shared;
    send(store.add_fact(&s, fact("a", "b"))).await.unwrap();
    send(store.query(&s, "a", 5)).await.unwrap();
    send(store.fact_count(&s)).await.unwrap();
    send(store.build_context(&s, "a", 8192)).await.unwrap();
    send(store.consolidate(&s)).await.unwrap();
    send(store.find_skills(&s, &car_memory::SkillQuery::default()))
        .await
        .unwrap();
    send(store.list_skills(&s, None)).await.unwrap();
    send(store.persist(&s, "p.json")).await.unwrap();
    send(store.load(&s, "p.json")).await.unwrap();
    send(store.report_outcome(&s, "none", Outcome::Fail))
        .await
        .unwrap_err();
    assert!(!send(store.delete(&s, "none")).await.unwrap().deleted);
    send(store.flush_all()).await.unwrap();
}
