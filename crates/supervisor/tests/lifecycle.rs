//! Spawning, exit handling and the restart policy, with real `/bin/sh` children.
#![cfg(target_os = "linux")]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use car_supervisor::{Restart, Status, SupervisorError};
use common::{events_until, wait_for, Env};

#[tokio::test]
async fn spawn_redirects_output_sets_env_and_records_pid() {
    let env = Env::new();
    let sup = env.supervisor();
    let mut events = sup.subscribe();
    let work = env.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut spec = env.spec(
        "a1",
        r#"echo "foo=$FOO"
echo "path=${PATH:+set}"
echo "cwd=$(pwd)"
echo "stdin=$(readlink /proc/$$/fd/0)"
echo "stdout=$(readlink /proc/$$/fd/1)"
echo "to-stderr" >&2
exec sleep 1000"#,
    );
    spec.env.insert("FOO".into(), "bar baz".into());
    spec.cwd = Some(work.clone());
    let rt = sup.start(spec).await.unwrap();
    assert_eq!(rt.status, Status::Running);
    assert!(!rt.adopted);
    let pid = rt.pid.unwrap();
    let seen = events_until(&mut events, "a1", |rt| rt.status == Status::Running).await;
    let statuses: Vec<Status> = seen.iter().map(|rt| rt.status).collect();
    assert_eq!(statuses, [Status::Starting, Status::Running]);

    // Own process group.
    assert_eq!(common::stat_field(pid, 5).unwrap(), pid.to_string());
    env.until("the script's output", || {
        env.log("a1", "stdout.log").contains("stdout=")
    })
    .await;
    let out = env.log("a1", "stdout.log");
    let stdout_path = env.logs_dir().join("agents/a1/stdout.log");
    for want in [
        "foo=bar baz".to_string(),
        "path=set".to_string(),
        format!("cwd={}", work.display()),
        "stdin=/dev/null".to_string(),
        format!("stdout={}", stdout_path.display()),
    ] {
        assert!(
            out.lines().any(|l| l == want),
            "missing {want:?} in {out:?}"
        );
    }
    assert_eq!(env.log("a1", "stderr.log"), "to-stderr\n");
    let log_mode = std::fs::metadata(&stdout_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(log_mode & 0o777, 0o600);

    let record_path = env.run_dir().join("a1.json");
    let mode = std::fs::metadata(&record_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    assert_eq!(record["pid"], pid);
    assert_eq!(record["pgid"], pid);
    assert_eq!(record["command"], "/bin/sh");
    assert_eq!(record["started_at"].as_str(), rt.started_at.as_deref());
    assert_eq!(
        record["starttime"].as_u64().unwrap().to_string(),
        common::stat_field(pid, 22).unwrap()
    );

    let stopped = sup.stop("a1", false).await.unwrap();
    assert_eq!(stopped.status, Status::Stopped);
    assert_eq!(stopped.pid, None);
    assert_eq!(stopped.last_signal, Some(libc::SIGTERM));
    assert!(!record_path.exists());
    env.assert_no_procs().await;
}

#[tokio::test]
async fn never_policy_maps_exits_to_stopped_or_errored() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec("ok", "exit 0")).await.unwrap();
    sup.start(env.spec("bad", "exit 3")).await.unwrap();
    sup.start(env.spec("sig", "kill -9 $$")).await.unwrap();

    let ok = wait_for(&sup, "ok", &[Status::Stopped, Status::Errored]).await;
    assert_eq!(
        (ok.status, ok.last_exit_code, &ok.reason),
        (Status::Stopped, Some(0), &None)
    );
    let bad = wait_for(&sup, "bad", &[Status::Stopped, Status::Errored]).await;
    assert_eq!(bad.status, Status::Errored);
    assert_eq!(bad.last_exit_code, Some(3));
    assert_eq!(bad.reason.as_deref(), Some("exited with status 3"));
    let sig = wait_for(&sup, "sig", &[Status::Stopped, Status::Errored]).await;
    assert_eq!(sig.status, Status::Errored);
    assert_eq!((sig.last_exit_code, sig.last_signal), (None, Some(9)));
    assert_eq!(sig.reason.as_deref(), Some("killed by signal 9 (SIGKILL)"));
    for rt in [&ok, &bad, &sig] {
        assert_eq!((rt.pid, rt.restart_count), (None, 0));
    }
    assert!(!env.run_dir().join("bad.json").exists());
    env.assert_no_procs().await;
}

