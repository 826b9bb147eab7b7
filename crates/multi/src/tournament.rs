//! `multi.tournament`: single-elimination pairwise judging.
//!
//! Competitors answer the task in parallel (`candidates`, input order); only the
//! successful ones enter the bracket, in input order. Each round pairs entrants in order
//! (1v2, 3v4, …), the odd one out getting a bye to the end of the next round; a round's
//! matches are judged in parallel, each by a fresh clone of `judge` named
//! `"{judge}_{a}_vs_{b}"`. Matches are reported in play order with 1-based rounds.
//!
//! A verdict is read by [`parse_verdict`]: first a JSON object with a `winner` field
//! (bare, in a ```json fence or embedded in prose; `"A"`/`"B"`, `"Candidate A"`, or a
//! candidate's name), else the first standalone `A`/`B`/candidate-name token. A judge that
//! failed, was refused, or said nothing parseable lets candidate A advance, with a
//! rationale saying why.
//!
//! `ranking`: the winner, then the other entrants by the round they were eliminated in
//! (later is better; ties in bracket order), then failed candidates in input order.

use std::cmp::Reverse;

use car_proto::methods::fields::Name;
use car_proto::methods::multi::{
    AgentOutput, AgentSpec, MatchResult, TournamentParams, TournamentResult,
};
use serde_json::Value;

use crate::budget::Budget;
use crate::prompts;
use crate::run::{run_parallel, same_task};
use crate::AgentRunner;

/// Which candidate of a match won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// Rationale recorded when the verdict came from the heuristic token scan.
pub const HEURISTIC_RATIONALE: &str = "verdict parsed heuristically (no JSON winner field)";

/// How many `{` positions the JSON scan tries before giving up (judge replies are short).
const MAX_JSON_STARTS: usize = 64;

/// Run a tournament.
pub async fn tournament(runner: &dyn AgentRunner, p: TournamentParams) -> TournamentResult {
    let budget = Budget::new(p.budget);
    tracing::info!(
        competitors = p.competitors.len(),
        "multi.tournament starting"
    );
    let candidates = run_parallel(runner, &budget, &same_task(&p.competitors, &p.task)).await;
    let name = |i: usize| p.competitors[i].name.as_str();
    let entrants: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].succeeded())
        .collect();
    let mut eliminated_in = vec![0u32; candidates.len()];
    let mut matches = Vec::new();
    let mut alive = entrants.clone();
    let mut round = 0u32;
    while alive.len() > 1 {
        round += 1;
        let pairs: Vec<(usize, usize)> = alive
            .chunks_exact(2)
            .map(|pair| (pair[0], pair[1]))
            .collect();
        let bye = (alive.len() % 2 == 1).then(|| alive[alive.len() - 1]);
        let jobs: Vec<(AgentSpec, String)> = pairs
            .iter()
            .map(|&(a, b)| {
                let spec = judge_spec(&p.judge, name(a), name(b));
                let prompt = prompts::judge(&p.task, &candidates[a].answer, &candidates[b].answer);
                (spec, prompt)
            })
            .collect();
        let verdicts = run_parallel(runner, &budget, &jobs).await;
        let mut next = Vec::with_capacity(pairs.len() + 1);
        for (&(a, b), verdict) in pairs.iter().zip(&verdicts) {
            let (side, rationale) = decide(verdict, name(a), name(b));
            let (winner, loser) = match side {
                Side::A => (a, b),
                Side::B => (b, a),
            };
            tracing::debug!(
                round,
                a = name(a),
                b = name(b),
                winner = name(winner),
                "match judged"
            );
            eliminated_in[loser] = round;
            matches.push(MatchResult {
                round,
                a: name(a).to_owned(),
                b: name(b).to_owned(),
                winner: name(winner).to_owned(),
                rationale,
            });
            next.push(winner);
        }
        next.extend(bye);
        alive = next;
    }
    let champion = alive.first().copied();
    let mut losers: Vec<(usize, usize)> = entrants
        .iter()
        .enumerate()
        .filter(|&(_, &i)| Some(i) != champion)
        .map(|(pos, &i)| (pos, i))
        .collect();
    losers.sort_by_key(|&(pos, i)| (Reverse(eliminated_in[i]), pos));
    let failed = (0..candidates.len()).filter(|&i| !candidates[i].succeeded());
    let ranking: Vec<String> = champion
        .into_iter()
        .chain(losers.into_iter().map(|(_, i)| i))
        .chain(failed)
        .map(|i| name(i).to_owned())
        .collect();
    let (winner_name, winner_answer) = champion
        .map(|i| (name(i).to_owned(), candidates[i].answer.clone()))
        .unwrap_or_default();
    tracing::info!(
        winner = winner_name.as_str(),
        rounds = round,
        "multi.tournament finished"
    );
    TournamentResult {
        task: p.task,
        candidates,
        matches,
        winner_name,
        winner_answer,
        ranking,
    }
}

