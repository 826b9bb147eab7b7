//! `skill.find`: matching skills to a persona, a URL and a task.
//!
//! Owns the match-score formula, URL globbing and host extraction. It must not mutate
//! skills or touch facts.
//!
//! # `find` score
//! CAR's `skill.find` is a scored match (spreading activation from the context to each
//! skill's triggers), not a filter: every criterion the caller gives adds to one score, and
//! a skill that misses one criterion can still win on the others. Each given criterion `c`
//! yields a score `s_c` in [0, 1] and says whether it matched the skill *specifically*:
//!
//! | criterion (weight `w_c`) | skill side | `s_c` | specific |
//! |---|---|---|---|
//! | `persona` (0.2) | equal ignoring case and surrounding space | 1 | yes |
//! | | skill persona empty (any persona) | 0.5 | no |
//! | | different | 0 | no |
//! | `url` (0.3) | `url_pattern` glob-matches the URL | `0.5 + 0.5 × L / (L + 8)` | when `L > 0` |
//! | | no glob match, but same host (or a subdomain of it) | 0.2 | yes |
//! | | `url_pattern` empty (anywhere, like `*`) | 0.5 | no |
//! | | different host | 0 | no |
//! | `task` (0.5) | mean over the query's analysed terms of 1 (term in `task_keywords` or `name`), 0.5 (only in `description`), 0 | mean | when > 0 |
//!
//! - `url_pattern` is a case-insensitive glob where `*` matches any run of characters; a pattern
//!   without `://` is also tried against the URL minus its scheme. `L` is the number of literal
//!   (non-`*`) characters, so a pattern that pins down more of the URL wins. "Same host" compares
//!   [`host_of`] of both sides, for patterns whose host has no `*` after the leading `*.` is
//!   dropped.
//! - Task terms are stemmed with stop words dropped; a task of only stop words (or blank), like a
//!   blank persona or URL, counts as not given.
//!
//! `base = Σ w_c·s_c / Σ w_c` over the given criteria. A skill none of whose given criteria
//! matches specifically scores 0 and is not returned (a generic skill is not offered for an
//! unrelated context just because it is generic; generic credit only ranks skills that
//! matched something). With no criterion given every active skill has `base = 1`.
//!
//! `match_score` is `base`, halved while the skill is degraded. Superseded skills are never
//! returned. Rows are sorted by `match_score` (descending), then non-degraded before
//! degraded, then more successes, then name; at most `max_results` (default
//! [`DEFAULT_MAX_RESULTS`] = 1, as CAR's) are returned.

use crate::error::ValidationError;
use crate::graph::Graph;
use crate::skills::Skill;
pub use car_proto::methods::skills::SkillMatch;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Default `max_results` for `skill.find` (CAR's).
pub const DEFAULT_MAX_RESULTS: usize = 1;
/// Weight of the `persona` criterion.
pub const PERSONA_WEIGHT: f64 = 0.2;
/// Weight of the `url` criterion.
pub const URL_WEIGHT: f64 = 0.3;
/// Weight of the `task` criterion.
pub const TASK_WEIGHT: f64 = 0.5;
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

/// A criterion's score and whether it matched the skill specifically (module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Criterion {
    score: f64,
    specific: bool,
}

impl Criterion {
    const MISS: Criterion = Criterion {
        score: 0.0,
        specific: false,
    };

    fn generic(score: f64) -> Self {
        Criterion {
            score,
            specific: false,
        }
    }

    fn specific(score: f64) -> Self {
        Criterion {
            score,
            specific: true,
        }
    }
}

fn persona_score(skill_persona: &str, persona: &str) -> Criterion {
    let skill_persona = skill_persona.trim();
    if skill_persona.is_empty() {
        Criterion::generic(0.5)
    } else if skill_persona.to_lowercase() == persona.to_lowercase() {
        Criterion::specific(1.0)
    } else {
        Criterion::MISS
    }
}

