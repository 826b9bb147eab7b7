//! Proactive memory: CAR's execution-state memory for long-horizon runs
//! (`memory.update_status`, `memory.save_knowledge`, `memory.save_procedural`,
//! `memory.intervene`, and the status branch of `memory.delete`).
//!
//! Owns the private status slots, the validated input for knowledge and procedural entries
//! and the metadata stamped on them. It must not do I/O of its own or know about JSON-RPC:
//! entries are ordinary graph facts, persisted by the store's group commit and snapshots
//! like every other fact, returned by `memory.query` with their kind, and deleted by
//! `memory.delete` like any fact. The selector is [`crate::intervene`]'s, its offline
//! evaluation [`crate::evaluate`]'s.
//!
//! # Status slots
//! `memory.update_status` writes one slot per scope and per id, the id being
//! `proactive-status:<tenant_id or "global">` (so a tenant literally named `global` shares
//! the untenanted slot: their ids are equal). A second call overwrites. A slot is not a graph
//! fact, so `memory.query`, `memory.build_context`, `memory.intervene` and snapshots never
//! see it. CAR keeps it session-local; here it lives in the daemon's memory, per scope, and
//! is not persisted: every connection on the scope sees it until it is deleted or the daemon
//! restarts. At most [`MAX_STATUS_SLOTS`] slots per scope. `memory.delete` with a status id
//! clears the slot (kind `status`); a status id naming no set slot falls through to the
//! facts, so a plain fact saved earlier under such an id stays deletable.
//!
//! # Knowledge and procedural entries
//! Facts of kind [`FactKind::Knowledge`] / [`FactKind::Procedural`] carrying a
//! [`ProactiveMeta`] (confidence text, tenant, `is_constraint`). An absent id is minted as
//! `knowledge-<16 hex>` / `procedural-<16 hex>`; a taken id is never overwritten: the entry is
//! saved as `<id>-2`, `<id>-3`, … (the first free one). Ids starting with
//! [`STATUS_ID_PREFIX`] are refused. The confidence text also sets the fact's numeric
//! confidence (ranking tie-breaks): a number in [0, 1] is used as is; `verified` / `certain`
//! 1.0, `high` 0.9, `medium` 0.6, `low` / `tentative` / `unverified` 0.3 (any case); anything
//! else 1.0. An entry saved with a tenant is visible to `memory.intervene` only for that
//! tenant; untenanted entries and plain facts are visible to every request.

use crate::error::{MemoryError, ValidationError};
use crate::fact::{FactInput, FactKind, NewFact, MAX_FACT_ID_CHARS};
use crate::graph::Graph;
use crate::store::{MemoryStore, Scope};
use car_proto::clock::now_ms_u64;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

/// The prefix of every status slot id.
pub const STATUS_ID_PREFIX: &str = "proactive-status:";
/// The status slot suffix used when no tenant is given.
pub const GLOBAL_STATUS: &str = "global";
/// Most status slots one scope holds.
pub const MAX_STATUS_SLOTS: usize = 1_024;
/// Longest accepted `tenant_id` or `confidence` text, in characters.
pub const MAX_LABEL_CHARS: usize = 256;
/// Longest caller-chosen `id`: leaves room for a `-<n>` suffix within the fact-id limit.
pub const MAX_ID_CHARS: usize = MAX_FACT_ID_CHARS - 16;

/// Metadata stamped on knowledge and procedural entries (stored with the fact).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProactiveMeta {
    /// The caller's confidence text (`high`, `verified`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<String>,
    /// The tenant it was saved for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Whether it is a hard rule (`build_context` lists it with the constraints).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_constraint: bool,
}

/// What `memory.delete` removed: a fact of some kind, or a status slot. Serialised as the
/// kind's wire name (`constraint`, `knowledge`, `status`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletedKind {
    /// A graph fact.
    Fact(FactKind),
    /// A proactive status slot.
    Status,
}

impl DeletedKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletedKind::Fact(kind) => kind.as_str(),
            DeletedKind::Status => "status",
        }
    }
}

