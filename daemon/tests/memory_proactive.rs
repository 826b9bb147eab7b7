//! Proactive memory against a real daemon: knowledge and procedural entries in the scoped
//! graph (visible to `memory.query` with their kind, additive ids), the private status slot
//! (invisible to retrieval, deletable, not persisted), `memory.intervene`'s inject and silent
//! decisions, `memory.evaluate`'s counts on hand-labelled cases, precise `-32602`s, and
//! durability of entries and injection counters across a restart.

mod common;

use common::*;
use serde_json::{json, Value};

async fn ns(d: &Daemon, namespace: &str) -> Ws {
    let mut ws = Ws::tcp(&d.ws_url).await;
    let r = ws
        .call(
            "session.auth",
            json!({"token": d.token(), "memory_namespace": namespace}),
        )
        .await;
    assert_eq!(r["result"]["memory_namespace"], namespace, "{r}");
    ws
}

async fn ok(ws: &mut Ws, method: &str, params: Value) -> Value {
    let r = ws.call(method, params.clone()).await;
    assert!(r.get("error").is_none(), "{method} {params} → {r}");
    r["result"].clone()
}

/// What is on disk for a namespace: its snapshot and its journal (memory keeps changes
/// since the last compaction in `<snapshot>.journal`, compact JSON), with `": "` written
/// as `":"` so one pattern matches both.
fn on_disk(home: &std::path::Path, namespace: &str) -> String {
    let snapshot = home.join(format!("memory/memory-namespaces/{namespace}.json"));
    let journal = home.join(format!("memory/memory-namespaces/{namespace}.json.journal"));
    [snapshot, journal]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect::<String>()
        .replace("\": ", "\":")
}

async fn invalid(ws: &mut Ws, method: &str, params: Value) -> String {
    let r = ws.call(method, params.clone()).await;
    assert_eq!(code(&r), -32602, "{method} {params} → {r}");
    message(&r)
}

/// The bank the selector and evaluation tests use: one procedural entry, one knowledge
/// entry, one plain preference.
async fn seed(ws: &mut Ws) {
    ok(ws, "memory.save_procedural", json!({"id": "linker", "subject": "cargo linker error", "body": "when the linker cc is not found install build-essential", "confidence": "verified"})).await;
    ok(ws, "memory.save_knowledge", json!({"id": "staging", "subject": "deploy target staging", "body": "deploy to the staging cluster eu-west-2 first"})).await;
    ok(ws, "memory.add_fact", json!({"subject": "editor settings", "body": "use four spaces in the editor", "kind": "preference", "fact_id": "editor"})).await;
}

fn tool_error(query: &str, recent: &[&str]) -> Value {
    json!({"query": query, "recent": recent, "trigger": {"tool_error": true}})
}

