//! Command tasks: `tasks.schedule` validation, daemon timers running real processes,
//! unscheduling, restart survival and the kill after the grace period.

use car_scheduler::CommandTaskExt as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use car_scheduler::{
    decode, Backend, CommandTask, CommandTasks, DaemonTimers, OsScheduler, ScheduleRequest,
    SchedulerError, TaskStore,
};
use serde_json::{json, Value};

/// Writes an executable /bin/sh script.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Polls `cond` every 50 ms for up to 30 s.
async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn request(v: Value) -> Result<CommandTask, SchedulerError> {
    CommandTask::from_request(decode::<ScheduleRequest>(v)?)
}

struct Fixture {
    dir: tempfile::TempDir,
    store: TaskStore,
    timers: DaemonTimers,
    tasks: CommandTasks,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let timers = DaemonTimers::start(
        store.clone(),
        dir.path().join("logs"),
        Duration::from_secs(1),
    )
    .unwrap();
    let os = OsScheduler::new(store.clone(), dir.path().join("units"), dir.path(), false);
    let tasks = CommandTasks::new(store.clone(), timers.clone(), os);
    Fixture {
        dir,
        store,
        timers,
        tasks,
    }
}

#[test]
fn schedule_validation_names_fields() {
    let dir = tempfile::tempdir().unwrap();
    let prog = script(dir.path(), "ok.sh", "true");
    let prog = prog.to_str().unwrap();
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let field = |v: Value| request(v).unwrap_err().field().unwrap().to_owned();

    let t = request(
        json!({"name": "Nightly Backup!", "program": prog, "cadence": {"interval_secs": 60}}),
    )
    .unwrap();
    assert!(t.id.starts_with("nightly-backup-") && t.id.len() == "nightly-backup-".len() + 6);
    assert_eq!(
        (t.durable, t.backend, t.schedule.as_str()),
        (true, Backend::Systemd, "60")
    );
    let t = request(
        json!({"name": "c", "program": prog, "durable": false, "cadence": {"cron": "*/5 * * * *"}}),
    )
    .unwrap();
    assert_eq!(
        (t.backend, t.schedule.as_str()),
        (Backend::Daemon, "*/5 * * * *")
    );

    assert_eq!(
        field(json!({"name": "x", "program": prog, "cadence": {}})),
        "cadence"
    );
    assert_eq!(
        field(
            json!({"name": "x", "program": prog, "cadence": {"interval_secs": 5, "cron": "* * * * *"}})
        ),
        "cadence"
    );
    assert_eq!(
        field(json!({"name": "x", "program": prog, "cadence": {"cron": "* * 32 * *"}})),
        "cadence.cron"
    );
    for bad in [json!(0), json!(1.5), json!(-3)] {
        assert_eq!(
            field(json!({"name": "x", "program": prog, "cadence": {"interval_secs": bad}})),
            "cadence.interval_secs"
        );
    }
    let cadence = json!({"interval_secs": 5});
    assert_eq!(
        field(json!({"name": "x", "program": "ok.sh", "cadence": cadence})),
        "program"
    );
    assert_eq!(
        field(json!({"name": "x", "program": "/nonexistent/prog", "cadence": cadence})),
        "program"
    );
    assert_eq!(
        field(json!({"name": "x", "program": plain, "cadence": cadence})),
        "program"
    );
    assert_eq!(
        field(json!({"name": "x", "program": dir.path(), "cadence": cadence})),
        "program"
    );
    assert_eq!(
        field(json!({"name": " ", "program": prog, "cadence": cadence})),
        "name"
    );
    assert_eq!(
        field(json!({"name": "x", "program": prog, "cadence": cadence, "working_dir": "rel"})),
        "working_dir"
    );
    assert_eq!(
        field(json!({"name": "x", "program": prog, "cadence": cadence, "env": {"A=B": "c"}})),
        "env"
    );
    assert_eq!(
        field(json!({"name": "x", "program": prog, "cadence": cadence, "args": ["a", 1]})),
        "args[1]"
    );
    assert_eq!(field(json!({"name": "x", "cadence": cadence})), "program");
}

