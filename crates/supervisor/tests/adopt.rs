//! Orphan adoption across supervisors (daemon restarts) and stale pid records.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;

use car_supervisor::{Restart, Status, SupervisorError};
use common::{Env, MARKER_VAR};

const TICKER: &str = "i=0\nwhile :; do echo \"tick $i\"; i=$((i+1)); sleep 0.1; done";

#[tokio::test]
async fn a_live_orphan_is_adopted_not_duplicated_and_then_stopped() {
    let env = Env::new();
    let spec = env.spec("orphan", TICKER);
    let a = env.supervisor();
    let first = a.start(spec.clone()).await.unwrap();
    let pid = first.pid.unwrap();
    a.shutdown(false).await;
    drop(a);

    assert!(
        common::alive(pid),
        "shutdown(false) leaves the child running"
    );
    let b = env.supervisor();
    assert_eq!(b.recorded_ids(), ["orphan"]);
    let adopted = b.start(spec.clone()).await.unwrap();
    assert_eq!(adopted.status, Status::Running);
    assert_eq!(adopted.pid, Some(pid));
    assert!(adopted.adopted);
    assert_eq!(adopted.started_at, first.started_at);
    assert_eq!(env.script_procs("orphan"), vec![pid], "no second process");
    assert_eq!(b.start(spec).await.unwrap().pid, Some(pid));

    // The orphan still logs to its files after its supervisor is gone.
    let before = env.log("orphan", "stdout.log").lines().count();
    env.until("more ticks", || {
        env.log("orphan", "stdout.log").lines().count() > before + 2
    })
    .await;

    let stopped = b.stop("orphan", false).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!((stopped.last_exit_code, stopped.last_signal), (None, None));
    assert!(!env.run_dir().join("orphan.json").exists());
    assert!(env.procs().is_empty(), "{:?}", env.procs());
}

#[tokio::test]
async fn an_adopted_exit_is_noticed_and_the_policy_applies() {
    let env = Env::new();
    // First run waits for `go` and exits 0; later runs stay up.
    let body = "[ -e \"$D/first-done\" ] && exec sleep 1000\n\
                while [ ! -e \"$D/go\" ]; do sleep 0.05; done\n\
                touch \"$D/first-done\"\nexit 0";
    let spec = env.spec_with("ex", body, Restart::OnFailure, 3);
    let a = env.supervisor();
    let orphan = a.start(spec.clone()).await.unwrap().pid.unwrap();
    a.shutdown(false).await;
    drop(a);

    let b = env.supervisor();
    let adopted = b.start(spec).await.unwrap();
    assert_eq!((adopted.pid, adopted.adopted), (Some(orphan), true));
    let mut events = b.subscribe();
    std::fs::write(env.path().join("go"), "").unwrap();
    // Exit status unknown → on_failure restarts it as a child of ours.
    let seen = common::events_until(&mut events, "ex", |rt| rt.status == Status::Running).await;
    let backoff = seen.iter().find(|rt| rt.status == Status::Backoff).unwrap();
    assert_eq!((backoff.last_exit_code, backoff.last_signal), (None, None));
    assert!(backoff
        .reason
        .as_deref()
        .unwrap()
        .starts_with("exited (status unknown"));
    let rerun = seen.last().unwrap();
    assert_eq!(rerun.restart_count, 1);
    assert!(!rerun.adopted);
    assert_ne!(rerun.pid, Some(orphan));
    b.stop("ex", false).await.unwrap();
    env.assert_no_procs().await;
}

fn write_record(run_dir: &Path, id: &str, pid: u32, starttime: u64) {
    std::fs::create_dir_all(run_dir).unwrap();
    let record = serde_json::json!({
        "pid": pid, "pgid": pid, "starttime": starttime, "command": "/bin/sleep",
        "started_at": "2024-01-01T00:00:00.000Z", "started_unix_ms": 1_704_067_200_000u64,
    });
    std::fs::write(run_dir.join(format!("{id}.json")), record.to_string()).unwrap();
}

