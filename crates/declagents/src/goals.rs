//! Standing chat goals (`$CAR_HOME/chat-goals.json`): one completion contract per chat
//! `session_id`, and what its turns' events said of it.
//!
//! Status: `active` when set; `running` once a turn of the session reports
//! `goal_evaluated` (its `iteration`, `met`, `grounded` and `reason` are kept); a terminal
//! `done` makes it `met` if the last verdict was met (else `done`), an `error` makes it
//! `error` (its message kept). A daemon restart reloads a stale `running` as `active`,
//! keeping the verdict fields. Every change is written atomically before it is answered;
//! at most [`MAX_GOALS`] goals are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_proto::methods::goal::{clamp_iterations, ChatGoalState};
use car_proto::safe_file::{self, ReadLimits};

/// Goals kept at most.
pub const MAX_GOALS: usize = 4096;
/// The longest check accepted (bytes).
pub const MAX_CHECK_BYTES: usize = 8192;
const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug)]
pub struct GoalStore {
    path: PathBuf,
    goals: Mutex<BTreeMap<String, ChatGoalState>>,
}

/// A chat event's bearing on a goal.
#[derive(Debug, Clone, PartialEq)]
pub enum Observed<'a> {
    Evaluated {
        iteration: Option<u32>,
        met: Option<bool>,
        grounded: Option<bool>,
        reason: Option<&'a str>,
    },
    Done(Option<&'a str>),
    Error(Option<&'a str>),
}

/// A check as stored: trimmed, non-empty, bounded.
pub fn checked(check: &str) -> Result<String, String> {
    let check = check.trim();
    if check.is_empty() {
        return Err("check: must not be empty".into());
    }
    if check.len() > MAX_CHECK_BYTES || check.contains('\0') {
        return Err(format!(
            "check: at most {MAX_CHECK_BYTES} bytes, without NUL"
        ));
    }
    Ok(check.to_string())
}

impl GoalStore {
    pub fn open(path: &Path) -> Self {
        let mut goals: BTreeMap<String, ChatGoalState> =
            match safe_file::read(path, ReadLimits::cap(MAX_FILE_BYTES)) {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    tracing::warn!(file = %path.display(), error = %e, "chat goals do not parse; starting empty");
                    BTreeMap::new()
                }),
                Err(e) if e.is_not_found() => BTreeMap::new(),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "chat goals unreadable; starting empty");
                    BTreeMap::new()
                }
            };
        for goal in goals.values_mut() {
            if goal.status == "running" {
                goal.status = "active".into();
            }
        }
        GoalStore {
            path: path.to_path_buf(),
            goals: Mutex::new(goals),
        }
    }

    /// Stores a goal for `session_id` (replacing any), owned by `owner`.
    pub fn set(
        &self,
        session_id: &str,
        check: &str,
        max_iterations: Option<u32>,
        owner: Option<String>,
        now: String,
    ) -> Result<ChatGoalState, String> {
        let check = checked(check)?;
        self.update(|goals| {
            if !goals.contains_key(session_id) && goals.len() >= MAX_GOALS {
                return Err(format!("session_id: at most {MAX_GOALS} standing goals"));
            }
            let state = ChatGoalState {
                session_id: session_id.to_string(),
                check,
                max_iterations: clamp_iterations(max_iterations),
                status: "active".into(),
                last_iteration: None,
                last_met: None,
                last_grounded: None,
                last_reason: None,
                terminal_kind: None,
                terminal_message: None,
                updated_at: now,
                owner,
            };
            goals.insert(session_id.to_string(), state.clone());
            Ok(state)
        })
    }

    pub fn get(&self, session_id: &str) -> Option<ChatGoalState> {
        self.goals
            .lock()
            .expect("goals lock")
            .get(session_id)
            .cloned()
    }

    /// Every goal `visible` lets through.
    pub fn all(&self, visible: impl Fn(&ChatGoalState) -> bool) -> Vec<ChatGoalState> {
        self.goals
            .lock()
            .expect("goals lock")
            .values()
            .filter(|g| visible(g))
            .cloned()
            .collect()
    }

    /// Removes the goals `chosen` picks; answers how many went.
    pub fn clear(&self, chosen: impl Fn(&ChatGoalState) -> bool) -> Result<u64, String> {
        self.update(|goals| {
            let before = goals.len();
            goals.retain(|_, g| !chosen(g));
            Ok((before - goals.len()) as u64)
        })
    }

    /// Folds a chat event of `session_id` into its goal (nothing without one).
    pub fn observe(&self, session_id: &str, event: Observed<'_>, now: String) {
        if self.get(session_id).is_none() {
            return;
        }
        let outcome = self.update(|goals| {
            let Some(g) = goals.get_mut(session_id) else {
                return Ok(());
            };
            match event {
                Observed::Evaluated {
                    iteration,
                    met,
                    grounded,
                    reason,
                } => {
                    g.status = "running".into();
                    g.last_iteration = iteration;
                    g.last_met = met;
                    g.last_grounded = grounded;
                    g.last_reason = reason.map(str::to_string);
                }
                Observed::Done(message) => {
                    g.status = if g.last_met == Some(true) {
                        "met"
                    } else {
                        "done"
                    }
                    .into();
                    g.terminal_kind = Some("done".into());
                    g.terminal_message = message.map(|m| m.chars().take(4000).collect());
                }
                Observed::Error(message) => {
                    g.status = "error".into();
                    g.terminal_kind = Some("error".into());
                    g.terminal_message = message.map(|m| m.chars().take(4000).collect());
                }
            }
            g.updated_at = now;
            Ok(())
        });
        if let Err(e) = outcome {
            tracing::warn!(session = session_id, error = %e, "chat goal status not saved");
        }
    }

    fn update<T>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, ChatGoalState>) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut goals = self.goals.lock().expect("goals lock");
        let mut next = goals.clone();
        let out = f(&mut next)?;
        crate::save_json(&self.path, &next)?;
        *goals = next;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_follow_events_and_survive_a_restart_as_active() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chat-goals.json");
        let store = GoalStore::open(&path);
        assert!(store.set("s", "  ", None, None, "t0".into()).is_err());
        let g = store
            .set("s", " test -f x ", Some(500), None, "t0".into())
            .unwrap();
        assert_eq!(
            (g.check.as_str(), g.max_iterations, g.status.as_str()),
            ("test -f x", 50, "active")
        );
        store.observe(
            "s",
            Observed::Evaluated {
                iteration: Some(1),
                met: Some(false),
                grounded: Some(true),
                reason: Some("exit 1"),
            },
            "t1".into(),
        );
        assert_eq!(store.get("s").unwrap().status, "running");
        let reopened = GoalStore::open(&path);
        let g = reopened.get("s").unwrap();
        assert_eq!(
            (g.status.as_str(), g.last_reason.as_deref()),
            ("active", Some("exit 1"))
        );
        reopened.observe(
            "s",
            Observed::Evaluated {
                iteration: Some(2),
                met: Some(true),
                grounded: Some(true),
                reason: None,
            },
            "t2".into(),
        );
        reopened.observe("s", Observed::Done(Some("ok")), "t3".into());
        assert_eq!(reopened.get("s").unwrap().status, "met");
        reopened.observe("nobody", Observed::Error(None), "t4".into());
        assert_eq!(reopened.clear(|g| g.session_id == "s").unwrap(), 1);
        assert!(GoalStore::open(&path).all(|_| true).is_empty());
    }
}
