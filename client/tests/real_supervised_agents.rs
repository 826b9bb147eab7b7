//! Supervised agents against the real `car-server`: the daemon starts the
//! `supervised_agent` example as a registered agent's child process; it connects back as
//! that agent, is restarted after SIGKILL, stops at its crash-loop limit with
//! `agents.health` saying why, logs to `agents.tail_log`, and after a daemon restart runs
//! exactly once (adopted, not spawned again). Every test ends with no child left (checked
//! by scanning `/proc` for the test's marker in the children's environment).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(home: &std::path::Path) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(home)))
}

fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap();
    let bin = target.join("examples").join("supervised_agent");
    assert!(
        bin.exists(),
        "{} is missing (cargo test builds the examples)",
        bin.display()
    );
    bin
}

/// Pids whose environment carries `CAR_TEST_MARKER=<marker>`.
fn marked(marker: &str) -> Vec<u32> {
    let needle = format!("CAR_TEST_MARKER={marker}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if !zombie && env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            pids.push(pid);
        }
    }
    pids
}

/// Kills whatever a failed test left behind, and checks nothing was left.
struct NoOrphans(String);

impl Drop for NoOrphans {
    fn drop(&mut self) {
        let left = marked(&self.0);
        for pid in &left {
            // SAFETY: kill(2) on processes this test started (matched by its marker).
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(*pid as libc::pid_t, libc::SIGKILL);
            }
        }
        if !std::thread::panicking() {
            assert!(
                left.is_empty(),
                "supervised children outlived the test: {left:?}"
            );
        }
    }
}

fn marker(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    )
}

async fn until<F, Fut>(what: &str, mut f: F) -> Value
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<Value>>,
{
    let deadline = Instant::now() + support::SAFETY;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} did not happen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn listed(c: &Client, id: &str) -> Value {
    let list = c.call("agents.list", json!({})).await.unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .find(|a| a["spec"]["id"] == id)
        .cloned()
        .expect("listed")
}

/// The agent's `agents.tail_log` once its stdout has the line it prints after its first
/// call was answered (attached and serving).
async fn logged_attach(c: &Client, id: &str) -> Value {
    until("the attach line in the log", || async {
        let t = c
            .call("agents.tail_log", json!({"id": id, "n": 10}))
            .await
            .unwrap();
        t["stdout"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("attached"))
            .then_some(t)
    })
    .await
}

