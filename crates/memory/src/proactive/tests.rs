//! Unit tests of [`crate::proactive`] and [`crate::intervene`]: ids, validation, the
//! selector and status slots.

use super::*;
use crate::graph::test_support::add;
use crate::intervene::*;

fn save(g: &mut Graph, kind: FactKind, input: SaveInput) -> SaveReport {
    g.save_proactive_at(kind, input.validate().unwrap(), 5)
}

fn with_id(id: &str, subject: &str, body: &str) -> SaveInput {
    SaveInput {
        id: Some(id.to_owned()),
        ..SaveInput::new(subject, body)
    }
}

fn request(query: &str) -> RequestInput {
    RequestInput {
        query: Some(query.to_owned()),
        ..RequestInput::default()
    }
}

fn select(g: &Graph, input: RequestInput) -> Intervention {
    g.select(&input.validate().unwrap())
}

fn reason(i: &Intervention) -> Option<SilentReason> {
    match i.decision {
        Decision::Silent(r) => Some(r),
        Decision::Inject { .. } => None,
    }
}

fn selected(i: &Intervention) -> Option<&str> {
    match &i.decision {
        Decision::Inject { selected, .. } => Some(selected.fact_id.as_str()),
        Decision::Silent(_) => None,
    }
}

/// A bank with one entry of each proactive kind and a plain preference.
fn bank() -> Graph {
    let mut g = Graph::new();
    save(
        &mut g,
        FactKind::Procedural,
        with_id(
            "linker",
            "cargo linker error",
            "when the linker cc is not found install build-essential",
        ),
    );
    save(
        &mut g,
        FactKind::Knowledge,
        with_id(
            "staging",
            "deploy target staging",
            "deploy to the staging cluster eu-west-2 first",
        ),
    );
    add(
        &mut g,
        "editor",
        "editor settings",
        "use four spaces in the editor",
        FactKind::Preference,
        1,
    );
    g
}

#[test]
fn repeated_ids_are_suffixed_and_absent_ids_minted() {
    let mut g = Graph::new();
    add(&mut g, "x-2", "taken", "by a plain fact", FactKind::Fact, 1);
    let ids: Vec<String> = (0..3)
        .map(|_| save(&mut g, FactKind::Knowledge, with_id("x", "s", "b")).id)
        .collect();
    assert_eq!(ids, ["x", "x-3", "x-4"]);
    let minted = save(&mut g, FactKind::Procedural, SaveInput::new("s", "b"));
    assert!(minted.id.starts_with("procedural-"), "{minted:?}");
    assert_eq!((minted.kind, minted.fact_count), (FactKind::Procedural, 5));
    assert!(save(&mut g, FactKind::Knowledge, SaveInput::new("s", "b"))
        .id
        .starts_with("knowledge-"));
    assert_eq!(
        g.fact("x-2").unwrap().kind,
        FactKind::Fact,
        "never overwritten"
    );
    assert_eq!(
        g.bank(),
        Bank {
            facts: 1,
            knowledge: 4,
            procedural: 1
        }
    );
}

#[test]
fn saved_entries_carry_their_metadata() {
    let mut g = Graph::new();
    let input = SaveInput {
        tags: vec!["deploy".into(), "deploy".into()],
        confidence: Some("Low".into()),
        tenant_id: Some("acme".into()),
        is_constraint: true,
        ..with_id("k", "deploys", "never deploy on fridays")
    };
    save(&mut g, FactKind::Knowledge, input);
    let f = g.fact("k").unwrap();
    assert_eq!(
        (f.kind, f.confidence, f.tags.as_slice()),
        (FactKind::Knowledge, 0.3, &["deploy".to_owned()][..])
    );
    assert_eq!(
        f.proactive,
        Some(ProactiveMeta {
            confidence: Some("Low".into()),
            tenant_id: Some("acme".into()),
            is_constraint: true
        })
    );
    assert!(f.is_constraint());
    let hit = &g.query("friday deploys", 5, None).unwrap()[0];
    assert_eq!(
        (hit.fact_id.as_str(), hit.kind.as_str()),
        ("k", "knowledge")
    );
    let block = g.build_context("", 8_192, None).unwrap();
    assert!(
        block.text.contains("never deploy on fridays"),
        "{}",
        block.text
    );
    assert_eq!(numeric_confidence("0.42"), 0.42);
    assert_eq!(numeric_confidence("verified"), 1.0);
    assert_eq!(numeric_confidence("7"), 1.0);
}

