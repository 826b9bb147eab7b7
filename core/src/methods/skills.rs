//! `skill.*` / `skills.*`: procedural memory.

use crate::methods::{Access, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::Json;
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
    FindParams => Json;
    member("find_skill", &[req("persona", Str), req("url", Str), req("task", Str), opt("max_results", Int)], json())
);
crate::method!(
    /// `skill.report` → the skill's updated stats.
    Report = op("skill.report", "record a skill outcome; returns its counts and degraded flag");
    access: Access::owned(Resource::Memory);
    ReportParams => Json;
    member("report_outcome", &[req("skill_name", Str), req("outcome", Str)], json())
);
crate::method!(
    /// `skills.list` → skills.
    List = op("skills.list", "the skills in memory, optionally for one domain");
    access: Access::owned(Resource::Memory);
    ListParams => Json;
    member("list_skills", &[opt("domain", Str)], json())
);

pub const DECLARATIONS: &[Declaration] = &[
    Declaration::of::<Ingest>(),
    Declaration::of::<Find>(),
    Declaration::of::<Report>(),
    Declaration::of::<List>(),
];
