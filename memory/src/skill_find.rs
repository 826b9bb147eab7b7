//! `skill.find`: matching skills to a persona, a URL and a task.
//!
//! Owns the match-score formula, URL globbing and host extraction. It must not mutate
//! skills or touch facts.
//!
//! # `find` score
//! Each criterion the caller gives scores in [0, 1]; a skill failing a given criterion is
//! not returned at all:
//! - `task` (weight 0.5): the query's analysed terms (stemmed, stop words dropped); a term
//!   found in the skill's `task_keywords` or `name` counts 1, one found only in its
//!   `description` counts 0.5; the score is the mean over query terms and must be > 0.
//!   A task made only of stop words is ignored as a criterion.
//! - `url` (weight 0.3): `url_pattern` is a case-insensitive glob where `*` matches any run
//!   of characters; a pattern without `://` is also tried against the URL minus its scheme.
//!   A match scores `0.5 + 0.5 × L / (L + 8)` where `L` is the number of literal (non-`*`)
//!   characters, so the pattern that pins down more of the URL wins (`*` alone scores 0.5);
//!   a skill with an empty pattern is generic and scores 0.25.
//! - `persona` (weight 0.2): equal ignoring case and surrounding space scores 1; a skill with
//!   an empty persona is generic and scores 0.5.
//!
//! `match_score` is the weighted mean over the given criteria (1.0 when none is given),
//! halved while the skill is degraded. Superseded skills are never returned. Ties break on
//! more successes, then name.

use crate::error::ValidationError;
use crate::graph::Graph;
use crate::skills::Skill;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Default `max_results` for `skill.find`.
pub const DEFAULT_MAX_RESULTS: usize = 5;
/// Largest accepted `max_results`.
pub const MAX_RESULTS: usize = 100;

/// The parameters of `skill.find`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SkillQuery {
    /// Persona to match.
    pub persona: Option<String>,
    /// URL to match against `url_pattern`.
    pub url: Option<String>,
    /// Task description to match against keywords and description.
    pub task: Option<String>,
    /// 1..=[`MAX_RESULTS`], default [`DEFAULT_MAX_RESULTS`].
    pub max_results: Option<i64>,
}

/// One `skill.find` row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SkillMatch {
    /// The skill's name.
    pub name: String,
    /// Its code.
    pub code: String,
    /// Score in [0, 1] (formula in the module docs).
    pub match_score: f64,
    /// Its platform.
    pub platform: String,
    /// Its persona.
    pub persona: String,
    /// Its URL glob.
    pub url_pattern: String,
    /// Its description.
    pub description: String,
    /// Its task keywords.
    pub task_keywords: Vec<String>,
    /// Successes so far.
    pub success_count: u64,
    /// Failures so far.
    pub fail_count: u64,
    /// Whether it is degraded.
    pub degraded: bool,
}

/// Matches `text` against a glob where `*` is any run of characters; case-insensitive.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.to_lowercase().chars().collect();
    let t: Vec<char> = text.to_lowercase().chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Classic greedy wildcard match: on a mismatch, backtrack to the last `*` and let it
    // swallow one more character. Linear in practice, never exponential.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The host part of a URL or URL pattern: scheme, user info, port, path, query and a
