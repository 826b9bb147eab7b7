//! Swarm (parallel / sequential / hybrid), pipeline and the budget.

mod common;

use std::sync::Arc;
use std::time::Duration;

use car_multi::{pipeline, swarm};
use car_proto::methods::multi::{BudgetLimits, PipelineParams, SwarmMode, SwarmParams};
use common::{ok, spec, specs, with_tokens, Barriered, Scripted};

fn swarm_params(mode: SwarmMode, names: &[&str]) -> SwarmParams {
    SwarmParams {
        mode,
        agents: specs(names),
        task: "T".into(),
        synthesizer: None,
        budget: None,
        runner: None,
    }
}

#[tokio::test]
async fn parallel_without_synthesizer_concatenates_successes() {
    let runner = Scripted::new(|name, _| {
        if name == "b" {
            Err("boom".into())
        } else {
            Ok(ok(name, &format!("{name}!")))
        }
    });
    let r = swarm(&runner, swarm_params(SwarmMode::Parallel, &["a", "b", "c"])).await;
    assert_eq!(r.task, "T");
    assert_eq!(r.outputs.len(), 3);
    assert_eq!(
        r.outputs[1].error.as_deref(),
        Some("agent 'b' failed: boom")
    );
    assert_eq!(r.outputs[1].name, "b");
    assert_eq!(r.final_summary, "## a\na!\n\n## c\nc!");
    assert!(runner.calls().iter().all(|(_, task)| task == "T"));
    assert!(r.outputs.iter().all(|o| o.duration_ms > 0.0));
}

#[tokio::test]
async fn parallel_with_no_success_says_so() {
    let runner = Scripted::new(|_, _| Err("down".into()));
    let mut p = swarm_params(SwarmMode::Parallel, &["a", "b"]);
    p.synthesizer = Some(spec("synth"));
    let r = swarm(&runner, p).await;
    assert_eq!(r.final_summary, "[no agent produced an answer]");
    assert!(!runner.names().contains(&"synth".to_owned()));
}

#[tokio::test]
async fn synthesizer_gets_the_answer_list() {
    let runner = Scripted::new(|name, _| Ok(ok(name, &format!("{name} answer"))));
    let mut p = swarm_params(SwarmMode::Parallel, &["a", "b"]);
    p.synthesizer = Some(spec("synth"));
    let r = swarm(&runner, p).await;
    assert_eq!(r.final_summary, "synth answer");
    assert_eq!(r.outputs.len(), 2);
    let prompt = runner.task_of("synth", 0);
    assert!(
        prompt.starts_with("Original task: T\n\nAgent outputs:\n- a: a answer\n- b: b answer\n\n"),
        "{prompt}"
    );
    assert!(prompt.contains("Synthesize"));
}

#[tokio::test]
async fn failed_synthesizer_falls_back() {
    let runner = Scripted::new(|name, _| {
        if name == "synth" {
            Err("no".into())
        } else {
            Ok(ok(name, "x"))
        }
    });
    let mut p = swarm_params(SwarmMode::Parallel, &["a"]);
    p.synthesizer = Some(spec("synth"));
    assert_eq!(swarm(&runner, p).await.final_summary, "## a\nx");
}

#[tokio::test]
async fn parallel_agents_run_concurrently() {
    let runner = Barriered {
        barrier: Arc::new(tokio::sync::Barrier::new(3)),
    };
    let run = swarm(&runner, swarm_params(SwarmMode::Parallel, &["a", "b", "c"]));
    let r = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("parallel swarm ran its agents one at a time (barrier never released)");
    assert!(r
        .outputs
        .iter()
        .all(|o| o.succeeded() && o.answer == "done"));
}

#[tokio::test]
async fn sequential_threads_findings() {
    let runner = Scripted::new(|name, _| {
        if name == "b" {
            Err("skip me".into())
        } else {
            Ok(ok(name, &format!("{name} found")))
        }
    });
    let r = swarm(
        &runner,
        swarm_params(SwarmMode::Sequential, &["a", "b", "c", "d"]),
    )
    .await;
    assert_eq!(runner.names(), ["a", "b", "c", "d"]);
    assert_eq!(runner.task_of("a", 0), "T");
    assert_eq!(
        runner.task_of("b", 0),
        "T\n\nPrior agents' findings:\n- a: a found"
    );
    assert_eq!(
        runner.task_of("c", 0),
        "T\n\nPrior agents' findings:\n- a: a found"
    );
    assert_eq!(
        runner.task_of("d", 0),
        "T\n\nPrior agents' findings:\n- a: a found\n- c: c found"
    );
    assert_eq!(
        r.final_summary,
        "## a\na found\n\n## c\nc found\n\n## d\nd found"
    );
}