#[tokio::test]
async fn entries_are_queryable_additive_and_survive_restart_with_their_counters() {
    let mut d = Daemon::start();
    let mut ws = ns(&d, "pm").await;
    let k = ok(&mut ws, "memory.save_knowledge", json!({"id": "req", "subject": "task requirement", "body": "ship the cli as a static binary", "tags": ["release"], "confidence": "high", "tenant_id": null, "is_constraint": false})).await;
    assert_eq!(
        k,
        json!({"id": "req", "kind": "knowledge", "fact_count": 1})
    );
    let again = ok(
        &mut ws,
        "memory.save_knowledge",
        json!({"id": "req", "subject": "task requirement", "body": "also ship a musl build"}),
    )
    .await;
    assert_eq!(
        again,
        json!({"id": "req-2", "kind": "knowledge", "fact_count": 2})
    );
    let minted = ok(&mut ws, "memory.save_procedural", json!({"subject": "cargo linker error", "body": "when the linker cc is not found install build-essential"})).await;
    assert_eq!(
        (minted["kind"].clone(), minted["fact_count"].clone()),
        (json!("procedural"), json!(3))
    );
    let procedural_id = minted["id"].as_str().unwrap().to_string();
    assert!(procedural_id.starts_with("procedural-"), "{minted}");

    let hits = ok(
        &mut ws,
        "memory.query",
        json!({"query": "static binary requirement"}),
    )
    .await;
    assert_eq!(
        (hits[0]["fact_id"].clone(), hits[0]["kind"].clone()),
        (json!("req"), json!("knowledge"))
    );
    assert_eq!(hits[0]["tags"], json!(["release"]));

    let i = ok(
        &mut ws,
        "memory.intervene",
        tool_error("run cargo build", &["error: linker `cc` not found"]),
    )
    .await;
    assert_eq!(i["decision"], "inject", "{i}");
    assert_eq!(i["selected"]["id"], procedural_id.as_str());

    let home = d.home.clone();
    let snapshot = on_disk(&home, "pm");
    assert!(snapshot.contains("\"injections\":1"), "{snapshot}");
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home.clone()).start();
    let mut ws = ns(&d, "pm").await;
    assert_eq!(ok(&mut ws, "memory.fact_count", json!({})).await, 3);
    let hits = ok(
        &mut ws,
        "memory.query",
        json!({"query": "musl build", "k": 1}),
    )
    .await;
    assert_eq!(
        (hits[0]["fact_id"].clone(), hits[0]["kind"].clone()),
        (json!("req-2"), json!("knowledge"))
    );
    ok(
        &mut ws,
        "memory.intervene",
        tool_error("run cargo build", &["error: linker `cc` not found"]),
    )
    .await;
    let snapshot = on_disk(&home, "pm");
    assert!(
        snapshot.contains("\"injections\":2"),
        "the counter carried over: {snapshot}"
    );

    let gone = ok(&mut ws, "memory.delete", json!({"id": "req-2"})).await;
    assert_eq!(
        gone,
        json!({"id": "req-2", "deleted": true, "kind": "knowledge", "fact_count": 2})
    );
}

#[tokio::test]
async fn the_status_slot_is_private_overwritten_and_deletable() {
    let mut d = Daemon::start();
    let mut ws = ns(&d, "status").await;
    ok(
        &mut ws,
        "memory.add_fact",
        json!({"subject": "plan", "body": "migrate the billing database in three steps"}),
    )
    .await;
    let s = ok(
        &mut ws,
        "memory.update_status",
        json!({"body": "billing migration step 1 blocked on credentials"}),
    )
    .await;
    assert_eq!(
        s,
        json!({"id": "proactive-status:global", "body": "billing migration step 1 blocked on credentials"})
    );
    let s = ok(
        &mut ws,
        "memory.update_status",
        json!({"body": "billing migration step 2 credentials risk", "tenant_id": "acme"}),
    )
    .await;
    assert_eq!(
        s,
        json!({"id": "proactive-status:acme", "body": "billing migration step 2 credentials risk", "tenant_id": "acme"})
    );

    let hits = ok(
        &mut ws,
        "memory.query",
        json!({"query": "billing migration credentials blocked", "k": 10}),
    )
    .await;
    assert_eq!(
        hits.as_array().unwrap().len(),
        1,
        "only the plan fact: {hits}"
    );
    let context = ok(
        &mut ws,
        "memory.build_context",
        json!({"query": "billing migration credentials"}),
    )
    .await;
    assert!(
        !context.as_str().unwrap().contains("credentials"),
        "{context}"
    );
    assert_eq!(ok(&mut ws, "memory.fact_count", json!({})).await, 1);
    let i = ok(
        &mut ws,
        "memory.intervene",
        json!({"query": "credentials blocked"}),
    )
    .await;
    assert_eq!(
        (i["decision"].clone(), i["reason"].clone()),
        (json!("silent"), json!("no_candidates")),
        "{i}"
    );

    let del = ok(
        &mut ws,
        "memory.delete",
        json!({"id": "proactive-status:global"}),
    )
    .await;
    assert_eq!(
        del,
        json!({"id": "proactive-status:global", "deleted": true, "kind": "status", "fact_count": 1})
    );
    let del = ok(
        &mut ws,
        "memory.delete",
        json!({"id": "proactive-status:global"}),
    )
    .await;
    assert_eq!(del["deleted"], false);
    // Another scope has its own slots.
    let mut other = ns(&d, "status-other").await;
    let del = ok(
        &mut other,
        "memory.delete",
        json!({"id": "proactive-status:acme"}),
    )
    .await;
    assert_eq!(del["deleted"], false);

    // Slots live in the daemon's memory only.
    let home = d.home.clone();
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    let mut ws = ns(&d, "status").await;
    let del = ok(
        &mut ws,
        "memory.delete",
        json!({"id": "proactive-status:acme"}),
    )
    .await;
    assert_eq!(
        del,
        json!({"id": "proactive-status:acme", "deleted": false, "kind": null, "fact_count": 1})
    );
}

