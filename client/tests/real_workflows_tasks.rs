//! Workflows and scheduled tasks against the real `car-server`: a workflow pauses at an
//! approval gate, survives a daemon restart in `workflow.list_paused` and completes with
//! `workflow.resume`; an interval command task on the daemon's timers runs repeatedly and
//! stops after `tasks.unschedule`; cron cadences are validated.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use car_daemon_client::{Client, ClientConfig, EnvSnapshot, Error};
use car_test_harness::Daemon;
use serde_json::{json, Value};

fn client(home: &std::path::Path) -> Client {
    Client::new(ClientConfig::with_env(EnvSnapshot::with_car_home(home)))
}

fn runner(c: &Client) {
    c.register_handler("multi.run_agent", |params: Value| {
        let name = params["spec"]["name"].as_str().unwrap().to_string();
        Ok(json!({"name": name, "answer": format!("{name} did: {}", params["task"].as_str().unwrap()),
                  "turns": 1, "tool_calls": 0, "duration_ms": 1.0}))
    });
}

fn workflow() -> Value {
    let agent = |n: &str| json!({"name": n, "system_prompt": "", "tools": [], "max_turns": 1, "metadata": {}});
    json!({
        "id": "wf", "name": "review", "start": "draft",
        "stages": [
            {"id": "draft", "name": "Draft", "step": {"type": "pattern", "pattern": "pipeline", "task": "write", "agents": [agent("writer")]}},
            {"id": "gate", "name": "Gate", "step": {"type": "approval", "prompt": "Ship it?", "fields": [{"name": "ok", "required": true}], "output_key": "review"}},
            {"id": "ship", "name": "Ship", "step": {"type": "pattern", "pattern": "pipeline", "task": "ship", "agents": [agent("shipper")]}},
        ],
        "edges": [{"from": "draft", "to": "gate"}, {"from": "gate", "to": "ship", "conditions": [{"key": "review.ok", "value": "yes"}]}],
    })
}

/// A script that appends a line to `ticks` in its (returned, temporary) directory.
fn ticker() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tick.sh");
    let out = dir.path().join("ticks");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho tick >> {}\n", out.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, script)
}