#[tokio::test]
async fn hybrid_revises_with_the_others_answers() {
    let runner = Scripted::new(|name, task| {
        let round2 = task.contains("Other agents answered:");
        match (name, round2) {
            ("c", true) => Err("tired".into()),
            (_, false) => Ok(ok(name, &format!("{name}1"))),
            (_, true) => Ok(ok(name, &format!("{name}2"))),
        }
    });
    let r = swarm(&runner, swarm_params(SwarmMode::Hybrid, &["a", "b", "c"])).await;
    assert_eq!(runner.calls().len(), 6);
    let answers: Vec<&str> = r.outputs.iter().map(|o| o.answer.as_str()).collect();
    assert_eq!(answers, ["a2", "b2", "c1"]);
    let a2 = runner.task_of("a", 1);
    assert!(
        a2.starts_with("T\n\nOther agents answered:\n- b: b1\n- c: c1\n\n"),
        "{a2}"
    );
    assert!(runner.task_of("c", 1).contains("- a: a1\n- b: b1"));
}

#[tokio::test]
async fn budget_caps_a_parallel_batch() {
    let runner = Scripted::echo();
    let mut p = swarm_params(SwarmMode::Parallel, &["a", "b", "c"]);
    p.budget = Some(BudgetLimits {
        max_agents: Some(2),
        ..Default::default()
    });
    let r = swarm(&runner, p).await;
    assert_eq!(runner.names(), ["a", "b"]);
    let msg = "coordination budget agent cap reached: 2 of 2 agents already started";
    let c = &r.outputs[2];
    assert_eq!((c.name.as_str(), c.answer.as_str(), c.turns), ("c", "", 0));
    assert_eq!((c.tool_calls, c.duration_ms), (0, 0.0));
    assert_eq!(c.error.as_deref(), Some(msg));
    assert_eq!(
        c.outcome,
        Some(
            serde_json::json!({"status": "give_up", "summary": msg, "evidence": [
                {"kind": "stop_reason", "description": msg, "data": {"budget_skipped": true}}
            ]})
        )
    );
    assert_eq!(r.final_summary, "## a\na says hi\n\n## b\nb says hi");
}

#[tokio::test]
async fn refused_synthesizer_falls_back() {
    let runner = Scripted::echo();
    let mut p = swarm_params(SwarmMode::Parallel, &["a", "b"]);
    p.synthesizer = Some(spec("synth"));
    p.budget = Some(BudgetLimits {
        max_agents: Some(2),
        ..Default::default()
    });
    let r = swarm(&runner, p).await;
    assert_eq!(runner.names(), ["a", "b"]);
    assert_eq!(r.final_summary, "## a\na says hi\n\n## b\nb says hi");
}

#[tokio::test]
async fn hybrid_round_two_is_budgeted() {
    let runner = Scripted::echo();
    let mut p = swarm_params(SwarmMode::Hybrid, &["a", "b"]);
    p.budget = Some(BudgetLimits {
        max_agents: Some(3),
        ..Default::default()
    });
    let r = swarm(&runner, p).await;
    assert_eq!(runner.names(), ["a", "b", "a"]);
    // b's refused round-2 call leaves its round-1 output.
    assert!(r.outputs.iter().all(|o| o.succeeded()));
}

#[tokio::test]
async fn pipeline_threads_stages() {
    let runner = Scripted::new(|name, _| Ok(ok(name, &format!("{name} out"))));
    let p = PipelineParams {
        stages: specs(&["draft", "edit", "polish"]),
        task: "W".into(),
        budget: None,
        runner: None,
    };
    let r = pipeline(&runner, p).await;
    assert_eq!(r.stages.len(), 3);
    assert_eq!(r.final_answer, "polish out");
    assert_eq!(
        runner.task_of("polish", 0),
        "W\n\nPrior agents' findings:\n- draft: draft out\n- edit: edit out"
    );
}

#[tokio::test]
async fn pipeline_last_stage_failure_leaves_no_answer() {
    let runner = Scripted::new(|name, _| {
        if name == "z" {
            Err("x".into())
        } else {
            Ok(ok(name, "fine"))
        }
    });
    let p = PipelineParams {
        stages: specs(&["y", "z"]),
        task: "W".into(),
        budget: None,
        runner: None,
    };
    assert_eq!(pipeline(&runner, p).await.final_answer, "");
}

#[tokio::test]
async fn pipeline_token_budget_refuses_later_stages() {
    let runner = Scripted::new(|name, _| Ok(with_tokens(ok(name, "big"), 60, 50)));
    let p = PipelineParams {
        stages: specs(&["one", "two", "three"]),
        task: "W".into(),
        budget: Some(BudgetLimits {
            max_total_tokens: Some(100),
            ..Default::default()
        }),
        runner: None,
    };
    let r = pipeline(&runner, p).await;
    assert_eq!(runner.names(), ["one"]);
    let msg = "coordination budget exhausted: total tokens 110 >= limit 100";
    for stage in &r.stages[1..] {
        assert_eq!(stage.error.as_deref(), Some(msg));
        assert_eq!(stage.outcome.as_ref().unwrap()["status"], "give_up");
    }
    assert_eq!(r.final_answer, "");
}

#[test]
fn pattern_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let runner = Scripted::echo();
    let f = swarm(&runner, swarm_params(SwarmMode::Hybrid, &["a"]));
    assert_send(&f);
}