fn judge_spec(judge: &AgentSpec, a: &str, b: &str) -> AgentSpec {
    let mut spec = judge.clone();
    spec.name = Name(format!("{}_{a}_vs_{b}", judge.name));
    spec
}

/// The side a judge's output picks, and why.
fn decide(verdict: &AgentOutput, a: &str, b: &str) -> (Side, String) {
    if let Some(error) = &verdict.error {
        return (
            Side::A,
            format!("judge failed ({error}); candidate A advances by default"),
        );
    }
    parse_verdict(&verdict.answer, a, b).unwrap_or_else(|| {
        (
            Side::A,
            "no verdict could be parsed from the judge's reply; candidate A advances by default"
                .to_owned(),
        )
    })
}

/// Read a judge's reply for a match between candidates named `a` and `b`.
pub fn parse_verdict(text: &str, a: &str, b: &str) -> Option<(Side, String)> {
    json_verdict(text, a, b)
        .or_else(|| heuristic_side(text, a, b).map(|side| (side, HEURISTIC_RATIONALE.to_owned())))
}

fn json_verdict(text: &str, a: &str, b: &str) -> Option<(Side, String)> {
    let starts = text
        .match_indices('{')
        .map(|(i, _)| i)
        .take(MAX_JSON_STARTS);
    for start in starts {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(Value::Object(map))) = values.next() else {
            continue;
        };
        let Some(side) = map
            .get("winner")
            .and_then(Value::as_str)
            .and_then(|w| side_of(w, a, b))
        else {
            continue;
        };
        let rationale = map.get("rationale").and_then(Value::as_str).unwrap_or("");
        return Some((side, rationale.to_owned()));
    }
    None
}

fn side_of(winner: &str, a: &str, b: &str) -> Option<Side> {
    let w = winner.trim();
    let label = w
        .get(..10)
        .filter(|p| p.eq_ignore_ascii_case("candidate "))
        .map_or(w, |_| w[10..].trim());
    if label.eq_ignore_ascii_case("a") {
        return Some(Side::A);
    }
    if label.eq_ignore_ascii_case("b") {
        return Some(Side::B);
    }
    for exact in [true, false] {
        let same = |name: &str| {
            !name.is_empty()
                && if exact {
                    w == name
                } else {
                    w.eq_ignore_ascii_case(name)
                }
        };
        if same(a) {
            return Some(Side::A);
        }
        if same(b) {
            return Some(Side::B);
        }
    }
    None
}

/// The side of the earliest standalone `A`, `B` or candidate-name token (case-sensitive;
/// at one position the longer token wins).
fn heuristic_side(text: &str, a: &str, b: &str) -> Option<Side> {
    let needles = [("A", Side::A), ("B", Side::B), (a, Side::A), (b, Side::B)];
    needles
        .iter()
        .filter(|(needle, _)| !needle.is_empty())
        .filter_map(|&(needle, side)| first_standalone(text, needle).map(|pos| (pos, needle, side)))
        .min_by_key(|&(pos, needle, _)| (pos, Reverse(needle.len())))
        .map(|(_, _, side)| side)
}

fn first_standalone(text: &str, needle: &str) -> Option<usize> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(needle).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + needle.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_verdicts() {
        let v = parse_verdict(r#"{"winner": "B", "rationale": "tighter"}"#, "x", "y");
        assert_eq!(v, Some((Side::B, "tighter".to_owned())));
        let fenced = "Here you go:\n```json\n{\"winner\": \"a\", \"rationale\": \"r\"}\n```\n";
        assert_eq!(
            parse_verdict(fenced, "x", "y"),
            Some((Side::A, "r".to_owned()))
        );
        let embedded = r#"I think {"note": 1} and then {"winner": "y", "rationale": "named"} ok"#;
        assert_eq!(
            parse_verdict(embedded, "x", "y"),
            Some((Side::B, "named".to_owned()))
        );
        let labelled = r#"{"winner": "Candidate B"}"#;
        assert_eq!(
            parse_verdict(labelled, "x", "y"),
            Some((Side::B, String::new()))
        );
    }

    #[test]
    fn heuristic_verdicts() {
        let h =
            |t: &str| parse_verdict(t, "alpha", "beta").map(|(s, r)| (s, r == HEURISTIC_RATIONALE));
        assert_eq!(h("Candidate B is clearly better."), Some((Side::B, true)));
        assert_eq!(
            h("I'd go with beta, though alpha is close"),
            Some((Side::B, true))
        );
        assert_eq!(
            h("Both are a fine try; ABBA aside, A wins"),
            Some((Side::A, true))
        );
        assert_eq!(h(r#"{"winner": "neither"} but B"#), Some((Side::B, true)));
        assert_eq!(h("no idea"), None);
    }
}
