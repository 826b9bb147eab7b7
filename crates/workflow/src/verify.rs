//! `workflow.verify`: static checks; nothing runs.
//!
//! Issues read `error: …` (the workflow cannot run: `valid` is false) or `warning: …`,
//! with `stage '<id>': ` when a stage is involved and `stage '<id>': sub_workflow '<id>': `
//! for problems inside a sub-workflow. Errors: a missing start stage, an edge to or from an
//! unknown stage, duplicate stage ids, an approval with an empty `output_key`, an approval
//! used as a compensation or as a `loop_until`/`for_each` body, `loop_until` with
//! `max_iterations` below 1, `for_each` with an empty `items_from`, `dedup` with an empty
//! field or a zero `ttl_secs`, `deliver` without sinks, and steps nested deeper than
//! [`MAX_DEPTH`]. Warnings: stages unreachable from `start`, cycles (also `has_cycles`;
//! runs stay bounded by `max_iterations`), and approvals inside sub-workflows (they cannot
//! pause, so they fail their stage).
//!
//! `semantic` lists edge conditions on state keys that no stage writes: `stage.<id>.*` of
//! any stage, `foreach.<id>.*`, an approval's `output_key` and `output_key.<field>`, a
//! proposal's `state_write` keys and `expected_effects` keys, a dedup's `into`, and `goal`.
//! The initial state is unknown statically, so a branch on one of its keys is listed too.
//! Conditions that hold when the key is absent (`ne`, `not_exists`) are not listed.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::Value;

use crate::model::{ConditionOp, Proposal, StageStep, Workflow};

/// Deepest step nesting (loop and for_each bodies, sub-workflows) a workflow may have.
pub const MAX_DEPTH: u32 = 32;

/// `workflow.verify`'s result: the contract's type.
pub use car_proto::methods::workflow::VerifyReply as VerifyReport;

/// The `error: …` issues of a report, without the prefix.
pub fn errors(report: &VerifyReport) -> impl Iterator<Item = &str> {
    report
        .issues
        .iter()
        .filter_map(|i| i.strip_prefix("error: "))
}

