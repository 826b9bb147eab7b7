//! The daemon's SQLite database (`$CAR_HOME/car.db`, WAL): the event log and run records.
//!
//! One dedicated thread owns the connection and executes commands in order, so SQLite
//! never runs on a tokio worker and writes never contend. Events are fire-and-forget
//! ([`Store::record`]); consecutive ones are committed in one transaction, and when the
//! queue runs dry the thread lingers up to [`EVENT_LINGER`] (or [`EVENT_BATCH`] events) for
//! more before committing: a proposal's actions record several events each, and one
//! commit per burst instead of per event keeps SQLite's per-commit work (WAL frame
//! checksums, writes) off the two cores the calls need. Nothing waits on an event, and a
//! [`Store::run`] job ends the linger at once: every job is ordered after every event
//! recorded before it — so a query sees every event its caller caused. Closing drains the
//! queue before returning.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;

use car_proto::errors::RpcError;
use rusqlite::{params, Connection};
use serde_json::Value;
use tokio::sync::oneshot;

/// One event-log entry to write.
#[derive(Debug, Clone, Default)]
pub struct NewEvent {
    pub kind: &'static str,
    pub session_id: Option<String>,
    /// The agent the recording session is bound to: an agent session reads only its own
    /// events (`events.*`).
    pub agent_id: Option<String>,
    pub proposal_id: Option<String>,
    pub action_id: Option<String>,
    pub request_id: Option<String>,
    pub data: Value,
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Longest wait for more events before a batch is committed.
pub const EVENT_LINGER: std::time::Duration = std::time::Duration::from_millis(5);
/// Most events committed in one transaction.
pub const EVENT_BATCH: usize = 1024;

enum Command {
    Event(NewEvent, i64),
    Job(Job),
}

/// Handle to the database thread.
#[derive(Debug)]
pub struct Store {
    tx: Mutex<Option<mpsc::Sender<Command>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT,
    proposal_id TEXT,
    action_id TEXT,
    request_id TEXT,
    data TEXT NOT NULL,
    agent_id TEXT
);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind);
CREATE INDEX IF NOT EXISTS events_proposal ON events(proposal_id);
CREATE INDEX IF NOT EXISTS events_action ON events(action_id);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts_ms);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    intent TEXT NOT NULL,
    agent_id TEXT,
    agent_name TEXT,
    idempotency_key TEXT,
    status TEXT NOT NULL,
    outcome TEXT,
    summary TEXT,
    started_ms INTEGER NOT NULL,
    completed_ms INTEGER,
    UNIQUE(owner, idempotency_key)
);
CREATE TABLE IF NOT EXISTS run_trace (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    seq INTEGER NOT NULL,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY(run_id, seq)
);
CREATE TABLE IF NOT EXISTS run_cancellations (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    idempotency_key TEXT NOT NULL,
    reason_digest TEXT NOT NULL,
    principal TEXT NOT NULL,
    receipt TEXT NOT NULL,
    PRIMARY KEY(run_id, idempotency_key)
);
";

impl Store {
    /// Opens (creating) the database and starts its thread.
    pub fn open(path: &Path, retention: EventRetention) -> Result<Store, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let conn =
            Connection::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .and_then(|_| conn.pragma_update(None, "synchronous", "NORMAL"))
            .and_then(|_| conn.pragma_update(None, "foreign_keys", "ON"))
            .and_then(|_| conn.busy_timeout(std::time::Duration::from_secs(5)))
            .and_then(|_| conn.execute_batch(SCHEMA))
            .and_then(|_| migrate(&conn))
            .map_err(|e| format!("cannot initialise {}: {e}", path.display()))?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("car-store".into())
            .spawn(move || serve(conn, rx, retention))
            .map_err(|e| format!("cannot start the database thread: {e}"))?;
        Ok(Store {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, cmd: Command) -> bool {
        match self.tx.lock().expect("store lock").as_ref() {
            Some(tx) => tx.send(cmd).is_ok(),
            None => false,
        }
    }

    /// Appends an event (timestamped now); never blocks.
    pub fn record(&self, event: NewEvent) {
        if !self.send(Command::Event(event, car_proto::clock::now_ms())) {
            tracing::warn!("event dropped: the store is closed");
        }
    }

    /// Runs `job` on the database thread after everything queued before it.
    pub async fn run<T, F>(&self, job: F) -> Result<T, RpcError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, RpcError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let boxed: Job = Box::new(move |conn| {
            let _ = tx.send(job(conn));
        });
        if !self.send(Command::Job(boxed)) {
            return Err(RpcError::internal("the event store is closed"));
        }
        rx.await
            .map_err(|_| RpcError::internal("the event store stopped"))?
    }

    /// Drains the queue and stops the thread.
    pub fn close(&self) {
        self.tx.lock().expect("store lock").take();
        if let Some(t) = self.thread.lock().expect("store lock").take() {
            let _ = t.join();
        }
    }
}

/// Adds what older databases lack: `events.agent_id` (and its index).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    let has_agent: bool = conn
        .prepare("SELECT 1 FROM pragma_table_info('events') WHERE name = 'agent_id'")?
        .exists([])?;
    if !has_agent {
        conn.execute_batch("ALTER TABLE events ADD COLUMN agent_id TEXT")?;
    }
    conn.execute_batch("CREATE INDEX IF NOT EXISTS events_agent ON events(agent_id)")
}

