//! Proactive memory through the durable store: status slots per scope and tenant (never
//! persisted, cleared by `delete`), knowledge and procedural entries and injection counters
//! surviving a reopen, and evaluation leaving every counter alone.

use car_memory::{
    Decision, DeletedKind, EvalCase, FactKind, MemoryStore, RequestInput, SaveInput, Scope, Trigger,
};

fn ns(name: &str) -> Scope {
    Scope::Namespace(name.to_owned())
}

fn entry(id: &str, subject: &str, body: &str) -> car_memory::ValidSave {
    SaveInput {
        id: Some(id.to_owned()),
        ..SaveInput::new(subject, body)
    }
    .validate()
    .unwrap()
}

fn linker_request() -> car_memory::Request {
    RequestInput {
        query: Some("run cargo build".into()),
        recent: vec!["error: linker `cc` not found".into()],
        trigger: Trigger {
            tool_error: true,
            ..Trigger::default()
        },
        ..RequestInput::default()
    }
    .validate()
    .unwrap()
}

#[tokio::test]
async fn status_slots_are_isolated_overwritten_deleted_and_not_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let (a, b) = (ns("a"), ns("b"));
    let first = store
        .update_status(&a, "step 1 of 3".into(), None)
        .await
        .unwrap();
    assert_eq!(first.id, "proactive-status:global");
    store
        .update_status(&a, "step 2 of 3".into(), None)
        .await
        .unwrap();
    let tenant = store
        .update_status(&a, "acme is blocked".into(), Some("acme".into()))
        .await
        .unwrap();
    assert_eq!(
        (tenant.id.as_str(), tenant.tenant_id.as_deref()),
        ("proactive-status:acme", Some("acme"))
    );
    assert_eq!(store.status(&a, None).unwrap().body, "step 2 of 3");
    assert_eq!(
        store.status(&a, Some("acme")).unwrap().body,
        "acme is blocked"
    );
    assert!(store.status(&b, None).is_none(), "another scope");
    assert!(store.status(&Scope::Shared, None).is_none());
    let err = store.update_status(&a, " ".into(), None).await.unwrap_err();
    assert!(err.is_invalid_params());
    assert_eq!(err.to_string(), "body: must not be empty");

    // Not a fact: not counted, not queryable, not in the snapshot.
    assert_eq!(store.fact_count(&a).await.unwrap(), 0);
    store
        .add_fact(
            &a,
            car_memory::FactInput::new("progress", "the plan")
                .validate()
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(store.query(&a, "step", 5).await.unwrap().is_empty());
    // What is on disk: the snapshot (if compacted yet) and the journal.
    let on_disk: String = [
        "memory-namespaces/a.json",
        "memory-namespaces/a.json.journal",
    ]
    .iter()
    .filter_map(|f| std::fs::read_to_string(dir.path().join(f)).ok())
    .collect();
    assert!(on_disk.contains("the plan"), "{on_disk}");
    assert!(!on_disk.contains("step 2"), "{on_disk}");

    let report = store.delete(&a, "proactive-status:global").await.unwrap();
    assert_eq!(
        (report.deleted, report.kind, report.fact_count),
        (true, Some(DeletedKind::Status), 1)
    );
    assert!(store.status(&a, None).is_none());
    assert!(
        store.status(&a, Some("acme")).is_some(),
        "other tenants kept"
    );
    let again = store.delete(&a, "proactive-status:global").await.unwrap();
    assert_eq!((again.deleted, again.kind), (false, None));

    drop(store);
    let store = MemoryStore::open(dir.path()).await.unwrap();
    assert!(store.status(&a, Some("acme")).is_none(), "in memory only");
}

#[tokio::test]
async fn entries_and_injection_counters_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let scope = ns("run");
    {
        let store = MemoryStore::open(dir.path()).await.unwrap();
        let k = store
            .save_knowledge(
                &scope,
                entry("req", "task requirement", "ship the cli as a static binary"),
            )
            .await
            .unwrap();
        assert_eq!(
            (k.id.as_str(), k.kind, k.fact_count),
            ("req", FactKind::Knowledge, 1)
        );
        let p = store
            .save_procedural(
                &scope,
                entry(
                    "linker",
                    "cargo linker error",
                    "when the linker cc is not found install build-essential",
                ),
            )
            .await
            .unwrap();
        assert_eq!((p.kind, p.fact_count), (FactKind::Procedural, 2));
        let again = store
            .save_knowledge(
                &scope,
                entry("req", "task requirement", "also ship a musl build"),
            )
            .await
            .unwrap();
        assert_eq!(again.id, "req-2");
        for _ in 0..2 {
            let i = store.intervene(&scope, &linker_request()).await.unwrap();
            assert!(
                matches!(&i.decision, Decision::Inject { selected, .. } if selected.fact_id == "linker"),
                "{i:?}"
            );
        }
        // Evaluation runs the same selector and changes nothing.
        let case = EvalCase {
            id: "c".into(),
            request: linker_request(),
            relevant_fact_ids: vec!["linker".into()],
        };
        let e = store.evaluate(&scope, &[case.clone(), case]).await.unwrap();
        assert_eq!((e.cases, e.selective.true_positives), (2, 2));
        // A silent decision writes nothing either.
        let silent = RequestInput {
            query: Some("what colour is the logo".into()),
            ..RequestInput::default()
        }
        .validate()
        .unwrap();
        assert!(matches!(
            store.intervene(&scope, &silent).await.unwrap().decision,
            Decision::Silent(_)
        ));
    }
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let facts = store
        .read(&scope, |g| {
            g.facts().into_iter().cloned().collect::<Vec<_>>()
        })
        .await
        .unwrap();
    let by_id = |id: &str| facts.iter().find(|f| f.fact_id == id).unwrap().clone();
    assert_eq!(facts.len(), 3);
    assert_eq!(
        by_id("linker").injections,
        2,
        "counted twice, not by evaluate"
    );
    assert_eq!(by_id("req").injections, 0);
    assert_eq!(by_id("req-2").kind, FactKind::Knowledge);
    let hits = store
        .query(&scope, "static binary requirement", 5)
        .await
        .unwrap();
    assert_eq!(
        (hits[0].fact_id.as_str(), hits[0].kind),
        ("req", FactKind::Knowledge)
    );
    let deleted = store.delete(&scope, "linker").await.unwrap();
    assert_eq!(deleted.kind, Some(DeletedKind::Fact(FactKind::Procedural)));
    assert_eq!(deleted.fact_count, 2);
}

#[tokio::test]
async fn too_many_cases_are_refused_naming_cases() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemoryStore::open(dir.path()).await.unwrap();
    let case = EvalCase {
        id: "c".into(),
        request: linker_request(),
        relevant_fact_ids: Vec::new(),
    };
    let err = store
        .evaluate(&Scope::Shared, &vec![case; 1_001])
        .await
        .unwrap_err();
    assert!(err.is_invalid_params());
    assert!(
        err.to_string().starts_with("cases: must have at most 1000"),
        "{err}"
    );
}