/// Check a workflow without running it.
pub fn verify(wf: &Workflow) -> VerifyReport {
    let mut c = Checker::default();
    let (reachable_stages, unreachable_stages) = c.workflow(wf, "", 1);
    let mut producers = Producers::default();
    producers.workflow(wf, true);
    let mut semantic = Vec::new();
    producers.check_edges(wf, "", &mut semantic);
    VerifyReport {
        valid: !c.issues.iter().any(|i| i.starts_with("error: ")),
        issues: c.issues,
        has_cycles: c.has_cycles,
        reachable_stages,
        unreachable_stages,
        semantic,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Stage,
    Compensation,
    Body(&'static str),
}

#[derive(Default)]
struct Checker {
    issues: Vec<String>,
    has_cycles: bool,
    too_deep: bool,
}

impl Checker {
    fn error(&mut self, prefix: &str, msg: impl std::fmt::Display) {
        self.issues.push(format!("error: {prefix}{msg}"));
    }

    fn warn(&mut self, prefix: &str, msg: impl std::fmt::Display) {
        self.issues.push(format!("warning: {prefix}{msg}"));
    }

    /// Check one workflow (`depth` > 1: a sub-workflow); returns (reachable, unreachable).
    fn workflow(&mut self, wf: &Workflow, prefix: &str, depth: u32) -> (Vec<String>, Vec<String>) {
        let mut ids: Vec<&str> = Vec::new();
        for s in &wf.stages {
            if ids.contains(&s.id.as_str()) {
                self.error(prefix, format_args!("stage '{}': duplicate stage id", s.id));
            } else {
                ids.push(&s.id);
            }
        }
        let known: HashSet<&str> = ids.iter().copied().collect();
        if !known.contains(wf.start.as_str()) {
            self.error(
                prefix,
                format_args!("start stage '{}' does not exist", wf.start),
            );
        }
        for e in &wf.edges {
            for (end, id) in [("from", &e.from), ("to", &e.to)] {
                if !known.contains(id.as_str()) {
                    self.error(
                        prefix,
                        format_args!("edge {end} '{id}' references unknown stage"),
                    );
                }
            }
        }
        for s in &wf.stages {
            let at = format!("{prefix}stage '{}': ", s.id);
            if depth > 1 && matches!(s.step, StageStep::Approval(_)) {
                self.warn(
                    &at,
                    "an approval inside a sub_workflow cannot pause the run; it fails the stage",
                );
            }
            self.step(&s.step, &at, Role::Stage, depth);
            if let Some(comp) = &s.compensation {
                self.step(comp, &at, Role::Compensation, depth);
            }
        }

        let graph = Graph::new(&ids, wf);
        let reachable = graph.reachable(&wf.start);
        let (reach, unreach): (Vec<&str>, Vec<&str>) =
            ids.iter().partition(|id| reachable.contains(**id));
        for id in &unreach {
            self.warn(
                prefix,
                format_args!("stage '{id}': unreachable from start '{}'", wf.start),
            );
        }
        let cyclic = graph.cyclic();
        if !cyclic.is_empty() {
            self.has_cycles = true;
            let names: Vec<String> = cyclic.iter().map(|id| format!("'{id}'")).collect();
            self.warn(
                prefix,
                format_args!(
                    "cycle among stages {} (runs are bounded by max_iterations = {})",
                    names.join(", "),
                    wf.max_iterations
                ),
            );
        }
        let own = |v: Vec<&str>| v.into_iter().map(String::from).collect();
        (own(reach), own(unreach))
    }

    fn step(&mut self, step: &StageStep, at: &str, role: Role, depth: u32) {
        if depth > MAX_DEPTH {
            if !self.too_deep {
                self.too_deep = true;
                self.error(
                    at,
                    format_args!("steps nest deeper than {MAX_DEPTH} levels"),
                );
            }
            return;
        }
        match step {
            StageStep::Pattern(_) | StageStep::Proposal(_) => {}
            StageStep::Approval(a) => {
                if a.output_key.trim().is_empty() {
                    self.error(at, "approval output_key is empty");
                }
                match role {
                    Role::Compensation => {
                        self.error(at, "an approval cannot be a compensation step")
                    }
                    Role::Body(kind) => {
                        self.error(at, format_args!("an approval cannot be a {kind} body"))
                    }
                    Role::Stage => {}
                }
            }
            StageStep::LoopUntil(l) => {
                if l.max_iterations < 1 {
                    self.error(at, "loop_until max_iterations must be at least 1");
                }
                self.step(&l.body, at, Role::Body("loop_until"), depth + 1);
            }
            StageStep::ForEach(f) => {
                if f.items_from.trim().is_empty() {
                    self.error(at, "for_each items_from is empty");
                }
                self.step(&f.body, at, Role::Body("for_each"), depth + 1);
            }
            StageStep::Dedup(d) => {
                for (name, value) in [
                    ("items_from", &d.items_from),
                    ("into", &d.into),
                    ("store", &d.store),
                ] {
                    if value.trim().is_empty() {
                        self.error(at, format_args!("dedup {name} is empty"));
                    }
                }
                if d.ttl_secs == Some(0) {
                    self.error(at, "dedup ttl_secs must be greater than 0");
                }
            }
            StageStep::Deliver(d) => {
                if d.sinks.is_empty() {
                    self.error(at, "deliver has no sinks");
                }
            }
            StageStep::SubWorkflow(s) => {
                let inner = format!("{at}sub_workflow '{}': ", s.workflow.id);
                self.workflow(&s.workflow, &inner, depth + 1);
            }
        }
    }
}

/// The stage graph over known stage ids.
struct Graph<'w> {
    ids: Vec<&'w str>,
    succ: HashMap<&'w str, Vec<&'w str>>,
}

impl<'w> Graph<'w> {
    fn new(ids: &[&'w str], wf: &'w Workflow) -> Self {
        let mut succ: HashMap<&str, Vec<&str>> = ids.iter().map(|id| (*id, Vec::new())).collect();
        for e in &wf.edges {
            if succ.contains_key(e.to.as_str()) {
                if let Some(out) = succ.get_mut(e.from.as_str()) {
                    out.push(&e.to);
                }
            }
        }
        Graph {
            ids: ids.to_vec(),
            succ,
        }
    }

    fn reachable(&self, start: &str) -> HashSet<&'w str> {
        let mut seen = HashSet::new();
        let Some((&start, _)) = self.succ.get_key_value(start) else {
            return seen;
        };
        let mut queue = VecDeque::from([start]);
        seen.insert(start);
        while let Some(id) = queue.pop_front() {
            for &next in &self.succ[id] {
                if seen.insert(next) {
                    queue.push_back(next);
                }
            }
        }
        seen
    }

    /// Stages on a cycle (or between cycles): what is left after repeatedly removing
    /// stages with no remaining predecessors or no remaining successors.
    fn cyclic(&self) -> Vec<&'w str> {
        let mut pred: HashMap<&str, Vec<&str>> =
            self.ids.iter().map(|id| (*id, Vec::new())).collect();
        for (&from, tos) in &self.succ {
            for &to in tos {
                if let Some(p) = pred.get_mut(to) {
                    p.push(from);
                }
            }
        }
        let mut indeg: HashMap<&str, usize> = pred.iter().map(|(k, v)| (*k, v.len())).collect();
        let mut outdeg: HashMap<&str, usize> =
            self.succ.iter().map(|(k, v)| (*k, v.len())).collect();
        let mut removed: HashSet<&str> = HashSet::new();
        let mut queue: VecDeque<&str> = self
            .ids
            .iter()
            .copied()
            .filter(|id| indeg[id] == 0 || outdeg[id] == 0)
            .collect();
        while let Some(id) = queue.pop_front() {
            if !removed.insert(id) {
                continue;
            }
            for &next in &self.succ[id] {
                let d = indeg.get_mut(next).expect("known stage");
                *d -= 1;
                if *d == 0 && !removed.contains(next) {
                    queue.push_back(next);
                }
            }
            for &prev in &pred[id] {
                let d = outdeg.get_mut(prev).expect("known stage");
                *d -= 1;
                if *d == 0 && !removed.contains(prev) {
                    queue.push_back(prev);
                }
            }
        }
        self.ids
            .iter()
            .copied()
            .filter(|id| !removed.contains(id))
            .collect()
    }
}

