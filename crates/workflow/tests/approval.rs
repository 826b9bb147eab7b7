//! Approval gates: pausing, checkpoints, resume validation and exactly-once claims.

mod common;

use car_workflow::{resume, run, CheckpointStore, RunStatus, StageStatus, WorkflowError};
use common::*;
use serde_json::{json, Value};

fn gated(c_config: Value) -> car_workflow::Workflow {
    wf(json!({
        "id": "wf", "name": "Gated", "start": "a",
        "stages": [
            stage("a", pattern("draft", json!({}))),
            stage("b", json!({"type": "approval", "prompt": "Ship it?", "output_key": "appr",
                "fields": [{"name": "yes", "required": true},
                           {"name": "mode", "options": ["fast", "slow"]}]})),
            stage("c", pattern("use {{appr}}", c_config)),
        ],
        "edges": [edge("a", "b"), edge("b", "c")],
    }))
}

#[tokio::test]
async fn pause_then_resume_completes_with_the_approval_in_state() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    let paused = run(&fake, &store, gated(json!({})), None).await.unwrap();
    assert_eq!(paused.status, RunStatus::Paused);
    assert_eq!(paused.stages.len(), 1);
    let cp = paused.paused.clone().unwrap();
    assert_eq!(cp.run_id.len(), 32);
    assert!(cp.run_id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        (cp.paused_stage_id.as_str(), cp.prompt.as_str()),
        ("b", "Ship it?")
    );
    assert_eq!(cp.output_key, "appr");
    assert_eq!(cp.iterations, 2);
    let carried: car_workflow::Workflow =
        serde_json::from_value(serde_json::Value::Object(cp.workflow.clone())).unwrap();
    assert_eq!(carried, gated(json!({})));
    let listed = store.list_paused();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].run_id, cp.run_id);
    assert_eq!(listed[0].prompt, "Ship it?");

    let shown = serde_json::to_value(&paused).unwrap();
    assert_eq!(shown["status"], "paused");
    assert_eq!(shown["paused"]["paused_stage_id"], "b");
    assert_eq!(shown["stages"][0]["output"]["type"], "pattern");
    assert_eq!(shown["stages"][0]["output"]["final_answer"], "ans");
    assert_eq!(shown["stages"][0]["output"]["outputs"][0]["name"], "w");
    assert!(car_proto::clock::parse_rfc3339(shown["timestamp"].as_str().unwrap()).is_ok());

    let done = resume(&fake, &store, &cp.run_id, obj(json!({"yes": "y"})))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(
        Value::Object(done.final_state.clone()),
        json!({
            "stage.a.succeeded": true, "stage.a.answer": "ans",
            "appr": {"yes": "y"}, "appr.yes": "y",
            "stage.b.answer": "{\"yes\":\"y\"}", "stage.b.succeeded": true,
            "stage.c.succeeded": true, "stage.c.answer": "ans",
        })
    );
    let ids: Vec<&str> = done.stages.iter().map(|s| s.stage_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(done.stages[1].status, StageStatus::Succeeded);
    assert_eq!(
        done.stages[1].output,
        json!({"type": "approval", "response": {"yes": "y"}})
    );
    // `{{appr}}` is not templated.
    assert_eq!(fake.tasks(), ["draft", "use {{appr}}"]);
    assert!(store.list_paused().is_empty());
    assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 0);
}

#[tokio::test]
async fn invalid_input_is_refused_and_the_checkpoint_kept() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    let cp = run(&fake, &store, gated(json!({})), None)
        .await
        .unwrap()
        .paused
        .unwrap();

    let err = resume(&fake, &store, &cp.run_id, obj(json!({"other": 1})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WorkflowError::Invalid { path, .. } if path == "input.yes"),
        "{err}"
    );
    let err = resume(&fake, &store, &cp.run_id, obj(json!({"yes": null})))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WorkflowError::Invalid { path, .. } if path == "input.yes"),
        "{err}"
    );
    let err = resume(
        &fake,
        &store,
        &cp.run_id,
        obj(json!({"yes": true, "mode": "warp"})),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, WorkflowError::Invalid { path, .. } if path == "input.mode"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("input.mode: must be one of"),
        "{err}"
    );
    assert_eq!(store.list_paused().len(), 1);
    assert_eq!(fake.tasks(), ["draft"]);

    let done = resume(
        &fake,
        &store,
        &cp.run_id,
        obj(json!({"yes": true, "mode": "slow"})),
    )
    .await
    .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.final_state["appr.mode"], "slow");
}

#[tokio::test]
async fn a_run_resumes_exactly_once() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    let cp = run(&fake, &store, gated(json!({"sleep_ms": 50})), None)
        .await
        .unwrap()
        .paused
        .unwrap();
    let input = obj(json!({"yes": "y"}));
    let (one, two) = tokio::join!(
        resume(&fake, &store, &cp.run_id, input.clone()),
        resume(&fake, &store, &cp.run_id, input.clone()),
    );
    let (ok, err) = if one.is_ok() { (one, two) } else { (two, one) };
    assert_eq!(ok.unwrap().status, RunStatus::Completed);
    let err = err.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "no resumable run '{}' (unknown, or already being resumed)",
            cp.run_id
        )
    );
    let again = resume(&fake, &store, &cp.run_id, input).await.unwrap_err();
    assert!(matches!(again, WorkflowError::NotResumable { .. }));
    assert_eq!(fake.tasks(), ["draft", "use {{appr}}"]);
}