pub use crate::config::EventRetention;

/// Deletes the events beyond `retention` (by id, the insertion order, and by age).
fn prune_events(conn: &Connection, retention: EventRetention) -> rusqlite::Result<usize> {
    let max = i64::try_from(retention.max_events).unwrap_or(i64::MAX);
    let by_count = conn.execute(
        "DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?1",
        params![max],
    )?;
    let oldest = car_proto::clock::now_ms().saturating_sub(retention.max_age.as_millis() as i64);
    let by_age = conn.execute("DELETE FROM events WHERE ts_ms < ?1", params![oldest])?;
    Ok(by_count + by_age)
}

fn serve(mut conn: Connection, rx: mpsc::Receiver<Command>, retention: EventRetention) {
    let mut next = rx.recv().ok();
    while let Some(cmd) = next.take() {
        match cmd {
            Command::Job(job) => job(&mut conn),
            Command::Event(event, ts) => {
                let mut batch = vec![(event, ts)];
                let linger_until = std::time::Instant::now() + EVENT_LINGER;
                // Gather what is queued behind it, and what arrives within the linger,
                // into one transaction; a job (or closing) ends the batch at once.
                while batch.len() < EVENT_BATCH {
                    let wait = linger_until.saturating_duration_since(std::time::Instant::now());
                    match rx.recv_timeout(wait) {
                        Ok(Command::Event(e, t)) => batch.push((e, t)),
                        Ok(other) => {
                            next = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                if let Err(e) = insert_events(&mut conn, &batch) {
                    tracing::error!(error = %e, count = batch.len(), "writing events failed");
                }
                match prune_events(&conn, retention) {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(deleted = n, "old events deleted (retention)"),
                    Err(e) => tracing::error!(error = %e, "pruning the event log failed"),
                }
            }
        }
        if next.is_none() {
            next = rx.recv().ok();
        }
    }
}

fn insert_events(conn: &mut Connection, batch: &[(NewEvent, i64)]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO events (ts_ms, kind, session_id, proposal_id, action_id, request_id, data, agent_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )?;
        for (e, ts) in batch {
            stmt.execute(params![
                ts,
                e.kind,
                e.session_id,
                e.proposal_id,
                e.action_id,
                e.request_id,
                e.data.to_string(),
                e.agent_id
            ])?;
        }
    }
    tx.commit()
}

/// Maps a SQLite failure to `-32603`.
pub fn db_error(e: rusqlite::Error) -> RpcError {
    tracing::error!(error = %e, "database error");
    RpcError::internal(format!("database error: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log written before events carried `agent_id` opens, gains the column, and keeps
    /// its rows.
    #[tokio::test]
    async fn an_older_event_log_gains_the_agent_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("car.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, ts_ms INTEGER NOT NULL,
                 kind TEXT NOT NULL, session_id TEXT, proposal_id TEXT, action_id TEXT,
                 request_id TEXT, data TEXT NOT NULL);
                 INSERT INTO events (ts_ms, kind, data) VALUES (CAST(strftime('%s', 'now') AS INTEGER) * 1000, 'old', '{}');",
            )
            .unwrap();
        }
        let store = Store::open(&path, EventRetention::default()).unwrap();
        store.record(NewEvent {
            kind: "new",
            agent_id: Some("a1".into()),
            ..Default::default()
        });
        let rows: Vec<(String, Option<String>)> = store
            .run(|c| {
                let mut stmt = c
                    .prepare("SELECT kind, agent_id FROM events ORDER BY id")
                    .map_err(db_error)?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .map_err(db_error)?;
                rows.collect::<Result<_, _>>().map_err(db_error)
            })
            .await
            .unwrap();
        store.close();
        assert_eq!(
            rows,
            [
                ("old".to_string(), None),
                ("new".to_string(), Some("a1".into()))
            ]
        );
    }

    #[tokio::test]
    async fn events_are_ordered_before_later_jobs_and_survive_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("car.db");
        let store = Store::open(&path, EventRetention::default()).unwrap();
        for i in 0..100 {
            store.record(NewEvent {
                kind: "test",
                data: serde_json::json!({"i": i}),
                ..Default::default()
            });
        }
        let n: i64 = store
            .run(|c| {
                c.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
                    .map_err(db_error)
            })
            .await
            .unwrap();
        assert_eq!(n, 100);
        store.record(NewEvent {
            kind: "last",
            ..Default::default()
        });
        store.close();
        let store = Store::open(&path, EventRetention::default()).unwrap();
        let n: i64 = store
            .run(|c| {
                c.query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
                    .map_err(db_error)
            })
            .await
            .unwrap();
        assert_eq!(n, 101);
    }

    #[test]
    fn a_lone_event_is_committed_without_a_later_job() {
        // The linger ends on its own: a burst's last event reaches the file even when no
        // job or further event follows it. Read through a second connection, polling
        // (the linger is milliseconds; the bound only keeps a broken build from hanging).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("car.db");
        let store = Store::open(&path, EventRetention::default()).unwrap();
        store.record(NewEvent {
            kind: "lone",
            ..Default::default()
        });
        let reader = Connection::open(&path).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let n: i64 = reader
                .query_row("SELECT COUNT(*) FROM events WHERE kind = 'lone'", [], |r| {
                    r.get(0)
                })
                .unwrap();
            if n == 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the event was never committed"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        store.close();
    }
}