#[tokio::test]
async fn intervene_injects_under_a_tool_error_and_stays_silent_otherwise() {
    let d = Daemon::start();
    let mut ws = ns(&d, "intervene").await;
    let empty = ok(&mut ws, "memory.intervene", json!({"query": "anything"})).await;
    assert_eq!(
        empty,
        json!({"decision": "silent", "reason": "empty_bank", "candidates": 0, "bank": {"facts": 0, "knowledge": 0, "procedural": 0}})
    );
    seed(&mut ws).await;
    let i = ok(
        &mut ws,
        "memory.intervene",
        tool_error(
            "run cargo build for the daemon",
            &["error: linker `cc` not found"],
        ),
    )
    .await;
    assert_eq!(i["decision"], "inject", "{i}");
    assert_eq!(i["selected"]["id"], "linker");
    assert_eq!(i["selected"]["kind"], "procedural");
    assert_eq!(
        i["reminder"],
        "Remember (procedural, linker): cargo linker error: when the linker cc is not found install build-essential"
    );
    assert_eq!(
        i["bank"],
        json!({"facts": 1, "knowledge": 1, "procedural": 1})
    );
    assert_eq!(i["candidates"], 1);
    assert!(i.get("reason").is_none());

    let unrelated = ok(
        &mut ws,
        "memory.intervene",
        json!({"query": "what colour is the logo"}),
    )
    .await;
    assert_eq!(
        (unrelated["decision"].clone(), unrelated["reason"].clone()),
        (json!("silent"), json!("no_candidates"))
    );
    assert!(unrelated.get("selected").is_none() && unrelated.get("reminder").is_none());
    let weak = ok(
        &mut ws,
        "memory.intervene",
        json!({"query": "editor theme colours"}),
    )
    .await;
    assert_eq!(
        (weak["reason"].clone(), weak["candidates"].clone()),
        (json!("below_threshold"), json!(1))
    );
    let forced = ok(
        &mut ws,
        "memory.intervene",
        json!({"query": "editor theme colours", "force": true, "max_candidates": 1}),
    )
    .await;
    assert_eq!(forced["selected"]["id"], "editor");
    let nothing = ok(&mut ws, "memory.intervene", json!({})).await;
    assert_eq!(nothing["reason"], "no_query");
    // Each decision is journalled with its counts, never a memory body (CAR's
    // ProactiveMemoryIntervention).
    let events = ok(
        &mut ws,
        "events.query",
        json!({"kinds": ["memory.intervention"]}),
    )
    .await;
    let text = events.to_string();
    assert!(text.contains("\"selected\":\"linker\""), "{events}");
    assert!(text.contains("below_threshold"), "{events}");
    assert!(!text.contains("build-essential"), "{events}");
}