#[test]
fn bad_inputs_name_their_field() {
    let err = |input: SaveInput| input.validate().unwrap_err().to_string();
    assert_eq!(err(SaveInput::new(" ", "b")), "subject: must not be empty");
    assert_eq!(err(SaveInput::new("s", "")), "body: must not be empty");
    assert_eq!(err(with_id(" ", "s", "b")), "id: must not be empty");
    assert!(err(with_id("proactive-status:x", "s", "b")).starts_with("id: must not start with"));
    assert!(
        err(with_id(&"i".repeat(MAX_ID_CHARS + 1), "s", "b")).starts_with("id: must be at most")
    );
    let tenant = SaveInput {
        tenant_id: Some("".into()),
        ..SaveInput::new("s", "b")
    };
    assert_eq!(err(tenant), "tenant_id: must not be empty");
    let confidence = SaveInput {
        confidence: Some("  ".into()),
        ..SaveInput::new("s", "b")
    };
    assert_eq!(err(confidence), "confidence: must not be empty");

    let req = |input: RequestInput| input.validate().unwrap_err().to_string();
    for bad in [0, 33, -1] {
        let input = RequestInput {
            max_candidates: Some(bad),
            ..RequestInput::default()
        };
        assert_eq!(
            req(input),
            format!("max_candidates: must be between 1 and 32 (got {bad})")
        );
    }
    let recent = RequestInput {
        recent: vec!["x".into(); MAX_RECENT + 1],
        ..RequestInput::default()
    };
    assert!(req(recent).starts_with("recent: must have at most"));
    let defaults = RequestInput::default().validate().unwrap();
    assert_eq!(defaults.max_candidates, DEFAULT_MAX_CANDIDATES);
}

#[test]
fn tool_errors_inject_the_relevant_procedural_entry() {
    let g = bank();
    let input = RequestInput {
        query: Some("run cargo build for the daemon".into()),
        recent: vec!["error: linker `cc` not found".into()],
        trigger: Trigger {
            tool_error: true,
            ..Trigger::default()
        },
        ..RequestInput::default()
    };
    let without_trigger = select(
        &g,
        RequestInput {
            trigger: Trigger::default(),
            ..input.clone()
        },
    );
    let i = select(&g, input);
    assert_eq!(selected(&i), Some("linker"), "{i:?}");
    let Decision::Inject { reminder, selected } = &i.decision else {
        unreachable!()
    };
    assert_eq!(
        reminder,
        "Remember (procedural, linker): cargo linker error: when the linker cc is not found install build-essential"
    );
    assert!(selected.score >= INJECT_THRESHOLD && selected.score <= 1.0);
    let plain = &without_trigger.candidates[0];
    assert!((selected.score - plain.score * (1.0 + FAILURE_PROCEDURAL_BOOST)).abs() < 1e-9);
    assert_eq!(
        i.bank,
        Bank {
            facts: 1,
            knowledge: 1,
            procedural: 1
        }
    );
}

#[test]
fn silence_says_why() {
    assert_eq!(
        reason(&select(&Graph::new(), request("anything"))),
        Some(SilentReason::EmptyBank)
    );
    let g = bank();
    assert_eq!(
        reason(&select(&g, request("the of"))),
        Some(SilentReason::NoQuery)
    );
    assert_eq!(
        reason(&select(&g, RequestInput::default())),
        Some(SilentReason::NoQuery)
    );
    let unrelated = select(&g, request("what colour is the logo"));
    assert_eq!(reason(&unrelated), Some(SilentReason::NoCandidates));
    assert!(unrelated.candidates.is_empty());
    let weak = select(&g, request("editor theme colours"));
    assert_eq!(
        reason(&weak),
        Some(SilentReason::BelowThreshold),
        "{weak:?}"
    );
    assert_eq!(weak.candidates.len(), 1);
    let forced = select(
        &g,
        RequestInput {
            force: true,
            ..request("editor theme colours")
        },
    );
    assert_eq!(selected(&forced), Some("editor"));
    let forced_nothing = select(
        &g,
        RequestInput {
            force: true,
            ..request("what colour is the logo")
        },
    );
    assert_eq!(reason(&forced_nothing), Some(SilentReason::NoCandidates));
}

