//! Skills: procedural memory kept in the same graph as facts.
//!
//! Owns the skill record, its input rules, outcome tracking with the degradation rule
//! (`skill.report`) and listing by domain (`skills.list`); matching (`skill.find`) lives in
//! [`crate::skill_find`]. It must not touch facts or do I/O.
//!
//! # Degradation
//! The last [`OUTCOME_WINDOW`] outcomes are kept. A skill becomes degraded once it has at
//! least [`MIN_OUTCOMES`] recent outcomes and their failure rate is ≥ [`DEGRADE_AT`]; it
//! recovers when that rate falls below [`RECOVER_BELOW`]. The gap is hysteresis, so one
//! lucky success does not flap the flag.

use crate::error::{MemoryError, ValidationError};
use crate::fact::validate_tags;
use crate::graph::{now_ms, Graph};
use crate::skill_find::host_of;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How many recent outcomes the degradation rule looks at.
pub const OUTCOME_WINDOW: usize = 10;
/// Fewest recent outcomes before a skill can be degraded.
pub const MIN_OUTCOMES: usize = 5;
/// Recent failure rate at which a skill becomes degraded.
pub const DEGRADE_AT: f64 = 0.6;
/// Recent failure rate below which a degraded skill recovers.
pub const RECOVER_BELOW: f64 = 0.4;
const MAX_NAME_CHARS: usize = 256;
const MAX_CODE_CHARS: usize = 262_144;
const MAX_FIELD_CHARS: usize = 1_024;
const MAX_DESCRIPTION_CHARS: usize = 16_384;

/// How a skill run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It worked.
    Success,
    /// It did not.
    Fail,
}

impl FromStr for Outcome {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "success" => Ok(Outcome::Success),
            "fail" => Ok(Outcome::Fail),
            other => Err(ValidationError::new(
                "outcome",
                format!("must be success or fail (got {other:?})"),
            )),
        }
    }
}

/// A stored skill, exactly as snapshots write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skill {
    /// Unique name; ingesting the same name replaces the skill.
    pub name: String,
    /// The procedure itself.
    pub code: String,
    /// Where it runs (free text, e.g. `python`, `browser`).
    pub platform: String,
    /// Which persona it is for; empty means any.
    pub persona: String,
    /// Glob over URLs where it applies; empty means anywhere.
    pub url_pattern: String,
    /// Words describing the tasks it solves.
    pub task_keywords: Vec<String>,
    /// What it does.
    pub description: String,
    /// The skill this one replaced, if any.
    #[serde(default)]
    pub supersedes: Option<String>,
    /// The skill that replaced this one; a superseded skill is never returned by `find`.
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// Successes reported since the code last changed.
    #[serde(default)]
    pub success_count: u64,
    /// Failures reported since the code last changed.
    #[serde(default)]
    pub fail_count: u64,
    /// The last [`OUTCOME_WINDOW`] outcomes, oldest first.
    #[serde(default)]
    pub recent_outcomes: Vec<Outcome>,
    /// Whether the degradation rule currently holds.
    #[serde(default)]
    pub degraded: bool,
    /// First ingested (Unix milliseconds).
    pub created_ms: u64,
    /// Last ingested or reported (Unix milliseconds).
    pub updated_ms: u64,
}

/// The parameters of `skill.ingest`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SkillInput {
    /// Required, non-blank.
    pub name: String,
    /// Required, non-blank.
    pub code: String,
    /// May be empty.
    pub platform: String,
    /// May be empty (any persona).
    pub persona: String,
    /// May be empty (any URL).
    pub url_pattern: String,
    /// Non-blank entries; duplicates dropped.
    pub task_keywords: Vec<String>,
    /// May be empty.
    pub description: String,
    /// An existing skill this one replaces.
    #[serde(default)]
    pub supersedes: Option<String>,
}

/// The `skill.report` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReport {
    /// Successes so far.
    pub success_count: u64,
    /// Failures so far.
    pub fail_count: u64,
    /// Whether the skill is now degraded.
    pub degraded: bool,
}

fn text(
    field: &'static str,
    value: String,
    max: usize,
    required: bool,
) -> Result<String, ValidationError> {
    if required && value.trim().is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    let n = value.chars().count();
    if n > max {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max} characters (got {n})"),
        ));
    }
    Ok(value)
}

impl SkillInput {
    /// Checks every rule; the first broken one is returned, naming its field.
    pub fn validate(self) -> Result<SkillInput, ValidationError> {
        let name = text("name", self.name, MAX_NAME_CHARS, true)?;
        let supersedes = self
            .supersedes
            .map(|s| text("supersedes", s, MAX_NAME_CHARS, true))
            .transpose()?;
        if supersedes.as_deref() == Some(name.as_str()) {
            return Err(ValidationError::new("supersedes", "must differ from name"));
        }
        let task_keywords = validate_tags(self.task_keywords).map_err(|e| {
            ValidationError::new(
                "task_keywords",
                e.to_string().trim_start_matches("tags ").to_owned(),
            )
        })?;
        Ok(SkillInput {
            name,
            code: text("code", self.code, MAX_CODE_CHARS, true)?,
            platform: text("platform", self.platform, MAX_FIELD_CHARS, false)?,
            persona: text("persona", self.persona, MAX_FIELD_CHARS, false)?,
            url_pattern: text("url_pattern", self.url_pattern, MAX_FIELD_CHARS, false)?,
            task_keywords,
            description: text(
                "description",
                self.description,
                MAX_DESCRIPTION_CHARS,
                false,
            )?,
            supersedes,
        })
    }
}