#[tokio::test]
async fn on_failure_crash_loop_backs_off_then_errors_at_the_limit() {
    let env = Env::new();
    let sup = env.supervisor();
    let mut events = sup.subscribe();
    sup.start(env.spec_with("loop", "exit 3", Restart::OnFailure, 2))
        .await
        .unwrap();
    let seen = events_until(&mut events, "loop", |rt| rt.status == Status::Errored).await;
    let backoffs: Vec<&str> = seen
        .iter()
        .filter(|rt| rt.status == Status::Backoff)
        .map(|rt| rt.reason.as_deref().unwrap())
        .collect();
    assert_eq!(
        backoffs,
        [
            "exited with status 3; restart 1 of 2 in 50ms",
            "exited with status 3; restart 2 of 2 in 100ms"
        ]
    );
    let pids: std::collections::BTreeSet<u32> = seen.iter().filter_map(|rt| rt.pid).collect();
    assert_eq!(pids.len(), 3, "three distinct runs: {seen:#?}");
    let last = seen.last().unwrap();
    assert_eq!(last.restart_count, 2);
    assert_eq!(last.last_exit_code, Some(3));
    let reason = last.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("crash loop: restart limit 2 reached"),
        "{reason}"
    );
    assert!(reason.ends_with("last exited with status 3"), "{reason}");
    assert_eq!(sup.status("loop").unwrap(), *last);
    env.assert_no_procs().await;
}

#[tokio::test]
async fn on_failure_stops_after_a_clean_exit_and_always_restarts_it() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec_with("clean", "exit 0", Restart::OnFailure, 3))
        .await
        .unwrap();
    let clean = wait_for(&sup, "clean", &[Status::Stopped, Status::Errored]).await;
    assert_eq!((clean.status, clean.restart_count), (Status::Stopped, 0));

    sup.start(env.spec_with("always", "exit 0", Restart::Always, 2))
        .await
        .unwrap();
    let always = wait_for(&sup, "always", &[Status::Errored]).await;
    assert_eq!(always.restart_count, 2);
    assert_eq!(always.last_exit_code, Some(0));
    assert!(always.reason.unwrap().contains("restart limit 2 reached"));
    env.assert_no_procs().await;
}

#[tokio::test]
async fn a_run_longer_than_stable_after_resets_the_streak() {
    let env = Env::new();
    let mut config = env.config();
    config.stable_after = Duration::from_millis(200);
    let sup = car_supervisor::Supervisor::new(config);
    let mut events = sup.subscribe();
    // Each run lasts ≥ 400 ms > stable_after, so the limit of 1 is never reached.
    sup.start(env.spec_with("steady", "sleep 0.4; exit 1", Restart::OnFailure, 1))
        .await
        .unwrap();
    let seen = events_until(&mut events, "steady", |rt| {
        rt.restart_count >= 3 || rt.status == Status::Errored
    })
    .await;
    assert!(
        seen.iter().all(|rt| rt.status != Status::Errored),
        "{seen:#?}"
    );
    for rt in seen.iter().filter(|rt| rt.status == Status::Backoff) {
        assert!(rt
            .reason
            .as_deref()
            .unwrap()
            .contains("restart 1 of 1 in 50ms"));
    }
    sup.stop("steady", false).await.unwrap();
    env.assert_no_procs().await;
}

#[tokio::test]
async fn invalid_specs_and_spawn_failures_are_reported() {
    let env = Env::new();
    let sup = env.supervisor();
    let missing = car_supervisor::LaunchSpec::new("missing", "/nonexistent/agent-binary");
    let err = sup.start(missing).await.unwrap_err();
    let SupervisorError::Spawn { id, reason } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(id, "missing");
    assert!(
        reason.starts_with("spawn failed: /nonexistent/agent-binary: No such file"),
        "{reason}"
    );
    let rt = sup.status("missing").unwrap();
    assert_eq!(rt.status, Status::Errored);
    assert_eq!(rt.reason.as_deref(), Some(reason.as_str()));

    let mut bad_cwd = env.spec("cwd", "exit 0");
    bad_cwd.cwd = Some(env.path().join("no-such-dir"));
    let err = sup.start(bad_cwd).await.unwrap_err().to_string();
    assert!(
        err.contains("working directory") && err.contains("is not a directory"),
        "{err}"
    );

    let relative = car_supervisor::LaunchSpec::new("rel", "bin/sh");
    assert!(matches!(
        sup.start(relative).await,
        Err(SupervisorError::InvalidSpec { .. })
    ));
    for id in ["", "..", "a/b"] {
        let spec = car_supervisor::LaunchSpec::new(id, "/bin/sh");
        assert!(matches!(
            sup.start(spec).await,
            Err(SupervisorError::InvalidSpec { .. })
        ));
    }
    assert!(matches!(
        sup.stop("nobody", false).await,
        Err(SupervisorError::NotFound(_))
    ));
    assert!(sup.status("nobody").is_none());
}