async fn upsert(c: &Client, id: &str, marker: &str, extra: Value) -> Value {
    let mut spec = json!({
        "id": id, "name": id, "command": agent_bin(), "restart": "on_failure",
        "max_restarts": 3, "backoff_secs": 0, "capabilities": ["chat"],
        "env": {"CAR_TEST_MARKER": marker},
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    c.call_host_management("agents.upsert", spec).await.unwrap()
}

#[tokio::test]
async fn a_supervised_agent_runs_attaches_restarts_and_logs() {
    let mark = marker("run");
    let _guard = NoOrphans(mark.clone());
    let d = Daemon::builder()
        .args(["--no-approvals", "--agent-stop-grace", "2s"])
        .start();
    let c = client(&d.home);
    upsert(&c, "echo", &mark, json!({})).await;
    let started = c.call("agents.start", json!({"id": "echo"})).await.unwrap();
    assert!(
        matches!(started["status"].as_str(), Some("starting" | "running")),
        "{started}"
    );
    let running = c
        .call(
            "agents.wait",
            json!({"id": "echo", "targets": ["running"], "timeout_secs": 60}),
        )
        .await
        .unwrap();
    let pid = running["pid"].as_u64().expect("a pid");
    let attached = until("the agent attaching", || async {
        let a = listed(&c, "echo").await;
        (a["attached"] == true).then_some(a)
    })
    .await;
    assert_eq!(attached["status"], "running");
    assert_eq!(attached["pid"].as_u64(), Some(pid));
    let host_agents = c.call_as_host("host.agents", json!({})).await.unwrap();
    let row = host_agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == "echo")
        .cloned()
        .expect("in host.agents");
    assert_eq!(row["status"], "running", "{row}");

    // A host's chat turn reaches the supervised agent's chat handler.
    let (tx, mut chat_events) = tokio::sync::mpsc::unbounded_channel::<Value>();
    c.register_notification_handler("agents.chat.event", move |e| {
        let _ = tx.send(e);
    });
    let ack = c
        .call(
            "agents.chat",
            json!({"agent_id": "echo", "prompt": "ping", "session_id": "s1"}),
        )
        .await
        .unwrap();
    assert_eq!(ack["accepted"], true, "{ack}");
    let done = loop {
        let e = support::within("the chat turn's events", chat_events.recv())
            .await
            .unwrap();
        if e["kind"] == "done" || e["kind"] == "error" {
            break e;
        }
    };
    assert_eq!(
        (done["kind"].as_str(), done["text"].as_str()),
        (Some("done"), Some("echo: ping")),
        "{done}"
    );

    let log = logged_attach(&c, "echo").await;
    assert!(
        log["stdout_path"].as_str().unwrap().ends_with("stdout.log"),
        "{log}"
    );

    // SIGKILL: the supervisor restarts it with a new pid.
    // SAFETY: kill(2) on the child the daemon started for this test.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
    let again = until("a restart after SIGKILL", || async {
        let a = listed(&c, "echo").await;
        (a["status"] == "running" && a["pid"].as_u64().is_some_and(|p| p != pid)).then_some(a)
    })
    .await;
    assert!(again["restart_count"].as_u64().unwrap() >= 1, "{again}");
    assert_eq!(marked(&mark).len(), 1, "exactly one process runs");

    let stopped = c.call("agents.stop", json!({"id": "echo"})).await.unwrap();
    assert_eq!(stopped["status"], "stopped", "{stopped}");
    assert!(marked(&mark).is_empty());
}

#[tokio::test]
async fn a_crash_loop_stops_at_the_limit_and_health_says_why() {
    let mark = marker("crash");
    let _guard = NoOrphans(mark.clone());
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let c = client(&d.home);
    upsert(
        &c,
        "crashy",
        &mark,
        json!({"max_restarts": 2, "env": {"CAR_TEST_MARKER": mark, "CAR_TEST_AGENT_CRASH_AFTER_MS": "50"}}),
    )
    .await;
    c.call("agents.start", json!({"id": "crashy"}))
        .await
        .unwrap();
    let errored = c
        .call(
            "agents.wait",
            json!({"id": "crashy", "targets": ["errored"], "timeout_secs": 60}),
        )
        .await
        .unwrap();
    assert_eq!(errored["status"], "errored");
    let reason = errored["reason"].as_str().unwrap();
    assert!(reason.contains("restart limit 2"), "{reason}");
    let health = c.call("agents.health", json!({})).await.unwrap();
    let row = health
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "crashy")
        .cloned()
        .unwrap();
    assert_eq!(row["ok"], false, "{row}");
    assert!(
        row["reason"].as_str().unwrap().contains("restart limit"),
        "{row}"
    );
    let tail = c
        .call(
            "agents.tail_log",
            json!({"id": "crashy", "stream": "stderr", "n": 5}),
        )
        .await
        .unwrap();
    assert!(
        tail["stderr"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l.as_str().unwrap().contains("crashing on purpose")),
        "{tail}"
    );
}