fn count_ticks(out: &std::path::Path) -> usize {
    std::fs::read_to_string(out)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn rpc_error(r: Result<Value, Error>) -> (i64, String) {
    match r {
        Err(Error::Rpc { code, message, .. }) => (code, message),
        other => panic!("expected an RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_paused_workflow_survives_a_daemon_restart_and_resumes() {
    let home = tempfile::tempdir().unwrap();
    let car_home = home.path().join("car-home");
    let mut d1 = Daemon::builder().home(&car_home).start();
    let c = client(&car_home);
    runner(&c);
    let r = c
        .call("workflow.run", json!({"workflow": workflow()}))
        .await
        .unwrap();
    assert_eq!(r["status"], "paused", "{r}");
    let run_id = r["paused"]["run_id"].as_str().unwrap().to_string();
    assert_eq!(r["final_state"]["stage.draft.answer"], "writer did: write");
    d1.terminate();
    drop(c);

    let d2 = Daemon::builder().home(&car_home).start();
    let c = client(&d2.home);
    runner(&c);
    let paused = c.call("workflow.list_paused", json!(null)).await.unwrap();
    assert_eq!(paused[0]["run_id"], run_id.as_str(), "{paused}");
    assert_eq!(paused[0]["paused_stage_id"], "gate");
    assert_eq!(paused[0]["prompt"], "Ship it?");

    let (code, message) = rpc_error(
        c.call("workflow.resume", json!({"run_id": run_id, "input": {}}))
            .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("input.ok"), "{message}");

    let done = c
        .call(
            "workflow.resume",
            json!({"run_id": run_id, "input": {"ok": "yes"}}),
        )
        .await
        .unwrap();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["final_state"]["stage.ship.answer"],
        "shipper did: ship"
    );
    assert_eq!(done["final_state"]["review.ok"], "yes");
    assert_eq!(
        c.call("workflow.list_paused", json!(null)).await.unwrap(),
        json!([])
    );
    let (code, message) = rpc_error(
        c.call(
            "workflow.resume",
            json!({"run_id": run_id, "input": {"ok": "yes"}}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("no resumable run"), "{message}");
}

#[tokio::test]
async fn workflow_verify_and_bad_manifests() {
    let d = Daemon::builder().start();
    let c = client(&d.home);
    let mut wf = workflow();
    wf["edges"][0]["to"] = json!("nowhere");
    let report = c
        .call("workflow.verify", json!({"workflow": wf}))
        .await
        .unwrap();
    assert_eq!(report["valid"], false);
    assert!(report["issues"].to_string().contains("nowhere"), "{report}");
    let mut bad = workflow();
    bad["stages"][1]["step"]
        .as_object_mut()
        .unwrap()
        .remove("prompt");
    let (code, message) = rpc_error(c.call("workflow.run", json!({"workflow": bad})).await);
    assert_eq!(code, -32602);
    assert!(
        message.contains("stages[1].step") && message.contains("prompt"),
        "{message}"
    );
}

#[tokio::test]
async fn an_interval_task_runs_repeatedly_until_unscheduled() {
    let d = Daemon::builder().start();
    let c = client(&d.home);
    let (dir, script) = ticker();
    let out = dir.path().join("ticks");
    let ticks = || count_ticks(&out);

    let r = c
        .call_host_management(
            "tasks.schedule",
            json!({"name": "ticker", "program": script, "cadence": {"interval_secs": 1}, "durable": false}),
        )
        .await
        .unwrap();
    assert_eq!(r["backend"], "daemon", "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    let listed = c.call("tasks.list", json!({})).await.unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == id.as_str()),
        "{listed}"
    );
    let deadline = Instant::now() + support::SAFETY;
    while ticks() < 2 {
        assert!(Instant::now() < deadline, "the task did not run twice");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = c
        .call_host_management("tasks.unschedule", json!({"id": id}))
        .await
        .unwrap();
    assert_eq!(gone["deleted"], true, "{gone}");
    // A run already under way may still land; after that, nothing more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = ticks();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        ticks(),
        settled,
        "the task kept running after tasks.unschedule"
    );
}

#[tokio::test]
async fn cadences_and_tasks_are_validated() {
    let d = Daemon::builder().start();
    let c = client(&d.home);
    for (params, field) in [
        (
            json!({"name": "x", "program": "/bin/true", "cadence": {"cron": "61 * * * *"}}),
            "cadence.cron",
        ),
        (
            json!({"name": "x", "program": "/bin/true", "cadence": {}}),
            "cadence",
        ),
        (
            json!({"name": "x", "program": "/bin/true", "cadence": {"interval_secs": 1, "cron": "* * * * *"}}),
            "cadence",
        ),
        (
            json!({"name": "x", "program": "relative", "cadence": {"interval_secs": 5}}),
            "program",
        ),
        (
            json!({"name": "x", "program": "/bin/true", "cadence": {"interval_secs": -5}}),
            "cadence.interval_secs",
        ),
    ] {
        let (code, message) = rpc_error(c.call_host_management("tasks.schedule", params).await);
        assert_eq!(code, -32602, "{message}");
        assert!(message.contains(field), "{message:?} should name {field}");
    }
    let (code, message) = rpc_error(
        c.call(
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "cron", "schedule": "bogus"}),
        )
        .await,
    );
    assert_eq!(code, -32602);
    assert!(message.contains("schedule"), "{message}");
    let task = c
        .call(
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "cron", "schedule": "*/15 * * * *"}),
        )
        .await
        .unwrap();
    let rendered = c
        .call(
            "scheduler.os_render",
            json!({"task": task, "program": "/usr/bin/car", "args": ["run"]}),
        )
        .await
        .unwrap();
    assert!(
        rendered["crontab_line"]
            .as_str()
            .unwrap()
            .starts_with("*/15 * * * * /usr/bin/car run"),
        "{rendered}"
    );
    assert!(
        rendered["systemd_timer"]
            .as_str()
            .unwrap()
            .contains("OnCalendar="),
        "{rendered}"
    );
    // The daemon still serves.
    c.call("tasks.list", json!({})).await.unwrap();
}

#[tokio::test]
async fn os_install_waits_for_approval_and_writes_units_only_in_the_given_directory() {
    let units = tempfile::tempdir().unwrap();
    let d = Daemon::builder()
        .args(["--no-systemctl", "--systemd-user-dir"])
        .args([units.path().to_str().unwrap()])
        .start();
    let host = client(&d.home);
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel::<Value>();
    host.register_notification_handler("host.event", move |e| {
        let _ = tx.send(e);
    });
    host.call_as_host("host.subscribe", json!({}))
        .await
        .unwrap();
    let c = client(&d.home);
    let task = c
        .call(
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "interval", "schedule": "3600"}),
        )
        .await
        .unwrap();
    let id = task["id"].as_str().unwrap().to_string();
    let installed = approved(
        &host,
        &mut events,
        &c,
        "scheduler.os_install",
        json!({"task": task, "program": "/usr/bin/true"}),
    )
    .await;
    assert_eq!(installed["backend"], "systemd", "{installed}");
    let label = format!("ai.parslee.car.task.{id}");
    assert_eq!(installed["label"], label.as_str());
    let files: Vec<String> = std::fs::read_dir(units.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "a .service and a .timer: {files:?}");
    assert_eq!(
        c.call("scheduler.os_list", json!(null)).await.unwrap(),
        json!([label])
    );
    // Removing schedules waits for approval too.
    let removed = approved(
        &host,
        &mut events,
        &c,
        "scheduler.os_uninstall",
        json!({"label": id}),
    )
    .await;
    assert_eq!(removed["removed"], true);
    assert_eq!(std::fs::read_dir(units.path()).unwrap().count(), 0);
    let report = approved(
        &host,
        &mut events,
        &c,
        "scheduler.os_reconcile",
        json!(null),
    )
    .await;
    assert_eq!(report["removed"], json!([]), "{report}");
}