#[tokio::test]
async fn daemon_timer_runs_until_unscheduled() {
    let f = fixture();
    let out = f.dir.path().join("out.txt");
    let prog = script(
        f.dir.path(),
        "tick.sh",
        r#"echo "tick $GREETING $(pwd)" >> "$1""#,
    );
    let work = f.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let resp = f
        .tasks
        .schedule(
            decode(json!({
                "name": "ticker", "program": prog, "args": [out], "durable": false,
                "cadence": {"interval_secs": 1}, "env": {"GREETING": "hi"},
                "working_dir": work, "permission_tier": "low",
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!((resp.backend, resp.durable), (Backend::Daemon, false));
    assert_eq!(resp.task.permission_tier.as_deref(), Some("low"));
    let id = resp.id.clone();
    assert_eq!(f.timers.scheduled(), vec![id.clone()]);

    wait_for("two runs", || lines(&out) >= 2).await;
    let first = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        first.lines().next().unwrap(),
        format!("tick hi {}", work.display())
    );
    wait_for("two recorded runs", || {
        f.store.load_command(&id).unwrap().unwrap().run_count >= 2
    })
    .await;
    let listed = f.tasks.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].last_exit_code),
        (id.as_str(), Some(0))
    );
    assert!(listed[0].run_count >= 2 && listed[0].last_run_at.is_some());
    let log =
        std::fs::read_to_string(f.dir.path().join("logs/tasks").join(format!("{id}.log"))).unwrap();
    assert!(
        log.contains("start:") && log.contains("end: exit status: 0"),
        "{log}"
    );

    let gone = f
        .tasks
        .unschedule(&format!("ai.parslee.car.task.{id}"))
        .await
        .unwrap();
    assert_eq!((gone.os_removed, gone.deleted), (false, true));
    assert!(f.timers.scheduled().is_empty());
    // A run already under way when unscheduled may still finish; then nothing more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = lines(&out);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(lines(&out), settled, "runs after unschedule");
    assert!(
        f.store.load(&id).unwrap().is_none(),
        "a late run must not re-create the task"
    );
    assert!(f.tasks.list().unwrap().is_empty());
    let again = f.tasks.unschedule(&id).await.unwrap();
    assert_eq!((again.os_removed, again.deleted), (false, false));
    f.timers.shutdown().await;
}

#[tokio::test]
async fn timers_survive_a_restart() {
    let f = fixture();
    let out = f.dir.path().join("out.txt");
    let prog = script(f.dir.path(), "tick.sh", r#"echo tick >> "$1""#);
    let schedule = |durable: bool, cadence: Value| {
        decode::<ScheduleRequest>(json!({
            "name": "t", "program": prog, "args": [out], "durable": durable, "cadence": cadence,
        }))
        .unwrap()
    };
    let id = f
        .tasks
        .schedule(schedule(false, json!({"interval_secs": 1})))
        .await
        .unwrap()
        .id;
    let cron_id = f
        .tasks
        .schedule(schedule(false, json!({"cron": "0 0 1 1 *"})))
        .await
        .unwrap()
        .id;
    let durable_id = f
        .tasks
        .schedule(schedule(true, json!({"interval_secs": 60})))
        .await
        .unwrap()
        .id;
    // A disabled task is stored but never armed.
    let mut disabled =
        CommandTask::from_request(schedule(false, json!({"interval_secs": 1}))).unwrap();
    disabled.enabled = false;
    f.store.save_command(&disabled).unwrap();
    f.timers.shutdown().await;
    let before = lines(&out);

    // A new daemon: a new store and timers over the same directory.
    let store = TaskStore::new(f.dir.path().join("tasks"));
    let timers =
        DaemonTimers::start(store, f.dir.path().join("logs"), Duration::from_secs(1)).unwrap();
    let mut want = vec![id, cron_id];
    want.sort();
    assert_eq!(timers.scheduled(), want);
    assert!(!timers.scheduled().contains(&durable_id));
    wait_for("a run after restart", || lines(&out) > before).await;
    timers.shutdown().await;
}

#[tokio::test]
async fn shutdown_kills_a_command_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let timers = DaemonTimers::start(
        store.clone(),
        dir.path().join("logs"),
        Duration::from_millis(200),
    )
    .unwrap();
    let out = dir.path().join("out.txt");
    let prog = script(
        dir.path(),
        "slow.sh",
        r#"echo started >> "$1"; exec sleep 60"#,
    );
    let task = CommandTask::from_request(
        decode(
            json!({"name": "slow", "program": prog, "args": [out], "durable": false,
                      "cadence": {"interval_secs": 1}}),
        )
        .unwrap(),
    )
    .unwrap();
    store.save_command(&task).unwrap();
    timers.schedule(&task).unwrap();
    wait_for("the command to start", || lines(&out) >= 1).await;
    tokio::time::timeout(Duration::from_secs(20), timers.shutdown())
        .await
        .expect("shutdown waits for the grace, then kills");
    let stored = store.load_command(&task.id).unwrap().unwrap();
    assert_eq!((stored.run_count, stored.last_exit_code), (1, None));
    assert!(
        stored.last_error.unwrap().contains("signal"),
        "killed by a signal"
    );
    assert_eq!(lines(&out), 1, "no run after shutdown");
    assert!(timers.schedule(&task).is_err(), "no timers after shutdown");
}

