//! The live side of runs (docs/protocol-choices.md, "Run lifecycle"): which connection
//! produces each running run, the run's work token (`runs.cancel` fires it, and the
//! proposals running for the run stop), and the resume leases.
//!
//! A run is attached to the connection that started it. When that connection ends, a
//! producer that negotiated `runs.resume.v1` leaves a lease: for the lease's length another
//! connection of the run's agent may take the run over with `runs.resume`; a lease nobody
//! claims ends the run `incomplete`. A producer without the capability leaves no lease (its
//! runs end `incomplete` at once). Leases live in memory only: a daemon that restarts marks
//! the runs it finds running `incomplete`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio_util::sync::CancellationToken;

use crate::state::session::Session;

#[derive(Debug)]
enum Holder {
    /// A live connection produces the run.
    Producer {
        session: Weak<Session>,
        /// It took the run over with `runs.resume` (recovery only: no new proposals).
        resumed: bool,
    },
    /// The producer's connection ended; `from` may be replaced until the lease expires.
    Lease { from: String, lease: u64 },
}

#[derive(Debug)]
struct Live {
    holder: Holder,
    work: CancellationToken,
}

/// Why `runs.resume` cannot take a run over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefused {
    /// Its producer connection is still live (or has closed and is being released).
    ProducerLive,
    /// Nothing holds it: its producer left no lease.
    NoLease,
}

/// Running runs, by id.
#[derive(Debug, Default)]
pub struct RunRegistry {
    runs: Mutex<HashMap<String, Live>>,
    next_lease: AtomicU64,
}

impl RunRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.runs.lock().expect("run registry lock")
    }

    /// `session` produces `run_id` from now on, with a fresh work token.
    pub fn attach(&self, run_id: &str, session: &Arc<Session>, resumed: bool) {
        self.lock().insert(
            run_id.to_string(),
            Live {
                holder: Holder::Producer {
                    session: Arc::downgrade(session),
                    resumed,
                },
                work: CancellationToken::new(),
            },
        );
    }

    /// The token the run's proposals stop on.
    pub fn work(&self, run_id: &str) -> Option<CancellationToken> {
        self.lock().get(run_id).map(|l| l.work.clone())
    }

    /// The connection producing the run, if it is live.
    pub fn producer(&self, run_id: &str) -> Option<Arc<Session>> {
        match &self.lock().get(run_id)?.holder {
            Holder::Producer { session, .. } => session.upgrade(),
            Holder::Lease { .. } => None,
        }
    }

    /// Whether `session` took `run_id` over with `runs.resume`.
    pub fn resumed_by(&self, run_id: &str, session: &Session) -> bool {
        matches!(
            self.lock().get(run_id).map(|l| &l.holder),
            Some(Holder::Producer { session: s, resumed: true }) if s.upgrade().is_some_and(|s| s.id == session.id)
        )
    }

    /// The run ended: forgets it (its lease, if any, no longer expires into anything).
    /// Returns the live producer. The work token is not fired: `runs.cancel` fires it.
    pub fn release(&self, run_id: &str) -> Option<Arc<Session>> {
        let live = self.lock().remove(run_id)?;
        match live.holder {
            Holder::Producer { session, .. } => session.upgrade(),
            Holder::Lease { .. } => None,
        }
    }

    /// The producer `session` of `run_id` closed: with `resumable`, the run is leased to
    /// whoever resumes it (returns the lease's id); otherwise it is forgotten (`None`).
    pub fn producer_closed(&self, run_id: &str, session: &Session, resumable: bool) -> Option<u64> {
        let mut runs = self.lock();
        let held = matches!(
            runs.get(run_id).map(|l| &l.holder),
            Some(Holder::Producer { session: s, .. }) if s.upgrade().is_none_or(|s| s.id == session.id)
        );
        if !held {
            return None;
        }
        if !resumable {
            if let Some(live) = runs.remove(run_id) {
                live.work.cancel();
            }
            return None;
        }
        let lease = self.next_lease.fetch_add(1, Ordering::Relaxed);
        let live = runs.get_mut(run_id).expect("checked above");
        live.work.cancel();
        live.work = CancellationToken::new();
        live.holder = Holder::Lease {
            from: session.label(),
            lease,
        };
        Some(lease)
    }

    /// The lease `lease` on `run_id` ran out: true (and the run is forgotten) if it was
    /// still unclaimed.
    pub fn expire(&self, run_id: &str, lease: u64) -> bool {
        let mut runs = self.lock();
        let unclaimed = matches!(
            runs.get(run_id).map(|l| &l.holder),
            Some(Holder::Lease { lease: l, .. }) if *l == lease
        );
        if unclaimed {
            runs.remove(run_id);
        }
        unclaimed
    }

    /// `session` takes `run_id` over; returns the client id it replaces. Atomic: of
    /// concurrent claims exactly one wins.
    pub fn claim(&self, run_id: &str, session: &Arc<Session>) -> Result<String, ClaimRefused> {
        let mut runs = self.lock();
        let live = runs.get_mut(run_id).ok_or(ClaimRefused::NoLease)?;
        match &live.holder {
            // Live, or closed and not released yet.
            Holder::Producer { .. } => Err(ClaimRefused::ProducerLive),
            Holder::Lease { from, .. } => {
                let from = from.clone();
                live.holder = Holder::Producer {
                    session: Arc::downgrade(session),
                    resumed: true,
                };
                Ok(from)
            }
        }
    }
}