/// Calls `method` on `c`, approves the approval it parks on through `host`, and returns
/// the call's result.
async fn approved(
    host: &Client,
    events: &mut tokio::sync::mpsc::UnboundedReceiver<Value>,
    c: &Client,
    method: &'static str,
    params: Value,
) -> Value {
    let caller = c.clone();
    let parked = tokio::spawn(async move { caller.call(method, params).await });
    let approval = loop {
        let e = support::within("approval.requested", events.recv())
            .await
            .unwrap();
        if e["kind"] == "approval.requested" {
            break e["payload"]["id"].as_str().unwrap().to_string();
        }
    };
    host.call_as_host(
        "host.resolve_approval",
        json!({"approval_id": approval, "approved": true}),
    )
    .await
    .unwrap();
    support::within(method, parked).await.unwrap().unwrap()
}

#[tokio::test]
async fn bad_input_for_the_new_methods_is_refused_precisely() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let c = client(&d.home);
    let good = c
        .call(
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "interval", "schedule": "60"}),
        )
        .await
        .unwrap();
    let mut wf_bad = workflow();
    wf_bad["start"] = json!("missing");
    let agent = json!({"name": "a"});
    let cases: Vec<(&str, Value, &str, bool)> = vec![
        (
            "scheduler.run",
            json!({"task": {"prompt": "p"}}),
            "task.name",
            false,
        ),
        (
            "scheduler.run_loop",
            json!({"task": good, "max_iterations": 0}),
            "max_iterations",
            false,
        ),
        (
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "weekly"}),
            "trigger",
            false,
        ),
        (
            "scheduler.create",
            json!({"name": "n", "prompt": "p", "trigger": "interval", "schedule": "0"}),
            "schedule",
            false,
        ),
        (
            "scheduler.os_install",
            json!({"task": good, "program": "car"}),
            "program",
            false,
        ),
        (
            "scheduler.os_render",
            json!({"task": {"name": "n"}, "program": "/bin/true"}),
            "task",
            false,
        ),
        (
            "workflow.chain",
            json!({"workflows": [workflow(), wf_bad]}),
            "workflows[1]",
            false,
        ),
        (
            "workflow.resume",
            json!({"run_id": "0123456789abcdef0123456789abcdef"}),
            "no resumable run",
            false,
        ),
        (
            "workflow.resume",
            json!({"run_id": "../../etc"}),
            "run",
            false,
        ),
        (
            "multi.tournament",
            json!({"competitors": [], "judge": agent, "task": "T"}),
            "competitors",
            false,
        ),
        ("multi.subtask", json!({"task": "T"}), "main", false),
        (
            "multi.map_reduce",
            json!({"mapper": agent, "reducer": agent, "task": "T"}),
            "items",
            false,
        ),
        (
            "agents.install",
            json!({"agent": {"name": "x"}, "transport": {"kind": "pure_data"}}),
            "agent.id",
            true,
        ),
        (
            "agents.install",
            json!({"agent": {"id": "x"}, "transport": {"kind": "carrier_pigeon"}}),
            "transport.kind",
            true,
        ),
        (
            "agents.install",
            json!({"agent": {"id": "x"}, "transport": {"kind": "pure_data"}, "runtime": {"car_min_version": "99.0"}}),
            "car_min_version",
            true,
        ),
        (
            "agents.install",
            json!({"agent": {"id": "x"}, "transport": {"kind": "external_process", "command": "relative/bin"}}),
            "transport.command",
            true,
        ),
        ("tasks.unschedule", json!({"id": "../x"}), "id", true),
    ];
    for (method, params, needle, host) in cases {
        let r = if host {
            c.call_host_management(method, params).await
        } else {
            c.call(method, params).await
        };
        let (code, message) = rpc_error(r);
        assert_eq!(code, -32602, "{method}: {message}");
        assert!(
            message.contains(needle),
            "{method}: {message:?} should name {needle}"
        );
    }
    // A command-shaped manifest becomes a registry agent; nothing starts.
    let installed = c
        .call_host_management(
            "agents.install",
            json!({"agent": {"id": "inst", "name": "Installed"}, "transport": {"kind": "external_process", "command": "/bin/sleep", "args": ["60"]},
                   "capabilities": {"optional": {"voice": ["tts"]}}}),
        )
        .await
        .unwrap();
    assert_eq!(installed["agent"]["spec"]["id"], "inst", "{installed}");
    assert_eq!(installed["agent"]["status"], "stopped");
    assert_eq!(
        installed["report"]["missingOptional"],
        json!([{"namespace": "voice", "feature": "tts"}])
    );
    let data_only = c
        .call_host_management(
            "agents.install",
            json!({"agent": {"id": "card"}, "transport": {"kind": "pure_data"}}),
        )
        .await
        .unwrap();
    assert!(data_only["agent"].is_null());
    assert!(d.home.join("agents/card/manifest.json").exists());
    // Unknown labels and ids are answers, not errors.
    let none = c
        .call("scheduler.os_uninstall", json!({"label": "nope"}))
        .await
        .unwrap();
    assert_eq!(none["removed"], false);
    let gone = c
        .call_host_management("tasks.unschedule", json!({"id": "nope"}))
        .await
        .unwrap();
    assert_eq!(gone["deleted"], false);
    c.call("tasks.list", json!(null)).await.unwrap();
}