#[test]
fn candidates_are_capped_ranked_and_deterministic() {
    let mut g = Graph::new();
    for i in 0..40 {
        add(
            &mut g,
            &format!("f{i:02}"),
            "database migration",
            &format!("migration note {i}"),
            FactKind::Fact,
            1,
        );
    }
    let i = select(&g, request("database migration"));
    assert_eq!(i.candidates.len(), DEFAULT_MAX_CANDIDATES);
    let again = select(&g, request("database migration"));
    assert_eq!(i, again);
    let three = select(
        &g,
        RequestInput {
            max_candidates: Some(3),
            ..request("database migration")
        },
    );
    assert_eq!(
        three
            .candidates
            .iter()
            .map(|c| c.fact_id.as_str())
            .collect::<Vec<_>>(),
        ["f00", "f01", "f02"],
        "equal scores break ties by id"
    );
    assert!(i.candidates.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn triggers_boost_constraints_and_knowledge() {
    let mut g = Graph::new();
    add(
        &mut g,
        "rule",
        "production database",
        "never drop tables in the production database",
        FactKind::Constraint,
        1,
    );
    add(
        &mut g,
        "note",
        "production database",
        "the production database is postgres 16",
        FactKind::Fact,
        1,
    );
    let calm = select(&g, request("drop the production database tables"));
    let risky = select(
        &g,
        RequestInput {
            trigger: Trigger {
                high_risk_action: true,
                ..Trigger::default()
            },
            ..request("drop the production database tables")
        },
    );
    let score =
        |i: &Intervention, id: &str| i.candidates.iter().find(|c| c.fact_id == id).unwrap().score;
    assert!(score(&risky, "rule") > score(&calm, "rule"));
    assert_eq!(score(&risky, "note"), score(&calm, "note"));
    assert_eq!(selected(&risky), Some("rule"));
    let k = SaveInput::new(
        "production database",
        "the production database runs postgres 16",
    );
    save(
        &mut g,
        FactKind::Knowledge,
        SaveInput {
            id: Some("k".into()),
            ..k
        },
    );
    let unsure = select(
        &g,
        RequestInput {
            trigger: Trigger {
                explicit_uncertainty: true,
                ..Trigger::default()
            },
            ..request("which postgres version does the production database run")
        },
    );
    assert_eq!(unsure.candidates[0].fact_id, "k");
    let k = &unsure.candidates[0];
    assert!(
        (k.score - (k.relevance * (1.0 + KNOWLEDGE_BOOST + GROUNDING_BOOST)).min(1.0)).abs() < 1e-9
    );
}

#[test]
fn tenants_see_their_own_and_untenanted_entries() {
    let mut g = Graph::new();
    let tenant = |t: &str, id: &str| SaveInput {
        tenant_id: Some(t.to_owned()),
        ..with_id(
            id,
            "release checklist",
            "run the release checklist before tagging",
        )
    };
    save(&mut g, FactKind::Knowledge, tenant("acme", "acme"));
    save(&mut g, FactKind::Knowledge, tenant("globex", "globex"));
    let ids = |g: &Graph, t: Option<&str>| {
        select(
            g,
            RequestInput {
                tenant_id: t.map(str::to_owned),
                ..request("release checklist before tagging")
            },
        )
        .candidates
        .into_iter()
        .map(|c| c.fact_id)
        .collect::<Vec<_>>()
    };
    assert_eq!(ids(&g, Some("acme")), ["acme"]);
    assert_eq!(ids(&g, Some("globex")), ["globex"]);
    assert_eq!(
        reason(&select(&g, request("release checklist"))),
        Some(SilentReason::EmptyBank)
    );
    save(
        &mut g,
        FactKind::Knowledge,
        with_id("all", "release checklist", "tag releases from main"),
    );
    assert_eq!(ids(&g, None), ["all"]);
    assert_eq!(ids(&g, Some("acme")).len(), 2);
}

#[test]
fn injections_are_counted_and_survive_replacement_and_consolidation() {
    let mut g = bank();
    assert!(g.record_injection("linker"));
    assert!(g.record_injection("linker"));
    assert!(!g.record_injection("missing"));
    assert_eq!(g.fact("linker").unwrap().injections, 2);
    // Two identical knowledge entries are kept apart by consolidation.
    save(
        &mut g,
        FactKind::Knowledge,
        with_id(
            "staging",
            "deploy target staging",
            "deploy to the staging cluster eu-west-2 first",
        ),
    );
    assert_eq!(g.consolidate().removed_count, 0);
    assert!(g.fact("staging-2").is_some());
}

#[test]
fn status_slots_are_per_scope_and_tenant() {
    let slots = StatusSlots::default();
    let (a, b) = (Scope::Namespace("a".into()), Scope::Namespace("b".into()));
    let status = |tenant: Option<&str>, body: &str| Status {
        id: status_id(tenant),
        body: body.to_owned(),
        tenant_id: tenant.map(str::to_owned),
    };
    slots.set(&a, status(None, "one")).unwrap();
    slots.set(&a, status(None, "two")).unwrap();
    slots.set(&a, status(Some("t"), "tenant")).unwrap();
    assert_eq!(
        slots.get(&a, "proactive-status:global").unwrap().body,
        "two"
    );
    assert_eq!(slots.get(&a, "proactive-status:t").unwrap().body, "tenant");
    assert!(slots.get(&b, "proactive-status:global").is_none());
    assert!(!slots.clear(&b, "proactive-status:global"));
    assert!(!slots.clear(&a, "global"), "only status ids");
    assert!(slots.clear(&a, "proactive-status:global"));
    assert!(!slots.clear(&a, "proactive-status:global"));
    assert!(slots.get(&a, "proactive-status:t").is_some());
    for i in 1..MAX_STATUS_SLOTS {
        slots.set(&b, status(Some(&i.to_string()), "x")).unwrap();
    }
    slots.set(&b, status(None, "last")).unwrap();
    let err = slots.set(&b, status(Some("over"), "x")).unwrap_err();
    assert_eq!(err.field(), "tenant_id");
    slots.set(&b, status(None, "overwrite is fine")).unwrap();
}

#[test]
fn deleted_kinds_serialise_as_wire_names() {
    for (kind, name) in [
        (DeletedKind::Status, "status"),
        (DeletedKind::Fact(FactKind::Knowledge), "knowledge"),
        (DeletedKind::Fact(FactKind::Pattern), "pattern"),
    ] {
        assert_eq!(serde_json::to_value(kind).unwrap(), name);
        assert_eq!(
            serde_json::from_value::<DeletedKind>(name.into()).unwrap(),
            kind
        );
    }
    assert!(serde_json::from_value::<DeletedKind>("nope".into()).is_err());
}
