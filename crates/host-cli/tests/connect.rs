//! Reaching the daemon: a clear failure when nothing listens, `--start-server` starting
//! one, and `watch` carrying on across a daemon restart.

mod common;

use std::time::Duration;

use car_test_harness::{car_server_bin, Daemon};
use common::*;
use serde_json::{json, Value};

/// Kills a daemon car-host started (SIGKILL on drop, in case the test fails first).
struct Started(u32);

impl Started {
    fn alive(&self) -> bool {
        // A zombie (state Z) has exited; its parent (car-host) is gone and may not be reaped.
        std::fs::read_to_string(format!("/proc/{}/stat", self.0))
            .map(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(false)
    }

    fn signal(&self, sig: &str) {
        let _ = std::process::Command::new("kill")
            .args([sig, &self.0.to_string()])
            .status();
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.alive() {
            self.signal("-KILL");
        }
    }
}

#[tokio::test]
async fn an_unreachable_daemon_is_named_and_exits_1() {
    let home = tempfile::tempdir().unwrap();
    let url = format!("ws://127.0.0.1:{}", free_port());
    for args in [&["list"][..], &["approve", "approval-1"], &["watch"]] {
        let out = run(&url, home.path(), args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!(
                "car-host: error: cannot reach car-server at {url}: "
            )),
            "{err}"
        );
        assert!(err.contains("--start-server"), "{err}");
    }
    // Usage errors are clap's: exit 2.
    let out = run(&url, home.path(), &["approve"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = run(&url, home.path(), &["frobnicate"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_server_starts_a_daemon_that_outlives_car_host() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("ws://127.0.0.1:{port}");
    let bin = car_server_bin();
    let out = run(
        &url,
        home.path(),
        &[
            "list",
            "--json",
            "--start-server",
            "--server-bin",
            bin.to_str().unwrap(),
            "--server-arg=--approval-timeout",
            "--server-arg=5s",
        ],
    )
    .await;
    let listed = json_line(&out);
    let pid = listed["started_server"]["pid"].as_u64().expect("pid") as u32;
    let started = Started(pid);
    assert_eq!(listed["started_server"]["ws_url"], json!(url), "{listed}");
    assert_eq!(
        listed["started_server"]["log"],
        json!(home.path().join("car-server.log")),
        "{listed}"
    );
    assert_eq!(listed["agents"], json!([]), "{listed}");
    assert!(
        stderr(&out).contains(&format!(
            "car-host: started car-server (pid {pid}) at {url}"
        )),
        "{}",
        stderr(&out)
    );
    assert!(started.alive(), "the daemon outlives car-host");

    // Reachable now without --start-server; a second --start-server starts nothing.
    ok(&run(&url, home.path(), &["list"]).await);
    let again = run(&url, home.path(), &["list", "--json", "--start-server"]).await;
    let listed = json_line(&again);
    assert!(listed.get("started_server").is_none(), "{listed}");
    assert!(
        !stderr(&again).contains("started car-server"),
        "{}",
        stderr(&again)
    );

    // The extra argument reached the daemon: a gated call is denied after 5 s.
    let client = host_client(&url, home.path());
    let begun = std::time::Instant::now();
    let err = client
        .call("scheduler.os_uninstall", json!({"label": "t"}))
        .await
        .unwrap_err();
    assert_eq!(err.report().data.unwrap()["reason"], "approval_timeout");
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "{:?}",
        begun.elapsed()
    );
    client.close();

    started.signal("-TERM");
    let deadline = std::time::Instant::now() + WAIT;
    while started.alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "car-server ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = run(&url, home.path(), &["list"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_reports_the_daemon_output() {
    let home = tempfile::tempdir().unwrap();
    let url = format!("ws://127.0.0.1:{}", free_port());
    let bin = car_server_bin();
    let out = run(
        &url,
        home.path(),
        &[
            "list",
            "--start-server",
            "--server-bin",
            bin.to_str().unwrap(),
            "--server-arg=--no-such-flag",
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("exited before it was ready"), "{err}");
    assert!(
        err.contains("--no-such-flag"),
        "the daemon's own message: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resubscribes_after_a_daemon_restart() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let port_arg = port.to_string();
    let mut first = Daemon::builder()
        .home(home.path())
        .args(["--port", port_arg.as_str()])
        .start();
    let url = first.ws_url.clone();
    assert_eq!(url, format!("ws://127.0.0.1:{port}"));
    let mut watcher = Watcher::spawn(&url, home.path(), &["--json"]);
    let snapshot = watcher.json_kind("watch.snapshot").await;
    let epoch = snapshot["epoch"].as_str().unwrap().to_string();

    first.terminate();
    watcher.stderr_contains("car-host: connection lost").await;
    let second = Daemon::builder()
        .home(home.path())
        .args(["--port", port_arg.as_str()])
        .start();
    // A new daemon run: the resume is refused (`epoch`) and the fresh snapshot follows.
    let resync = watcher.json_kind("watch.snapshot").await;
    assert_eq!(resync["reason"], "epoch", "{resync}");
    assert_ne!(resync["epoch"], json!(epoch), "{resync}");
    assert!(
        watcher
            .stderr()
            .contains("missed events are lost (the daemon restarted)"),
        "{}",
        watcher.stderr()
    );

    // Live events of the new run stream as before.
    let client = host_client(&second.ws_url, home.path());
    let parked = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call("scheduler.os_uninstall", json!({"label": "r"}))
                .await
        })
    };
    let requested = watcher.json_kind("approval.requested").await;
    assert_eq!(requested["epoch"], resync["epoch"], "{requested}");
    let id = requested["payload"]["id"].as_str().unwrap();
    let approved = json_line(&run(&url, home.path(), &["approve", id, "--json"]).await);
    assert_eq!(approved["status"], "approved");
    let result: Value = tokio::time::timeout(WAIT, parked)
        .await
        .unwrap()
        .unwrap()
        .expect("approved call");
    assert_eq!(result["removed"], false, "{result}");
}
