//! A loaded-model cache: load once, keep loaded, evict least recently used beyond a budget.
//!
//! Owns: which loaded models stay in memory and the per-key load serialisation (two callers
//! asking for the same cold model load it once). Must not touch: how a model is loaded
//! (the caller passes a loader) or the registry.
//!
//! Sizes are estimates supplied by the caller (weights file size). A model larger than the
//! whole budget is still loaded and kept until something else is used; eviction only drops
//! the cache's reference, so a request still running on an evicted model keeps it alive
//! until it finishes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

type Slot<V> = Arc<Mutex<Option<Arc<V>>>>;

struct Entry<V> {
    slot: Slot<V>,
    /// Bytes accounted for this entry; 0 until its load finished.
    size: u64,
    last_used: u64,
}

struct Inner<V> {
    entries: HashMap<String, Entry<V>>,
    clock: u64,
}

/// An LRU cache of loaded models bounded by an estimated memory budget in bytes.
pub struct ModelCache<V> {
    budget: u64,
    inner: Mutex<Inner<V>>,
}

impl<V> std::fmt::Debug for ModelCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCache")
            .field("budget", &self.budget)
            .field("loaded", &self.loaded())
            .finish()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section below leaves the maps consistent before anything can panic,
    // so recovering a poisoned lock is safe.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<V> ModelCache<V> {
    /// A cache that keeps at most `budget` estimated bytes loaded.
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                clock: 0,
            }),
        }
    }

    /// The configured budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Returns the model under `key`, loading it with `load` if it is not cached. `size` is
    /// the estimate charged against the budget. Concurrent calls for the same key wait for
    /// one load; loads of different keys run in parallel.
    pub fn get_or_load<E>(
        &self,
        key: &str,
        size: u64,
        load: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let slot = {
            let mut inner = relock(&self.inner);
            inner.clock += 1;
            let now = inner.clock;
            let entry = inner
                .entries
                .entry(key.to_owned())
                .or_insert_with(|| Entry {
                    slot: Arc::new(Mutex::new(None)),
                    size: 0,
                    last_used: now,
                });
            entry.last_used = now;
            Arc::clone(&entry.slot)
        };
        let mut guard = relock(&slot);
        if let Some(v) = guard.as_ref() {
            return Ok(Arc::clone(v));
        }
        let value = match load() {
            Ok(v) => Arc::new(v),
            Err(e) => {
                drop(guard);
                let mut inner = relock(&self.inner);
                // Forget the empty slot so a later call retries, unless someone replaced it.
                if inner
                    .entries
                    .get(key)
                    .is_some_and(|e| Arc::ptr_eq(&e.slot, &slot) && e.size == 0)
                {
                    inner.entries.remove(key);
                }
                return Err(e);
            }
        };
        *guard = Some(Arc::clone(&value));
        drop(guard);
        let mut inner = relock(&self.inner);
        if let Some(entry) = inner.entries.get_mut(key) {
            if Arc::ptr_eq(&entry.slot, &slot) {
                entry.size = size;
            }
        }
        self.evict_beyond_budget(&mut inner, key);
        Ok(value)
    }

    /// Drops `key` from the cache (e.g. when its model is removed from the registry).
    pub fn evict(&self, key: &str) -> bool {
        relock(&self.inner).entries.remove(key).is_some()
    }

    /// Keys of loaded models, most recently used first.
    pub fn loaded(&self) -> Vec<String> {
        let inner = relock(&self.inner);
        let mut v: Vec<_> = inner
            .entries
            .iter()
            .filter(|(_, e)| e.size > 0)
            .map(|(k, e)| (e.last_used, k.clone()))
            .collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.0));
        v.into_iter().map(|(_, k)| k).collect()
    }

    /// Estimated bytes of loaded models.
    pub fn used(&self) -> u64 {
        relock(&self.inner).entries.values().map(|e| e.size).sum()
    }

    fn evict_beyond_budget(&self, inner: &mut Inner<V>, keep: &str) {
        loop {
            let used: u64 = inner.entries.values().map(|e| e.size).sum();
            if used <= self.budget {
                return;
            }
            let victim = inner
                .entries
                .iter()
                .filter(|(k, e)| e.size > 0 && k.as_str() != keep)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => {
                    tracing::info!(model = %k, "evicting model from cache");
                    inner.entries.remove(&k);
                }
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn loads_once_and_evicts_least_recently_used() {
        let cache = ModelCache::new(250);
        let loads = AtomicUsize::new(0);
        let load = |v: u32| {
            loads.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(v)
        };
        assert_eq!(*cache.get_or_load("a", 100, || load(1)).unwrap(), 1);
        assert_eq!(*cache.get_or_load("a", 100, || load(9)).unwrap(), 1);
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        cache.get_or_load("b", 100, || load(2)).unwrap();
        // Touch a so b becomes the least recently used.
        cache.get_or_load("a", 100, || load(9)).unwrap();
        cache.get_or_load("c", 100, || load(3)).unwrap();
        assert_eq!(cache.loaded(), vec!["c".to_owned(), "a".to_owned()]);
        assert_eq!(cache.used(), 200);
        assert!(cache.evict("a"));
        assert_eq!(cache.loaded(), vec!["c".to_owned()]);
    }

    #[test]
    fn an_oversized_model_still_loads_and_failed_loads_retry() {
        let cache = ModelCache::new(10);
        assert!(cache
            .get_or_load("x", 10, || Err::<u32, _>("boom"))
            .is_err());
        assert!(cache.loaded().is_empty());
        assert_eq!(*cache.get_or_load("x", 50, || Ok::<_, ()>(7)).unwrap(), 7);
        assert_eq!(cache.loaded(), vec!["x".to_owned()]);
    }

    #[test]
    fn concurrent_callers_share_one_load() {
        let cache = Arc::new(ModelCache::new(1000));
        let loads = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (cache, loads) = (Arc::clone(&cache), Arc::clone(&loads));
                std::thread::spawn(move || {
                    *cache
                        .get_or_load("m", 1, || {
                            loads.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(50));
                            Ok::<_, ()>(5u8)
                        })
                        .unwrap()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), 5);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
    }
}