#[tokio::test]
async fn daemon_timers_are_armed_again_after_a_daemon_restart() {
    let home = tempfile::tempdir().unwrap();
    let car_home = home.path().join("car-home");
    let (dir, script) = ticker();
    let out = dir.path().join("ticks");
    let ticks = || count_ticks(&out);
    let wait_for = |n: usize| async move {
        let deadline = Instant::now() + support::SAFETY;
        while ticks() < n {
            assert!(Instant::now() < deadline, "the task did not reach {n} runs");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };

    let mut d1 = Daemon::builder().home(&car_home).start();
    let c = client(&car_home);
    let r = c
        .call_host_management(
            "tasks.schedule",
            json!({"name": "survivor", "program": script, "cadence": {"interval_secs": 1}, "durable": false}),
        )
        .await
        .unwrap();
    let id = r["id"].as_str().unwrap().to_string();
    wait_for(1).await;
    d1.terminate();
    drop(c);
    let before = ticks();

    let d2 = Daemon::builder().home(&car_home).start();
    wait_for(before + 1).await;
    let c = client(&d2.home);
    let gone = c
        .call_host_management("tasks.unschedule", json!({"id": id}))
        .await
        .unwrap();
    assert_eq!(gone["deleted"], true);
}

/// A proposal stage runs against the workflow's state, not the connection's: a
/// `require_state` policy is satisfied by the workflow's state, the stage reports only the
/// keys it changed (a deleted one as null), and the connection's own state is untouched.
#[tokio::test]
async fn a_proposal_stage_reads_and_reports_the_workflows_state() {
    let d = Daemon::start();
    let c = client(&d.home);
    c.call("state.set", json!({"key": "conn_only", "value": true}))
        .await
        .unwrap();
    c.call("tools.register", json!([{"name": "tally"}]))
        .await
        .unwrap();
    c.call(
        "policy.register",
        json!({"name": "approved-only", "rule": "require_state", "key": "approved", "value": true}),
    )
    .await
    .unwrap();
    c.register_tool_handler(|call| Ok(json!({"tallied": call.params["n"]})));
    let wf = json!({
        "id": "wf-state", "name": "state", "start": "p",
        "stages": [{"id": "p", "name": "P", "step": {"type": "proposal", "proposal": {"actions": [
            {"id": "t", "type": "tool_call", "tool": "tally", "parameters": {"n": 5}},
            {"id": "w", "type": "state_write", "key": "total", "value": 5, "dependencies": ["t"]},
            {"id": "x", "type": "state_delete", "key": "stale"}
        ]}}}],
        "edges": []
    });
    let r = c
        .call(
            "workflow.run",
            json!({"workflow": wf, "initial_state": {"approved": true, "stale": 1, "kept": "x"}}),
        )
        .await
        .unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    let fs = &r["final_state"];
    assert_eq!(fs["total"], 5, "{r}");
    assert_eq!(fs["stale"], Value::Null, "{r}");
    assert_eq!(fs["kept"], "x", "{r}");
    assert!(
        fs.get("conn_only").is_none(),
        "the connection's state leaked in: {r}"
    );
    // The connection's own state saw none of it.
    let own = c.call("state.get", json!({"key": "total"})).await.unwrap();
    assert_eq!(own, Value::Null, "{own}");
    let own = c
        .call("state.get", json!({"key": "conn_only"}))
        .await
        .unwrap();
    assert_eq!(own, json!(true), "{own}");

    // Without `approved` in the workflow's state the policy refuses the stage's tool call,
    // though the connection's state is the same.
    let r = c
        .call(
            "workflow.run",
            json!({"workflow": wf, "initial_state": {"stale": 1}}),
        )
        .await
        .unwrap();
    assert_eq!(r["status"], "failed", "{r}");
}
