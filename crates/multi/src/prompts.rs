//! Every prompt the patterns build, in one place.
//!
//! Structures follow CAR 0.58.0 (the `- name: answer` lists, the `Original task:` headers,
//! the supervisor's `APPROVED` protocol, the judge's `## Candidate A` / `## Candidate B`
//! sections and JSON verdict); the instruction sentences are this crate's own wording.
//! Lists only ever contain agents that succeeded.

/// `- name: answer` lines, one per pair.
pub fn answer_list(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(name, answer)| format!("- {name}: {answer}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Swarm synthesizer.
pub fn synthesize(task: &str, pairs: &[(&str, &str)]) -> String {
    format!(
        "Original task: {task}\n\nAgent outputs:\n{}\n\nSynthesize these into a single coherent answer.",
        answer_list(pairs)
    )
}

/// Sequential swarm / pipeline: a later agent reads the earlier agents' findings.
pub fn with_findings(task: &str, prior: &[(&str, &str)]) -> String {
    if prior.is_empty() {
        task.to_owned()
    } else {
        format!("{task}\n\nPrior agents' findings:\n{}", answer_list(prior))
    }
}

/// Hybrid (debate) round 2: an agent revises having read the others' round-1 answers.
pub fn debate_revision(task: &str, others: &[(&str, &str)]) -> String {
    let list = if others.is_empty() {
        "(no other agent produced an answer)".to_owned()
    } else {
        answer_list(others)
    };
    format!(
        "{task}\n\nOther agents answered:\n{list}\n\nConsider their answers, then give your revised final answer."
    )
}

/// The concatenation used when there is no synthesizer (or it produced nothing).
pub fn concatenate(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return "[no agent produced an answer]".to_owned();
    }
    pairs
        .iter()
        .map(|(name, answer)| format!("## {name}\n{answer}"))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Supervisor workers after round 1.
pub fn worker_revision(task: &str, previous_round: u32, feedback: &str) -> String {
    format!("{task}\n\nSupervisor feedback from round {previous_round}:\n{feedback}")
}

/// The supervisor's review of one round.
pub fn supervisor_review(task: &str, round: u32, pairs: &[(&str, &str)]) -> String {
    format!(
        "Original task: {task}\n\nRound {round} results:\n{}\n\nReview these results. If they are satisfactory, respond with APPROVED followed by a final summary. Otherwise, provide specific feedback for improvement.",
        answer_list(pairs)
    )
}

/// One map-reduce mapper.
pub fn map_item(task: &str, item: &str) -> String {
    format!("{task}\n\nProcess this item: {item}")
}

/// The map-reduce reducer.
pub fn reduce(task: &str, pairs: &[(&str, &str)]) -> String {
    let list = pairs
        .iter()
        .map(|(name, answer)| format!("- [{name}] {answer}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!(
        "Original task: {task}\n\nResults from {} sub-agents:\n{list}\n\nCombine these into a single coherent result.",
        pairs.len()
    )
}

/// The vote synthesizer.
pub fn vote_synthesis(task: &str, pairs: &[(&str, &str)]) -> String {
    format!(
        "Original task: {task}\n\nVotes:\n{}\n\nDecide the answer these votes support best and reply with that final answer only.",
        answer_list(pairs)
    )
}

/// One tournament match.
pub fn judge(task: &str, answer_a: &str, answer_b: &str) -> String {
    format!(
        "Task: {task}\n\n## Candidate A\n{answer_a}\n\n## Candidate B\n{answer_b}\n\nJudge which candidate answers the task better. Reply with JSON only: {{\"winner\": \"A\" | \"B\", \"rationale\": \"...\"}}"
    )
}
