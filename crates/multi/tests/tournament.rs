//! Tournament brackets, byes, ranking and verdict handling.

mod common;

use car_multi::tournament;
use car_proto::methods::multi::{BudgetLimits, TournamentParams, TournamentResult};
use common::{ok, spec, specs, Scripted};

fn params(names: &[&str]) -> TournamentParams {
    TournamentParams {
        competitors: specs(names),
        judge: spec("judge"),
        task: "Best haiku".into(),
        budget: None,
        runner: None,
    }
}

/// Competitors answer `"{name} answer"`; judges (names starting `judge_`) reply `verdict`.
fn runner(verdict: &'static str) -> Scripted {
    Scripted::new(move |name, _| {
        if name.starts_with("judge_") {
            Ok(ok(name, verdict))
        } else {
            Ok(ok(name, &format!("{name} answer")))
        }
    })
}

fn played(r: &TournamentResult) -> Vec<(u32, &str, &str, &str)> {
    r.matches
        .iter()
        .map(|m| (m.round, m.a.as_str(), m.b.as_str(), m.winner.as_str()))
        .collect()
}

const PICK_A: &str = r#"{"winner": "A", "rationale": "A is better"}"#;

#[tokio::test]
async fn three_competitors_car_example() {
    let run = runner(PICK_A);
    let r = tournament(&run, params(&["a", "b", "c"])).await;
    assert_eq!(played(&r), [(1, "a", "b", "a"), (2, "a", "c", "a")]);
    assert_eq!(r.ranking, ["a", "c", "b"]);
    assert_eq!(
        (r.winner_name.as_str(), r.winner_answer.as_str()),
        ("a", "a answer")
    );
    assert_eq!(r.candidates.len(), 3);
    assert_eq!(r.matches[0].rationale, "A is better");
    let judge_task = run.task_of("judge_a_vs_b", 0);
    assert!(judge_task.contains("Best haiku"));
    assert!(judge_task.contains("## Candidate A\na answer"));
    assert!(judge_task.contains("## Candidate B\nb answer"));
    assert!(judge_task.contains(r#"{"winner": "A" | "B", "rationale": "..."}"#));
    assert!(run.names().contains(&"judge_a_vs_c".to_owned()));
}

#[tokio::test]
async fn four_competitors() {
    let r = tournament(&runner(PICK_A), params(&["a", "b", "c", "d"])).await;
    assert_eq!(
        played(&r),
        [(1, "a", "b", "a"), (1, "c", "d", "c"), (2, "a", "c", "a")]
    );
    assert_eq!(r.ranking, ["a", "c", "b", "d"]);
}

#[tokio::test]
async fn five_competitors_byes() {
    let r = tournament(
        &runner(
            r#"```json
{"winner": "B", "rationale": "B wins"}
```"#,
        ),
        params(&["a", "b", "c", "d", "e"]),
    )
    .await;
    // r1: b beats a, d beats c, e bye; r2: [b, d, e] → d beats b, e bye; r3: e beats d.
    assert_eq!(
        played(&r),
        [
            (1, "a", "b", "b"),
            (1, "c", "d", "d"),
            (2, "b", "d", "d"),
            (3, "d", "e", "e")
        ]
    );
    assert_eq!(r.ranking, ["e", "d", "b", "a", "c"]);
    assert_eq!(r.winner_name, "e");
}

#[tokio::test]
async fn heuristic_verdict() {
    let r = tournament(
        &runner("After reading both, Candidate B is stronger."),
        params(&["x", "y"]),
    )
    .await;
    assert_eq!(r.winner_name, "y");
    assert_eq!(
        r.matches[0].rationale,
        "verdict parsed heuristically (no JSON winner field)"
    );
}

#[tokio::test]
async fn verdict_by_candidate_name() {
    let r = tournament(
        &runner(r#"Verdict: {"winner": "y", "rationale": "named"}"#),
        params(&["x", "y"]),
    )
    .await;
    assert_eq!(
        (r.winner_name.as_str(), r.matches[0].rationale.as_str()),
        ("y", "named")
    );
}

#[tokio::test]
async fn unparseable_verdict_defaults_to_a() {
    let r = tournament(&runner("hmm, hard to say"), params(&["x", "y"])).await;
    assert_eq!(r.winner_name, "x");
    assert!(r.matches[0]
        .rationale
        .contains("no verdict could be parsed"));
}

#[tokio::test]
async fn failed_judge_defaults_to_a() {
    let run = Scripted::new(|name, _| {
        if name.starts_with("judge_") {
            Err("judge down".into())
        } else {
            Ok(ok(name, "ans"))
        }
    });
    let r = tournament(&run, params(&["x", "y"])).await;
    assert_eq!(r.winner_name, "x");
    assert!(
        r.matches[0]
            .rationale
            .contains("agent 'judge_x_vs_y' failed: judge down"),
        "{}",
        r.matches[0].rationale
    );
}

#[tokio::test]
async fn refused_judge_defaults_to_a() {
    let mut p = params(&["x", "y"]);
    p.budget = Some(BudgetLimits {
        max_agents: Some(2),
        ..Default::default()
    });
    let r = tournament(&runner(r#"{"winner": "B"}"#), p).await;
    assert_eq!(r.winner_name, "x");
    assert!(r.matches[0].rationale.contains("agent cap reached"));
}

#[tokio::test]
async fn failed_candidates_rank_last() {
    let run = Scripted::new(|name, _| match name {
        "b" | "d" => Err("crash".into()),
        n if n.starts_with("judge_") => Ok(ok(n, r#"{"winner":"B","rationale":"r"}"#)),
        n => Ok(ok(n, "ok")),
    });
    let r = tournament(&run, params(&["a", "b", "c", "d"])).await;
    assert_eq!(played(&r), [(1, "a", "c", "c")]);
    assert_eq!(r.ranking, ["c", "a", "b", "d"]);

    let none = tournament(&Scripted::new(|_, _| Err("x".into())), params(&["a", "b"])).await;
    assert_eq!(
        (none.winner_name.as_str(), none.winner_answer.as_str()),
        ("", "")
    );
    assert!(none.matches.is_empty());
    assert_eq!(none.ranking, ["a", "b"]);

    let solo = tournament(&runner(PICK_A), params(&["only"])).await;
    assert_eq!((solo.winner_name.as_str(), solo.ranking.len()), ("only", 1));
}