/// A `sleep` in its own process group carrying the test marker (not spawned by a supervisor).
fn foreign_sleeper(env: &Env) -> std::process::Child {
    std::process::Command::new("/bin/sleep")
        .arg("1000")
        .env(MARKER_VAR, &env.marker)
        .process_group(0)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn stale_records_are_ignored_and_replaced() {
    let env = Env::new();
    let sup = env.supervisor();

    // A dead pid.
    let mut gone = std::process::Command::new("/bin/true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    write_record(&env.run_dir(), "dead", dead, 1);
    let rt = sup
        .start(env.spec("dead", "exec sleep 1000"))
        .await
        .unwrap();
    assert!(!rt.adopted);
    assert_ne!(rt.pid, Some(dead));
    let record = env.read("run/agents/dead.json");
    assert!(
        record.contains(&format!("\"pid\": {}", rt.pid.unwrap())),
        "{record}"
    );
    sup.stop("dead", true).await.unwrap();

    // A live pid whose start time differs: the pid was reused by another process.
    let mut sleeper = foreign_sleeper(&env);
    let pid = sleeper.id();
    let starttime: u64 = common::stat_field(pid, 22).unwrap().parse().unwrap();
    write_record(&env.run_dir(), "reused", pid, starttime + 1);
    let rt = sup
        .start(env.spec("reused", "exec sleep 1000"))
        .await
        .unwrap();
    assert!(!rt.adopted);
    assert_ne!(rt.pid, Some(pid));
    sup.stop("reused", true).await.unwrap();
    assert!(
        common::alive(pid),
        "an unrelated process is never signalled"
    );

    // A malformed record.
    std::fs::write(env.run_dir().join("junk.json"), "{").unwrap();
    let rt = sup
        .start(env.spec("junk", "exec sleep 1000"))
        .await
        .unwrap();
    assert!(!rt.adopted);
    sup.stop("junk", true).await.unwrap();

    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    env.assert_no_procs().await;
}

#[tokio::test]
async fn stop_and_adopt_reach_orphans_unknown_to_this_supervisor() {
    let env = Env::new();
    let sup = env.supervisor();
    let mut sleeper = foreign_sleeper(&env);
    let pid = sleeper.id();
    let starttime: u64 = common::stat_field(pid, 22).unwrap().parse().unwrap();

    // adopt() with nothing recorded: nothing happens.
    assert_eq!(sup.adopt(env.spec("o", "exit 0")).await.unwrap(), None);
    assert!(sup.status("o").is_none());

    write_record(&env.run_dir(), "o", pid, starttime);
    let rt = sup.adopt(env.spec("o", "exit 0")).await.unwrap().unwrap();
    assert_eq!(
        (rt.pid, rt.adopted, rt.status),
        (Some(pid), true, Status::Running)
    );
    sup.stop("o", false).await.unwrap();
    let status = sleeper.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGTERM)
    );

    // stop() of an id never started here, with a live recorded orphan.
    let mut sleeper = foreign_sleeper(&env);
    let pid = sleeper.id();
    let starttime: u64 = common::stat_field(pid, 22).unwrap().parse().unwrap();
    write_record(&env.run_dir(), "o2", pid, starttime);
    let other = env.supervisor();
    let rt = other.stop("o2", false).await.unwrap();
    assert_eq!((rt.status, rt.adopted), (Status::Stopped, true));
    sleeper.wait().unwrap();
    assert!(!env.run_dir().join("o2.json").exists());

    // Neither known nor recorded (a stale record is removed on the way).
    write_record(&env.run_dir(), "o3", pid, starttime);
    assert!(matches!(
        other.stop("o3", false).await,
        Err(SupervisorError::NotFound(_))
    ));
    assert!(other.status("o3").is_none());
    assert!(other.recorded_ids().is_empty());
    env.assert_no_procs().await;
}
