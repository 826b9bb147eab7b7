//! Issue 24: `scheduler.run` (any operator or agent) with the id of a host's command task
//! (`tasks.schedule`, host-only) used to overwrite that task with a prompt task. It is now
//! refused and the command task stays; and an agent runs only its own prompt tasks. Drives
//! a real daemon.

mod common;

use common::*;
use serde_json::{json, Value};

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

/// Sends `method {task}` on `ws` and returns its reply, answering the daemon's
/// `multi.run_agent` reverse calls with `-32601` (this test client runs no agents, so the
/// daemon runs the prompt itself; without a model the execution records a failure).
async fn run(ws: &mut Ws, method: &str, task: &Value) -> Value {
    let id = ws.request(method, json!({"task": task})).await;
    loop {
        let msg = ws.recv_json().await;
        if msg["id"] == json!(id) && msg.get("method").is_none() {
            return msg;
        }
        if msg["method"] == "multi.run_agent" {
            let reply = json!({"jsonrpc": "2.0", "id": msg["id"],
                "error": {"code": -32601, "message": "no agent runner here"}});
            ws.send_text(reply.to_string()).await;
        }
    }
}

/// Issue 24: one agent's `scheduler.run` with another agent's prompt task id ran that task
/// and rewrote its history. Now only its owner (or the user) runs it.
#[tokio::test]
async fn an_agent_cannot_run_another_agents_prompt_task() {
    let d = Daemon::start();
    let mut host = Ws::host(&d).await;
    let mut a = registered_agent(&d, &mut host, "tasks-a").await;
    let mut b = registered_agent(&d, &mut host, "tasks-b").await;
    let task = json!({"id": "a-task-01", "name": "digest", "prompt": "summarise"});
    let r = run(&mut a, "scheduler.run", &task).await;
    assert!(r["result"]["execution_id"].is_string(), "{r}");
    for method in ["scheduler.run", "scheduler.run_loop"] {
        let r = run(&mut b, method, &task).await;
        assert_eq!(code(&r), -32602, "{method}: {r}");
        assert!(message(&r).contains("id"), "{method}: {r}");
        assert!(message(&r).contains("another principal"), "{method}: {r}");
    }
    // Its owner and the user still run it.
    let r = run(&mut a, "scheduler.run", &task).await;
    assert!(r["result"]["execution_id"].is_string(), "{r}");
    let mut user = Ws::authed(&d).await;
    let r = run(&mut user, "scheduler.run", &task).await;
    assert!(r["result"]["execution_id"].is_string(), "{r}");
}
