//! Reusing the KV cache of a prompt prefix across requests on one loaded model.
//!
//! Owns: which saved sequences are kept (a small least-recently-used set bounded by a byte
//! budget and a time to live), and which one a new prompt can start from. Must not touch:
//! llama.cpp itself — `llama` saves and restores the states; this module only keeps them.
//!
//! An agent loop sends, turn after turn, a conversation that extends the previous one: the
//! system prompt, the tool prompt and every earlier turn are the same tokens again. After
//! a generation, `llama` saves its context's sequence (`SeqState`: the KV cells of the
//! prompt and of the tokens it generated) here with the token ids that produced it. The
//! next request on the same model looks up the entry sharing the longest token prefix with
//! its prompt, restores it into its fresh context, drops the cells past the shared prefix,
//! and evaluates only the rest. At least one prompt token is always evaluated, since the
//! first sampled token needs the logits of the last prompt token.
//!
//! Rules:
//! - an entry is reused only when it shares at least [`MIN_REUSE`] tokens with the prompt
//!   (restoring costs a copy of the whole entry; below that, evaluating is as cheap);
//! - a new entry replaces every entry whose tokens are a prefix of its own (the previous turn of
//!   the same conversation), so one conversation holds one entry;
//! - entries expire after their time to live (`cache_ttl`: five minutes by default, one hour on
//!   request) and the least recently used go first when the byte budget is exceeded; an entry
//!   larger than the whole budget is not kept;
//! - reuse never changes what a request means: the restored cells are the ones the same tokens
//!   would have produced.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Fewest shared tokens worth restoring an entry for.
pub const MIN_REUSE: usize = 16;
/// How long an entry lives by default (CAR's `cache_ttl: "five_minutes"`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(5 * 60);
/// `cache_ttl: "one_hour"`.
pub const LONG_TTL: Duration = Duration::from_secs(60 * 60);
/// Default byte budget of one model's prefix cache.
pub const DEFAULT_BUDGET: u64 = 512 * 1024 * 1024;

/// How a request wants the prefix cache used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    /// Look up a reusable prefix and save this request's sequence afterwards.
    pub enabled: bool,
    /// How long the saved sequence lives.
    pub ttl: Duration,
}

impl Default for CacheHint {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: DEFAULT_TTL,
        }
    }
}

/// An entry a prompt can start from.
#[derive(Debug)]
pub struct Hit<S> {
    /// Leading prompt tokens whose cells the entry holds (at most `prompt.len() - 1`).
    pub reuse: usize,
    /// Tokens the entry holds in all (its cells beyond `reuse` are dropped after restore).
    pub len: usize,
    /// The saved state.
    pub state: Arc<S>,
}

/// What the cache holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
}

struct Entry<S> {
    tokens: Vec<i32>,
    state: Arc<S>,
    bytes: u64,
    expires: Instant,
    last_used: u64,
}

struct Inner<S> {
    entries: Vec<Entry<S>>,
    clock: u64,
}

/// Saved sequences of one model, keyed by the token ids that produced them.
pub struct PrefixCache<S> {
    budget: u64,
    inner: Mutex<Inner<S>>,
}

impl<S> std::fmt::Debug for PrefixCache<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefixCache")
            .field("budget", &self.budget)
            .field("stats", &self.stats())
            .finish()
    }
}