fn url_score(pattern: &str, url: &str) -> Criterion {
    if pattern.is_empty() {
        return Criterion::generic(0.5);
    }
    let without_scheme = url.split_once("://").map(|(_, r)| r);
    let matched = glob_match(pattern, url)
        || (!pattern.contains("://") && without_scheme.is_some_and(|u| glob_match(pattern, u)));
    if matched {
        let literal = pattern.chars().filter(|&c| c != '*').count();
        let score = 0.5 + 0.5 * literal as f64 / (literal as f64 + 8.0);
        return Criterion {
            score,
            specific: literal > 0,
        };
    }
    let pattern_host = host_of(pattern);
    let url_host = host_of(url);
    let same_host = !pattern_host.is_empty()
        && !pattern_host.contains('*')
        && (url_host == pattern_host || url_host.ends_with(&format!(".{pattern_host}")));
    if same_host {
        Criterion::specific(0.2)
    } else {
        Criterion::MISS
    }
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
                let mut given: Vec<(f64, Criterion)> = Vec::with_capacity(3);
                if let Some(p) = persona {
                    given.push((PERSONA_WEIGHT, persona_score(&s.persona, p)));
                }
                if let Some(u) = url {
                    given.push((URL_WEIGHT, url_score(s.url_pattern.trim(), u)));
                }
                if !task_terms.is_empty() {
                    let score = task_score(&task_terms, s);
                    given.push((
                        TASK_WEIGHT,
                        Criterion {
                            score,
                            specific: score > 0.0,
                        },
                    ));
                }
                let base = if given.is_empty() {
                    1.0
                } else if given.iter().any(|(_, c)| c.specific) {
                    let weighted: f64 = given.iter().map(|(w, c)| w * c.score).sum();
                    let weights: f64 = given.iter().map(|(w, _)| w).sum();
                    weighted / weights
                } else {
                    return None;
                };
                let match_score = if s.degraded { base * 0.5 } else { base };
                Some(SkillMatch {
                    name: s.name.clone(),
                    code: s.code.clone(),
                    platform: s.platform.clone(),
                    description: s.description.clone(),
                    stats: s.stats(),
                    match_score,
                    persona: s.persona.clone(),
                    url_pattern: s.url_pattern.clone(),
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
                .then_with(|| a.degraded.cmp(&b.degraded))
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
        let score = |p: &str, u: &str| url_score(p, u);
        let generic = score("*", "https://github.com/a");
        assert_eq!(generic, Criterion::generic(0.5), "`*` alone is generic");
        let specific = score("https://github.com/*", "https://github.com/a");
        assert_eq!(specific, Criterion::specific(0.5 + 0.5 * 19.0 / 27.0));
        let deeper = score("https://github.com/*/pull/*", "https://github.com/a/pull/1");
        assert_eq!(deeper, Criterion::specific(0.5 + 0.5 * 25.0 / 33.0));
        assert!(deeper.score > specific.score && specific.score < 1.0);
        assert_eq!(score("", "x"), Criterion::generic(0.5), "empty is like `*`");
        assert!(score("github.com/*", "https://github.com/a").specific);
    }

    #[test]
    fn url_mismatch_lowers_rather_than_excludes() {
        let score = |p: &str, u: &str| url_score(p, u);
        assert_eq!(
            score("https://github.com/*/pull/*", "https://github.com/settings"),
            Criterion::specific(0.2),
            "same host, other path: partial credit"
        );
        assert_eq!(
            score("https://*.atlassian.net/*", "https://atlassian.net/"),
            Criterion::specific(0.2),
            "the bare parent domain of a `*.` pattern"
        );
        assert_eq!(
            score("github.com/*", "https://docs.github.com/x"),
            Criterion::specific(0.2),
            "a subdomain of the pattern's host"
        );
        assert_eq!(
            score("https://gitlab.com/*", "https://github.com/a"),
            Criterion::MISS
        );
        assert_eq!(
            score("*github*", "https://gitlab.com/a"),
            Criterion::MISS,
            "a wildcard host never counts as the same host"
        );
    }

    #[test]
    fn persona_rules() {
        assert_eq!(
            persona_score(" Developer ", "developer"),
            Criterion::specific(1.0)
        );
        assert_eq!(persona_score("", "developer"), Criterion::generic(0.5));
        assert_eq!(persona_score("manager", "developer"), Criterion::MISS);
    }
}