impl Skill {
    fn record(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Success => self.success_count += 1,
            Outcome::Fail => self.fail_count += 1,
        }
        self.recent_outcomes.push(outcome);
        if self.recent_outcomes.len() > OUTCOME_WINDOW {
            let excess = self.recent_outcomes.len() - OUTCOME_WINDOW;
            self.recent_outcomes.drain(..excess);
        }
        let n = self.recent_outcomes.len();
        let fails = self
            .recent_outcomes
            .iter()
            .filter(|o| **o == Outcome::Fail)
            .count();
        let rate = fails as f64 / n as f64;
        if !self.degraded && n >= MIN_OUTCOMES && rate >= DEGRADE_AT {
            self.degraded = true;
        } else if self.degraded && rate < RECOVER_BELOW {
            self.degraded = false;
        }
    }
}

impl Graph {
    /// How many skills the graph holds (superseded ones included).
    pub fn skill_count(&self) -> usize {
        self.skills.len()
    }

    /// The skill with this name.
    pub fn skill(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// Ingests a validated skill (see [`SkillInput::validate`]) and returns the skill count.
    ///
    /// The same name replaces the skill, keeping its creation time; outcome history is kept
    /// only when the code is unchanged, since new code earns its own record. Supersession is
    /// sticky: re-ingesting a superseded skill does not revive it. `supersedes` must name an
    /// existing skill.
    pub fn ingest_skill(&mut self, input: SkillInput) -> Result<usize, MemoryError> {
        self.ingest_skill_at(input, now_ms())
    }

    /// [`Graph::ingest_skill`] with an explicit clock.
    pub fn ingest_skill_at(
        &mut self,
        input: SkillInput,
        now_ms: u64,
    ) -> Result<usize, MemoryError> {
        if let Some(old) = &input.supersedes {
            if !self.skills.contains_key(old) {
                return Err(MemoryError::SkillNotFound {
                    field: "supersedes",
                    name: old.clone(),
                });
            }
        }
        let previous = self.skills.remove(&input.name);
        let keep_history = previous.as_ref().is_some_and(|p| p.code == input.code);
        let mut skill = Skill {
            name: input.name,
            code: input.code,
            platform: input.platform,
            persona: input.persona,
            url_pattern: input.url_pattern,
            task_keywords: input.task_keywords,
            description: input.description,
            supersedes: input.supersedes,
            superseded_by: previous.as_ref().and_then(|p| p.superseded_by.clone()),
            success_count: 0,
            fail_count: 0,
            recent_outcomes: Vec::new(),
            degraded: false,
            created_ms: previous.as_ref().map_or(now_ms, |p| p.created_ms),
            updated_ms: now_ms,
        };
        if let (true, Some(p)) = (keep_history, previous) {
            skill.success_count = p.success_count;
            skill.fail_count = p.fail_count;
            skill.recent_outcomes = p.recent_outcomes;
            skill.degraded = p.degraded;
        }
        if let Some(old) = skill
            .supersedes
            .as_ref()
            .and_then(|o| self.skills.get_mut(o))
        {
            old.superseded_by = Some(skill.name.clone());
            old.updated_ms = now_ms;
        }
        self.skills.insert(skill.name.clone(), skill);
        Ok(self.skills.len())
    }

    /// Records an outcome for the named skill and returns its counts and degraded flag.
    pub fn report_outcome(
        &mut self,
        name: &str,
        outcome: Outcome,
    ) -> Result<OutcomeReport, MemoryError> {
        let skill = self
            .skills
            .get_mut(name)
            .ok_or_else(|| MemoryError::SkillNotFound {
                field: "name",
                name: name.to_owned(),
            })?;
        skill.record(outcome);
        skill.updated_ms = now_ms();
        Ok(OutcomeReport {
            success_count: skill.success_count,
            fail_count: skill.fail_count,
            degraded: skill.degraded,
        })
    }

    /// Every skill (superseded ones included, flagged by `superseded_by`), by name; with a
    /// domain, only skills whose `url_pattern` host (see [`host_of`]) is that domain or a
    /// subdomain of it. The domain may be given as a bare host or a URL.
    pub fn list_skills(&self, domain: Option<&str>) -> Vec<Skill> {
        let domain = domain.map(host_of).filter(|d| !d.is_empty());
        self.skills
            .values()
            .filter(|s| match &domain {
                None => true,
                Some(d) => {
                    let host = host_of(&s.url_pattern);
                    host == *d || host.ends_with(&format!(".{d}"))
                }
            })
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degradation_has_hysteresis() {
        let mut s = Skill {
            name: "n".into(),
            code: "c".into(),
            platform: String::new(),
            persona: String::new(),
            url_pattern: String::new(),
            task_keywords: vec![],
            description: String::new(),
            supersedes: None,
            superseded_by: None,
            success_count: 0,
            fail_count: 0,
            recent_outcomes: vec![],
            degraded: false,
            created_ms: 0,
            updated_ms: 0,
        };
        for _ in 0..4 {
            s.record(Outcome::Fail);
        }
        assert!(!s.degraded, "fewer than MIN_OUTCOMES never degrade");
        s.record(Outcome::Fail);
        assert!(s.degraded);
        for _ in 0..5 {
            s.record(Outcome::Success);
        }
        // Window: 5 fails + 5 successes = 0.5, not below RECOVER_BELOW.
        assert!(s.degraded);
        s.record(Outcome::Success);
        s.record(Outcome::Success);
        // Window: 3 fails / 10 = 0.3 < 0.4.
        assert!(!s.degraded);
        assert_eq!(
            (s.success_count, s.fail_count, s.recent_outcomes.len()),
            (7, 5, 10)
        );
    }
}