#[tokio::test]
async fn a_vanished_program_is_recorded() {
    let f = fixture();
    let prog = script(f.dir.path(), "gone.sh", "true");
    let req = decode(
        json!({"name": "g", "program": prog, "durable": false, "cadence": {"interval_secs": 1}}),
    );
    let id = f.tasks.schedule(req.unwrap()).await.unwrap().id;
    std::fs::remove_file(&prog).unwrap();
    wait_for("a failed run", || {
        f.store
            .load_command(&id)
            .unwrap()
            .unwrap()
            .last_error
            .is_some()
    })
    .await;
    let stored = f.store.load_command(&id).unwrap().unwrap();
    assert!(stored.last_error.unwrap().starts_with("spawning"));
    f.timers.shutdown().await;
}

/// A durable task needs a systemd user manager that answers: without one (no user bus) the
/// schedule is refused before anything is written, saying what is missing and how to run it
/// on the daemon's timer instead; with one, the units are written and enabled through it.
#[tokio::test]
async fn a_durable_task_needs_an_answering_user_manager() {
    let dir = tempfile::tempdir().unwrap();
    let prog = script(dir.path(), "job", "true");
    let calls = dir.path().join("systemctl-calls");
    let no_bus = script(
        dir.path(),
        "systemctl-no-bus",
        "echo 'Failed to connect to bus: No medium found' >&2; exit 1",
    );
    let working = script(
        dir.path(),
        "systemctl-ok",
        &format!("echo \"$@\" >> {}", calls.display()),
    );
    let store = TaskStore::new(dir.path().join("tasks"));
    let timers = DaemonTimers::start(
        store.clone(),
        dir.path().join("logs"),
        Duration::from_secs(1),
    )
    .unwrap();
    let units = dir.path().join("units");
    let spec = json!({"name": "nightly", "program": prog, "cadence": {"interval_secs": 3600}});
    let req = || decode::<ScheduleRequest>(spec.clone()).unwrap();

    let os = OsScheduler::new(store.clone(), &units, "/car/home", true).with_systemctl(&no_bus);
    let refused = CommandTasks::new(store.clone(), timers.clone(), os)
        .schedule(req())
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.starts_with("invalid `durable`: no systemd user manager answers"),
        "{message}"
    );
    assert!(
        message.contains("No medium found") && message.contains("durable: false"),
        "{message}"
    );
    assert!(!units.exists(), "nothing was written");
    assert!(CommandTasks::new(
        store.clone(),
        timers.clone(),
        OsScheduler::new(store.clone(), &units, "/h", false)
    )
    .list()
    .unwrap()
    .is_empty());

    let os = OsScheduler::new(store.clone(), &units, "/car/home", true).with_systemctl(&working);
    let done = CommandTasks::new(store.clone(), timers, os)
        .schedule(req())
        .await
        .unwrap();
    assert!(done.durable);
    let ran = std::fs::read_to_string(&calls).unwrap();
    assert!(
        ran.starts_with(
            "--user show-environment\n--user daemon-reload\n--user enable --now car-task-"
        ),
        "{ran}"
    );
    assert_eq!(
        std::fs::read_dir(&units).unwrap().count(),
        2,
        "a service and a timer"
    );
}
