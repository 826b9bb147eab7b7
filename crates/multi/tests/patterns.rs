//! Supervisor, map-reduce and vote.

mod common;

use car_multi::{map_reduce, supervisor, vote, MultiError};
use car_proto::methods::multi::{BudgetLimits, MapReduceParams, SupervisorParams, VoteParams};
use common::{ok, spec, specs, Scripted};

fn sup_params(max_rounds: Option<u32>) -> SupervisorParams {
    SupervisorParams {
        workers: specs(&["w1", "w2"]),
        supervisor: spec("boss"),
        task: "T".into(),
        max_rounds,
        budget: None,
        runner: None,
    }
}

#[tokio::test]
async fn supervisor_approves_in_round_two() {
    let runner = Scripted::new(|name, task| match name {
        "boss" if task.contains("Round 1 results:") => Ok(ok(name, "Needs sources.")),
        "boss" => Ok(ok(name, "Approved: the final summary")),
        _ if task.contains("Supervisor feedback") => Ok(ok(name, &format!("{name} v2"))),
        _ => Ok(ok(name, &format!("{name} v1"))),
    });
    let r = supervisor(&runner, sup_params(None)).await.unwrap();
    assert!(r.approved);
    assert_eq!(r.final_answer, "the final summary");
    assert_eq!(
        r.supervisor_feedback,
        ["Needs sources.", "Approved: the final summary"]
    );
    assert_eq!(r.rounds.len(), 2);
    assert_eq!(r.rounds[1][0].answer, "w1 v2");
    assert_eq!(runner.task_of("w1", 0), "T");
    assert_eq!(
        runner.task_of("w2", 1),
        "T\n\nSupervisor feedback from round 1:\nNeeds sources."
    );
    let review = runner.task_of("boss", 1);
    assert!(
        review.starts_with("Original task: T\n\nRound 2 results:\n- w1: w1 v2\n- w2: w2 v2\n\n"),
        "{review}"
    );
    assert!(review.contains("respond with APPROVED followed by a final summary"));
}

#[tokio::test]
async fn supervisor_bare_approval_keeps_the_whole_answer() {
    let runner =
        Scripted::new(|name, _| Ok(ok(name, if name == "boss" { "APPROVED" } else { "w" })));
    let r = supervisor(&runner, sup_params(None)).await.unwrap();
    assert!(r.approved);
    assert_eq!(r.final_answer, "APPROVED");
    assert_eq!(r.rounds.len(), 1);
}

#[tokio::test]
async fn supervisor_stops_at_max_rounds() {
    let runner = Scripted::new(|name, task| {
        if name == "boss" {
            let round = task.split("Round ").nth(1).unwrap().chars().next().unwrap();
            Ok(ok(name, &format!("not yet, unapproved ({round})")))
        } else {
            Ok(ok(name, "w"))
        }
    });
    let r = supervisor(&runner, sup_params(Some(2))).await.unwrap();
    assert!(!r.approved);
    assert_eq!(r.rounds.len(), 2);
    assert_eq!(r.supervisor_feedback.len(), 2);
    assert_eq!(
        r.final_answer,
        "[max supervision rounds reached] not yet, unapproved (2)"
    );

    let default_rounds = supervisor(&runner, sup_params(None)).await.unwrap();
    assert_eq!(default_rounds.rounds.len(), 3);
}

#[tokio::test]
async fn supervisor_runner_error_aborts() {
    let runner = Scripted::new(|name, _| {
        if name == "boss" {
            Err("offline".into())
        } else {
            Ok(ok(name, "w"))
        }
    });
    let err = supervisor(&runner, sup_params(None)).await.unwrap_err();
    assert_eq!(
        err,
        MultiError::Agent("supervisor error: agent 'boss' failed: offline".into())
    );
    assert_eq!(
        err.to_string(),
        "supervisor error: agent 'boss' failed: offline"
    );
}

#[tokio::test]
async fn refused_supervisor_ends_unapproved_with_worker_answers() {
    let runner = Scripted::new(|name, _| Ok(ok(name, &format!("{name} work"))));
    let mut p = sup_params(None);
    p.budget = Some(BudgetLimits {
        max_agents: Some(2),
        ..Default::default()
    });
    let r = supervisor(&runner, p).await.unwrap();
    assert!(!r.approved);
    assert_eq!(r.final_answer, "w1 work\n\nw2 work");
    assert!(r.supervisor_feedback.is_empty());
    assert_eq!(runner.names(), ["w1", "w2"]);
}

