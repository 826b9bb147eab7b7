//! Property tests: confinement never yields a path outside the memory directory, snapshots
//! round-trip every field, and build_context never exceeds its budget while keeping every
//! constraint.

use car_memory::snapshot::{decode, encode};
use car_memory::{confine, FactInput, FactKind, Graph, MemoryError};
use proptest::prelude::*;
use std::path::{Component, Path};

fn kind() -> impl Strategy<Value = FactKind> {
    prop::sample::select(FactKind::ALL.to_vec())
}

fn text() -> impl Strategy<Value = String> {
    // Unicode words with punctuation and newlines; never blank.
    "[a-zA-Zéß日 ,.!\\n-]{0,40}[a-z]".prop_map(|s| s)
}

/// Checks a resolved path the way an attacker would hope it fails: lexically inside, and
/// every existing ancestor (symlinks followed) inside too.
fn assert_inside(root: &Path, resolved: &Path) {
    assert!(
        resolved.starts_with(root),
        "{resolved:?} not under {root:?}"
    );
    assert_ne!(resolved, root);
    assert!(!resolved.components().any(|c| c == Component::ParentDir));
    let mut probe = resolved.to_path_buf();
    loop {
        if let Ok(real) = probe.canonicalize() {
            assert!(real.starts_with(root), "{resolved:?} reaches {real:?}");
            break;
        }
        if !probe.pop() {
            break;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn confinement_never_escapes(parts in prop::collection::vec(
        prop::sample::select(vec!["a", "b", "..", ".", "", "link", "inner", "shared.json", "agents", "x.json", "%2e%2e"]),
        1..6,
    ), absolute in any::<bool>(), outside_abs in any::<bool>()) {
        let parent = tempfile::tempdir().unwrap();
        let memory = parent.path().join("memory");
        std::fs::create_dir_all(memory.join("inner")).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(parent.path(), memory.join("link")).unwrap();
            std::os::unix::fs::symlink(memory.join("inner"), memory.join("inner").join("a")).unwrap();
        }
        let root = memory.canonicalize().unwrap();
        let joined = parts.join("/");
        let requested = match (absolute, outside_abs) {
            (true, false) => format!("{}/{joined}", root.display()),
            (true, true) => format!("{}/{joined}", parent.path().display()),
            _ => joined,
        };
        if let Ok(resolved) = confine::resolve(&memory, &requested) {
            assert_inside(&root, &resolved);
        }
    }

    #[test]
    fn snapshots_round_trip_every_field(facts in prop::collection::vec(
        (text(), text(), kind(), 0.0f64..=1.0, prop::collection::vec("[a-z]{1,8}", 0..4), prop::option::of("[a-z:/.]{1,20}"), 0u64..1u64 << 50),
        0..20,
    )) {
        let mut graph = Graph::new();
        for (i, (subject, body, kind, confidence, tags, source, now)) in facts.into_iter().enumerate() {
            let mut input = FactInput::new(subject, body).fact_id(format!("id-{i}")).kind(kind).confidence(confidence).tags(tags);
            input.source = source;
            graph.add_fact_at(input.validate().unwrap(), now);
        }
        let back = decode(&encode(&graph)).unwrap();
        prop_assert_eq!(back.facts(), graph.facts());
    }

    #[test]
    fn build_context_stays_within_budget_and_keeps_every_constraint(
        facts in prop::collection::vec((text(), text(), kind()), 0..60),
        window in 256usize..20_000,
        query in "[a-z ]{0,30}",
    ) {
        let mut graph = Graph::new();
        for (i, (subject, body, kind)) in facts.iter().enumerate() {
            let input = FactInput::new(subject.clone(), body.clone()).fact_id(format!("id-{i}")).kind(*kind);
            graph.add_fact_at(input.validate().unwrap(), i as u64);
        }
        let constraints: Vec<_> = graph.facts().into_iter().filter(|f| f.kind == FactKind::Constraint).cloned().collect();
        match graph.build_context(&query, window, None) {
            Ok(block) => {
                prop_assert!(block.used_tokens <= block.budget_tokens);
                prop_assert!(block.budget_tokens <= window);
                prop_assert_eq!(block.used_tokens, car_memory::text::estimate_tokens(&block.text));
                prop_assert_eq!(block.included.constraints, constraints.len());
                for c in &constraints {
                    let flat = c.body.split_whitespace().collect::<Vec<_>>().join(" ");
                    prop_assert!(block.text.contains(&flat), "missing constraint {:?}", c.fact_id);
                }
            }
            Err(MemoryError::WindowTooSmall { window: w, needed }) => {
                prop_assert_eq!(w, window);
                prop_assert!(needed > window);
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
    }
}
