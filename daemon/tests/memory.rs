//! Issue 5 acceptance against a real daemon: scopes, durability, file names, ranking,
//! persist/load confinement, concurrency, context budgets, skills and bad inputs.

mod common;

use std::path::Path;

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

async fn add(ws: &mut Ws, params: Value) -> Value {
    let r = ws.call("memory.add_fact", params.clone()).await;
    assert!(r["result"].is_u64(), "{params} → {r}");
    r["result"].clone()
}

fn ids(hits: &Value) -> Vec<String> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["fact_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn scopes_are_shared_within_and_isolated_across_and_survive_restart() {
    let mut d = Daemon::start();
    let (mut a1, mut a2, mut b) = (
        ns(&d, "Proj/A").await,
        ns(&d, "Proj/A").await,
        ns(&d, "proj/a").await,
    );
    let mut shared = Ws::authed(&d).await;
    add(&mut a1, json!({"subject": "deploys", "body": "deploy on fridays is forbidden", "kind": "constraint", "fact_id": "a-rule"})).await;
    add(
        &mut shared,
        json!({"subject": "editor", "body": "the team uses helix", "fact_id": "s-editor"}),
    )
    .await;
    assert_eq!(
        ids(&a2
            .call("memory.query", json!({"query": "friday deploys"}))
            .await["result"]),
        ["a-rule"]
    );
    assert_eq!(
        b.call("memory.fact_count", json!({})).await["result"],
        0,
        "case differs: another namespace"
    );
    assert_eq!(
        shared.call("memory.fact_count", json!({})).await["result"],
        1
    );
    assert_eq!(
        ids(&shared
            .call("memory.query", json!({"query": "deploy friday"}))
            .await["result"]),
        Vec::<String>::new()
    );
    // File names follow the encoding, and the two namespaces never share one.
    let dir = d.home.join("memory").join("memory-namespaces");
    assert!(
        dir.join("%50roj%2f%41.json").exists(),
        "{:?}",
        std::fs::read_dir(&dir).unwrap().collect::<Vec<_>>()
    );
    assert!(
        !dir.join("proj%2fa.json").exists(),
        "nothing written for an empty namespace"
    );
    add(
        &mut b,
        json!({"subject": "x", "body": "lower-case namespace fact"}),
    )
    .await;
    assert!(dir.join("proj%2fa.json").exists());
    assert!(d.home.join("memory").join("shared.json").exists());

    let home = d.home.clone();
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    let mut a = ns(&d, "Proj/A").await;
    let hits = a
        .call("memory.query", json!({"query": "deploy fridays", "k": 3}))
        .await["result"]
        .clone();
    assert_eq!(hits[0]["fact_id"], "a-rule");
    assert_eq!(hits[0]["kind"], "constraint");
    let c = hits[0]["confidence"].as_f64().unwrap();
    assert!(c > 0.0 && c <= 1.0, "relevance in [0, 1]: {c}");
    assert_eq!(
        Ws::authed(&d)
            .await
            .call("memory.fact_count", json!({}))
            .await["result"],
        1
    );
}

#[tokio::test]
async fn agent_scopes_are_isolated() {
    let d = Daemon::builder().args(["--no-auth"]).start();
    let mut agent = Ws::tcp(&d.ws_url).await;
    agent
        .call("session.auth", json!({"token": "x", "agent_id": "Agent 7"}))
        .await;
    add(
        &mut agent,
        json!({"subject": "me", "body": "agent seven remembers this"}),
    )
    .await;
    let mut other = Ws::tcp(&d.ws_url).await;
    other
        .call("session.auth", json!({"token": "x", "agent_id": "agent-8"}))
        .await;
    assert_eq!(
        other.call("memory.fact_count", json!({})).await["result"],
        0
    );
    assert_eq!(
        Ws::tcp(&d.ws_url)
            .await
            .call("memory.fact_count", json!({}))
            .await["result"],
        0
    );
    assert!(d
        .home
        .join("memory")
        .join("agents")
        .join("%41gent%207.json")
        .exists());
    // memory_namespace wins over agent_id for the memory scope.
    let mut both = Ws::tcp(&d.ws_url).await;
    both.call(
        "session.auth",
        json!({"token": "x", "agent_id": "Agent 7", "memory_namespace": "n"}),
    )
    .await;
    assert_eq!(both.call("memory.fact_count", json!({})).await["result"], 0);
}

