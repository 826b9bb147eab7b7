//! `multi.map_reduce` and `multi.vote`: many agents in parallel, then one combined answer.
//!
//! - map-reduce: the mapper runs once per item, concurrently, as `"{mapper}_{i}"` (`i` 0-based) on
//!   `"{task}\n\nProcess this item: {item}"`; the reducer then combines the successful results.
//!   `reduced_answer` is the reducer's answer, `""` if it failed, was refused, or had nothing to
//!   combine (no mapper succeeded: the reducer is not called).
//! - vote: every agent answers in parallel. Successful answers are grouped by their trimmed,
//!   lowercased text; the largest group wins (ties: the group seen first) and is reported by its
//!   first member's original text. `agreement_ratio` = winning group size / all votes, failed ones
//!   included (0.0 without votes). A synthesizer, when given and something succeeded, sees the
//!   votes and its answer becomes the winner; if it fails or is refused the majority stands.

use car_proto::methods::fields::Name;
use car_proto::methods::multi::{
    AgentOutput, AgentSpec, MapReduceParams, MapReduceResult, VoteParams, VoteResult,
};

use crate::budget::Budget;
use crate::prompts;
use crate::run::{run_agent, run_parallel, same_task, successes};
use crate::AgentRunner;

/// Map every item with the mapper, then reduce.
pub async fn map_reduce(runner: &dyn AgentRunner, p: MapReduceParams) -> MapReduceResult {
    let budget = Budget::new(p.budget);
    tracing::info!(items = p.items.len(), "multi.map_reduce starting");
    let jobs: Vec<(AgentSpec, String)> = p
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut spec = p.mapper.clone();
            spec.name = Name(format!("{}_{i}", p.mapper.name));
            (spec, prompts::map_item(&p.task, item))
        })
        .collect();
    let map_outputs = run_parallel(runner, &budget, &jobs).await;
    let specs: Vec<AgentSpec> = jobs.into_iter().map(|(spec, _)| spec).collect();
    let results = successes(&specs, &map_outputs);
    let reduced_answer = if results.is_empty() {
        tracing::warn!("no mapper succeeded; skipping the reducer");
        String::new()
    } else {
        let prompt = prompts::reduce(&p.task, &results);
        let out = run_agent(runner, &budget, &p.reducer, &prompt).await;
        answer_or_empty(out, "reducer")
    };
    tracing::info!(succeeded = results.len(), "multi.map_reduce finished");
    MapReduceResult {
        task: p.task,
        map_outputs,
        reduced_answer,
    }
}

/// Let every agent vote, then take the majority (or the synthesizer's pick).
pub async fn vote(runner: &dyn AgentRunner, p: VoteParams) -> VoteResult {
    let budget = Budget::new(p.budget);
    tracing::info!(agents = p.agents.len(), "multi.vote starting");
    let votes = run_parallel(runner, &budget, &same_task(&p.agents, &p.task)).await;
    let (majority, size) = majority(&votes);
    let agreement_ratio = if votes.is_empty() {
        0.0
    } else {
        size as f64 / votes.len() as f64
    };
    let answers = successes(&p.agents, &votes);
    let mut winner = majority;
    if let (Some(synth), false) = (&p.synthesizer, answers.is_empty()) {
        let prompt = prompts::vote_synthesis(&p.task, &answers);
        let out = run_agent(runner, &budget, synth, &prompt).await;
        if out.succeeded() {
            winner = out.answer;
        } else {
            tracing::warn!(
                synthesizer = synth.name.as_str(),
                error = out.error.as_deref().unwrap_or(""),
                "vote synthesizer produced nothing; keeping the majority"
            );
        }
    }
    tracing::info!(votes = votes.len(), agreement_ratio, "multi.vote finished");
    VoteResult {
        task: p.task,
        votes,
        winner,
        agreement_ratio,
    }
}

/// The winning answer's first-seen text and its group size (`("", 0)` when nothing
/// succeeded).
pub fn majority(votes: &[AgentOutput]) -> (String, usize) {
    // (normalised key, first original text, count), in first-seen order.
    let mut groups: Vec<(String, &str, usize)> = Vec::new();
    for vote in votes.iter().filter(|v| v.succeeded()) {
        let key = vote.answer.trim().to_lowercase();
        match groups.iter_mut().find(|(k, _, _)| *k == key) {
            Some(group) => group.2 += 1,
            None => groups.push((key, &vote.answer, 1)),
        }
    }
    let mut best: Option<&(String, &str, usize)> = None;
    for group in &groups {
        if best.is_none_or(|b| group.2 > b.2) {
            best = Some(group);
        }
    }
    best.map_or((String::new(), 0), |(_, text, n)| ((*text).to_owned(), *n))
}

fn answer_or_empty(out: AgentOutput, role: &str) -> String {
    if out.succeeded() {
        out.answer
    } else {
        tracing::warn!(
            role,
            error = out.error.as_deref().unwrap_or(""),
            "combining agent produced nothing"
        );
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(answer: &str) -> AgentOutput {
        let mut out = AgentOutput::failed("x", "");
        out.error = None;
        out.answer = answer.into();
        out
    }

    #[test]
    fn majority_groups_normalised_answers() {
        let votes = [
            ok(" Paris"),
            ok("london"),
            ok("paris "),
            AgentOutput::failed("f", "e"),
        ];
        assert_eq!(majority(&votes), (" Paris".to_owned(), 2));
    }

    #[test]
    fn majority_tie_takes_first_group() {
        let votes = [ok("b"), ok("a"), ok("a"), ok("B")];
        assert_eq!(majority(&votes), ("b".to_owned(), 2));
        assert_eq!(
            majority(&[AgentOutput::failed("f", "e")]),
            (String::new(), 0)
        );
    }
}
