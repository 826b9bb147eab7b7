//! `skill.*` / `skills.*`: procedural memory.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::member::{int, json, member, opt, req, ArgKind::*};
use super::{op, Declaration};

/// `skill.ingest` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct IngestParams {
    pub name: String,
    pub code: String,
    #[serde(default)]
    pub platform: Option<String>,
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub url_pattern: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub task_keywords: Option<Vec<String>>,
    #[serde(default)]
    pub supersedes: Option<String>,
}

/// `skill.find` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct FindParams {
    #[serde(default)]
    pub persona: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    /// Default 1.
    #[serde(default)]
    pub max_results: Option<i64>,
}

/// `skill.report` params (`name` is accepted for `skill_name`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReportParams {
    #[serde(alias = "name")]
    pub skill_name: String,
    /// `success`, or any other string for a failure.
    pub outcome: String,
}

/// `skills.list` params.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ListParams {
    #[serde(default)]
    pub domain: Option<String>,
}

/// A stored skill, exactly as snapshots write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// Whether the degradation rule (`car_memory::is_degraded`) holds for the counts above.
    /// Snapshots from older versions may also carry a `recent_outcomes` list; it is ignored on
    /// load.
    #[serde(default)]
    pub degraded: bool,
    /// First ingested (Unix milliseconds).
    pub created_ms: u64,
    /// Last ingested or reported (Unix milliseconds).
    pub updated_ms: u64,
}

impl Skill {
    /// Its counts and degraded flag.
    pub fn stats(&self) -> SkillStats {
        SkillStats {
            success_count: self.success_count,
            fail_count: self.fail_count,
            degraded: self.degraded,
        }
    }
}

/// A skill's track record: the `skill.report` result and the `stats` of a `skill.find`
/// row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillStats {
    /// Successes so far.
    pub success_count: u64,
    /// Failures so far.
    pub fail_count: u64,
    /// Whether the skill is now degraded.
    pub degraded: bool,
}

/// One `skill.find` row: CAR's `{ name, code, platform, description, stats, match_score }`
/// plus the skill's other trigger fields and flat copies of `stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillMatch {
    /// The skill's name.
    pub name: String,
    /// Its code.
    pub code: String,
    /// Its platform.
    pub platform: String,
    /// Its description.
    pub description: String,
    /// Its track record (`{success_count, fail_count, degraded}`).
    pub stats: SkillStats,
    /// Score in (0, 1] (formula in the module docs).
    pub match_score: f64,
    /// Its persona.
    pub persona: String,
    /// Its URL glob.
    pub url_pattern: String,
    /// Its task keywords.
    pub task_keywords: Vec<String>,
    /// Successes so far (same as `stats.success_count`).
    pub success_count: u64,
    /// Failures so far (same as `stats.fail_count`).
    pub fail_count: u64,
    /// Whether it is degraded (same as `stats.degraded`).
    pub degraded: bool,
}

crate::method!(
    /// `skill.ingest` → the skill's node id.
    Ingest = op("skill.ingest", "add or replace a skill in procedural memory");
    access: Access::owned(Resource::Memory);
    IngestParams => u64;
    member("ingest_skill", &[req("name", Str), req("code", Str), req("platform", Str), req("persona", Str), req("url_pattern", Str), req("task_keywords", StrList), req("description", Str), opt("supersedes", Str)], int())
);
crate::method!(
    /// `skill.find` → matches best first.
    Find = op("skill.find", "skills matching a persona, url and task, best first");
    access: Access::owned(Resource::Memory);
    FindParams => Vec<SkillMatch>;
    member("find_skill", &[req("persona", Str), req("url", Str), req("task", Str), opt("max_results", Int)], json())
);
crate::method!(
    /// `skill.report` → the skill's updated stats.
    Report = op("skill.report", "record a skill outcome; returns its counts and degraded flag");
    access: Access::owned(Resource::Memory);
    ReportParams => SkillStats;
    member("report_outcome", &[req("skill_name", Str), req("outcome", Str)], json())
);
crate::method!(
    /// `skills.list` → skills.
    List = op("skills.list", "the skills in memory, optionally for one domain");
    access: Access::owned(Resource::Memory);
    ListParams => Vec<Skill>;
    member("list_skills", &[opt("domain", Str)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Ingest>(),
    Declaration::of::<Find>(),
    Declaration::of::<Report>(),
    Declaration::of::<List>(),
];