#[tokio::test]
async fn start_is_a_no_op_while_running_and_restart_replaces_the_process() {
    let env = Env::new();
    let sup = env.supervisor();
    let spec = env.spec("svc", "exec sleep 1000");
    let first = sup.start(spec.clone()).await.unwrap();
    let again = sup.start(spec.clone()).await.unwrap();
    assert_eq!(first.pid, again.pid);
    assert_eq!(env.procs().len(), 1);

    let restarted = sup.restart(spec).await.unwrap();
    assert_eq!(restarted.status, Status::Running);
    assert_ne!(restarted.pid, first.pid);
    assert_eq!(restarted.restart_count, 0);
    assert!(!common::alive(first.pid.unwrap()));
    assert_eq!(env.procs(), vec![restarted.pid.unwrap()]);
    sup.stop("svc", false).await.unwrap();
    env.assert_no_procs().await;
}

#[tokio::test]
async fn wait_is_event_driven_and_times_out_with_the_current_status() {
    let env = Env::new();
    let sup = env.supervisor();
    assert!(matches!(
        sup.wait("ghost", &[Status::Running], common::LONG).await,
        Err(SupervisorError::NotFound(_))
    ));
    sup.start(env.spec("w", "exec sleep 1000")).await.unwrap();
    let now = sup
        .wait("w", &[Status::Running], common::LONG)
        .await
        .unwrap();
    assert_eq!(now.status, Status::Running);

    let err = sup
        .wait(
            "w",
            &[Status::Stopped, Status::Errored],
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        SupervisorError::WaitTimeout {
            status: Status::Running,
            ..
        }
    ));
    let msg = err.to_string();
    assert_eq!(
        msg,
        "timed out after 200ms waiting for agent `w` to become stopped or errored; it is running"
    );

    let waiter = {
        let sup = sup.clone();
        tokio::spawn(async move { sup.wait("w", &[Status::Stopped], common::LONG).await })
    };
    tokio::task::yield_now().await;
    sup.stop("w", false).await.unwrap();
    let rt = waiter.await.unwrap().unwrap();
    assert_eq!(rt.status, Status::Stopped);
    env.assert_no_procs().await;
}

#[tokio::test]
async fn forget_stops_and_drops_state_but_keeps_logs() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec("f", "echo hello; exec sleep 1000"))
        .await
        .unwrap();
    env.until("output", || env.log("f", "stdout.log") == "hello\n")
        .await;
    sup.forget("f").await.unwrap();
    assert!(env.procs().is_empty());
    assert!(sup.status("f").is_none());
    assert!(!env.run_dir().join("f.json").exists());
    let tail = sup
        .tail_log("f", 10, car_supervisor::LogStream::Combined, 0)
        .unwrap();
    assert_eq!(tail.lines, ["hello"]);
    assert!(matches!(
        sup.forget("f").await,
        Err(SupervisorError::NotFound(_))
    ));
}

#[tokio::test]
async fn shutdown_with_stop_ends_every_child_and_refuses_new_starts() {
    let env = Env::new();
    let sup = env.supervisor();
    sup.start(env.spec("s1", "exec sleep 1000")).await.unwrap();
    sup.start(env.spec("s2", "sleep 1000 & wait"))
        .await
        .unwrap();
    sup.shutdown(true).await;
    assert!(env.procs().is_empty(), "{:?}", env.procs());
    for (_, rt) in sup.list() {
        assert_eq!(rt.status, Status::Stopped);
    }
    assert!(sup.recorded_ids().is_empty());
    assert!(matches!(
        sup.start(env.spec("s3", "exit 0")).await,
        Err(SupervisorError::ShutDown(_))
    ));
}
