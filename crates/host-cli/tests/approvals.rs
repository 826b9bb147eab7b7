//! End to end against a real daemon: an ordinary (daemon-token) session's gated
//! `scheduler.os_uninstall` parks (a host's own calls are never held: it is the approver),
//! `car-host watch` (a child process) prints its approval request as it happens,
//! `car-host list` shows it pending, and `car-host approve` / `deny` release the parked
//! call.

mod common;

use car_test_harness::Daemon;
use common::*;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_request_and_approve_releases_the_parked_call() {
    let d = Daemon::builder().start();
    let (url, home) = (d.ws_url.as_str(), d.home.as_path());
    let mut watcher = Watcher::spawn(url, home, &["--json"]);
    // Subscribed before anything happens: the first line is the snapshot.
    let snapshot = watcher.json_kind("watch.snapshot").await;
    assert_eq!(snapshot["approvals"], json!([]), "{snapshot}");
    assert!(
        snapshot["epoch"].is_string() && snapshot["reason"].is_null(),
        "{snapshot}"
    );

    let client = host_client(url, home);
    let parked = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call("scheduler.os_uninstall", json!({"label": "x"}))
                .await
        })
    };
    let requested = watcher.json_kind("approval.requested").await;
    let approval = &requested["payload"];
    let id = approval["id"].as_str().expect("approval id").to_string();
    assert_eq!(
        approval["action"], "ws.method:scheduler.os_uninstall",
        "{requested}"
    );
    assert_eq!(approval["status"], "pending", "{requested}");
    assert_eq!(approval["client_id"], Value::Null, "{requested}");
    assert!(requested["seq"].as_u64().is_some() && requested["epoch"] == snapshot["epoch"]);
    assert!(!parked.is_finished(), "the call must park until approved");

    // `list` shows the pending approval, in both formats.
    let listed = json_line(&run(url, home, &["list", "--json"]).await);
    let pending = listed["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{listed}");
    assert_eq!(pending[0]["id"], json!(id), "{listed}");
    assert_eq!(listed["registry"], json!([]), "{listed}");
    let human = ok(&run(url, home, &["list"]).await);
    assert!(
        human.lines().any(|l| l.starts_with(&format!(
            "approval  {id}  pending  ws.method:scheduler.os_uninstall  agent=-"
        ))),
        "{human}"
    );
    assert!(human.contains("no registry agents"), "{human}");

    let approved = run(url, home, &["approve", &id]).await;
    assert_eq!(
        ok(&approved).trim(),
        format!("approved {id}  ws.method:scheduler.os_uninstall")
    );
    let upserted = tokio::time::timeout(WAIT, parked)
        .await
        .expect("the parked call returns after the approval")
        .unwrap()
        .expect("the approved call succeeds");
    assert_eq!(upserted["removed"], false, "{upserted}");

    let resolved = watcher.json_kind("approval.resolved").await;
    assert_eq!(resolved["payload"]["id"], json!(id), "{resolved}");
    assert_eq!(resolved["payload"]["status"], "approved", "{resolved}");
    assert_eq!(
        resolved["seq"].as_u64(),
        requested["seq"].as_u64().map(|s| s + 1),
        "nothing between the request and its resolution: {resolved}"
    );

    // Nothing is pending now (`--all` shows the row).
    let listed = json_line(&run(url, home, &["list", "--json"]).await);
    assert_eq!(listed["approvals"], json!([]), "{listed}");
    let all = json_line(&run(url, home, &["--json", "list", "--all"]).await);
    assert_eq!(all["approvals"][0]["status"], "approved", "{all}");
    let human = ok(&run(url, home, &["list"]).await);
    assert!(human.contains("no pending approvals"), "{human}");

    // The watcher is still streaming.
    assert!(watcher.child.try_wait().unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_fails_the_parked_call_and_a_second_answer_is_refused() {
    let d = Daemon::builder().start();
    let (url, home) = (d.ws_url.as_str(), d.home.as_path());
    let mut watcher = Watcher::spawn(url, home, &[]);
    watcher
        .stderr_contains("car-host: watching ws://127.0.0.1:")
        .await;

    let client = host_client(url, home);
    let parked = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call("scheduler.os_uninstall", json!({"label": "y"}))
                .await
        })
    };
    // Human format: `<time>  approval.requested  <id>  <action>  agent=-  <description>`.
    let line = watcher
        .line_where("approval.requested line", |l| {
            l.contains("  approval.requested  ")
        })
        .await;
    let fields: Vec<&str> = line.split("  ").collect();
    assert_eq!(fields[1], "approval.requested", "{line}");
    let id = fields[2].to_string();
    assert!(id.starts_with("approval"), "{line}");
    assert_eq!(fields[3], "ws.method:scheduler.os_uninstall", "{line}");
    assert_eq!(fields[4], "agent=-", "{line}");

    let denied = json_line(&run(url, home, &["deny", &id, "--notes", "not now", "--json"]).await);
    assert_eq!(denied["id"], json!(id), "{denied}");
    assert_eq!(denied["status"], "denied", "{denied}");
    assert_eq!(denied["notes"], "not now", "{denied}");
    let err = tokio::time::timeout(WAIT, parked)
        .await
        .expect("the parked call returns after the denial")
        .unwrap()
        .expect_err("a denied call fails");
    assert_eq!(err.code(), Some(-32003), "{err:?}");
    assert_eq!(err.report().data.unwrap()["reason"], "approval_denied");

    let line = watcher
        .line_where("approval.resolved line", |l| {
            l.contains("  approval.resolved  ")
        })
        .await;
    assert!(
        line.ends_with(&format!(
            "approval.resolved  {id}  ws.method:scheduler.os_uninstall  agent=-  denied"
        )),
        "{line}"
    );

    // Answering again: the daemon's refusal, exit 1.
    let again = run(url, home, &["approve", &id]).await;
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert!(stdout(&again).is_empty(), "{}", stdout(&again));
    assert!(
        stderr(&again).starts_with("car-host: error: ")
            && stderr(&again).contains(&format!("approval '{id}' is already denied")),
        "{}",
        stderr(&again)
    );
    let again = run(url, home, &["--json", "deny", &id]).await;
    assert_eq!(again.status.code(), Some(1));
    let report: Value = serde_json::from_str(stderr(&again).trim()).unwrap();
    assert_eq!(report["error"]["code"], -32602, "{report}");
    assert_eq!(
        report["error"]["data"]["reason"], "already_resolved",
        "{report}"
    );

    // An unknown id: the daemon's message.
    let unknown = run(url, home, &["approve", "approval-nope"]).await;
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("approval_id: no approval 'approval-nope'"),
        "{}",
        stderr(&unknown)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_started_later_shows_what_is_already_pending() {
    let d = Daemon::builder().start();
    let (url, home) = (d.ws_url.as_str(), d.home.as_path());
    let client = host_client(url, home);
    let parked = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call("scheduler.os_uninstall", json!({"label": "z"}))
                .await
        })
    };
    // Wait until the gate holds it.
    let deadline = tokio::time::Instant::now() + WAIT;
    let id = loop {
        let listed = json_line(&run(url, home, &["list", "--json"]).await);
        if let Some(id) = listed["approvals"][0]["id"].as_str() {
            break id.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no pending approval: {listed}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mut watcher = Watcher::spawn(url, home, &[]);
    let line = watcher
        .line_where("pending approval line", |l| l.starts_with("approval  "))
        .await;
    assert!(
        line.starts_with(&format!(
            "approval  {id}  pending  ws.method:scheduler.os_uninstall"
        )),
        "{line}"
    );
    ok(&run(url, home, &["approve", &id]).await);
    tokio::time::timeout(WAIT, parked)
        .await
        .unwrap()
        .unwrap()
        .expect("approved");
    watcher
        .line_where("resolution", |l| {
            l.contains("approval.resolved") && l.ends_with("approved")
        })
        .await;
}