#[tokio::test]
async fn evaluate_counts_three_labelled_cases_exactly() {
    let d = Daemon::start();
    let mut ws = ns(&d, "evaluate").await;
    seed(&mut ws).await;
    let cases = json!({"cases": [
        // The procedural fix, under a tool error: every memory mode hits it.
        {"id": "a", "request": tool_error("cargo linker cc not found", &[]), "relevant_fact_ids": ["linker"]},
        // A weak brush with the editor fact where silence is right: only selective is silent.
        {"id": "b", "request": {"query": "editor theme colours"}},
        // Nothing matches although a reminder was wanted: every mode misses it.
        {"id": "c", "request": {"query": "rotate the api keys"}, "relevant_fact_ids": ["staging"]},
    ]});
    let e = ok(&mut ws, "memory.evaluate", cases.clone()).await;
    let third = 1.0 / 3.0;
    assert_eq!(e["cases"], 3);
    let expect = |interventions,
                  tp,
                  fp,
                  fn_,
                  precision: f64,
                  recall: f64,
                  rate: f64,
                  exposed: f64| {
        json!({"interventions": interventions, "true_positives": tp, "false_positives": fp, "false_negatives": fn_,
               "precision": precision, "recall": recall, "interruption_rate": rate, "avg_candidates_exposed": exposed})
    };
    assert_eq!(e["selective"], expect(1, 1, 0, 1, 1.0, 0.5, third, third));
    assert_eq!(
        e["always_inject"],
        expect(2, 1, 1, 1, 0.5, 0.5, 2.0 / 3.0, 2.0 / 3.0)
    );
    assert_eq!(
        e["passive_retrieval"],
        expect(2, 1, 1, 1, 0.5, 0.5, 2.0 / 3.0, 2.0 / 3.0)
    );
    assert_eq!(e["no_memory"], expect(0, 0, 0, 2, 0.0, 0.0, 0.0, 0.0));
    // Read-only: a second run answers the same and no counter was written.
    assert_eq!(ok(&mut ws, "memory.evaluate", cases).await, e);
    let snapshot = on_disk(&d.home, "evaluate");
    assert!(snapshot.contains("\"facts\":"), "{snapshot}");
    assert!(!snapshot.contains("injections"), "{snapshot}");
    let none = ok(&mut ws, "memory.evaluate", json!({"cases": []})).await;
    assert_eq!(none["selective"], expect(0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0));
}

#[tokio::test]
async fn bad_params_name_their_field() {
    let d = Daemon::start();
    let mut ws = ns(&d, "bad").await;
    let cases: &[(&str, Value, &str)] = &[
        (
            "memory.save_knowledge",
            json!({"subject": " ", "body": "b"}),
            "invalid params: subject: must not be empty",
        ),
        (
            "memory.save_procedural",
            json!({"subject": "s", "body": ""}),
            "invalid params: body: must not be empty",
        ),
        (
            "memory.save_knowledge",
            json!({"subject": "s", "body": "b", "id": "proactive-status:x"}),
            "invalid params: id: must not start with",
        ),
        (
            "memory.save_knowledge",
            json!({"subject": "s", "body": "b", "tenant_id": ""}),
            "invalid params: tenant_id: must not be empty",
        ),
        (
            "memory.save_knowledge",
            json!({"subject": "s", "body": "b", "tags": "x"}),
            "invalid params: tags",
        ),
        (
            "memory.save_procedural",
            json!({"subject": "s", "body": "b", "is_constraint": "yes"}),
            "invalid params: is_constraint",
        ),
        (
            "memory.update_status",
            json!({"body": 5}),
            "invalid params: body",
        ),
        (
            "memory.update_status",
            json!({"body": " "}),
            "invalid params: body: must not be empty",
        ),
        (
            "memory.intervene",
            json!({"max_candidates": 0}),
            "invalid params: max_candidates: must be between 1 and 32 (got 0)",
        ),
        (
            "memory.intervene",
            json!({"max_candidates": 33}),
            "invalid params: max_candidates: must be between 1 and 32 (got 33)",
        ),
        (
            "memory.intervene",
            json!({"trigger": {"tool_error": "yes"}}),
            "invalid params: trigger.tool_error",
        ),
        (
            "memory.intervene",
            json!({"trigger": {"repeated_failures": -1}}),
            "invalid params: trigger.repeated_failures",
        ),
        (
            "memory.intervene",
            json!({"recent": "not a list"}),
            "invalid params: recent",
        ),
        ("memory.evaluate", json!({}), "invalid params"),
        (
            "memory.evaluate",
            json!({"cases": [{"id": "a", "request": {}}, {"id": "b", "request": {"max_candidates": 99}}]}),
            "invalid params: cases[1].request.max_candidates: must be between 1 and 32 (got 99)",
        ),
        (
            "memory.evaluate",
            json!({"cases": [{"id": "a", "request": {"force": 1}}]}),
            "invalid params: cases[0].request.force",
        ),
    ];
    for (method, params, expected) in cases {
        let m = invalid(&mut ws, method, params.clone()).await;
        assert!(m.starts_with(expected), "{method} {params}: {m}");
    }
    assert_eq!(
        ok(&mut ws, "memory.fact_count", json!({})).await,
        0,
        "nothing was written"
    );
}
