//! Acceptance: state roots, relative CAR_HOME, side-by-side and non-primary daemons
//! (issue 2 §4).

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn relative_car_home_exits_2_naming_the_value() {
    let Err((status, stderr)) = Daemon::builder()
        .env("CAR_HOME", "relative/car-home")
        .spawn()
    else {
        panic!("daemon started with a relative CAR_HOME")
    };
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("relative/car-home"), "{stderr}");
}

#[tokio::test]
async fn bad_flags_exit_2() {
    let Err((status, stderr)) = Daemon::builder()
        .args(["--handler-timeout", "soon"])
        .spawn()
    else {
        panic!("daemon accepted a bad duration")
    };
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("soon"), "{stderr}");
}

#[tokio::test]
async fn two_roots_run_side_by_side_without_touching_each_other() {
    let a = Daemon::start();
    let b = Daemon::start();
    assert!(a.primary && b.primary);
    assert_ne!(a.port, b.port);
    assert_ne!(a.token(), b.token());
    assert!(a.socket.starts_with(&a.home) && b.socket.starts_with(&b.home));
    // Each token opens only its own daemon.
    let mut ws = Ws::tcp(&a.ws_url).await;
    assert_eq!(
        code(&ws.call("session.auth", json!({"token": b.token()})).await),
        -32603
    );
    Ws::authed(&a).await;
    Ws::authed(&b).await;
    for d in [&a, &b] {
        let names: Vec<String> = std::fs::read_dir(&d.home)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names.contains(&"run".to_string()) && names.contains(&"ai.parslee.car".to_string()),
            "{names:?}"
        );
    }
}

#[tokio::test]
async fn a_second_daemon_on_the_same_root_is_not_primary() {
    let first = Daemon::builder().args(["--require-auth"]).start();
    assert!(
        first.stderr().contains("deprecated"),
        "--require-auth logs a deprecation warning"
    );
    let token = first.token();
    let second = Daemon::builder()
        .home(first.home.clone())
        .env("CAR_AUTH_TOKEN", "second-daemon-token")
        .start();
    assert!(!second.primary);
    assert_eq!(
        second.socket.file_name().unwrap().to_str().unwrap(),
        format!("car-server-{}.sock", second.port)
    );
    assert_eq!(
        first.token(),
        token,
        "the non-primary daemon left the token file alone"
    );
    let log = second.stderr();
    assert!(
        log.contains("no token file written") && log.contains("per-port socket"),
        "{log}"
    );
    // The second daemon answers its supplied token over TCP and its own socket.
    let mut ws = Ws::unix(&second.socket).await;
    assert_eq!(
        ws.call("session.auth", json!({"token": "second-daemon-token"}))
            .await["result"]["ok"],
        true
    );
    let mut ws = Ws::tcp(&second.ws_url).await;
    assert_eq!(
        code(&ws.call("session.auth", json!({"token": token})).await),
        -32603
    );
    // The first daemon still owns the shared socket.
    let mut ws = Ws::unix(&first.socket).await;
    assert_eq!(
        ws.call("session.auth", json!({"token": token})).await["result"]["ok"],
        true
    );

    // The token-file form is read, trimmed and deleted.
    let token_file = first.home.join("third.token");
    std::fs::write(&token_file, "  third-token\n").unwrap();
    let third = Daemon::builder()
        .home(first.home.clone())
        .args(["--auth-token-file", token_file.to_str().unwrap()])
        .start();
    assert!(!third.primary && !token_file.exists());
    let mut ws = Ws::tcp(&third.ws_url).await;
    assert_eq!(
        ws.call("session.auth", json!({"token": "third-token"}))
            .await["result"]["ok"],
        true
    );
}

#[tokio::test]
async fn a_stale_lock_and_socket_do_not_block_a_new_primary() {
    let mut first = Daemon::start();
    let home = first.home.clone();
    first.kill(); // SIGKILL: socket file and token files stay behind.
    assert!(home.join("run").join("car-server.sock").exists());
    let second = Daemon::builder().home(home).start();
    assert!(second.primary);
    Ws::authed(&second).await;
}

#[test]
fn version_and_help() {
    let bin = car_test_harness::car_server_bin();
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("car-server {}", car_proto::CAR_VERSION)
    );
    let out = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--port",
        "--bind",
        "--no-auth",
        "--auth-token-file",
        "--handler-timeout",
        "--idle-timeout",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}

#[test]
fn a_fifo_or_device_as_the_token_file_is_refused_at_once() {
    // Only a daemon that is not primary for its state root reads --auth-token-file.
    let first = Daemon::start();
    let scratch = tempfile::tempdir().unwrap();
    let fifo = scratch.path().join("token.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // A blocking read of either would never finish (no writer; endless zeroes).
    for (path, kind) in [
        (fifo.to_str().unwrap(), "is a FIFO, not a regular file"),
        ("/dev/zero", "is a character device, not a regular file"),
    ] {
        match Daemon::builder()
            .home(first.home.clone())
            .args(["--auth-token-file", path])
            .spawn()
        {
            Ok(_) => panic!("a daemon started with --auth-token-file {path}"),
            Err((_, stderr)) => assert!(
                stderr.contains(&format!("cannot read --auth-token-file {path}: {kind}")),
                "{stderr}"
            ),
        }
    }
}