impl Serialize for DeletedKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DeletedKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name == "status" {
            return Ok(DeletedKind::Status);
        }
        FactKind::ALL
            .into_iter()
            .find(|k| k.as_str() == name)
            .map(DeletedKind::Fact)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown kind {name:?}")))
    }
}

/// A status slot: `memory.update_status`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// `proactive-status:<tenant_id or "global">`.
    pub id: String,
    /// The status text.
    pub body: String,
    /// The tenant, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

/// The status slot id for a tenant.
pub fn status_id(tenant_id: Option<&str>) -> String {
    format!("{STATUS_ID_PREFIX}{}", tenant_id.unwrap_or(GLOBAL_STATUS))
}

/// Every scope's status slots, in memory only.
#[derive(Debug, Default)]
pub(crate) struct StatusSlots(Mutex<HashMap<Scope, BTreeMap<String, Status>>>);

impl StatusSlots {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<Scope, BTreeMap<String, Status>>> {
        // Every operation is a single map insert or remove, so a poisoned map is consistent.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, scope: &Scope, status: Status) -> Result<(), ValidationError> {
        let mut all = self.slots();
        let slots = all.entry(scope.clone()).or_default();
        if slots.len() >= MAX_STATUS_SLOTS && !slots.contains_key(&status.id) {
            return Err(ValidationError::new(
                "tenant_id",
                format!("would exceed {MAX_STATUS_SLOTS} status slots in this scope"),
            ));
        }
        slots.insert(status.id.clone(), status);
        Ok(())
    }

    fn get(&self, scope: &Scope, id: &str) -> Option<Status> {
        self.slots().get(scope)?.get(id).cloned()
    }

    /// Clears the slot `id` names in `scope`; false when there was none.
    pub(crate) fn clear(&self, scope: &Scope, id: &str) -> bool {
        if !id.starts_with(STATUS_ID_PREFIX) {
            return false;
        }
        let mut all = self.slots();
        let Some(slots) = all.get_mut(scope) else {
            return false;
        };
        let removed = slots.remove(id).is_some();
        if slots.is_empty() {
            all.remove(scope);
        }
        removed
    }
}

/// `memory.save_knowledge` / `memory.save_procedural` params before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SaveInput {
    /// Optional; a taken id is suffixed `-2`, `-3`, …
    pub id: Option<String>,
    /// Required, non-blank.
    pub subject: String,
    /// Required, non-blank.
    pub body: String,
    /// Non-blank, deduplicated.
    pub tags: Vec<String>,
    /// Free text, kept on the entry.
    pub confidence: Option<String>,
    /// The tenant the entry belongs to.
    pub tenant_id: Option<String>,
    /// A hard rule.
    pub is_constraint: bool,
}

/// A [`SaveInput`] that passed every rule.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSave {
    id: Option<String>,
    fact: NewFact,
}

impl SaveInput {
    /// An entry with this subject and body and every optional field absent.
    pub fn new(subject: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            body: body.into(),
            ..Self::default()
        }
    }

    /// Checks every rule; the first broken one is returned, naming its field.
    pub fn validate(self) -> Result<ValidSave, ValidationError> {
        let mut fact = FactInput {
            subject: self.subject,
            body: self.body,
            confidence: Some(self.confidence.as_deref().map_or(1.0, numeric_confidence)),
            tags: self.tags,
            ..FactInput::default()
        }
        .validate()?;
        let id = match self.id {
            None => None,
            Some(id) if id.trim().is_empty() => {
                return Err(ValidationError::new("id", "must not be empty"))
            }
            Some(id) if id.chars().count() > MAX_ID_CHARS => {
                return Err(ValidationError::new(
                    "id",
                    format!("must be at most {MAX_ID_CHARS} characters"),
                ))
            }
            Some(id) if id.starts_with(STATUS_ID_PREFIX) => {
                return Err(ValidationError::new(
                    "id",
                    format!("must not start with {STATUS_ID_PREFIX:?} (status slot ids)"),
                ))
            }
            Some(id) => Some(id),
        };
        let confidence = optional_label("confidence", self.confidence)?;
        let tenant_id = optional_label("tenant_id", self.tenant_id)?;
        fact.proactive = Some(ProactiveMeta {
            confidence,
            tenant_id,
            is_constraint: self.is_constraint,
        });
        Ok(ValidSave { id, fact })
    }
}