/// leading `*.` removed, lower-cased. `https://*.GitHub.com:443/x` → `github.com`.
pub fn host_of(url_or_pattern: &str) -> String {
    let rest = url_or_pattern
        .split_once("://")
        .map_or(url_or_pattern, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = host.split(':').next().unwrap_or_default();
    host.trim_start_matches("*.").to_lowercase()
}

fn url_score(pattern: &str, url: &str) -> Option<f64> {
    if pattern.is_empty() {
        return Some(0.25);
    }
    let without_scheme = url.split_once("://").map(|(_, r)| r);
    let matched = glob_match(pattern, url)
        || (!pattern.contains("://") && without_scheme.is_some_and(|u| glob_match(pattern, u)));
    matched.then(|| {
        let literal = pattern.chars().filter(|&c| c != '*').count() as f64;
        0.5 + 0.5 * literal / (literal + 8.0)
    })
}

fn task_score(query_terms: &HashSet<String>, skill: &Skill) -> f64 {
    let mut keyword_terms: HashSet<String> = crate::text::terms(&skill.name).into_iter().collect();
    for keyword in &skill.task_keywords {
        keyword_terms.extend(crate::text::terms(keyword));
    }
    let description_terms: HashSet<String> =
        crate::text::terms(&skill.description).into_iter().collect();
    let total: f64 = query_terms
        .iter()
        .map(|t| {
            if keyword_terms.contains(t) {
                1.0
            } else if description_terms.contains(t) {
                0.5
            } else {
                0.0
            }
        })
        .sum();
    total / query_terms.len() as f64
}

impl Graph {
    /// Skills matching `query`, best first (score formula in the module docs).
    pub fn find_skills(&self, query: &SkillQuery) -> Result<Vec<SkillMatch>, ValidationError> {
        let max = match query.max_results {
            None => DEFAULT_MAX_RESULTS,
            Some(n) if (1..=MAX_RESULTS as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(ValidationError::new(
                    "max_results",
                    format!("must be between 1 and {MAX_RESULTS} (got {n})"),
                ))
            }
        };
        let persona = query
            .persona
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty());
        let url = query
            .url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        let task_terms: HashSet<String> = query
            .task
            .as_deref()
            .map(|t| crate::text::terms(t).into_iter().collect())
            .unwrap_or_default();
        let mut rows: Vec<SkillMatch> = self
            .skills
            .values()
            .filter(|s| s.superseded_by.is_none())
            .filter_map(|s| {
                let mut weighted = 0.0;
                let mut weights = 0.0;
                if let Some(p) = persona {
                    let skill_persona = s.persona.trim();
                    let score = if skill_persona.is_empty() {
                        0.5
                    } else if skill_persona.to_lowercase() == p.to_lowercase() {
                        1.0
                    } else {
                        return None;
                    };
                    weighted += 0.2 * score;
                    weights += 0.2;
                }
                if let Some(u) = url {
                    weighted += 0.3 * url_score(s.url_pattern.trim(), u)?;
                    weights += 0.3;
                }
                if !task_terms.is_empty() {
                    let score = task_score(&task_terms, s);
                    if score == 0.0 {
                        return None;
                    }
                    weighted += 0.5 * score;
                    weights += 0.5;
                }
                let base = if weights == 0.0 {
                    1.0
                } else {
                    weighted / weights
                };
                let match_score = if s.degraded { base * 0.5 } else { base };
                Some(SkillMatch {
                    name: s.name.clone(),
                    code: s.code.clone(),
                    match_score,
                    platform: s.platform.clone(),
                    persona: s.persona.clone(),
                    url_pattern: s.url_pattern.clone(),
                    description: s.description.clone(),
                    task_keywords: s.task_keywords.clone(),
                    success_count: s.success_count,
                    fail_count: s.fail_count,
                    degraded: s.degraded,
                })
            })
            .collect();
        rows.sort_by(|a, b| {
            b.match_score
                .total_cmp(&a.match_score)
                .then_with(|| b.success_count.cmp(&a.success_count))
                .then_with(|| a.name.cmp(&b.name))
        });
        rows.truncate(max);
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_rules() {
        assert!(glob_match("https://github.com/*", "https://github.com/a/b"));
        assert!(glob_match("*.github.com/*", "docs.GitHub.com/x"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(!glob_match("https://github.com/*", "https://gitlab.com/a"));
        assert!(glob_match(&"*a".repeat(20), &"a".repeat(40)));
    }

    #[test]
    fn host_rules() {
        assert_eq!(host_of("https://*.GitHub.com:443/x?y"), "github.com");
        assert_eq!(host_of("user@mail.example.org/inbox"), "mail.example.org");
        assert_eq!(host_of("github.com"), "github.com");
        assert_eq!(host_of(""), "");
    }

    #[test]
    fn url_specificity_wins() {
        let generic = url_score("*", "https://github.com/a").unwrap();
        let specific = url_score("https://github.com/*", "https://github.com/a").unwrap();
        assert!(specific > generic && specific <= 1.0);
        assert_eq!(generic, 0.5);
        let deeper =
            url_score("https://github.com/*/pull/*", "https://github.com/a/pull/1").unwrap();
        assert!(
            deeper > specific,
            "more literal characters are more specific"
        );
        assert_eq!(url_score("", "x"), Some(0.25));
        assert_eq!(
            url_score("https://gitlab.com/*", "https://github.com/a"),
            None
        );
        assert!(url_score("github.com/*", "https://github.com/a").is_some());
    }
}
