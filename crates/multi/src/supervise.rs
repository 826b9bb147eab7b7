//! `multi.supervisor`: workers in rounds until a supervisor agent approves.
//!
//! Each round runs every worker in parallel (round 1 on the task, later rounds on the task
//! plus the previous round's feedback), then asks the supervisor to review. An answer
//! containing the word `APPROVED` (any case, as a whole word) ends the run approved, with
//! the text after it (or, if none, the whole answer) as the final answer. Otherwise the
//! answer is the next round's feedback; after `max_rounds` (default 3, at least 1) the run
//! ends unapproved with `[max supervision rounds reached] {last feedback}`.
//!
//! A supervisor that fails (runner error or an output with `error` set) aborts the run
//! with [`MultiError::Agent`]; a supervisor the budget refuses ends it unapproved with the
//! last round's successful worker answers joined by blank lines.

use car_proto::methods::multi::{AgentOutput, SupervisorParams, SupervisorResult};

use crate::budget::Budget;
use crate::prompts;
use crate::run::{call_admitted, run_parallel, same_task, successes};
use crate::{AgentRunner, MultiError};

const DEFAULT_MAX_ROUNDS: u32 = 3;

/// Run supervised rounds.
pub async fn supervisor(
    runner: &dyn AgentRunner,
    p: SupervisorParams,
) -> Result<SupervisorResult, MultiError> {
    let budget = Budget::new(p.budget);
    let max_rounds = p.max_rounds.unwrap_or(DEFAULT_MAX_ROUNDS).max(1);
    tracing::info!(
        workers = p.workers.len(),
        max_rounds,
        "multi.supervisor starting"
    );
    let mut rounds = Vec::new();
    let mut feedback: Vec<String> = Vec::new();
    for round in 1..=max_rounds {
        let worker_task = match feedback.last() {
            None => p.task.clone(),
            Some(last) => prompts::worker_revision(&p.task, round - 1, last),
        };
        let outputs = run_parallel(runner, &budget, &same_task(&p.workers, &worker_task)).await;
        let answers = successes(&p.workers, &outputs);
        let review = prompts::supervisor_review(&p.task, round, &answers);
        let joined = answers
            .iter()
            .map(|(_, answer)| *answer)
            .collect::<Vec<_>>()
            .join("\n\n");
        rounds.push(outputs);

        if let Err(msg) = budget.admit(&p.supervisor.name) {
            tracing::warn!(round, reason = %msg, "supervisor refused by the budget; ending unapproved");
            return Ok(finish(p.task, rounds, feedback, joined, false));
        }
        let verdict = call_admitted(runner, &budget, &p.supervisor, &review).await;
        if let Some(error) = verdict.error {
            return Err(MultiError::Agent(format!("supervisor error: {error}")));
        }
        let answer = verdict.answer;
        let approval = approved_summary(&answer);
        feedback.push(answer);
        if let Some(summary) = approval {
            tracing::info!(round, "multi.supervisor approved");
            return Ok(finish(p.task, rounds, feedback, summary, true));
        }
        tracing::debug!(round, "supervisor asked for another round");
    }
    let last = feedback.last().cloned().unwrap_or_default();
    tracing::info!(max_rounds, "multi.supervisor reached its round limit");
    let final_answer = format!("[max supervision rounds reached] {last}");
    Ok(finish(p.task, rounds, feedback, final_answer, false))
}

fn finish(
    task: String,
    rounds: Vec<Vec<AgentOutput>>,
    supervisor_feedback: Vec<String>,
    final_answer: String,
    approved: bool,
) -> SupervisorResult {
    SupervisorResult {
        task,
        rounds,
        supervisor_feedback,
        final_answer,
        approved,
    }
}

/// `Some(final answer)` when `answer` approves: the text after the first whole-word
/// `APPROVED` (leading punctuation and space trimmed), or the whole answer if nothing
/// follows it.
pub fn approved_summary(answer: &str) -> Option<String> {
    let end = find_word_ci(answer, "approved")?;
    let rest = answer[end..]
        .trim_start_matches(|c: char| {
            c.is_whitespace() || matches!(c, ':' | '-' | '.' | ',' | '!' | '—' | '–')
        })
        .trim_end();
    Some(if rest.is_empty() {
        answer.trim().to_owned()
    } else {
        rest.to_owned()
    })
}

/// The byte offset just past the first whole-word, ASCII-case-insensitive `word`.
fn find_word_ci(text: &str, word: &str) -> Option<usize> {
    // ASCII lowercasing keeps byte offsets, so indices into `lower` are indices into `text`.
    let lower = text.to_ascii_lowercase();
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(pos) = lower[from..].find(word) {
        let start = from + pos;
        let end = start + word.len();
        let before = lower[..start].chars().next_back();
        let after = lower[end..].chars().next();
        if !before.is_some_and(is_word) && !after.is_some_and(is_word) {
            return Some(end);
        }
        from = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approval_detection() {
        assert_eq!(
            approved_summary("APPROVED: all good").as_deref(),
            Some("all good")
        );
        assert_eq!(
            approved_summary("Looks fine.\napproved — ship it ").as_deref(),
            Some("ship it")
        );
        assert_eq!(
            approved_summary("  Approved.  ").as_deref(),
            Some("Approved.")
        );
        assert_eq!(approved_summary("unapproved; needs work"), None);
        assert_eq!(approved_summary("APPROVEDX or approved_by"), None);
        assert_eq!(approved_summary("more detail needed"), None);
        assert_eq!(approved_summary("İ approved yes").as_deref(), Some("yes"));
    }
}