/// State keys a workflow can write, statically.
#[derive(Default)]
struct Producers {
    exact: HashSet<String>,
    prefixes: Vec<String>,
}

impl Producers {
    fn workflow(&mut self, wf: &Workflow, global: bool) {
        if wf.goal.is_some() {
            self.exact.insert("goal".into());
        }
        for s in &wf.stages {
            self.prefixes.push(format!("stage.{}.", s.id));
            self.step(&s.step, &s.id, global);
            if let Some(comp) = &s.compensation {
                self.step(comp, &s.id, global);
            }
        }
    }

    fn step(&mut self, step: &StageStep, stage_id: &str, global: bool) {
        match step {
            StageStep::Pattern(_) => {}
            StageStep::Approval(a) => {
                self.exact.insert(a.output_key.clone());
                self.prefixes.push(format!("{}.", a.output_key));
            }
            StageStep::Proposal(p) if global => self.proposal(&p.proposal),
            StageStep::Deliver(d) if global => d.sinks.iter().for_each(|p| self.proposal(p)),
            StageStep::Dedup(d) if global => {
                self.exact.insert(d.into.clone());
            }
            StageStep::Proposal(_) | StageStep::Deliver(_) | StageStep::Dedup(_) => {}
            StageStep::LoopUntil(l) => self.step(&l.body, stage_id, global),
            StageStep::ForEach(f) => {
                self.prefixes.push(format!("foreach.{stage_id}."));
                self.step(&f.body, stage_id, false);
            }
            StageStep::SubWorkflow(s) => self.workflow(&s.workflow, global),
        }
    }

    fn proposal(&mut self, p: &Proposal) {
        let effects = |v: &Value| -> Vec<String> {
            v.get("expected_effects")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        self.exact.extend(effects(p.as_value()));
        for action in p.actions() {
            if action.get("type").and_then(Value::as_str) == Some("state_write") {
                if let Some(key) = action.get("key").and_then(Value::as_str) {
                    self.exact.insert(key.into());
                }
            }
            self.exact.extend(effects(action));
        }
    }

    fn produces(&self, key: &str) -> bool {
        self.exact.contains(key) || self.prefixes.iter().any(|p| key.starts_with(p.as_str()))
    }

    fn check_edges(&self, wf: &Workflow, prefix: &str, out: &mut Vec<String>) {
        for e in &wf.edges {
            for c in &e.conditions {
                let absent_ok =
                    matches!(c.effective_op(), ConditionOp::Ne | ConditionOp::NotExists);
                if absent_ok || self.produces(&c.key) {
                    continue;
                }
                let msg = format!(
                    "{prefix}edge {}->{} branches on state key '{}', which no stage produces (the branch may never be taken)",
                    e.from, e.to, c.key
                );
                if !out.contains(&msg) {
                    out.push(msg);
                }
            }
        }
        for s in &wf.stages {
            self.nested_edges(&s.step, &format!("{prefix}stage '{}': ", s.id), out);
        }
    }

    fn nested_edges(&self, step: &StageStep, at: &str, out: &mut Vec<String>) {
        match step {
            StageStep::SubWorkflow(s) => {
                self.check_edges(
                    &s.workflow,
                    &format!("{at}sub_workflow '{}': ", s.workflow.id),
                    out,
                );
            }
            StageStep::LoopUntil(l) => self.nested_edges(&l.body, at, out),
            StageStep::ForEach(f) => self.nested_edges(&f.body, at, out),
            _ => {}
        }
    }
}