#[tokio::test]
async fn ranking_fixture_hits_at_least_18_of_20_through_the_daemon() {
    let d = Daemon::start();
    let mut ws = ns(&d, "ranking").await;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/memory-ranking.json");
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for f in fixture["facts"].as_array().unwrap() {
        add(&mut ws, f.clone()).await;
    }
    let mut hits = 0;
    for q in fixture["queries"].as_array().unwrap() {
        let ranked = ws
            .call("memory.query", json!({"query": q["query"], "k": 3}))
            .await["result"]
            .clone();
        if ids(&ranked)
            .iter()
            .any(|id| q["expected_fact_id"] == id.as_str())
        {
            hits += 1;
        }
    }
    eprintln!("daemon memory ranking hit rate (top 3): {hits}/20");
    assert!(hits >= 18, "only {hits}/20 expected facts in the top 3");
}

#[tokio::test]
async fn persist_and_load_round_trip_and_refuse_escapes() {
    let d = Daemon::start();
    let mut ws = ns(&d, "snap").await;
    add(&mut ws, json!({"subject": "s", "body": "b", "kind": "preference", "confidence": 0.3, "fact_id": "f1", "tags": ["t1", "t2"], "source": "https://example.invalid/x"})).await;
    add(
        &mut ws,
        json!({"subject": "open question", "body": "which region hosts prod", "kind": "unknown"}),
    )
    .await;
    assert_eq!(
        ws.call("memory.persist", json!({"path": "backups/snap.json"}))
            .await["result"],
        2
    );
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(d.home.join("memory/backups/snap.json")).unwrap(),
    )
    .unwrap();
    let f1 = written["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact_id"] == "f1")
        .unwrap()
        .clone();
    let mut other = ns(&d, "restore").await;
    assert_eq!(
        other
            .call("memory.load", json!({"path": "backups/snap.json"}))
            .await["result"],
        2
    );
    assert_eq!(
        other
            .call("memory.persist", json!({"path": "copy.json"}))
            .await["result"],
        2
    );
    let copy: Value =
        serde_json::from_str(&std::fs::read_to_string(d.home.join("memory/copy.json")).unwrap())
            .unwrap();
    let g1 = copy["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["fact_id"] == "f1")
        .unwrap()
        .clone();
    assert_eq!(f1, g1, "every field survives persist → load → persist");
    for bad in [
        "../escape.json",
        "/etc/passwd",
        "a/../../b.json",
        "shared.json",
    ] {
        let r = ws.call("memory.persist", json!({"path": bad})).await;
        assert_eq!(code(&r), -32602, "{bad} → {r}");
        assert!(message(&r).contains("path"), "{r}");
    }
    // A symlink inside the memory dir pointing outside is refused too.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), d.home.join("memory/link")).unwrap();
    assert_eq!(
        code(
            &ws.call("memory.persist", json!({"path": "link/x.json"}))
                .await
        ),
        -32602
    );
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing written outside"
    );
    assert!(!d.home.join("escape.json").exists());
}

