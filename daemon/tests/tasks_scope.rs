//! Issue 24: `scheduler.run` (any operator or agent) with the id of a host's command task
//! (`tasks.schedule`, host-only) used to overwrite that task with a prompt task. It is now
//! refused and the command task stays. Drives a real daemon.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn a_prompt_run_cannot_overwrite_a_hosts_command_task() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let r = host
        .call(
            "tasks.schedule",
            json!({"name": "backup", "program": "/bin/true", "durable": false,
                   "cadence": {"interval_secs": 3600}}),
        )
        .await;
    let id = r["result"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let mut operator = Ws::authed(&d).await;
    let r = operator
        .call(
            "scheduler.run",
            json!({"task": {"id": id, "name": "backup", "prompt": "rm -rf ~"}}),
        )
        .await;
    assert_eq!(code(&r), -32602, "{r}");
    assert!(message(&r).contains("task.id"), "{r}");
    assert!(message(&r).contains("command task"), "{r}");
    let r = host.call("tasks.list", json!({})).await;
    let tasks = r["result"]["tasks"]
        .as_array()
        .or_else(|| r["result"].as_array())
        .unwrap_or_else(|| panic!("{r}"));
    assert!(
        tasks
            .iter()
            .any(|t| t["id"] == id.as_str() && t.to_string().contains("/bin/true")),
        "the command task is intact: {r}"
    );
}
