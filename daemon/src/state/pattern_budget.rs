//! [`PatternBudget`]: the daemon-wide bound on memory held by compiled policy regexes.
//!
//! Each `deny_tool_param` pattern is compiled with a program size limit of
//! [`PROGRAM_BYTES`] and a lazy-DFA cache limit of [`DFA_BYTES`] (the regex crate's own
//! knobs), and reserves their sum from one budget of [`TOTAL_BYTES`] shared by every
//! connection. The reservation is released when the last copy of the compiled policy is
//! dropped (unregistered, or its connection closed). A pattern that would exceed the
//! budget is refused (`-32603 server busy`), so no number of connections can make the
//! daemon hold unbounded regex memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Compiled-program limit per pattern.
pub const PROGRAM_BYTES: usize = 256 << 10;
/// Lazy-DFA cache limit per pattern.
pub const DFA_BYTES: usize = 256 << 10;
/// What one pattern reserves.
pub const PER_PATTERN: usize = PROGRAM_BYTES + DFA_BYTES;
/// The daemon-wide budget (512 patterns at their limits).
pub const TOTAL_BYTES: usize = 256 << 20;

#[derive(Debug)]
pub struct PatternBudget {
    used: Arc<AtomicUsize>,
    total: usize,
}

impl Default for PatternBudget {
    fn default() -> Self {
        Self::with_total(TOTAL_BYTES)
    }
}

/// One pattern's share of the budget; released on drop.
#[derive(Debug)]
pub struct Reservation {
    used: Arc<AtomicUsize>,
    bytes: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl PatternBudget {
    pub fn with_total(total: usize) -> Self {
        PatternBudget {
            used: Arc::new(AtomicUsize::new(0)),
            total,
        }
    }

    /// Reserves one pattern's share, or `None` when the budget is spent.
    pub fn reserve(&self) -> Option<Arc<Reservation>> {
        let mut current = self.used.load(Ordering::Acquire);
        loop {
            let next = current.checked_add(PER_PATTERN)?;
            if next > self.total {
                return None;
            }
            match self.used.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Some(Arc::new(Reservation {
                        used: self.used.clone(),
                        bytes: PER_PATTERN,
                    }))
                }
                Err(actual) => current = actual,
            }
        }
    }

    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded_and_released_on_drop() {
        let budget = PatternBudget::with_total(PER_PATTERN * 2);
        let a = budget.reserve().unwrap();
        let b = budget.reserve().unwrap();
        assert!(budget.reserve().is_none(), "the budget holds two");
        let shared = a.clone();
        drop(a);
        assert!(budget.reserve().is_none(), "a clone keeps the share");
        drop(shared);
        assert!(budget.reserve().is_some(), "released with its last copy");
        drop(b);
        assert_eq!(budget.used(), 0);
    }
}
