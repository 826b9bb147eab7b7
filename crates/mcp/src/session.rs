//! HTTP MCP sessions: the `Mcp-Session-Id` values `initialize` mints, their idle expiry and
//! their end on `DELETE /mcp`.
//!
//! This module owns the table and the id format and nothing else (no HTTP). An id is 32
//! bytes from the operating system's CSPRNG (`getrandom`), hex-encoded: 64 visible ASCII
//! characters, 256 bits. The id is a bearer credential, so it is never logged. The table
//! holds at most [`MAX_SESSIONS`]; minting beyond that forgets the least recently used
//! session, so a client that initializes in a loop cannot grow the daemon's memory without
//! bound.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most sessions remembered at once.
pub const MAX_SESSIONS: usize = 4096;

/// Bytes of randomness in an id.
const ID_BYTES: usize = 32;

/// The live sessions and when each was last used.
#[derive(Debug)]
pub struct Sessions {
    idle: Duration,
    last_used: Mutex<HashMap<String, Used>>,
    uses: AtomicU64,
}

/// When a session was last used; `seq` orders uses that share an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Used {
    at: Instant,
    seq: u64,
}

impl Sessions {
    /// A table whose sessions expire after `idle` without a request.
    pub fn new(idle: Duration) -> Self {
        Self {
            idle,
            last_used: Mutex::new(HashMap::new()),
            uses: AtomicU64::new(0),
        }
    }

    /// Mints and records a new session id.
    pub fn mint(&self) -> String {
        let id = car_proto::token::random_hex(ID_BYTES);
        let now = Instant::now();
        let mut table = self.table();
        self.sweep(&mut table, now);
        if table.len() >= MAX_SESSIONS {
            let oldest = table
                .iter()
                .min_by_key(|(_, used)| **used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                table.remove(&oldest);
            }
        }
        let used = self.next_use(now);
        table.insert(id.clone(), used);
        id
    }

    /// Marks `id` used now; false when it is unknown or expired (then it is forgotten).
    pub fn touch(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        let used = self.next_use(now);
        match table.get_mut(id) {
            Some(last) if now.duration_since(last.at) < self.idle => {
                *last = used;
                true
            }
            Some(_) => {
                table.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends `id`; false when it was unknown or already expired.
    pub fn end(&self, id: &str) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        match table.remove(id) {
            Some(last) => now.duration_since(last.at) < self.idle,
            None => false,
        }
    }

    /// How many sessions are live.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        let mut table = self.table();
        self.sweep(&mut table, Instant::now());
        table.len()
    }

    /// True when no session is live.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn sweep(&self, table: &mut HashMap<String, Used>, now: Instant) {
        table.retain(|_, used| now.duration_since(used.at) < self.idle);
    }

    fn next_use(&self, at: Instant) -> Used {
        Used {
            at,
            seq: self.uses.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Used>> {
        self.last_used.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_visible_ascii_and_distinct() {
        let s = Sessions::new(Duration::from_secs(60));
        let a = s.mint();
        let b = s.mint();
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert!(s.touch(&a));
        assert!(!s.touch("0000"));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn end_forgets_a_session() {
        let s = Sessions::new(Duration::from_secs(60));
        let a = s.mint();
        assert!(s.end(&a));
        assert!(!s.end(&a));
        assert!(!s.touch(&a));
        assert!(s.is_empty());
    }

    #[test]
    fn an_idle_session_expires() {
        // A zero idle window: every session is already expired when next used.
        let s = Sessions::new(Duration::ZERO);
        let a = s.mint();
        assert!(!s.touch(&a));
        assert!(!s.end(&a));
    }

    #[test]
    fn the_table_is_bounded() {
        let s = Sessions::new(Duration::from_secs(60));
        let first = s.mint();
        for _ in 0..MAX_SESSIONS {
            s.mint();
        }
        assert_eq!(s.len(), MAX_SESSIONS);
        assert!(!s.touch(&first));
    }
}