#[tokio::test]
async fn unknown_and_malformed_run_ids_are_not_resumable() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    for id in ["0123456789abcdef0123456789abcdef", "../../etc/passwd", ""] {
        let err = resume(&fake, &store, id, obj(json!({}))).await.unwrap_err();
        assert!(
            matches!(err, WorkflowError::NotResumable { .. }),
            "{id}: {err}"
        );
    }
}

#[tokio::test]
async fn a_checkpoint_survives_a_restart() {
    let fake = Fake::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("workflow-runs");
    let run_id = {
        let store = CheckpointStore::new(&dir);
        run(&fake, &store, gated(json!({})), None)
            .await
            .unwrap()
            .paused
            .unwrap()
            .run_id
    };
    // A corrupt checkpoint and an in-flight claim are not listed.
    std::fs::write(
        dir.join("ffffffffffffffffffffffffffffffff.json"),
        "{not json",
    )
    .unwrap();
    std::fs::write(dir.join("eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee.claimed"), "{}").unwrap();

    let store = CheckpointStore::new(&dir);
    let listed = store.list_paused();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].run_id.as_str(),
            listed[0].paused_stage_id.as_str()
        ),
        (run_id.as_str(), "b")
    );
    assert!(car_proto::clock::parse_rfc3339(&listed[0].created_at).is_ok());
    assert_eq!(store.get(&run_id).unwrap().prompt, "Ship it?");

    let done = resume(&fake, &store, &run_id, obj(json!({"yes": 1})))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.stages.len(), 3);
}

#[cfg(unix)]
#[tokio::test]
async fn checkpoints_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let fake = Fake::new();
    let (_tmp, store) = store();
    let cp = run(&fake, &store, gated(json!({})), None)
        .await
        .unwrap()
        .paused
        .unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(store.dir()), 0o700);
    assert_eq!(
        mode(&store.dir().join(format!("{}.json", cp.run_id))),
        0o600
    );
}

#[tokio::test]
async fn pausing_again_keeps_the_run_id() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    let two_gates = wf(json!({
        "id": "wf", "name": "Two gates", "start": "g1",
        "stages": [
            stage("g1", json!({"type": "approval", "prompt": "first", "output_key": "one"})),
            stage("g2", json!({"type": "approval", "prompt": "second", "output_key": "two"})),
            stage("end", pattern("finish", json!({}))),
        ],
        "edges": [edge("g1", "g2"), edge("g2", "end")],
    }));
    let first = run(&fake, &store, two_gates, None)
        .await
        .unwrap()
        .paused
        .unwrap();
    let second = resume(&fake, &store, &first.run_id, obj(json!({"ok": 1})))
        .await
        .unwrap();
    assert_eq!(second.status, RunStatus::Paused);
    let cp = second.paused.unwrap();
    assert_eq!(
        (cp.run_id.as_str(), cp.paused_stage_id.as_str()),
        (first.run_id.as_str(), "g2")
    );
    assert_eq!(store.list_paused().len(), 1);
    assert_eq!(store.list_paused()[0].prompt, "second");
    let done = resume(&fake, &store, &cp.run_id, obj(json!({})))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Completed);
    assert_eq!(done.final_state["one.ok"], 1);
    assert_eq!(done.final_state["two"], json!({}));
    assert!(store.list_paused().is_empty());
}

#[tokio::test]
async fn a_failure_after_resume_compensates_stages_from_before_the_pause() {
    let fake = Fake::new();
    let (_tmp, store) = store();
    let w = wf(json!({
        "id": "wf", "name": "Saga across a pause", "start": "a",
        "stages": [
            {"id": "a", "name": "A", "step": write("do-a", "a", json!(1)),
             "compensation": write("undo-a", "a", json!(0))},
            stage("gate", json!({"type": "approval", "prompt": "go?", "output_key": "go"})),
            stage("boom", failing("boom")),
        ],
        "edges": [edge("a", "gate"), edge("gate", "boom")],
    }));
    let cp = run(&fake, &store, w, None).await.unwrap().paused.unwrap();
    let done = resume(&fake, &store, &cp.run_id, obj(json!({})))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Compensated);
    assert_eq!(fake.proposal_ids(), ["do-a", "boom", "undo-a"]);
    assert_eq!(done.final_state["a"], 0);
}

#[cfg(unix)]
#[tokio::test]
async fn fifos_and_symlinks_in_the_checkpoint_dir_are_skipped_without_blocking() {
    let fake = Fake::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("workflow-runs");
    let store = CheckpointStore::new(&dir);
    let run_id = run(&fake, &store, gated(json!({})), None)
        .await
        .unwrap()
        .paused
        .unwrap()
        .run_id;
    let fifo_id = "ffffffffffffffffffffffffffffffff";
    assert!(std::process::Command::new("mkfifo")
        .arg(dir.join(format!("{fifo_id}.json")))
        .status()
        .unwrap()
        .success());
    let link_id = "dddddddddddddddddddddddddddddddd";
    std::os::unix::fs::symlink(
        dir.join(format!("{run_id}.json")),
        dir.join(format!("{link_id}.json")),
    )
    .unwrap();
    let listed: Vec<String> = store.list_paused().into_iter().map(|p| p.run_id).collect();
    assert_eq!(listed, std::slice::from_ref(&run_id));
    assert!(store.get(fifo_id).is_none());
    assert!(store.get(link_id).is_none());
    let err = resume(&fake, &store, fifo_id, obj(json!({"yes": 1})))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("is a FIFO, not a regular file"),
        "{err}"
    );
}
