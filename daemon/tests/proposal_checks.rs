//! `verify.simulate`, `verify.equivalent`, `verify.optimize` and `policy.check` against a
//! real daemon (issue 16: the MCP `simulate` / `equivalent` / `optimize` / `policy_check`
//! tools are thin adapters over these methods).

mod common;

use common::*;
use serde_json::{json, Value};

fn proposal(actions: Value) -> Value {
    json!({"actions": actions})
}

#[tokio::test]
async fn simulate_applies_declared_effects_and_cascades_blocked_actions() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let p = proposal(json!([
        {"id": "a", "type": "state_write", "key": "x", "value": 1},
        {"id": "b", "type": "tool_call", "tool": "fetch", "dependencies": ["a"],
         "expected_effects": {"page": "html"}},
        // Needs a key nothing provides: blocked, and so is its dependent.
        {"id": "c", "type": "state_write", "key": "y", "value": 2, "state_dependencies": ["token"]},
        {"id": "d", "type": "state_write", "key": "z", "value": 3, "dependencies": ["c"]},
    ]));
    let r = ws.call("verify.simulate", json!({"proposal": p})).await;
    let result = &r["result"];
    assert_eq!(
        result["final_state"],
        json!({"x": 1, "page": "html"}),
        "{r}"
    );
    assert_eq!(result["blocked"], json!(["c", "d"]), "{r}");
    assert_eq!(result["execution_levels"][0], json!(["a", "c"]), "{r}");
    // With the dependency satisfied by the initial state, c and d run.
    let r = ws
        .call(
            "verify.simulate",
            json!({"proposal": p, "initial_state": {"token": "t"}}),
        )
        .await;
    assert_eq!(
        r["result"]["final_state"],
        json!({"x": 1, "page": "html", "y": 2, "z": 3, "token": "t"}),
        "{r}"
    );
    // Bad input names the field.
    let r = ws.call("verify.simulate", json!({"proposal": 5})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("proposal"),
        "{r}"
    );
}

#[tokio::test]
async fn equivalent_samples_states_and_reports_witnesses() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let write =
        |v: i64| proposal(json!([{"id": "w", "type": "state_write", "key": "k", "value": v}]));
    let same = json!({"proposal_a": write(1), "proposal_b": write(1)});
    let r = ws.call("verify.equivalent", same).await;
    assert_eq!(r["result"]["equivalent"], true, "{r}");
    assert_eq!(r["result"]["tier"], "sampled");
    assert_eq!(r["result"]["states_tested"], 2);
    assert_eq!(r["result"]["used_default_states"], true);
    let r = ws
        .call(
            "verify.equivalent",
            json!({"proposal_a": write(1), "proposal_b": write(2), "test_states": [{"q": 0}]}),
        )
        .await;
    assert_eq!(r["result"]["equivalent"], false, "{r}");
    assert_eq!(r["result"]["used_default_states"], false);
    assert_eq!(
        r["result"]["divergences"][0],
        json!({"state_index": 0, "key": "k", "a": 1, "b": 2})
    );
    // [] means the defaults; more than 256 states is refused naming the field.
    let r = ws
        .call(
            "verify.equivalent",
            json!({"proposal_a": write(1), "proposal_b": write(1), "test_states": []}),
        )
        .await;
    assert_eq!(r["result"]["states_tested"], 2, "{r}");
    let many: Vec<Value> = (0..257).map(|_| json!({})).collect();
    let r = ws
        .call(
            "verify.equivalent",
            json!({"proposal_a": write(1), "proposal_b": write(1), "test_states": many}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("test_states"));
    let r = ws
        .call(
            "verify.equivalent",
            json!({"proposal_a": write(1), "proposal_b": {"actions": [{"id": "x"}]}}),
        )
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("proposal_b"),
        "{r}"
    );
}

#[tokio::test]
async fn optimize_drops_only_dependencies_nothing_writes() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let p = proposal(json!([
        {"id": "a", "type": "tool_call", "tool": "t", "expected_effects": {"made": true}},
        {"id": "b", "type": "tool_call", "tool": "t", "state_dependencies": ["made", "ghost"],
         "source_note": "kept"},
    ]));
    let r = ws.call("verify.optimize", json!({"proposal": p})).await;
    let result = &r["result"];
    assert_eq!(
        result["pruned"],
        json!([{"action_id": "b", "removed": ["ghost"]}]),
        "{r}"
    );
    assert_eq!(
        result["proposal"]["actions"][1]["state_dependencies"],
        json!(["made"])
    );
    assert_eq!(result["proposal"]["actions"][1]["source_note"], "kept");
}

