//! Facts: the stored record, its kinds, and the validated input for adding one.
//!
//! Owns every rule a caller-supplied fact must satisfy (non-empty text, confidence in
//! [0, 1], size caps) and the query-limit rule for `k`. It must not rank, store or persist:
//! the graph does that with values this module has already validated.

use crate::error::ValidationError;
use crate::proactive::ProactiveMeta;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest accepted `subject`, in characters.
pub const MAX_SUBJECT_CHARS: usize = 1_024;
/// Longest accepted `body`, in characters. Bounds one fact's share of a context budget.
pub const MAX_BODY_CHARS: usize = 16_384;
/// Most tags on one fact.
pub const MAX_TAGS: usize = 64;
/// Longest accepted tag, in characters.
pub const MAX_TAG_CHARS: usize = 128;
/// Longest accepted caller-chosen `fact_id`, in characters.
pub const MAX_FACT_ID_CHARS: usize = 256;
/// Longest accepted `source`, in characters.
pub const MAX_SOURCE_CHARS: usize = 1_024;
/// Default `k` for `memory.query`.
pub const DEFAULT_K: usize = 5;
/// Largest accepted `k` for `memory.query`.
pub const MAX_K: usize = 1_000;
/// Confidence a fact gets when the caller does not say.
pub const DEFAULT_CONFIDENCE: f64 = 1.0;

/// What kind of knowledge a fact is. Serialised lower-case.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum FactKind {
    /// A learned pattern (the default).
    #[default]
    Pattern,
    /// A hard rule: `build_context` always includes every constraint.
    Constraint,
    /// A user or project preference.
    Preference,
    /// A plain statement of fact.
    Fact,
    /// A known unknown: an open question, listed last by `build_context`.
    Unknown,
    /// Proactive execution-state knowledge (`memory.save_knowledge`): requirements,
    /// verified environment facts, policies.
    Knowledge,
    /// Proactive procedural evidence (`memory.save_procedural`): failed attempts, fixes,
    /// gotchas.
    Procedural,
}

impl FactKind {
    /// Every kind, in wire order.
    pub const ALL: [FactKind; 7] = [
        FactKind::Pattern,
        FactKind::Constraint,
        FactKind::Preference,
        FactKind::Fact,
        FactKind::Unknown,
        FactKind::Knowledge,
        FactKind::Procedural,
    ];

    /// The kinds `memory.add_fact` accepts (and [`FromStr`] parses). The proactive kinds
    /// are written only by `memory.save_knowledge` / `memory.save_procedural`, which stamp
    /// their metadata.
    pub const ADDABLE: [FactKind; 5] = [
        FactKind::Pattern,
        FactKind::Constraint,
        FactKind::Preference,
        FactKind::Fact,
        FactKind::Unknown,
    ];

    /// Whether this is a proactive-memory kind (knowledge or procedural).
    pub fn is_proactive(self) -> bool {
        matches!(self, FactKind::Knowledge | FactKind::Procedural)
    }

    /// The wire name (`pattern`, `constraint`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Pattern => "pattern",
            FactKind::Constraint => "constraint",
            FactKind::Preference => "preference",
            FactKind::Fact => "fact",
            FactKind::Unknown => "unknown",
            FactKind::Knowledge => "knowledge",
            FactKind::Procedural => "procedural",
        }
    }
}

impl fmt::Display for FactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FactKind {
    type Err = ValidationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FactKind::ADDABLE
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                ValidationError::new(
                    "kind",
                    format!(
                        "must be one of pattern, constraint, preference, fact, unknown (got {s:?})"
                    ),
                )
            })
    }
}

/// A stored fact, exactly as snapshots and `memory.persist` write it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    /// Stable identifier (caller-chosen or generated `f-<16 hex>`).
    pub fact_id: String,
    /// What the fact is about.
    pub subject: String,
    /// The fact itself.
    pub body: String,
    /// Its kind.
    pub kind: FactKind,
    /// How sure the writer was, in [0, 1].
    pub confidence: f64,
    /// Free-form labels, searched with the text.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Where it came from (a URL, a run id, a person), if known.
    #[serde(default)]
    pub source: Option<String>,
    /// When it was first added (Unix milliseconds).
    pub created_ms: u64,
    /// When it was last replaced or merged (Unix milliseconds).
    pub updated_ms: u64,
    /// How many times `memory.intervene` injected it as a reminder.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub injections: u64,
    /// Proactive-memory metadata; present on knowledge and procedural entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proactive: Option<ProactiveMeta>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Fact {
    /// Whether `build_context` and the proactive selector treat it as a hard rule: a
    /// `constraint`, or a proactive entry saved with `is_constraint`.
    pub fn is_constraint(&self) -> bool {
        self.kind == FactKind::Constraint
            || self.proactive.as_ref().is_some_and(|m| m.is_constraint)
    }

    /// The tenant a proactive entry was saved for (`None`: every tenant sees it).
    pub fn tenant_id(&self) -> Option<&str> {
        self.proactive.as_ref()?.tenant_id.as_deref()
    }
}