#[tokio::test]
async fn map_reduce_names_and_prompts() {
    let runner = Scripted::new(|name, task| match name {
        "m_1" => Err("bad item".into()),
        "r" => Ok(ok(name, "combined")),
        _ => Ok(ok(name, &task.rsplit(": ").next().unwrap().to_uppercase())),
    });
    let p = MapReduceParams {
        mapper: spec("m"),
        reducer: spec("r"),
        items: vec!["x".into(), "y".into(), "z".into()],
        task: "Shout".into(),
        budget: None,
        runner: None,
    };
    let r = map_reduce(&runner, p).await;
    let names: Vec<&str> = r.map_outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["m_0", "m_1", "m_2"]);
    assert_eq!(runner.task_of("m_2", 0), "Shout\n\nProcess this item: z");
    assert_eq!(
        r.map_outputs[1].error.as_deref(),
        Some("agent 'm_1' failed: bad item")
    );
    let reduce = runner.task_of("r", 0);
    assert!(
        reduce.starts_with(
            "Original task: Shout\n\nResults from 2 sub-agents:\n- [m_0] X\n- [m_2] Z\n\n"
        ),
        "{reduce}"
    );
    assert!(reduce.ends_with("Combine these into a single coherent result."));
    assert_eq!(r.reduced_answer, "combined");
}

#[tokio::test]
async fn map_reduce_failed_reducer_is_empty() {
    let runner = Scripted::new(|name, _| {
        if name == "r" {
            Err("x".into())
        } else {
            Ok(ok(name, "a"))
        }
    });
    let p = MapReduceParams {
        mapper: spec("m"),
        reducer: spec("r"),
        items: vec!["only".into()],
        task: "t".into(),
        budget: None,
        runner: None,
    };
    let r = map_reduce(&runner, p).await;
    assert_eq!(r.reduced_answer, "");
    assert!(r.map_outputs[0].succeeded());
}

fn vote_params(names: &[&str]) -> VoteParams {
    VoteParams {
        agents: specs(names),
        task: "Capital?".into(),
        synthesizer: None,
        budget: None,
        runner: None,
    }
}

#[tokio::test]
async fn vote_majority() {
    let runner = Scripted::new(|name, _| match name {
        "a" | "c" => Ok(ok(name, if name == "a" { "Paris " } else { "paris" })),
        "d" => Err("x".into()),
        _ => Ok(ok(name, "Lyon")),
    });
    let r = vote(&runner, vote_params(&["a", "b", "c", "d"])).await;
    assert_eq!(r.winner, "Paris ");
    assert_eq!(r.agreement_ratio, 0.5);
    assert_eq!(r.votes.len(), 4);
}

#[tokio::test]
async fn vote_tie_takes_earliest_group() {
    let runner = Scripted::new(|name, _| {
        Ok(ok(
            name,
            if name == "a" || name == "d" {
                "Lyon"
            } else {
                "Paris"
            },
        ))
    });
    let r = vote(&runner, vote_params(&["a", "b", "c", "d"])).await;
    assert_eq!(r.winner, "Lyon");
    assert_eq!(r.agreement_ratio, 0.5);

    let none = vote(&Scripted::echo(), vote_params(&[])).await;
    assert_eq!((none.winner.as_str(), none.agreement_ratio), ("", 0.0));
}

#[tokio::test]
async fn vote_synthesizer_picks_and_falls_back() {
    let runner = Scripted::new(|name, _| {
        Ok(ok(
            name,
            if name == "s" {
                "Paris, France"
            } else {
                "Paris"
            },
        ))
    });
    let mut p = vote_params(&["a", "b"]);
    p.synthesizer = Some(spec("s"));
    let r = vote(&runner, p.clone()).await;
    assert_eq!(r.winner, "Paris, France");
    assert_eq!(r.agreement_ratio, 1.0);
    let prompt = runner.task_of("s", 0);
    assert!(
        prompt.starts_with("Original task: Capital?\n\nVotes:\n- a: Paris\n- b: Paris\n\n"),
        "{prompt}"
    );

    let failing = Scripted::new(|name, _| {
        if name == "s" {
            Err("x".into())
        } else {
            Ok(ok(name, "Paris"))
        }
    });
    assert_eq!(vote(&failing, p.clone()).await.winner, "Paris");

    p.budget = Some(BudgetLimits {
        max_agents: Some(2),
        ..Default::default()
    });
    let refused = vote(&runner, p).await;
    assert_eq!(refused.winner, "Paris");
}
