//! Prompt tasks: creation and validation, run dedup, persistence, and run loops.

use car_scheduler::{CommandTaskExt as _, TaskExt as _};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use car_scheduler::{
    decode, run_task, run_task_as, run_task_loop, CommandTask, ExecutionStatus, NewTask,
    PromptRunner, ScheduleRequest, SchedulerError, Task, TaskStatus, TaskStore, Trigger,
};
use serde_json::{json, Map, Value};

/// Counts calls and answers with the prompt, or fails when the prompt says so.
#[derive(Default)]
struct Echo {
    calls: AtomicUsize,
    seen: Mutex<Vec<(String, String, u32)>>,
}

impl PromptRunner for Echo {
    fn run<'a>(
        &'a self,
        prompt: &'a str,
        system_prompt: &'a str,
        max_turns: u32,
        _metadata: &'a Map<String, Value>,
    ) -> Pin<Box<dyn Future<Output = Result<String, String>> + Send + 'a>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.seen
                .lock()
                .unwrap()
                .push((prompt.into(), system_prompt.into(), max_turns));
            if prompt == "fail" {
                Err("the model refused".into())
            } else {
                Ok(format!("answer to {prompt}"))
            }
        })
    }
}

fn new_task(trigger: &str, schedule: &str) -> Result<Task, SchedulerError> {
    Task::create(NewTask {
        name: "nightly".into(),
        prompt: "summarise logs".into(),
        trigger: Some(trigger.into()),
        schedule: schedule.into(),
        system_prompt: "be brief".into(),
        ..NewTask::default()
    })
}

fn field_of(r: Result<Task, SchedulerError>) -> String {
    r.unwrap_err()
        .field()
        .expect("a validation error")
        .to_owned()
}

#[test]
fn create_validates_each_trigger() {
    let t = new_task("interval", "3600").unwrap();
    assert_eq!(t.trigger, Trigger::Interval);
    assert_eq!(t.id.len(), 10);
    assert_eq!(t.id.as_bytes()[8], b'-');
    assert_eq!(t.status, TaskStatus::Pending);
    assert_eq!(t.max_turns, 10);
    assert!(new_task("cron", "*/15 * * * *").is_ok());
    assert!(new_task("cron", "@daily").is_ok());
    assert!(new_task("once", "2026-12-24T18:00:00+01:00").is_ok());
    assert!(new_task("manual", "").is_ok());

    assert_eq!(field_of(new_task("hourly", "")), "trigger");
    assert_eq!(field_of(new_task("interval", "0")), "schedule");
    assert_eq!(field_of(new_task("interval", "ten")), "schedule");
    assert_eq!(field_of(new_task("once", "tomorrow")), "schedule");
    let err = new_task("cron", "61 * * * *").unwrap_err();
    assert_eq!(err.field(), Some("schedule"));
    assert!(
        err.to_string()
            .contains("minute field `61` out of range 0-59"),
        "{err}"
    );
    assert_eq!(field_of(new_task("file_watch", "")), "watch_path");
}

#[test]
fn wire_shape_round_trips_leniently() {
    let t = new_task("interval", "3600").unwrap();
    let v = serde_json::to_value(&t).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = vec![
        "id",
        "name",
        "prompt",
        "trigger",
        "schedule",
        "watch_path",
        "agent_metadata",
        "max_turns",
        "system_prompt",
        "status",
        "created_at",
        "last_run_at",
        "run_count",
        "executions",
        "enabled",
    ];
    let mut got = keys.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));

    // Unknown fields ignored, missing ones defaulted, nulls as missing.
    let t: Task =
        decode(json!({"name": "n", "prompt": "p", "extra": 1, "agent_metadata": null})).unwrap();
    assert_eq!(
        (t.trigger, t.max_turns, t.enabled),
        (Trigger::Manual, 10, true)
    );
    let err = decode::<Task>(json!({"prompt": "p"})).unwrap_err();
    assert_eq!(err.field(), Some("name"));
    let err = decode::<Task>(json!({"name": "n", "prompt": "p", "trigger": "hourly"})).unwrap_err();
    assert_eq!(err.field(), Some("trigger"));
}

#[tokio::test]
async fn interval_occurrence_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path().join("tasks"));
    let runner = Echo::default();
    let task = new_task("interval", "3600").unwrap();

    let (saved, first) = run_task(&store, task.clone(), &runner).await.unwrap();
    assert_eq!(first.execution_id, format!("{}:int:0", task.id));
    assert_eq!(first.status, ExecutionStatus::Completed);
    assert_eq!(first.answer, "answer to summarise logs");
    assert_eq!((saved.run_count, saved.status), (1, TaskStatus::Completed));
    assert_eq!(
        runner.seen.lock().unwrap()[0],
        ("summarise logs".into(), "be brief".into(), 10)
    );

    // The client posts its stale copy again: the stored history dedups it.
    let (again, second) = run_task(&store, task.clone(), &runner).await.unwrap();
    assert_eq!(second, first);
    assert_eq!(again.executions.len(), 1);
    assert_eq!(runner.calls.load(Ordering::SeqCst), 1);

    // A new store on the same directory sees the same history.
    let reopened = TaskStore::new(dir.path().join("tasks"));
    let (_, third) = run_task(&reopened, task.clone(), &runner).await.unwrap();
    assert_eq!(third, first);
    assert_eq!(runner.calls.load(Ordering::SeqCst), 1);
    let stored = reopened.load_prompt(&task.id).unwrap().unwrap();
    assert_eq!(stored.executions, vec![first]);

    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(store.path_of(&task.id).unwrap())
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn manual_always_runs_and_failures_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let runner = Echo::default();
    let mut task = new_task("manual", "").unwrap();
    let (_, a) = run_task(&store, task.clone(), &runner).await.unwrap();
    let (_, b) = run_task(&store, task.clone(), &runner).await.unwrap();
    assert_ne!(a.execution_id, b.execution_id);
    assert_eq!(runner.calls.load(Ordering::SeqCst), 2);

    task.prompt = "fail".into();
    let (saved, c) = run_task(&store, task, &runner).await.unwrap();
    assert_eq!(c.status, ExecutionStatus::Failed);
    assert_eq!(c.error.as_deref(), Some("the model refused"));
    assert_eq!(
        (saved.status, saved.run_count, saved.executions.len()),
        (TaskStatus::Failed, 3, 3)
    );
}