#[tokio::test]
async fn after_a_daemon_restart_a_wanted_agent_runs_once() {
    let mark = marker("restart");
    let _guard = NoOrphans(mark.clone());
    let home = tempfile::tempdir().unwrap();
    let car_home = home.path().join("car-home");
    let mut d1 = Daemon::builder()
        .home(&car_home)
        .args(["--no-approvals"])
        .start();
    let port = d1.port.to_string();
    let c = client(&car_home);
    upsert(&c, "steady", &mark, json!({})).await;
    c.call("agents.start", json!({"id": "steady"}))
        .await
        .unwrap();
    let first = c
        .call("agents.wait", json!({"id": "steady", "timeout_secs": 60}))
        .await
        .unwrap();
    let pid = first["pid"].as_u64().unwrap();
    // Attached, and its first call answered (it prints then).
    logged_attach(&c, "steady").await;
    // The daemon dies without stopping its children.
    d1.kill();
    drop(c);
    let d2 = Daemon::builder()
        .home(&car_home)
        .args(["--no-approvals", "--port", &port])
        .start();
    let c2 = client(&d2.home);
    let after = c2
        .call("agents.wait", json!({"id": "steady", "timeout_secs": 60}))
        .await
        .unwrap();
    assert_eq!(
        after["pid"].as_u64(),
        Some(pid),
        "the running child was adopted: {after}\n{}",
        std::fs::read_to_string(car_home.join("logs/agents/steady/stderr.log")).unwrap_or_default()
    );
    assert_eq!(marked(&mark), vec![pid as u32], "no duplicate process");
    // A clean daemon exit stops the child; the next daemon starts it once.
    c2.call("agents.stop", json!({"id": "steady"}))
        .await
        .unwrap();
    assert!(marked(&mark).is_empty());
}

#[tokio::test]
async fn bad_supervisor_input_is_refused_precisely() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let c = client(&d.home);
    for (method, params, needle) in [
        (
            "agents.start",
            json!({"id": "ghost"}),
            "no registered agent 'ghost'",
        ),
        (
            "agents.stop",
            json!({"id": "ghost", "signal": "hup"}),
            "signal",
        ),
        ("agents.wait", json!({"id": "ghost"}), "no registered agent"),
        ("agents.tail_log", json!({}), "id"),
        (
            "agents.wait",
            json!({"id": "x", "timeout_secs": -1}),
            "no registered agent",
        ),
    ] {
        match c.call(method, params).await {
            Err(Error::Rpc { code, message, .. }) => {
                assert_eq!(code, -32602, "{method}: {message}");
                assert!(
                    message.contains(needle),
                    "{method}: {message:?} should mention {needle}"
                );
            }
            other => panic!("{method}: expected -32602, got {other:?}"),
        }
    }
    upsert(&c, "idle", "none", json!({})).await;
    match c
        .call("agents.wait", json!({"id": "idle", "timeout_secs": 0}))
        .await
    {
        Err(Error::Rpc { code, message, .. }) => {
            assert_eq!(code, -32602);
            assert!(message.contains("timeout_secs"), "{message}");
        }
        other => panic!("expected -32602, got {other:?}"),
    }
}

#[tokio::test]
async fn a_second_daemon_on_the_same_home_only_observes_the_agents() {
    let home = tempfile::tempdir().unwrap();
    let car_home = home.path().join("car-home");
    let d1 = Daemon::builder()
        .home(&car_home)
        .args(["--no-approvals"])
        .start();
    assert!(d1.primary);
    let c1 = client(&car_home);
    upsert(&c1, "shared", "observe", json!({})).await;
    let d2 = Daemon::builder()
        .home(&car_home)
        .args(["--no-auth", "--no-approvals"])
        .start();
    assert!(
        !d2.primary,
        "the second daemon is not the state root's primary"
    );
    let mut env = EnvSnapshot::with_car_home(&car_home);
    env.daemon_url = Some(d2.ws_url.clone());
    let c2 = Client::new(ClientConfig::with_env(env));
    // It reads the same registry…
    let listed = c2.call("agents.list", json!({})).await.unwrap();
    assert_eq!(listed[0]["spec"]["id"], "shared", "{listed}");
    // …but never starts what the primary supervises.
    match c2.call("agents.start", json!({"id": "shared"})).await {
        Err(Error::Rpc { message, data, .. }) => {
            assert!(message.contains("observe-only"), "{message}");
            assert_eq!(data.unwrap()["reason"], "observe_only");
        }
        other => panic!("expected observe-only, got {other:?}"),
    }
    assert!(marked("observe").is_empty());
}