fn shared_prefix(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<S> PrefixCache<S> {
    /// An empty cache keeping at most `budget` bytes of saved state.
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                clock: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<S>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live entry sharing the longest prefix with `prompt`, if it shares at least
    /// [`MIN_REUSE`] tokens.
    pub fn lookup(&self, prompt: &[i32], now: Instant) -> Option<Hit<S>> {
        let mut inner = self.lock();
        inner.entries.retain(|e| e.expires > now);
        inner.clock += 1;
        let clock = inner.clock;
        let limit = prompt.len().saturating_sub(1);
        let (index, reuse) = inner
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, shared_prefix(&e.tokens, prompt).min(limit)))
            .max_by_key(|(_, n)| *n)?;
        if reuse < MIN_REUSE {
            return None;
        }
        let entry = &mut inner.entries[index];
        entry.last_used = clock;
        Some(Hit {
            reuse,
            len: entry.tokens.len(),
            state: entry.state.clone(),
        })
    }

    /// Keeps `state`, the cells of `tokens`, for `ttl`; it replaces the entries it extends.
    pub fn insert(&self, tokens: Vec<i32>, state: S, bytes: u64, ttl: Duration, now: Instant) {
        if bytes > self.budget || tokens.len() < MIN_REUSE {
            return;
        }
        let mut inner = self.lock();
        inner
            .entries
            .retain(|e| e.expires > now && !tokens.starts_with(&e.tokens));
        inner.clock += 1;
        let last_used = inner.clock;
        inner.entries.push(Entry {
            tokens,
            state: Arc::new(state),
            bytes,
            expires: now + ttl,
            last_used,
        });
        while inner.entries.iter().map(|e| e.bytes).sum::<u64>() > self.budget {
            let oldest = inner
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
                .expect("over budget means not empty");
            inner.entries.swap_remove(oldest);
        }
    }

    /// Entry count and bytes held.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            entries: inner.entries.len(),
            bytes: inner.entries.iter().map(|e| e.bytes).sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: usize, salt: i32) -> Vec<i32> {
        (0..n as i32).map(|i| i * 7 + salt).collect()
    }

    #[test]
    fn the_longest_shared_prefix_wins_and_one_token_is_always_left_to_evaluate() {
        let cache = PrefixCache::new(1000);
        let now = Instant::now();
        let base = seq(40, 0);
        cache.insert(base[..20].to_vec(), "short", 10, DEFAULT_TTL, now);
        let mut other = base.clone();
        other[30] = -1;
        cache.insert(other, "forked", 10, DEFAULT_TTL, now);
        let hit = cache.lookup(&base, now).unwrap();
        assert_eq!((hit.reuse, hit.len, *hit.state), (30, 40, "forked"));
        // The same prompt again: everything but its last token is reused.
        cache.insert(base.clone(), "full", 10, DEFAULT_TTL, now);
        let hit = cache.lookup(&base, now).unwrap();
        assert_eq!((hit.reuse, *hit.state), (39, "full"));
    }

    #[test]
    fn too_short_a_match_is_not_reused() {
        let cache = PrefixCache::new(1000);
        let now = Instant::now();
        cache.insert(seq(40, 0), (), 10, DEFAULT_TTL, now);
        let mut prompt = seq(40, 0);
        prompt[MIN_REUSE - 1] = -5;
        assert!(cache.lookup(&prompt, now).is_none());
        prompt[MIN_REUSE - 1] = seq(40, 0)[MIN_REUSE - 1];
        prompt[MIN_REUSE + 1] = -5;
        assert_eq!(cache.lookup(&prompt, now).unwrap().reuse, MIN_REUSE + 1);
        assert!(cache.lookup(&seq(40, 3), now).is_none());
    }

    #[test]
    fn a_turn_replaces_the_turn_it_extends() {
        let cache = PrefixCache::new(1000);
        let now = Instant::now();
        let conversation = seq(100, 0);
        for turn in [20, 50, 80, 100] {
            cache.insert(conversation[..turn].to_vec(), turn, 10, DEFAULT_TTL, now);
        }
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 1,
                bytes: 10
            }
        );
        cache.insert(seq(30, 1), 0, 10, DEFAULT_TTL, now);
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let cache = PrefixCache::new(1000);
        let now = Instant::now();
        cache.insert(seq(40, 0), (), 10, Duration::from_secs(60), now);
        cache.insert(seq(40, 1), (), 10, LONG_TTL, now);
        let later = now + Duration::from_secs(61);
        assert!(cache.lookup(&seq(40, 0), later).is_none());
        assert!(cache.lookup(&seq(40, 1), later).is_some());
        assert_eq!(cache.stats().entries, 1);
    }

    #[test]
    fn the_budget_evicts_the_least_recently_used() {
        let cache = PrefixCache::new(25);
        let now = Instant::now();
        cache.insert(seq(40, 0), 'a', 10, DEFAULT_TTL, now);
        cache.insert(seq(40, 1), 'b', 10, DEFAULT_TTL, now);
        // Using `a` makes `b` the oldest.
        assert!(cache.lookup(&seq(40, 0), now).is_some());
        cache.insert(seq(40, 2), 'c', 10, DEFAULT_TTL, now);
        assert_eq!(
            cache.stats(),
            CacheStats {
                entries: 2,
                bytes: 20
            }
        );
        assert!(cache.lookup(&seq(40, 1), now).is_none());
        assert!(cache.lookup(&seq(40, 0), now).is_some());
        // Larger than the whole budget: not kept, nothing evicted for it.
        cache.insert(seq(40, 3), 'd', 26, DEFAULT_TTL, now);
        assert_eq!(cache.stats().entries, 2);
    }
}