#[tokio::test]
async fn once_and_cron_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let runner = Echo::default();
    let once = new_task("once", "2026-01-01T00:00:00Z").unwrap();
    let (_, a) = run_task(&store, once.clone(), &runner).await.unwrap();
    assert_eq!(a.execution_id, format!("{}:once", once.id));
    run_task(&store, once, &runner).await.unwrap();
    // A yearly cron's latest due time can't change between two calls.
    let cron = new_task("cron", "@yearly").unwrap();
    let (_, b) = run_task(&store, cron.clone(), &runner).await.unwrap();
    assert!(b.execution_id.starts_with(&format!("{}:cron:", cron.id)));
    let (_, c) = run_task(&store, cron, &runner).await.unwrap();
    assert_eq!(b, c);
    assert_eq!(runner.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn run_loop_follows_the_interval() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let runner = Echo::default();
    let task = new_task("interval", "1").unwrap();
    let runs = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        run_task_loop(&store, task.clone(), Some(2), &runner),
    )
    .await
    .expect("loop finished")
    .unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runner.calls.load(Ordering::SeqCst), 2);
    assert_ne!(runs[0].execution_id, runs[1].execution_id);
    assert_eq!(store.load_prompt(&task.id).unwrap().unwrap().run_count, 2);

    // Default: one iteration; manual tasks run once whatever the count; 0 is refused.
    let one = run_task_loop(&store, new_task("manual", "").unwrap(), Some(5), &runner);
    assert_eq!(one.await.unwrap().len(), 1);
    let err = run_task_loop(&store, task, Some(0), &runner)
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("max_iterations"));
}

#[tokio::test]
async fn unsafe_ids_never_become_paths() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let mut task = new_task("manual", "").unwrap();
    task.id = "../escape".into();
    let err = run_task(&store, task, &Echo::default()).await.unwrap_err();
    assert_eq!(err.field(), Some("id"));
}

/// Issue 24: `scheduler.run` with a command task's id used to overwrite that (host-only)
/// command task with a prompt task.
#[tokio::test]
async fn a_prompt_run_never_replaces_a_command_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let command = CommandTask::from_request(
        decode::<ScheduleRequest>(
            json!({"name": "backup", "program": "/bin/true", "cadence": {"interval_secs": 3600}}),
        )
        .unwrap(),
    )
    .unwrap();
    store.save_command(&command).unwrap();
    let mut task = new_task("manual", "").unwrap();
    task.id = command.id.clone();
    let runner = Echo::default();
    let err = run_task(&store, task, &runner).await.unwrap_err();
    assert_eq!(err.field(), Some("id"), "{err}");
    assert!(err.to_string().contains("command task"), "{err}");
    assert_eq!(runner.calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        store.load_command(&command.id).unwrap().unwrap().id,
        command.id
    );
}

/// Issue 24: any agent's `scheduler.run` with another's task id ran that task and rewrote
/// its history. An agent now runs only the tasks it stored; the user runs any, and a
/// posted `owner` is never believed.
#[tokio::test]
async fn an_agent_runs_only_its_own_prompt_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let store = TaskStore::new(dir.path());
    let runner = Echo::default();
    let mine = new_task("manual", "").unwrap();
    let (saved, _) = run_task_as(&store, mine.clone(), &runner, Some("agent:a"))
        .await
        .unwrap();
    assert_eq!(saved.owner.as_deref(), Some("agent:a"));

    let err = run_task_as(&store, mine.clone(), &runner, Some("agent:b"))
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("id"), "{err}");
    assert_eq!(runner.calls.load(Ordering::SeqCst), 1, "b's run never ran");

    // The user's own task is not an agent's either, even when the post claims it is.
    let mut users = new_task("manual", "").unwrap();
    run_task(&store, users.clone(), &runner).await.unwrap();
    users.owner = Some("agent:b".into());
    let err = run_task_as(&store, users.clone(), &runner, Some("agent:b"))
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("id"), "{err}");
    let mut forged = new_task("manual", "").unwrap();
    forged.owner = Some("agent:a".into());
    let (saved, _) = run_task(&store, forged, &runner).await.unwrap();
    assert_eq!(saved.owner, None, "a posted owner is ignored");

    // The user runs the agent's task; it stays the agent's.
    let (saved, _) = run_task(&store, mine, &runner).await.unwrap();
    assert_eq!(saved.owner.as_deref(), Some("agent:a"));
    assert_eq!(saved.run_count, 2);
}
