//! Issue 24: models are owner-scoped for agents and registration opens files safely.
//! Before, any agent could `models.unregister` the host's model and replace it with a
//! same-id `models.register`, and `models.register {path: <fifo>}` parked a blocking thread
//! forever (SIGTERM then hung). Drives a real daemon.

mod common;

use common::runs::refusal;
use common::*;
use serde_json::json;

/// The smallest valid GGUF: header, no metadata, no tensors.
fn tiny_gguf(dir: &std::path::Path) -> String {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

#[tokio::test]
async fn agents_replace_and_remove_only_their_own_models() {
    let d = Daemon::builder().args(["--no-approvals"]).start();
    let files = tempfile::tempdir().unwrap();
    let gguf = tiny_gguf(files.path());
    let mut host = Ws::host(&d).await;
    let r = host
        .call("models.register", json!({"id": "host-model", "path": gguf}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
    let mut a = registered_agent(&d, &mut host, "agent-a").await;
    let mut b = registered_agent(&d, &mut host, "agent-b").await;
    let r = a
        .call("models.register", json!({"id": "a-model", "path": gguf}))
        .await;
    assert!(r.get("error").is_none(), "{r}");

    for (who, id) in [("a", "host-model"), ("b", "a-model"), ("b", "host-model")] {
        let ws = if who == "a" { &mut a } else { &mut b };
        // (`models.remove` is host-only by its declaration.)
        let r = ws.call("models.unregister", json!({"id": id})).await;
        let (code, message, reason) = refusal(&r);
        assert_eq!((code, reason), (-32603, json!("not_owner")), "{id}: {r}");
        assert!(message.contains(id), "{message}");
        let r = ws
            .call("models.register", json!({"id": id, "path": gguf}))
            .await;
        assert_eq!(refusal(&r).2, json!("not_owner"), "replace {id}: {r}");
    }
    // Nothing changed hands.
    let list = host.call("models.list", json!({})).await;
    let rows = list["result"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"));
    let owner_of = |id: &str| {
        rows.iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} gone: {list}"))["owner"]
            .clone()
    };
    assert_eq!(owner_of("host-model"), serde_json::Value::Null);
    assert_eq!(owner_of("a-model"), json!("agent-a"));
    // The owner and the host manage what they may.
    let r = a.call("models.unregister", json!({"id": "a-model"})).await;
    assert!(r.get("error").is_none(), "{r}");
    let r = host
        .call("models.unregister", json!({"id": "host-model"}))
        .await;
    assert!(r.get("error").is_none(), "{r}");
}

#[tokio::test]
async fn fifos_and_devices_are_refused_promptly_and_the_daemon_shuts_down() {
    let mut d = Daemon::builder().args(["--no-approvals"]).start();
    let files = tempfile::tempdir().unwrap();
    let fifo = files.path().join("m.gguf");
    mkfifo(&fifo);
    let link = files.path().join("zero.gguf");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let mut host = Ws::host(&d).await;
    let mut a = registered_agent(&d, &mut host, "agent-a").await;
    for path in [
        fifo.to_str().unwrap(),
        "/dev/zero",
        "/dev/urandom",
        link.to_str().unwrap(),
    ] {
        let r = tokio::time::timeout(
            WAIT,
            a.call("models.register", json!({"id": "m", "path": path})),
        )
        .await
        .unwrap_or_else(|_| panic!("models.register {path} never answered"));
        assert_eq!(code(&r), -32602, "{path}: {r}");
        assert!(message(&r).contains("not a regular file"), "{path}: {r}");
    }
    let r = a.call("models.list", json!({})).await;
    assert_eq!(r["result"], json!([]), "{r}");
    // No blocking thread is parked on the FIFO: SIGTERM ends the daemon.
    drop(a);
    drop(host);
    let status = d.terminate();
    assert!(status.success(), "car-server exited with {status}");
}
