//! The OS backend in temp dirs with `activate: false`: install, list, uninstall, reconcile,
//! foreign files left alone, orphans reaped; durable `tasks.schedule`.

use car_scheduler::TaskExt as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use car_scheduler::{
    decode, render, Backend, CommandTasks, DaemonTimers, NewTask, OsScheduler, Task, TaskStore,
};
use serde_json::json;

fn task(trigger: &str, schedule: &str) -> Task {
    Task::create(NewTask {
        name: "n".into(),
        prompt: "p".into(),
        trigger: Some(trigger.into()),
        schedule: schedule.into(),
        ..NewTask::default()
    })
    .unwrap()
}

fn args(id: &str) -> Vec<String> {
    vec!["scheduler".into(), "run".into(), id.into()]
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn install_list_uninstall() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let units = dir.path().join("units");
    let os = OsScheduler::new(store.clone(), &units, "/car/home", false);
    assert!(
        os.list().unwrap().is_empty(),
        "a missing unit dir lists nothing"
    );

    let t = task("interval", "3600");
    let res = os.install(&t, "/usr/bin/car", &args(&t.id)).await.unwrap();
    let label = format!("ai.parslee.car.task.{}", t.id);
    assert_eq!(
        (res.label.as_str(), res.backend),
        (label.as_str(), Backend::Systemd)
    );
    assert!(res.detail.contains("not activated"), "{}", res.detail);
    let service = units.join(format!("car-task-{}.service", t.id));
    let timer = units.join(format!("car-task-{}.timer", t.id));
    let want = render(
        &t.id,
        t.trigger,
        &t.schedule,
        "/usr/bin/car",
        &args(&t.id),
        Path::new("/car/home"),
    );
    assert_eq!(
        std::fs::read_to_string(&service).unwrap(),
        want.systemd_service.unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(&timer).unwrap(),
        want.systemd_timer.unwrap()
    );
    assert_eq!((mode(&service), mode(&timer)), (0o644, 0o644));
    assert_eq!(
        store.load_prompt(&t.id).unwrap().unwrap().id,
        t.id,
        "task persisted"
    );
    assert_eq!(os.list().unwrap(), vec![label.clone()]);

    // Idempotent: a second install replaces the units.
    let mut t2 = t.clone();
    t2.schedule = "60".into();
    os.install(&t2, "/usr/bin/car", &args(&t.id)).await.unwrap();
    assert!(std::fs::read_to_string(&timer)
        .unwrap()
        .contains("OnUnitActiveSec=60s"));
    assert_eq!(os.list().unwrap(), vec![label.clone()]);

    // Only interval and cron install.
    let once = task("once", "2026-12-24T18:00:00Z");
    let err = os.install(&once, "/usr/bin/car", &[]).await.unwrap_err();
    assert_eq!(err.field(), Some("trigger"));
    assert!(
        store.load(&once.id).unwrap().is_none(),
        "a refused install persists nothing"
    );
    let err = os
        .install(&task("cron", "0 * * * *"), "car", &[])
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("program"));

    let gone = os.uninstall(&label).await.unwrap();
    assert_eq!((gone.label.as_str(), gone.removed), (label.as_str(), true));
    assert!(!service.exists() && !timer.exists());
    assert!(!os.uninstall(&t.id).await.unwrap().removed);
    assert!(os.list().unwrap().is_empty());
}

#[tokio::test]
async fn install_aborts_when_the_task_cannot_be_saved() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("tasks");
    std::fs::write(&not_a_dir, "a file where the task dir should be").unwrap();
    let units = dir.path().join("units");
    let os = OsScheduler::new(TaskStore::new(&not_a_dir), &units, "/h", false);
    let t = task("cron", "*/5 * * * *");
    assert!(os.install(&t, "/usr/bin/car", &[]).await.is_err());
    assert!(!units.join(format!("car-task-{}.timer", t.id)).exists());
}

