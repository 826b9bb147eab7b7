//! `agents.register_basics` against a real daemon: the built-in tools are listed as
//! `source: "builtin"`, run inside proposals without a reverse call, stay inside the
//! workspace root (`--workspace-root`), and the mutating ones wait for a host's approval.

mod common;

use common::{Daemon, Ws};
use serde_json::{json, Value};

fn result_of(reply: &Value, id: &str) -> Value {
    reply["result"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"))
        .iter()
        .find(|r| r["action_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no result for {id}: {reply}"))
}

fn call(id: &str, tool: &str, parameters: Value) -> Value {
    json!({"id": id, "type": "tool_call", "tool": tool, "parameters": parameters})
}

async fn submit(ws: &mut Ws, actions: Vec<Value>) -> Value {
    ws.call("proposal.submit", json!({"proposal": {"actions": actions}}))
        .await
}

struct Setup {
    d: Daemon,
    _ws: tempfile::TempDir,
    _outside: tempfile::TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn setup(extra: &[&str]) -> Setup {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = ws.path().join("project");
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(
        root.join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(root.join("notes.txt"), "alpha\nneedle here\nomega\n").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "needle outside\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("escape")).unwrap();
    let mut args = vec!["--workspace-root".to_string(), root.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let d = Daemon::builder().args(args).start();
    Setup {
        d,
        _ws: ws,
        root,
        outside: outside.path().to_path_buf(),
        _outside: outside,
    }
}

#[tokio::test]
async fn read_and_grep_work_in_a_proposal_and_escapes_are_refused() {
    let s = setup(&[]);
    let mut ws = Ws::authed(&s.d).await;
    let r = ws.call("agents.register_basics", json!(null)).await;
    assert_eq!(r["result"], Value::Null, "{r}");
    let r = ws.call("tools.list", json!({})).await;
    let tools = r["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in [
        "calculate",
        "edit_file",
        "find_files",
        "grep_files",
        "list_dir",
        "read_file",
        "write_file",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
    assert!(tools.iter().all(|t| t["source"] == "builtin"), "{r}");

    let reply = submit(
        &mut ws,
        vec![
            call("read", "read_file", json!({"path": "notes.txt"})),
            call(
                "grep",
                "grep_files",
                json!({"pattern": "needle", "path": "."}),
            ),
            call("calc", "calculate", json!({"expression": "6 * 7"})),
            call("find", "find_files", json!({"pattern": "*.rs"})),
        ],
    )
    .await;
    let read = result_of(&reply, "read");
    assert_eq!(read["status"], "succeeded", "{read}");
    assert!(
        read["output"]["content"]
            .as_str()
            .unwrap()
            .contains("     2\tneedle here"),
        "{read}"
    );
    let grep = result_of(&reply, "grep");
    assert_eq!(grep["status"], "succeeded", "{grep}");
    let matches = grep["output"]["matches"].as_array().unwrap();
    assert_eq!(
        matches.len(),
        1,
        "the symlinked outside dir is not followed: {grep}"
    );
    assert_eq!(matches[0]["path"], "notes.txt");
    assert_eq!(matches[0]["line"], 2);
    assert_eq!(result_of(&reply, "calc")["output"]["result"], 42);
    assert_eq!(
        result_of(&reply, "find")["output"]["files"],
        json!(["src/main.rs"])
    );

    let outside_file = s.outside.join("secret.txt");
    let reply = submit(
        &mut ws,
        vec![
            call("dotdot", "read_file", json!({"path": "../x"})),
            call(
                "absolute",
                "read_file",
                json!({"path": outside_file.display().to_string()}),
            ),
            call("link", "read_file", json!({"path": "escape/secret.txt"})),
            call(
                "grep_link",
                "grep_files",
                json!({"pattern": "needle", "path": "escape"}),
            ),
        ],
    )
    .await;
    for id in ["dotdot", "absolute", "link", "grep_link"] {
        let r = result_of(&reply, id);
        assert_eq!(r["status"], "failed", "{id}: {r}");
        let error = r["error"].as_str().unwrap();
        assert!(
            !error.contains(s.outside.to_str().unwrap()),
            "the error does not leak outside paths: {error}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside_file).unwrap(),
        "needle outside\n"
    );
    // Nothing went through a reverse call: this connection registered no handler.
    let r = ws.call("events.count", json!({})).await;
    assert!(r["result"].is_number(), "{r}");
}

/// The next `host.event` of `kind`.
async fn host_event(ws: &mut Ws, kind: &str) -> Value {
    loop {
        let v = ws.recv_json().await;
        if v["method"] == "host.event" && v["params"]["kind"] == kind {
            return v["params"].clone();
        }
    }
}

#[tokio::test]
async fn write_file_waits_for_approval_and_nothing_outside_is_touched() {
    let s = setup(&[]);
    let mut host = Ws::host(&s.d).await;
    host.call("server.handshake", common::handshake_params())
        .await;
    host.call("host.subscribe", json!({})).await;
    let mut ws = Ws::authed(&s.d).await;
    ws.call("agents.register_basics", json!({})).await;

    let id = ws
        .request(
            "proposal.submit",
            json!({"proposal": {"actions": [call("w", "write_file", json!({"path": "out/new.txt", "content": "made\n"}))]}}),
        )
        .await;
    let event = host_event(&mut host, "approval.requested").await;
    assert_eq!(event["payload"]["action"], "tool:write_file");
    assert!(
        !s.root.join("out/new.txt").exists(),
        "parked: nothing written yet"
    );
    let approval = event["payload"]["id"].as_str().unwrap().to_string();
    let r = host
        .call(
            "host.resolve_approval",
            json!({"approval_id": approval, "approved": true}),
        )
        .await;
    assert_eq!(r["result"]["status"], "approved", "{r}");
    let reply = loop {
        let v = ws.recv_json().await;
        if v["id"] == json!(id) {
            break v;
        }
    };
    assert_eq!(result_of(&reply, "w")["status"], "succeeded", "{reply}");
    assert_eq!(
        std::fs::read_to_string(s.root.join("out/new.txt")).unwrap(),
        "made\n"
    );

    // Denied: rejected, nothing written. Escapes: refused before any approval is asked.
    let id = ws
        .request(
            "proposal.submit",
            json!({"proposal": {"actions": [call("w2", "write_file", json!({"path": "denied.txt", "content": "x"}))]}}),
        )
        .await;
    let event = host_event(&mut host, "approval.requested").await;
    let approval = event["payload"]["id"].as_str().unwrap().to_string();
    host.call(
        "host.resolve_approval",
        json!({"approval_id": approval, "approved": false}),
    )
    .await;
    let reply = loop {
        let v = ws.recv_json().await;
        if v["id"] == json!(id) {
            break v;
        }
    };
    let w2 = result_of(&reply, "w2");
    assert_eq!(w2["status"], "rejected", "{w2}");
    assert!(w2["error"].as_str().unwrap().contains("denied"), "{w2}");
    assert!(!s.root.join("denied.txt").exists());
    let before: Vec<_> = std::fs::read_dir(&s.outside).unwrap().collect();
    assert_eq!(before.len(), 1);
}

#[tokio::test]
async fn without_approvals_edits_need_a_read_first_and_links_out_are_refused() {
    let s = setup(&["--no-approvals"]);
    let mut ws = Ws::authed(&s.d).await;
    ws.call("agents.register_basics", json!({})).await;
    let reply = submit(
        &mut ws,
        vec![call(
            "blind",
            "edit_file",
            json!({"path": "notes.txt", "old_text": "alpha", "new_text": "ALPHA"}),
        )],
    )
    .await;
    let blind = result_of(&reply, "blind");
    assert_eq!(blind["status"], "failed", "{blind}");
    let reply = submit(
        &mut ws,
        vec![call("read", "read_file", json!({"path": "notes.txt"}))],
    )
    .await;
    assert_eq!(result_of(&reply, "read")["status"], "succeeded");
    let reply = submit(
        &mut ws,
        vec![
            call(
                "edit",
                "edit_file",
                json!({"path": "notes.txt", "old_text": "alpha", "new_text": "ALPHA"}),
            ),
            call(
                "out",
                "write_file",
                json!({"path": "escape/planted.txt", "content": "x"}),
            ),
        ],
    )
    .await;
    assert_eq!(result_of(&reply, "edit")["status"], "succeeded", "{reply}");
    assert_eq!(result_of(&reply, "out")["status"], "failed", "{reply}");
    assert!(std::fs::read_to_string(s.root.join("notes.txt"))
        .unwrap()
        .starts_with("ALPHA\n"));
    assert!(!s.outside.join("planted.txt").exists());
    // Bad params name the field.
    let reply = submit(
        &mut ws,
        vec![call("bad", "grep_files", json!({"pattern": "("}))],
    )
    .await;
    let bad = result_of(&reply, "bad");
    assert!(bad["error"].as_str().unwrap().contains("pattern"), "{bad}");
}
