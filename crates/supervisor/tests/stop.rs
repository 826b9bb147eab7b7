//! Stopping: SIGTERM/grace/SIGKILL of the whole process group, escalation, and stops that
//! race the restart policy.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use car_supervisor::{Restart, Status, Supervisor, SupervisorError};
use common::{wait_for, Env, LONG};

/// Ignores SIGTERM (inherited by its `sleep` child), says so, then waits forever.
const STUBBORN: &str = "trap '' TERM\necho armed\nsleep 1000 &\nwait";

async fn armed(env: &Env, id: &str) {
    env.until("the TERM trap", || {
        env.log(id, "stdout.log").contains("armed")
    })
    .await;
}

#[tokio::test]
async fn term_stop_ends_the_script_and_its_children() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec("t", "sleep 1000 &\nwait"))
        .await
        .unwrap();
    env.until("script and sleep", || env.procs().len() == 2)
        .await;
    let rt = sup.stop("t", false).await.unwrap();
    assert_eq!(rt.status, Status::Stopped);
    assert_eq!(rt.last_signal, Some(libc::SIGTERM));
    assert!(env.procs().is_empty(), "{:?}", env.procs());
}

#[tokio::test]
async fn a_script_ignoring_term_is_killed_after_the_grace() {
    let env = Env::new();
    let sup = env.supervisor(); // grace 300 ms
    sup.start(env.spec("stubborn", STUBBORN)).await.unwrap();
    armed(&env, "stubborn").await;
    env.until("script and sleep", || env.procs().len() == 2)
        .await;
    let rt = sup.stop("stubborn", false).await.unwrap();
    assert_eq!(rt.status, Status::Stopped);
    assert_eq!(rt.last_signal, Some(libc::SIGKILL));
    assert!(env.procs().is_empty(), "{:?}", env.procs());
}

#[tokio::test]
async fn kill_stops_at_once_and_escalates_a_pending_term_stop() {
    let env = Env::new();
    let mut config = env.config();
    config.grace = Duration::from_secs(3600);
    let sup = Supervisor::new(config);

    sup.start(env.spec("k", STUBBORN)).await.unwrap();
    armed(&env, "k").await;
    let rt = tokio::time::timeout(LONG, sup.stop("k", true))
        .await
        .expect("kill must not wait out the grace")
        .unwrap();
    assert_eq!(rt.last_signal, Some(libc::SIGKILL));
    assert!(env.procs().is_empty());

    sup.start(env.spec("k2", STUBBORN)).await.unwrap();
    armed(&env, "k2").await;
    let term = {
        let sup = sup.clone();
        tokio::spawn(async move { sup.stop("k2", false).await })
    };
    // Let the term stop begin its (hour-long) grace, then cut it short.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let killed = tokio::time::timeout(LONG, sup.stop("k2", true))
        .await
        .expect("kill escalates")
        .unwrap();
    let termed = tokio::time::timeout(LONG, term)
        .await
        .expect("the term stop returns too")
        .unwrap()
        .unwrap();
    assert_eq!(killed.status, Status::Stopped);
    assert_eq!(termed.status, Status::Stopped);
    assert_eq!(killed.last_signal, Some(libc::SIGKILL));
    assert!(env.procs().is_empty());
}

#[tokio::test]
async fn a_requested_stop_never_restarts() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec_with("a", "exec sleep 1000", Restart::Always, 5))
        .await
        .unwrap();
    let rt = sup.stop("a", false).await.unwrap();
    assert_eq!((rt.status, rt.restart_count), (Status::Stopped, 0));
    // Negative check: with a 50 ms backoff a wrong restart would show up well within this.
    let err = sup
        .wait(
            "a",
            &[Status::Backoff, Status::Starting, Status::Running],
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        SupervisorError::WaitTimeout {
            status: Status::Stopped,
            ..
        }
    ));
    env.assert_no_procs().await;
}

#[tokio::test]
async fn stop_during_backoff_cancels_the_pending_restart() {
    let env = Env::new();
    let mut config = env.config();
    config.max_backoff = Duration::from_secs(3600);
    let sup = Supervisor::new(config);
    let mut spec = env.spec_with("b", "exit 1", Restart::OnFailure, 5);
    spec.backoff = Duration::from_secs(3600);
    sup.start(spec).await.unwrap();
    let backoff = wait_for(&sup, "b", &[Status::Backoff]).await;
    assert_eq!(backoff.restart_count, 1);
    assert_eq!(
        backoff.reason.as_deref(),
        Some("exited with status 1; restart 1 of 5 in 1h")
    );
    let rt = tokio::time::timeout(LONG, sup.stop("b", false))
        .await
        .expect("stop must not wait for the backoff")
        .unwrap();
    assert_eq!(rt.status, Status::Stopped);
    assert_eq!((rt.last_exit_code, rt.reason), (Some(1), None));
    env.assert_no_procs().await;
}

#[tokio::test]
async fn start_during_backoff_starts_now() {
    let env = Env::new();
    let mut config = env.config();
    config.max_backoff = Duration::from_secs(3600);
    let sup = Supervisor::new(config);
    let mut spec = env.spec_with(
        "late",
        "[ -e \"$D/ok\" ] && exec sleep 1000\nexit 1",
        Restart::OnFailure,
        5,
    );
    spec.backoff = Duration::from_secs(3600);
    sup.start(spec.clone()).await.unwrap();
    wait_for(&sup, "late", &[Status::Backoff]).await;
    std::fs::write(env.path().join("ok"), "").unwrap();
    let rt = sup.start(spec).await.unwrap();
    assert_eq!((rt.status, rt.restart_count), (Status::Running, 0));
    sup.stop("late", false).await.unwrap();
    env.assert_no_procs().await;
}

#[tokio::test]
async fn leftover_group_members_are_stopped_when_the_leader_exits() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec("bg", "sleep 1000 &\necho started\nexit 0"))
        .await
        .unwrap();
    let rt = wait_for(&sup, "bg", &[Status::Stopped, Status::Errored]).await;
    assert_eq!((rt.status, rt.last_exit_code), (Status::Stopped, Some(0)));
    assert_eq!(env.log("bg", "stdout.log"), "started\n");
    // The group is gone before the exit is published.
    assert!(env.procs().is_empty(), "{:?}", env.procs());
}