#[tokio::test]
async fn reconcile_reaps_orphans_and_leaves_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let units = dir.path().join("units");
    let os = OsScheduler::new(store.clone(), &units, "/h", false);
    let live = task("interval", "3600");
    let orphan = task("cron", "@daily");
    let demoted = task("cron", "@hourly");
    for t in [&live, &orphan, &demoted] {
        os.install(t, "/usr/bin/car", &args(&t.id)).await.unwrap();
    }
    store.delete(&orphan.id).unwrap();
    let mut manual = demoted.clone();
    manual.trigger = car_scheduler::Trigger::Manual;
    store.save_prompt(&manual).unwrap();

    // Foreign files: one elsewhere named, one squatting on a task's unit name.
    let foreign = units.join("foreign.service");
    std::fs::write(&foreign, "[Service]\nExecStart=/bin/true\n").unwrap();
    let squat = units.join("car-task-squatter-000000.timer");
    std::fs::write(&squat, "# someone else's\n[Timer]\nOnCalendar=daily\n").unwrap();
    let mut squatter = task("interval", "60");
    squatter.id = "squatter-000000".into();
    let err = os
        .install(&squatter, "/usr/bin/car", &[])
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("id"));
    assert!(store.load(&squatter.id).unwrap().is_none());
    assert!(!os.uninstall("squatter-000000").await.unwrap().removed);

    assert_eq!(os.list().unwrap().len(), 3);
    let report = os.reconcile().await.unwrap();
    let mut want = vec![
        format!("ai.parslee.car.task.{}", orphan.id),
        format!("ai.parslee.car.task.{}", demoted.id),
    ];
    want.sort();
    let mut removed = report.removed.clone();
    removed.sort();
    assert_eq!(removed, want);
    assert_eq!((report.kept, report.errors.len()), (1, 0));
    assert_eq!(
        os.list().unwrap(),
        vec![format!("ai.parslee.car.task.{}", live.id)]
    );
    assert!(
        foreign.exists() && squat.exists(),
        "foreign files untouched"
    );

    // An unreadable task dir removes nothing; a missing one counts as empty.
    let blocked = OsScheduler::new(TaskStore::new(&foreign), &units, "/h", false);
    assert!(blocked.reconcile().await.is_err());
    assert_eq!(os.list().unwrap().len(), 1);
    // Another state root's daemon, on the same unit directory, never reaps this one's.
    let other_home = OsScheduler::new(
        TaskStore::new(dir.path().join("nowhere")),
        &units,
        "/another/home",
        false,
    );
    let report = other_home.reconcile().await.unwrap();
    assert_eq!((report.removed.len(), report.kept), (0, 1));
    assert_eq!(os.list().unwrap().len(), 1);
    let empty = OsScheduler::new(
        TaskStore::new(dir.path().join("nowhere")),
        &units,
        "/h",
        false,
    );
    assert_eq!(empty.reconcile().await.unwrap().removed.len(), 1);
    assert!(os.list().unwrap().is_empty());
    assert!(foreign.exists() && squat.exists());
}

#[tokio::test]
async fn durable_command_tasks_use_the_os_backend() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let units = dir.path().join("units");
    let os = OsScheduler::new(store.clone(), &units, "/h", false);
    let timers = DaemonTimers::start(
        store.clone(),
        dir.path().join("logs"),
        Duration::from_secs(1),
    )
    .unwrap();
    let tasks = CommandTasks::new(store.clone(), timers.clone(), os.clone());
    let req = decode(json!({
        "name": "backup", "program": "/bin/sh", "args": ["-c", "echo 50%"],
        "cadence": {"cron": "30 2 * * 1-5"}, "env": {"A": "b"}, "working_dir": "/tmp",
    }));
    let resp = tasks.schedule(req.unwrap()).await.unwrap();
    assert_eq!((resp.durable, resp.backend), (true, Backend::Systemd));
    assert!(timers.scheduled().is_empty());
    let service =
        std::fs::read_to_string(units.join(format!("car-task-{}.service", resp.id))).unwrap();
    assert!(
        service.contains("ExecStart=/bin/sh -c \"echo 50%%\"\n"),
        "{service}"
    );
    assert!(
        service.contains("Environment=\"A=b\"\n") && service.contains("WorkingDirectory=/tmp\n")
    );
    let listed = tasks.list().unwrap();
    assert_eq!((listed.len(), listed[0].backend), (1, Backend::Systemd));
    let v = serde_json::to_value(&listed[0]).unwrap();
    for key in [
        "id", "name", "program", "args", "trigger", "schedule", "durable", "backend", "enabled",
    ] {
        assert!(v.get(key).is_some(), "{key}");
    }
    assert_eq!(v["trigger"], "cron");
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store.path_of(&resp.id).unwrap()).unwrap()).unwrap();
    assert_eq!(stored["kind"], "command");

    // A reconcile keeps a live command task's units.
    assert_eq!(os.reconcile().await.unwrap().kept, 1);
    let gone = tasks.unschedule(&resp.id).await.unwrap();
    assert_eq!((gone.os_removed, gone.deleted), (true, true));
    assert!(os.list().unwrap().is_empty());
    // A prompt task's id is refused by tasks.unschedule.
    let p = task("manual", "");
    store.save_prompt(&p).unwrap();
    assert_eq!(
        tasks.unschedule(&p.id).await.unwrap_err().field(),
        Some("id")
    );
    timers.shutdown().await;
}