#[tokio::test]
async fn eight_connections_times_500_concurrent_adds_keep_every_fact() {
    let mut d = Daemon::start();
    let mut conns = Vec::new();
    for _ in 0..8 {
        conns.push(ns(&d, "load").await);
    }
    let tasks = conns.into_iter().enumerate().map(|(c, mut ws)| {
        tokio::spawn(async move {
            for i in 0..500u64 {
                ws.request("memory.add_fact", json!({"subject": format!("conn {c}"), "body": format!("fact number {i}"), "fact_id": format!("c{c}-{i}")})).await;
            }
            let mut answered = 0;
            while answered < 500 {
                let r = ws.recv_json().await;
                assert!(r["result"].is_u64(), "{r}");
                answered += 1;
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.unwrap();
    }
    let home = d.home.clone();
    assert!(d.terminate().success());
    let d = Daemon::builder().home(home).start();
    assert_eq!(
        ns(&d, "load")
            .await
            .call("memory.fact_count", json!({}))
            .await["result"],
        4000
    );
}

#[tokio::test]
async fn build_context_fits_its_budget_and_keeps_every_constraint() {
    let d = Daemon::start();
    let mut ws = ns(&d, "ctx").await;
    for i in 0..5 {
        add(&mut ws, json!({"subject": format!("rule {i}"), "body": format!("never touch production database {i}"), "kind": "constraint"})).await;
    }
    for i in 0..300 {
        add(&mut ws, json!({"subject": format!("deploy note {i}"), "body": format!("deployment step {i} uses the blue green pipeline with canary checks and rollbacks")})).await;
    }
    add(
        &mut ws,
        json!({"subject": "region", "body": "which region hosts the canary", "kind": "unknown"}),
    )
    .await;
    for window in [1024usize, 4096, 32768] {
        let r = ws
            .call(
                "memory.build_context",
                json!({"query": "deploy pipeline canary", "model_context_window": window}),
            )
            .await;
        // CAR's result is the context string itself.
        let text = r["result"]
            .as_str()
            .unwrap_or_else(|| panic!("a context string: {r}"));
        // The memory budget is a quarter of the window, in tokens estimated as UTF-8
        // bytes / 3 rounded up (car-memory's conservative estimate).
        assert!(
            text.len().div_ceil(3) <= window / 4,
            "{} bytes exceed the budget of window {window}",
            text.len()
        );
        assert!(
            text.starts_with("## Constraints (always follow)\n"),
            "{text}"
        );
        for i in 0..5 {
            assert!(
                text.contains(&format!("never touch production database {i}")),
                "constraint {i} missing at window {window}"
            );
        }
        assert!(
            text.find("production database").unwrap()
                < text.find("blue green").unwrap_or(usize::MAX)
        );
    }
    // A larger window fits more of the relevant layer.
    let small = ws
        .call(
            "memory.build_context",
            json!({"query": "deploy pipeline canary", "model_context_window": 1024}),
        )
        .await["result"]
        .clone();
    let large = ws
        .call(
            "memory.build_context",
            json!({"query": "deploy pipeline canary", "model_context_window": 32768}),
        )
        .await["result"]
        .clone();
    assert!(
        large.as_str().unwrap().matches("blue green").count()
            > small.as_str().unwrap().matches("blue green").count()
    );
    let r = ws
        .call(
            "memory.build_context",
            json!({"query": "x", "model_context_window": 5}),
        )
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: model_context_window: must be between 256 and 10000000 (got 5)"
        )
    );
}

#[tokio::test]
async fn skills_are_found_best_first_and_degrade_on_failures() {
    let d = Daemon::start();
    let mut ws = ns(&d, "skills").await;
    let ingest = |name: &str, url: &str, keywords: Value| json!({"name": name, "code": format!("run_{name}()"), "platform": "web", "persona": "developer", "url_pattern": url, "task_keywords": keywords, "description": format!("{name} helper")});
    assert_eq!(
        ws.call(
            "skill.ingest",
            ingest(
                "merge_pr",
                "https://github.com/*/pull/*",
                json!(["merge", "pull request"])
            )
        )
        .await["result"],
        1
    );
    assert_eq!(
        ws.call(
            "skill.ingest",
            ingest(
                "open_issue",
                "https://github.com/*",
                json!(["issue", "report bug"])
            )
        )
        .await["result"],
        2
    );
    let query = json!({"persona": "developer", "url": "https://github.com/acme/app/pull/7", "task": "merge this pull request"});
    // max_results defaults to 1: the best match only.
    let found = ws.call("skill.find", query.clone()).await["result"].clone();
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found[0]["name"], "merge_pr", "{found}");
    assert_eq!(found[0]["code"], "run_merge_pr()");
    let mut wide = query.clone();
    wide["max_results"] = json!(5);
    let found = ws.call("skill.find", wide).await["result"].clone();
    let names: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["merge_pr", "open_issue"], "{found}");
    assert!(
        found[0]["match_score"].as_f64().unwrap() > found[1]["match_score"].as_f64().unwrap(),
        "{found}"
    );
    // A skill degrades once fail_count > success_count + 2; any outcome other than
    // "success" counts as a failure. `skill_name` is CAR's field, `name` an alias.
    let stats = |fail: u64, success: u64, degraded: bool| json!({"fail_count": fail, "success_count": success, "degraded": degraded});
    assert_eq!(
        report_many(&mut ws, "merge_pr", "fail", 2).await,
        stats(2, 0, false)
    );
    let r = ws
        .call(
            "skill.report",
            json!({"skill_name": "merge_pr", "outcome": "timeout"}),
        )
        .await;
    assert_eq!(r["result"], stats(3, 0, true), "{r}");
    assert_eq!(
        report_many(&mut ws, "merge_pr", "success", 1).await,
        stats(3, 1, false)
    );
    assert_eq!(
        report_many(&mut ws, "merge_pr", "fail", 3).await,
        stats(6, 1, true)
    );
    assert_eq!(
        report_many(&mut ws, "merge_pr", "success", 10).await,
        stats(6, 11, false)
    );
    let listed = ws
        .call("skills.list", json!({"domain": "github.com"}))
        .await["result"]
        .clone();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    let r = ws
        .call("skill.report", json!({"name": "ghost", "outcome": "fail"}))
        .await;
    assert_eq!(
        (code(&r), message(&r).as_str()),
        (
            -32602,
            "invalid params: name: names an unknown skill \"ghost\""
        )
    );
}

