//! Issue 24: what one principal may see of the agents. `agents.list` (and every reply that
//! carries an agent) used to return each agent's `env` verbatim to any caller, API keys
//! included; now the values are shown to the host only. `agents.tail_log` used to read any
//! agent's output; an agent now reads only its own. Supervised agents get a minimal
//! environment and, with Landlock, cannot read the daemon's or other agents' files. Drives
//! a real daemon.

mod common;

use common::runs::refusal;
use common::*;
use serde_json::{json, Value};

const KEY: &str = "sk-planted-4f1c9";

fn spec(id: &str) -> Value {
    json!({"id": id, "name": id, "command": "/bin/sh", "args": ["-c", format!("echo hello-from-{id}")],
           "env": {"OPENAI_API_KEY": KEY}})
}

/// Starts agent `id`, waits for it to end, and returns its stdout lines.
async fn run_to_end(host: &mut Ws, id: &str) -> Vec<String> {
    let r = host.call("agents.start", json!({"id": id})).await;
    assert!(r["result"].is_object(), "{r}");
    let r = host
        .call(
            "agents.wait",
            json!({"id": id, "targets": ["stopped", "errored", "backoff"]}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    let log = host
        .call(
            "agents.tail_log",
            json!({"id": id, "n": 200, "stream": "stdout"}),
        )
        .await;
    log["result"]["lines"]
        .as_array()
        .unwrap_or_else(|| panic!("{log}"))
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

/// A daemon whose approval gate is off, so nothing here depends on it (the gate is tested
/// in `host.rs`).
fn no_gate() -> Daemon {
    Daemon::builder().args(["--no-approvals"]).start()
}

#[tokio::test]
async fn env_values_are_shown_to_the_host_only() {
    let d = no_gate();
    let mut host = Ws::host(&d).await;
    let r = host.call("agents.upsert", spec("alpha")).await;
    assert_eq!(r["result"]["spec"]["env"]["OPENAI_API_KEY"], KEY, "{r}");
    let alpha = r["result"].clone();
    let beta = host.call("agents.upsert", spec("beta")).await["result"].clone();

    let mut operator = Ws::authed(&d).await;
    let mut agent = as_agent(&d, "beta", &agent_token(&beta)).await;
    for (who, ws) in [("operator", &mut operator), ("agent", &mut agent)] {
        let r = ws.call("agents.list", json!({})).await;
        let rows = r["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{who}: {r}"));
        assert_eq!(rows.len(), 2, "{who}: {r}");
        for row in rows {
            assert_eq!(
                row["spec"]["env"],
                json!({"OPENAI_API_KEY": "[redacted]"}),
                "{who}: {r}"
            );
        }
        assert!(!r.to_string().contains(KEY), "{who} saw the key: {r}");
    }
    // Every other reply that carries an agent hides them too.
    let r = operator.call("agents.start", json!({"id": "alpha"})).await;
    assert_eq!(r["result"]["spec"]["id"], "alpha", "{r}");
    assert!(!r.to_string().contains(KEY), "{r}");
    // The host still sees them.
    let r = host.call("agents.list", json!({})).await;
    assert!(r.to_string().contains(KEY), "{r}");
    assert_eq!(alpha["spec"]["id"], "alpha");
}

#[tokio::test]
async fn an_agent_reads_only_its_own_logs() {
    let d = no_gate();
    let mut host = Ws::host(&d).await;
    let alpha = host.call("agents.upsert", spec("alpha")).await["result"].clone();
    let beta = host.call("agents.upsert", spec("beta")).await["result"].clone();
    for id in ["alpha", "beta"] {
        run_to_end(&mut host, id).await;
    }

    let mut b = as_agent(&d, "beta", &agent_token(&beta)).await;
    let r = b.call("agents.tail_log", json!({"id": "alpha"})).await;
    let (code, message, reason) = refusal(&r);
    assert_eq!((code, reason), (-32602, json!("not_owner")), "{r}");
    assert!(message.contains("alpha"), "{message}");
    // Its own log and the host's view are served.
    let r = b.call("agents.tail_log", json!({"id": "beta"})).await;
    assert!(r.get("error").is_none(), "{r}");
    let mut a = as_agent(&d, "alpha", &agent_token(&alpha)).await;
    let r = a.call("agents.tail_log", json!({"id": "alpha"})).await;
    assert!(r.get("error").is_none(), "{r}");
    let r = host.call("agents.tail_log", json!({"id": "alpha"})).await;
    assert!(r.to_string().contains("hello-from-alpha"), "{r}");
}

/// Issue 24: a supervised agent used to inherit the daemon's whole environment (every
/// `*_API_KEY`) plus `CAR_HOME`, which leads to the daemon's and host's token files. An
/// agent that dumps its environment now shows only its own variables.
#[tokio::test]
async fn a_supervised_agent_gets_a_minimal_environment() {
    let d = Daemon::builder()
        .args(["--no-approvals"])
        .env("OPENAI_API_KEY", "sk-daemon-planted-openai")
        .env("ANTHROPIC_API_KEY", "sk-daemon-planted-anthropic")
        .start();
    let mut host = Ws::host(&d).await;
    let spec = json!({"id": "dumper", "name": "dumper", "command": "/usr/bin/env",
                      "env": {"MINE": "declared"}});
    let agent = host.call("agents.upsert", spec).await["result"].clone();
    let lines = run_to_end(&mut host, "dumper").await;
    let names: Vec<&str> = lines.iter().filter_map(|l| l.split('=').next()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "CAR_AGENT_ID",
            "CAR_AGENT_TOKEN",
            "CAR_DAEMON_URL",
            "MINE",
            "PATH"
        ],
        "{lines:?}"
    );
    assert!(
        lines.contains(&"CAR_AGENT_ID=dumper".to_string()),
        "{lines:?}"
    );
    assert!(lines.contains(&format!("CAR_AGENT_TOKEN={}", agent_token(&agent))));
    let text = lines.join("\n");
    for planted in ["sk-daemon-planted", &d.token(), &d.host_token()] {
        assert!(!text.contains(planted), "{planted} leaked: {text}");
    }
}

/// Issue 24: the state root holds every agent's token (and the daemon's, with `CAR_HOME`),
/// so without confinement a supervised agent reads them all. With Landlock it reads none
/// but its own; only a kernel without Landlock skips this, saying so.
#[tokio::test]
async fn with_landlock_a_supervised_agent_cannot_read_the_token_files() {
    let d = no_gate();
    let mut host = Ws::host(&d).await;
    let other = host.call("agents.upsert", spec("other")).await["result"].clone();
    let own_token = d.home.join("agents").join("peeker").join("token");
    let others_token = std::path::PathBuf::from(other["token_path"].as_str().unwrap());
    let probes = [
        d.token_path(),
        d.host_token_path(),
        others_token.clone(),
        d.home.join("secrets"),
        own_token.clone(),
        std::path::PathBuf::from("/etc/passwd"),
    ];
    let script = r#"for f in "$@"; do if { [ -d "$f" ] && ls "$f" || cat "$f"; } >/dev/null 2>&1; then echo "read $f"; else echo "denied $f"; fi; done"#;
    let mut args = vec![json!("-c"), json!(script), json!("sh")];
    args.extend(probes.iter().map(|p| json!(p.display().to_string())));
    let r = host
        .call(
            "agents.upsert",
            json!({"id": "peeker", "name": "peeker", "command": "/bin/sh", "args": args}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    std::fs::create_dir_all(d.home.join("secrets")).unwrap();

    let health = host.call("agents.health", json!({})).await;
    let rows = health["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{health}"));
    let file_access = rows[0]["file_access"]
        .as_str()
        .unwrap_or_else(|| panic!("{health}"));
    if file_access == "unconfined" {
        eprintln!("skipped: this kernel has no Landlock (agents.health file_access: unconfined)");
        return;
    }
    assert_eq!(file_access, "confined", "{health}");

    let lines = run_to_end(&mut host, "peeker").await;
    let expect = |verdict: &str, path: &std::path::Path| {
        let line = format!("{verdict} {}", path.display());
        assert!(lines.contains(&line), "{line} not in {lines:?}");
    };
    expect("denied", &d.token_path());
    expect("denied", &d.host_token_path());
    expect("denied", &others_token);
    expect("denied", &d.home.join("secrets"));
    expect("read", &own_token);
    expect("read", std::path::Path::new("/etc/passwd"));
}