/// One `memory.query` result. `confidence` here is the relevance score in [0, 1], not
/// the stored fact's confidence (the wire contract names it so).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactHit {
    /// The fact's id.
    pub fact_id: String,
    /// Its subject.
    pub subject: String,
    /// Its body.
    pub body: String,
    /// Its kind.
    pub kind: FactKind,
    /// Relevance to the query in [0, 1].
    pub confidence: f64,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its source.
    pub source: Option<String>,
}

/// The parameters of `memory.add_fact` before validation. The daemon fills it from the
/// request (absent optional fields stay `None` / empty) and calls [`FactInput::validate`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FactInput {
    /// Required, non-blank.
    pub subject: String,
    /// Required, non-blank.
    pub body: String,
    /// Defaults to [`FactKind::Pattern`].
    #[serde(default)]
    pub kind: Option<FactKind>,
    /// Defaults to [`DEFAULT_CONFIDENCE`]; must be finite and in [0, 1].
    #[serde(default)]
    pub confidence: Option<f64>,
    /// When given and already present, the add replaces that fact (keeping its `created_ms`).
    #[serde(default)]
    pub fact_id: Option<String>,
    /// Non-blank, at most [`MAX_TAGS`]; duplicates are dropped, order kept.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Optional provenance.
    #[serde(default)]
    pub source: Option<String>,
}

/// A fact input that passed every rule; only [`FactInput::validate`] makes one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewFact {
    pub(crate) subject: String,
    pub(crate) body: String,
    pub(crate) kind: FactKind,
    pub(crate) confidence: f64,
    pub(crate) fact_id: Option<String>,
    pub(crate) tags: Vec<String>,
    pub(crate) source: Option<String>,
    pub(crate) proactive: Option<ProactiveMeta>,
}

impl NewFact {
    /// The caller-chosen id, if any.
    pub fn fact_id(&self) -> Option<&str> {
        self.fact_id.as_deref()
    }

    /// The kind the fact will be stored with.
    pub fn kind(&self) -> FactKind {
        self.kind
    }
}

impl FactInput {
    /// A pattern with this subject and body and every optional field absent.
    pub fn new(subject: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            body: body.into(),
            ..Self::default()
        }
    }

    /// Sets the kind.
    pub fn kind(mut self, kind: FactKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// Sets the confidence.
    pub fn confidence(mut self, confidence: f64) -> Self {
        self.confidence = Some(confidence);
        self
    }

    /// Sets the caller-chosen id.
    pub fn fact_id(mut self, fact_id: impl Into<String>) -> Self {
        self.fact_id = Some(fact_id.into());
        self
    }

    /// Sets the tags.
    pub fn tags<I, S>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the source.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Checks every rule; the first broken one is returned, naming its field.
    pub fn validate(self) -> Result<NewFact, ValidationError> {
        let subject = required_text("subject", self.subject, MAX_SUBJECT_CHARS)?;
        let body = required_text("body", self.body, MAX_BODY_CHARS)?;
        let confidence = match self.confidence {
            None => DEFAULT_CONFIDENCE,
            Some(c) if c.is_finite() && (0.0..=1.0).contains(&c) => c,
            Some(c) => {
                return Err(ValidationError::new(
                    "confidence",
                    format!("must be between 0 and 1 (got {c})"),
                ))
            }
        };
        let fact_id = self
            .fact_id
            .map(|id| required_text("fact_id", id, MAX_FACT_ID_CHARS))
            .transpose()?;
        let source = self
            .source
            .map(|s| max_chars("source", s, MAX_SOURCE_CHARS))
            .transpose()?
            .filter(|s| !s.trim().is_empty());
        let tags = validate_tags(self.tags)?;
        Ok(NewFact {
            subject,
            body,
            kind: self.kind.unwrap_or_default(),
            confidence,
            fact_id,
            tags,
            source,
            proactive: None,
        })
    }
}

fn required_text(
    field: &'static str,
    value: String,
    max: usize,
) -> Result<String, ValidationError> {
    if value.trim().is_empty() {
        return Err(ValidationError::new(field, "must not be empty"));
    }
    max_chars(field, value, max)
}

/// `value` if it has at most `max` characters, else an error naming `field`.
pub(crate) fn max_chars(
    field: &'static str,
    value: String,
    max: usize,
) -> Result<String, ValidationError> {
    let n = value.chars().count();
    if n > max {
        return Err(ValidationError::new(
            field,
            format!("must be at most {max} characters (got {n})"),
        ));
    }
    Ok(value)
}

