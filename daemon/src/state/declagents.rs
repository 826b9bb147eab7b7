//! Where declarative agents live in the daemon: their registry (`$CAR_HOME/declagents/`),
//! the routing store (`$CAR_HOME/routing.json`), the standing chat goals
//! (`$CAR_HOME/chat-goals.json`), the scratch workspaces of running agents
//! (`$CAR_HOME/declagents-scratch/`, each removed when its run ends) and the chat turns
//! the daemon is running for them (so `agents.chat.cancel` can stop one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use car_declagents::goals::GoalStore;
use car_declagents::registry::Registry;
use car_declagents::routing::RoutingStore;

/// Removes scratch workspaces (`<pid>-…`) of daemons no longer running: runs a previous
/// daemon did not finish. A live daemon's (another one on this state root) stay.
fn remove_orphaned_scratch(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let pid = name.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Declarative chat turns in flight at most.
pub const MAX_CHATS: usize = 256;

/// A declarative chat turn in flight.
#[derive(Debug)]
pub struct ChatTurn {
    /// The host connection that started it.
    pub host_session: u64,
    pub task: tokio::task::AbortHandle,
}

#[derive(Debug)]
pub struct DeclAgents {
    pub registry: Registry,
    pub routing: RoutingStore,
    pub goals: GoalStore,
    pub scratch_root: PathBuf,
    chats: Mutex<HashMap<String, ChatTurn>>,
}

impl DeclAgents {
    pub fn open(state_root: &Path) -> Self {
        let scratch_root = state_root.join("declagents-scratch");
        remove_orphaned_scratch(&scratch_root);
        DeclAgents {
            registry: Registry::open(&state_root.join("declagents")),
            routing: RoutingStore::open(&state_root.join("routing.json")),
            goals: GoalStore::open(&state_root.join("chat-goals.json")),
            scratch_root,
            chats: Mutex::new(HashMap::new()),
        }
    }

    /// Records a chat turn in flight (refused beyond [`MAX_CHATS`] or for a `session_id`
    /// already running).
    pub fn start_chat(&self, session_id: &str, turn: ChatTurn) -> Result<(), String> {
        let mut chats = self.chats.lock().expect("chats lock");
        chats.retain(|_, t| !t.task.is_finished());
        if chats.contains_key(session_id) {
            return Err(format!(
                "session_id: a turn of chat {session_id:?} is already running"
            ));
        }
        if chats.len() >= MAX_CHATS {
            return Err(format!(
                "at most {MAX_CHATS} declarative chat turns may run at once"
            ));
        }
        chats.insert(session_id.to_string(), turn);
        Ok(())
    }

    /// The host connection of a running turn.
    pub fn chat_host(&self, session_id: &str) -> Option<u64> {
        let chats = self.chats.lock().expect("chats lock");
        chats
            .get(session_id)
            .filter(|t| !t.task.is_finished())
            .map(|t| t.host_session)
    }

    /// Stops a running turn; answers whether one was running.
    pub fn cancel_chat(&self, session_id: &str) -> bool {
        let turn = self.chats.lock().expect("chats lock").remove(session_id);
        match turn {
            Some(t) if !t.task.is_finished() => {
                t.task.abort();
                true
            }
            _ => false,
        }
    }

    /// Stops the turns host connection `session` started (it closed).
    pub fn on_host_closed(&self, session: u64) {
        let mut chats = self.chats.lock().expect("chats lock");
        chats.retain(|_, t| {
            let mine = t.host_session == session;
            if mine {
                t.task.abort();
            }
            !mine
        });
    }

    /// Forgets a finished turn.
    pub fn end_chat(&self, session_id: &str) {
        self.chats.lock().expect("chats lock").remove(session_id);
    }
}
