//! What changed in a graph since its last write: the input of a journal append.
//!
//! Owns the dirty sets (fact ids and skill names touched since the last flush, in no
//! order, each once however often it changed) and the "replaced wholesale" flag set by
//! `memory.load`. Every `Graph` mutation records here through the graph's few mutation
//! points (`insert_entry`, `remove_entry`, `record_injection`, the skill methods,
//! `replace_with`), so a flush writes O(changes) bytes, not O(graph). It must not encode
//! or write anything: [`crate::journal`] turns a drained set into records. The store
//! drains it on every flush; a graph used outside a store keeps accumulating it (one id
//! per fact or skill touched, never more).

use std::collections::HashSet;

/// The ids and names touched since the last flush.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    pub(crate) facts: HashSet<String>,
    pub(crate) skills: HashSet<String>,
    /// The whole graph was replaced: only a full snapshot can describe that.
    pub(crate) replaced: bool,
}

impl Changes {
    pub(crate) fn fact(&mut self, fact_id: &str) {
        if !self.replaced && !self.facts.contains(fact_id) {
            self.facts.insert(fact_id.to_owned());
        }
    }

    pub(crate) fn skill(&mut self, name: &str) {
        if !self.replaced && !self.skills.contains(name) {
            self.skills.insert(name.to_owned());
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        !self.replaced && self.facts.is_empty() && self.skills.is_empty()
    }
}
