//! Skills: procedural memory kept in the same graph as facts.
//!
//! Owns the skill record, its input rules, outcome tracking with the degradation rule
//! (`skill.report`) and listing by domain (`skills.list`); matching (`skill.find`) lives in
//! [`crate::skill_find`]. It must not touch facts or do I/O.
//!
//! # Outcomes
//! `skill.report` takes `outcome: "success" | string` (CAR's contract): exactly `"success"`
//! is a success; any other non-blank string (`"fail"`, `"error"`, `"Success"`, …) is a
//! failure; an empty or all-whitespace string is refused (see [`Outcome`]'s `FromStr`).
//!
//! # Degradation
//! CAR's rule: a skill is degraded exactly while `fail_count > success_count + 2` (see
//! [`is_degraded`], margin [`DEGRADE_MARGIN`]). The counts are lifetime counts since the code
//! last changed, so a degraded skill recovers as soon as enough successes make the rule stop
//! holding, and degrades again as soon as it holds. The stored `degraded` flag is recomputed
//! on every report, every ingest and every snapshot load, so it never disagrees with the
//! counts (older snapshots written under a different rule are corrected on load).

use crate::error::{MemoryError, ValidationError};
use crate::fact::validate_tags;
use crate::graph::Graph;
use crate::skill_find::host_of;
use car_proto::clock::now_ms_u64;
pub use car_proto::methods::skills::{Skill, SkillStats};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How many more failures than successes a skill may have before it is degraded.
pub const DEGRADE_MARGIN: u64 = 2;
const MAX_NAME_CHARS: usize = 256;
const MAX_CODE_CHARS: usize = 262_144;
const MAX_FIELD_CHARS: usize = 1_024;
const MAX_DESCRIPTION_CHARS: usize = 16_384;

/// CAR's degradation rule: `fail_count > success_count + DEGRADE_MARGIN`.
pub const fn is_degraded(success_count: u64, fail_count: u64) -> bool {
    fail_count > success_count.saturating_add(DEGRADE_MARGIN)
}

/// How a skill run went. Serialised as `"success"` / `"fail"`; parsed (and deserialised)
/// with CAR's rule: `"success"` is a success, any other non-blank string a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It worked.
    Success,
    /// It did not.
    Fail,
}

impl FromStr for Outcome {
    type Err = ValidationError;

    /// Exactly `"success"` (case-sensitive, as CAR compares it) is [`Outcome::Success`];
    /// any other string with a non-whitespace character is [`Outcome::Fail`]; an empty or
    /// all-whitespace string is refused as `outcome must not be empty`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "success" {
            Ok(Outcome::Success)
        } else if s.trim().is_empty() {
            Err(ValidationError::new("outcome", "must not be empty"))
        } else {
            Ok(Outcome::Fail)
        }
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
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

/// The `skill.report` result (the same shape as [`SkillStats`]).
pub type OutcomeReport = SkillStats;

fn text(
    field: &'static str,
    value: String,
    max: usize,
    required: bool,
) -> Result<String, ValidationError> {
    if required && value.trim().is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    crate::fact::max_chars(field, value, max)
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
                e.to_string().trim_start_matches("tags: ").to_owned(),
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

/// Recomputes a skill's `degraded` from its counts ([`is_degraded`]).
pub(crate) fn refresh_degraded(skill: &mut Skill) {
    skill.degraded = is_degraded(skill.success_count, skill.fail_count);
}

fn record(skill: &mut Skill, outcome: Outcome) {
    match outcome {
        Outcome::Success => skill.success_count = skill.success_count.saturating_add(1),
        Outcome::Fail => skill.fail_count = skill.fail_count.saturating_add(1),
    }
    refresh_degraded(skill);
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
        self.ingest_skill_at(input, now_ms_u64())
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
        self.changes.skill(&input.name);
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
            degraded: false,
            created_ms: previous.as_ref().map_or(now_ms, |p| p.created_ms),
            updated_ms: now_ms,
        };
        if let (true, Some(p)) = (keep_history, previous) {
            skill.success_count = p.success_count;
            skill.fail_count = p.fail_count;
        }
        refresh_degraded(&mut skill);
        if let Some(old) = skill
            .supersedes
            .as_ref()
            .and_then(|o| self.skills.get_mut(o))
        {
            old.superseded_by = Some(skill.name.clone());
            old.updated_ms = now_ms;
            self.changes.skill(&old.name);
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
        record(skill, outcome);
        skill.updated_ms = now_ms_u64();
        let stats = skill.stats();
        self.changes.skill(name);
        Ok(stats)
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

    fn blank() -> Skill {
        Skill {
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
            degraded: false,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn rule_is_fail_count_above_success_count_plus_two() {
        assert!(!is_degraded(0, 0));
        assert!(!is_degraded(0, 2));
        assert!(is_degraded(0, 3));
        assert!(!is_degraded(5, 7));
        assert!(is_degraded(5, 8));
        assert!(
            is_degraded(u64::MAX - 3, u64::MAX),
            "no overflow near the top"
        );
        assert!(!is_degraded(u64::MAX, u64::MAX));
    }

    #[test]
    fn degrades_and_recovers_as_soon_as_the_rule_changes() {
        let mut s = blank();
        use Outcome::{Fail as F, Success as S};
        // (successes, failures) after each report, and whether fails > successes + 2.
        let steps = [
            (F, (0, 1), false),
            (F, (0, 2), false),
            (F, (0, 3), true),
            (S, (1, 3), false),
            (F, (1, 4), true),
            (S, (2, 4), false),
            (S, (3, 4), false),
            (F, (3, 5), false),
            (F, (3, 6), true),
            (F, (3, 7), true),
        ];
        for (outcome, counts, degraded) in steps {
            record(&mut s, outcome);
            assert_eq!(
                ((s.success_count, s.fail_count), s.degraded),
                (counts, degraded)
            );
        }
        assert_eq!(
            s.stats(),
            SkillStats {
                success_count: 3,
                fail_count: 7,
                degraded: true
            }
        );
    }

    #[test]
    fn outcome_follows_cars_success_or_any_string() {
        let parse = |s: &str| s.parse::<Outcome>().map_err(|e| e.to_string());
        assert_eq!(parse("success"), Ok(Outcome::Success));
        for fail in [
            "fail", "failure", "error", "timeout", "Success", " success", "0",
        ] {
            assert_eq!(parse(fail), Ok(Outcome::Fail), "{fail:?}");
        }
        for empty in ["", " ", "\t\n"] {
            assert_eq!(parse(empty), Err("outcome: must not be empty".to_owned()));
        }
        let de = |j: &str| {
            serde_json::from_value::<Outcome>(serde_json::Value::String(j.to_owned()))
                .map_err(|e| e.to_string())
        };
        assert_eq!(de("success"), Ok(Outcome::Success));
        assert_eq!(de("crashed"), Ok(Outcome::Fail));
        assert_eq!(de(""), Err("outcome: must not be empty".to_owned()));
        assert_eq!(serde_json::to_string(&Outcome::Fail).unwrap(), r#""fail""#);
        assert_eq!(
            serde_json::to_string(&Outcome::Success).unwrap(),
            r#""success""#
        );
    }
}