#[tokio::test]
async fn policy_check_reads_policy_files_and_session_policies() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    // Nothing configured: an allow that reviewed nothing.
    let r = ws.call("policy.check", json!({"tool": "WebFetch"})).await;
    assert_eq!(r["result"]["decision"], "allow", "{r}");
    assert_eq!(r["result"]["basis"], "no_rules_configured");

    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join(".car/policies");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.toml"),
        "deny_tool = [\"WebFetch\"]\ndeny_keyword = [\"DROP TABLE\"]\n",
    )
    .unwrap();
    let cwd = project.path().to_str().unwrap();
    let r = ws
        .call("policy.check", json!({"tool": "WebFetch", "cwd": cwd}))
        .await;
    assert_eq!(r["result"]["decision"], "deny", "{r}");
    assert_eq!(r["result"]["basis"], "denied_by_rule");
    assert_eq!(r["result"]["findings"][0]["rule"], "deny_tool:WebFetch");
    assert_eq!(r["result"]["rules_loaded"], 2);
    assert_eq!(r["result"]["policy_sources"][1]["exists"], true);
    let r = ws
        .call(
            "policy.check",
            json!({"tool": "sql", "params": {"q": "drop table users"}, "cwd": cwd}),
        )
        .await;
    assert_eq!(
        r["result"]["findings"][0]["rule"], "deny_keyword:DROP TABLE",
        "{r}"
    );
    let r = ws
        .call("policy.check", json!({"tool": "Read", "cwd": cwd}))
        .await;
    assert_eq!(r["result"]["basis"], "passed_rules", "{r}");

    // The connection's own policies count too.
    let r = ws
        .call(
            "policy.register",
            json!({"name": "no-shell", "rule": "deny_tool", "target": "shell"}),
        )
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let r = ws.call("policy.check", json!({"tool": "shell"})).await;
    assert_eq!(r["result"]["decision"], "deny", "{r}");
    assert_eq!(r["result"]["findings"][0]["source"], "session_policy");

    // An unparseable file fails closed; a relative cwd is refused.
    std::fs::write(dir.join("broken.toml"), "deny_tool = [").unwrap();
    let r = ws
        .call("policy.check", json!({"tool": "Read", "cwd": cwd}))
        .await;
    assert_eq!(r["result"]["decision"], "deny", "{r}");
    assert_eq!(r["result"]["basis"], "policy_load_failed");
    let r = ws
        .call("policy.check", json!({"tool": "Read", "cwd": "relative"}))
        .await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("cwd"));
    let r = ws.call("policy.check", json!({"tool": ""})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

/// Issue 24: a caller-chosen `cwd` whose `.car/policies/` holds a link to `/dev/zero` or
/// `/dev/urandom`, a FIFO or an oversize file used to grow the daemon until the OOM killer
/// ended it (or park a blocking thread forever). Each is refused at once, the answer fails
/// closed, the daemon stays up and its memory does not grow by the file.
#[tokio::test]
async fn hostile_policy_files_are_refused_promptly_with_the_daemon_alive() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let before = rss_kib(d.pid());
    for kind in ["zero", "urandom", "fifo", "oversize"] {
        let project = tempfile::tempdir().unwrap();
        let dir = project.path().join(".car/policies");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{kind}.toml"));
        match kind {
            "fifo" => mkfifo(&file),
            "oversize" => std::fs::write(&file, vec![b'#'; 2 << 20]).unwrap(),
            device => std::os::unix::fs::symlink(format!("/dev/{device}"), &file).unwrap(),
        }
        let cwd = project.path().to_str().unwrap();
        let r = tokio::time::timeout(
            WAIT,
            ws.call("policy.check", json!({"tool": "Read", "cwd": cwd})),
        )
        .await
        .unwrap_or_else(|_| panic!("policy.check over a {kind} file never answered"));
        assert_eq!(r["result"]["decision"], "deny", "{kind}: {r}");
        assert_eq!(r["result"]["basis"], "policy_load_failed", "{kind}: {r}");
        let error = r["result"]["policy_sources"][1]["error"].as_str().unwrap();
        assert!(error.contains(&format!("{kind}.toml")), "{kind}: {error}");
    }
    // Alive and serving, and no file's bytes were buffered.
    let r = ws.call("policy.check", json!({"tool": "Read"})).await;
    assert_eq!(r["result"]["decision"], "allow", "{r}");
    let grown = rss_kib(d.pid()).saturating_sub(before);
    assert!(grown < 32 * 1024, "the daemon grew by {grown} KiB");
}