/// Validates a tag list: non-blank, bounded, duplicates dropped with order kept.
pub(crate) fn validate_tags(tags: Vec<String>) -> Result<Vec<String>, ValidationError> {
    if tags.len() > MAX_TAGS {
        return Err(ValidationError::new(
            "tags",
            format!("must have at most {MAX_TAGS} entries (got {})", tags.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for tag in tags {
        let tag = required_text("tags", tag, MAX_TAG_CHARS)
            .map_err(|e| ValidationError::new("tags", format!("entries {}", strip_field(&e))))?;
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

fn strip_field(e: &ValidationError) -> String {
    e.to_string()
        .strip_prefix(e.field())
        .unwrap_or_default()
        .trim_start_matches(':')
        .trim_start()
        .to_owned()
}

/// Validates `memory.query`'s `k`: absent → [`DEFAULT_K`], else 1..=[`MAX_K`]. Takes an
/// `i64` so a negative number from the wire is reported by this rule too.
pub fn validate_k(k: Option<i64>) -> Result<usize, ValidationError> {
    match k {
        None => Ok(DEFAULT_K),
        Some(k) if (1..=MAX_K as i64).contains(&k) => Ok(k as usize),
        Some(k) => Err(ValidationError::new(
            "k",
            format!("must be between 1 and {MAX_K} (got {k})"),
        )),
    }
}

/// Validates a query string: non-blank and at most [`MAX_BODY_CHARS`] characters.
pub fn validate_query(query: &str) -> Result<(), ValidationError> {
    required_text("query", query.to_owned(), MAX_BODY_CHARS).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(input: FactInput) -> String {
        input.validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_apply() {
        let f = FactInput::new("s", "b").validate().unwrap();
        assert_eq!(f.kind, FactKind::Pattern);
        assert_eq!(f.confidence, DEFAULT_CONFIDENCE);
        assert!(f.tags.is_empty() && f.fact_id.is_none() && f.source.is_none());
    }

    #[test]
    fn bad_inputs_name_their_field() {
        assert_eq!(err(FactInput::new("", "b")), "subject: must not be empty");
        assert_eq!(err(FactInput::new("s", "  \n")), "body: must not be empty");
        assert_eq!(
            err(FactInput::new("s", "b").confidence(1.5)),
            "confidence: must be between 0 and 1 (got 1.5)"
        );
        assert!(err(FactInput::new("s", "b").confidence(f64::NAN)).starts_with("confidence: "));
        assert!(err(FactInput::new("s", "b").confidence(-0.1)).starts_with("confidence: "));
        assert_eq!(
            err(FactInput::new("s", "b").fact_id(" ")),
            "fact_id: must not be empty"
        );
        assert_eq!(
            err(FactInput::new("s", "b").tags(["ok", ""])),
            "tags: entries must not be empty"
        );
        assert!(err(FactInput::new("s", "b").tags(vec!["t"; 65]))
            .starts_with("tags: must have at most 64"));
        assert!(
            err(FactInput::new("s".repeat(1025), "b")).starts_with("subject: must be at most 1024")
        );
        assert!(err(FactInput::new("s", "b".repeat(16_385))).starts_with("body: must be at most"));
    }

    #[test]
    fn tags_are_deduplicated_in_order() {
        let f = FactInput::new("s", "b")
            .tags(["b", "a", "b"])
            .validate()
            .unwrap();
        assert_eq!(f.tags, ["b", "a"]);
    }

    #[test]
    fn kinds_parse_and_serialise_lower_case() {
        for kind in FactKind::ALL {
            assert_eq!(serde_json::to_string(&kind).unwrap(), format!("\"{kind}\""));
            let back: FactKind = serde_json::from_str(&format!("\"{kind}\"")).unwrap();
            assert_eq!(back, kind);
            assert_eq!(
                kind.as_str().parse::<FactKind>().is_ok(),
                !kind.is_proactive()
            );
        }
        let e = "Constraint".parse::<FactKind>().unwrap_err();
        assert_eq!(e.field(), "kind");
        assert!(e.to_string().starts_with("kind: must be one of"));
    }

    #[test]
    fn k_rule() {
        assert_eq!(validate_k(None).unwrap(), DEFAULT_K);
        assert_eq!(validate_k(Some(1)).unwrap(), 1);
        assert_eq!(validate_k(Some(1000)).unwrap(), 1000);
        assert_eq!(
            validate_k(Some(0)).unwrap_err().to_string(),
            "k: must be between 1 and 1000 (got 0)"
        );
        assert!(validate_k(Some(1_000_000_000)).is_err());
        assert!(validate_k(Some(-3)).is_err());
    }

    #[test]
    fn query_rule() {
        assert_eq!(
            validate_query(" ").unwrap_err().to_string(),
            "query: must not be empty"
        );
        assert!(validate_query("x").is_ok());
    }
}
