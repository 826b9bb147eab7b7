//! Holes found in a read of the daemon, each closed and pinned here against a real daemon:
//! remote model registration (who may, which key), the credential directory's mode, the
//! daemon-wide regex budget of policies, and a symlinked alias of the memory directory.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{code, message, Daemon, Ws};
use serde_json::json;

#[tokio::test]
async fn only_a_host_registers_a_remote_endpoint_and_keys_are_named_narrowly() {
    let d = Daemon::builder().env("HOME_API_KEY", "k").start();
    let remote = json!({"id": "r", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "HOME_API_KEY"});
    let mut op = Ws::authed(&d).await;
    let r = op.call("models.register", remote.clone()).await;
    assert_eq!(code(&r), -32603, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "host_required", "{r}");
    let r = op.call("models.list", json!({})).await;
    assert!(
        !r.to_string().contains("127.0.0.1:9"),
        "nothing was registered: {r}"
    );
    let mut host = Ws::host(&d).await;
    let r = host.call("models.register", remote).await;
    assert_eq!(r["result"]["registered"], true, "{r}");
    // A key must come from a *_API_KEY variable or a secret entry, never any variable.
    for var in [
        "HOME",
        "CAR_AUTH_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "openai_api_key",
    ] {
        let r = host
            .call(
                "models.register",
                json!({"id": "r2", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": var}),
            )
            .await;
        assert_eq!(code(&r), -32602, "{var}: {r}");
        assert!(message(&r).contains("api_key_env"), "{r}");
    }
    let r = host
        .call(
            "models.register",
            json!({"id": "r3", "base_url": "http://127.0.0.1:9/v1", "model": "m", "api_key_secret": "car/OPENAI_API_KEY"}),
        )
        .await;
    assert_eq!(r["result"]["registered"], true, "{r}");
}

#[test]
fn a_group_readable_credential_directory_is_tightened_and_a_symlinked_one_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("car");
    let dir = home.join("ai.parslee.car");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let d = Daemon::builder().home(&home).start();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "tightened");
    assert!(d.stderr().contains("tightening"), "and said so");
    drop(d);

    let elsewhere = scratch.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let home2 = scratch.path().join("car2");
    std::fs::create_dir_all(&home2).unwrap();
    std::os::unix::fs::symlink(&elsewhere, home2.join("ai.parslee.car")).unwrap();
    match Daemon::builder().home(&home2).spawn() {
        Ok(_) => panic!("a daemon started with a symlinked credential directory"),
        Err((_, stderr)) => assert!(stderr.contains("symbolic link"), "{stderr}"),
    }
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "nothing written through it"
    );
}

#[tokio::test]
async fn policy_patterns_share_one_bounded_budget_released_on_close() {
    let d = Daemon::start();
    let per_pattern = 512 << 10;
    let total = 256 << 20;
    let fits = total / per_pattern;
    let mut a = Ws::authed(&d).await;
    let pattern = |i: usize| json!({"name": format!("p{i}"), "rule": "deny_tool_param", "target": "shell", "key": "cmd", "pattern": format!("^x{i}")});
    for i in 0..fits {
        let r = a.call("policy.register", pattern(i)).await;
        assert!(r["result"].is_object(), "pattern {i}: {r}");
    }
    let mut b = Ws::authed(&d).await;
    let r = b.call("policy.register", pattern(9999)).await;
    assert_eq!(code(&r), -32603, "{r}");
    assert_eq!(r["error"]["data"]["reason"], "pattern_budget", "{r}");
    // A rule without a pattern needs no budget.
    let r = b
        .call(
            "policy.register",
            json!({"name": "d", "rule": "deny_tool", "target": "rm"}),
        )
        .await;
    assert!(r["result"].is_object(), "{r}");
    drop(a);
    // Released when the holder's connection closes (its teardown is asynchronous).
    let deadline = std::time::Instant::now() + common::WAIT;
    loop {
        let r = b.call("policy.register", pattern(10_000)).await;
        if r["result"].is_object() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never released: {r}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_symlinked_alias_cannot_reach_the_shared_graph() {
    let d = Daemon::start();
    let mut ws = Ws::authed(&d).await;
    let r = ws
        .call(
            "memory.add_fact",
            json!({"subject": "s", "body": "kept", "kind": "fact"}),
        )
        .await;
    assert!(r["error"].is_null(), "{r}");
    let memory = d.home.join("memory");
    std::os::unix::fs::symlink(&memory, memory.join("alias")).unwrap();
    let shared = memory.join("shared.json");
    let before = std::fs::read(&shared).ok();
    for path in ["alias/shared.json", "alias/SHARED.JSON", "Shared.json"] {
        let r = ws.call("memory.persist", json!({"path": path})).await;
        assert_eq!(code(&r), -32602, "{path}: {r}");
    }
    assert_eq!(
        std::fs::read(&shared).ok(),
        before,
        "shared.json is untouched"
    );
}