#[tokio::test]
async fn bad_inputs_get_precise_errors_and_corrupt_snapshots_are_moved_aside() {
    let home = tempfile::tempdir().unwrap();
    let ns_dir = home.path().join("memory").join("memory-namespaces");
    std::fs::create_dir_all(&ns_dir).unwrap();
    std::fs::write(ns_dir.join("broken.json"), "{ not json").unwrap();
    let d = Daemon::builder().home(home.path()).start();
    let mut ws = ns(&d, "x").await;
    for (method, params, expected) in [
        (
            "memory.add_fact",
            json!({"body": "b"}),
            "invalid params: params: missing field `subject`",
        ),
        (
            "memory.add_fact",
            json!({"subject": "s", "body": 5}),
            "invalid params: body: invalid type: integer `5`, expected a string",
        ),
        (
            "memory.add_fact",
            json!({"subject": "s", "body": "b", "kind": "rumour"}),
            "invalid params: kind: must be one of pattern, constraint, preference, fact, unknown (got \"rumour\")",
        ),
        (
            "memory.add_fact",
            json!({"subject": "s", "body": "b", "confidence": 2}),
            "invalid params: confidence: must be between 0 and 1 (got 2)",
        ),
        (
            "memory.add_fact",
            json!({"subject": "s", "body": "b", "tags": "t"}),
            "invalid params: tags: invalid type: string \"t\", expected a sequence",
        ),
        (
            "memory.query",
            json!({"query": "q", "k": 0}),
            "invalid params: k: must be between 1 and 1000 (got 0)",
        ),
        (
            "memory.query",
            json!({"query": "q", "k": 1_000_000_000}),
            "invalid params: k: must be between 1 and 1000 (got 1000000000)",
        ),
        (
            "memory.query",
            json!({"k": 3}),
            "invalid params: params: missing field `query`",
        ),
        (
            "memory.delete",
            json!({}),
            "invalid params: params: missing field `id`",
        ),
        (
            "memory.load",
            json!({"path": "missing.json"}),
            "invalid params: path: cannot load from \"missing.json\": No such file or directory (os error 2)",
        ),
        (
            "skill.ingest",
            json!({"name": "n"}),
            "invalid params: params: missing field `code`",
        ),
        (
            "skill.find",
            json!({"max_results": 0}),
            "invalid params: max_results: must be between 1 and 100 (got 0)",
        ),
        (
            "skill.report",
            json!({"name": "n", "outcome": "meh"}),
            "invalid params: name: names an unknown skill \"n\"",
        ),
        (
            "skill.report",
            json!({"skill_name": "n"}),
            "invalid params: params: missing field `outcome`",
        ),
    ] {
        let r = ws.call(method, params.clone()).await;
        assert_eq!(
            (code(&r), message(&r).as_str()),
            (-32602, expected),
            "{method} {params} → {r}"
        );
    }
    // Deleting an unknown fact is not an error: the report says nothing was deleted.
    // `fact_id` is accepted for `id`.
    for params in [json!({"fact_id": "nope"}), json!({"id": "nope"})] {
        assert_eq!(
            ws.call("memory.delete", params).await["result"],
            json!({"id": "nope", "deleted": false, "kind": null, "fact_count": 0})
        );
    }
    assert_eq!(ws.call("memory.fact_count", json!({})).await["result"], 0);
    // The corrupt snapshot is moved aside with a warning, never silently dropped.
    let mut broken = ns(&d, "broken").await;
    assert_eq!(
        broken.call("memory.fact_count", json!({})).await["result"],
        0
    );
    let aside: Vec<String> = std::fs::read_dir(&ns_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("broken.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1, "corrupt file kept aside");
    assert_eq!(
        std::fs::read_to_string(ns_dir.join(&aside[0])).unwrap(),
        "{ not json"
    );
    assert!(d.stderr().contains("corrupt"), "a warning is logged");
    add(&mut broken, json!({"subject": "s", "body": "works again"})).await;
    add(
        &mut broken,
        json!({"subject": "r", "body": "a rule", "kind": "constraint", "fact_id": "rule-1"}),
    )
    .await;
    assert_eq!(
        broken.call("memory.delete", json!({"id": "rule-1"})).await["result"],
        json!({"id": "rule-1", "deleted": true, "kind": "constraint", "fact_count": 1})
    );
    assert_eq!(
        broken.call("memory.fact_count", json!({})).await["result"],
        1
    );
}

/// Reports `outcome` for skill `name` `times` times; the last `skill.report` result.
async fn report_many(ws: &mut Ws, name: &str, outcome: &str, times: usize) -> Value {
    let mut last = Value::Null;
    for _ in 0..times {
        last = ws
            .call("skill.report", json!({"name": name, "outcome": outcome}))
            .await["result"]
            .clone();
    }
    last
}