/// The numeric confidence a confidence text stands for (module docs).
fn numeric_confidence(text: &str) -> f64 {
    if let Ok(n) = text.trim().parse::<f64>() {
        if n.is_finite() && (0.0..=1.0).contains(&n) {
            return n;
        }
    }
    match text.trim().to_lowercase().as_str() {
        "high" => 0.9,
        "medium" => 0.6,
        "low" | "tentative" | "unverified" => 0.3,
        _ => 1.0,
    }
}

pub(crate) fn optional_label(
    field: &'static str,
    value: Option<String>,
) -> Result<Option<String>, ValidationError> {
    match value {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Err(ValidationError::new(field, "must not be empty")),
        Some(v) if v.chars().count() > MAX_LABEL_CHARS => Err(ValidationError::new(
            field,
            format!("must be at most {MAX_LABEL_CHARS} characters"),
        )),
        Some(v) => Ok(Some(v)),
    }
}

/// What a save did: `{id, kind, fact_count}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaveReport {
    /// The id the entry was saved under (minted or suffixed).
    pub id: String,
    /// `knowledge` or `procedural`.
    pub kind: FactKind,
    /// How many facts the scope holds now.
    pub fact_count: usize,
}

impl Graph {
    /// Saves a knowledge or procedural entry (module docs for ids), returning where it went.
    pub fn save_proactive_at(
        &mut self,
        kind: FactKind,
        entry: ValidSave,
        now_ms: u64,
    ) -> SaveReport {
        debug_assert!(kind.is_proactive(), "{kind} is not a proactive kind");
        let ValidSave { id, mut fact } = entry;
        let id = match id {
            Some(base) if self.fact(&base).is_some() => (2u64..)
                .map(|n| format!("{base}-{n}"))
                .find(|candidate| self.fact(candidate).is_none())
                .unwrap_or(base),
            Some(base) => base,
            None => self.fresh_id(kind.as_str(), &fact.subject, &fact.body, now_ms),
        };
        fact.kind = kind;
        fact.fact_id = Some(id.clone());
        let fact_count = self.add_fact_at(fact, now_ms);
        SaveReport {
            id,
            kind,
            fact_count,
        }
    }
}

impl MemoryStore {
    /// `memory.update_status`: sets (or overwrites) the scope's status slot for the tenant.
    pub async fn update_status(
        &self,
        scope: &Scope,
        body: String,
        tenant_id: Option<String>,
    ) -> Result<Status, MemoryError> {
        scope.snapshot_path(self.dir())?;
        let body = FactInput::new("status", body).validate()?.body;
        let tenant_id = optional_label("tenant_id", tenant_id)?;
        let status = Status {
            id: status_id(tenant_id.as_deref()),
            body,
            tenant_id,
        };
        self.status_slots().set(scope, status.clone())?;
        Ok(status)
    }

    /// The scope's status slot for the tenant, if set.
    pub fn status(&self, scope: &Scope, tenant_id: Option<&str>) -> Option<Status> {
        self.status_slots().get(scope, &status_id(tenant_id))
    }

    /// `memory.save_knowledge`.
    pub async fn save_knowledge(
        &self,
        scope: &Scope,
        input: ValidSave,
    ) -> Result<SaveReport, MemoryError> {
        self.mutate(scope, |g| {
            Ok(g.save_proactive_at(FactKind::Knowledge, input, now_ms_u64()))
        })
        .await
    }

    /// `memory.save_procedural`.
    pub async fn save_procedural(
        &self,
        scope: &Scope,
        input: ValidSave,
    ) -> Result<SaveReport, MemoryError> {
        self.mutate(scope, |g| {
            Ok(g.save_proactive_at(FactKind::Procedural, input, now_ms_u64()))
        })
        .await
    }
}

#[cfg(test)]
mod tests;
