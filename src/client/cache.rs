//! The process cache: server snapshots of rows, shared by a process's worker threads.
//!
//! Each entry holds an exact snapshot (every update of clocks `< data_clock`). Entries are
//! replaced only by newer snapshots. With a capacity the cache evicts the least recently
//! used row; without one it keeps every row it was asked for.

use crate::buf::AlignedBuf;
use crate::ids::{Clock, RowKey};
use dashmap::mapref::one::Ref;
use dashmap::DashMap;
use lru::LruCache;
use rustc_hash::FxBuildHasher;
use std::sync::Mutex;

/// A cached row snapshot.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) data: AlignedBuf,
    pub(crate) data_clock: Clock,
}

/// A read guard on one cached entry.
pub(crate) type CacheRef<'a> = Ref<'a, RowKey, Entry>;

/// The process cache (see module docs).
pub(crate) struct ProcessCache {
    map: DashMap<RowKey, Entry, FxBuildHasher>,
    lru: Option<Mutex<LruCache<RowKey, (), FxBuildHasher>>>,
}

impl ProcessCache {
    /// A cache holding at most `capacity` rows (`None`: unbounded).
    pub(crate) fn new(capacity: Option<usize>) -> Self {
        ProcessCache {
            map: DashMap::with_hasher(FxBuildHasher),
            lru: capacity.map(|c| {
                let c = std::num::NonZeroUsize::new(c).unwrap_or(std::num::NonZeroUsize::MIN);
                Mutex::new(LruCache::with_hasher(c, FxBuildHasher))
            }),
        }
    }

    /// The cached entry for `key` if its data clock is at least `required`; `None` on a
    /// miss or a stale entry. The returned guard holds a read lock on part of the map:
    /// drop it before doing anything else with the cache.
    #[inline]
    pub(crate) fn get_fresh(&self, key: RowKey, required: Clock) -> Option<CacheRef<'_>> {
        let entry = self.map.get(&key)?;
        if entry.data_clock < required {
            return None;
        }
        if let Some(lru) = &self.lru {
            lru.lock().unwrap_or_else(|p| p.into_inner()).promote(&key);
        }
        Some(entry)
    }

    /// Installs a snapshot unless a newer one is already cached; evicts to capacity.
    pub(crate) fn install(&self, key: RowKey, data: AlignedBuf, data_clock: Clock) {
        match self.map.entry(key) {
            dashmap::Entry::Occupied(mut e) => {
                if e.get().data_clock <= data_clock {
                    e.insert(Entry { data, data_clock });
                }
            }
            dashmap::Entry::Vacant(e) => {
                e.insert(Entry { data, data_clock });
            }
        }
        if let Some(lru) = &self.lru {
            let evicted = lru.lock().unwrap_or_else(|p| p.into_inner()).push(key, ());
            if let Some((old, ())) = evicted {
                if old != key {
                    self.map.remove(&old);
                }
            }
        }
    }

    /// Drops `key`'s cached row, if any.
    pub(crate) fn forget(&self, key: RowKey) {
        self.map.remove(&key);
        if let Some(lru) = &self.lru {
            lru.lock().unwrap_or_else(|p| p.into_inner()).pop(&key);
        }
    }

    /// Drops every cached row.
    pub(crate) fn clear(&self) {
        self.map.clear();
        if let Some(lru) = &self.lru {
            lru.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    /// Number of cached rows.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_newer_snapshots_and_checks_freshness() {
        let c = ProcessCache::new(None);
        let k = RowKey::new(0, 1);
        c.install(k, AlignedBuf::from_slice(&[2i32]), 2);
        c.install(k, AlignedBuf::from_slice(&[1i32]), 1);
        assert_eq!(c.get_fresh(k, 2).map(|e| e.data.cast::<i32>()[0]), Some(2));
        assert_eq!(c.get_fresh(k, 3).map(|e| e.data.cast::<i32>()[0]), None);
        assert_eq!(c.get_fresh(RowKey::new(0, 9), 0).map(|_| ()), None);
    }

    #[test]
    fn evicts_least_recently_used() {
        let c = ProcessCache::new(Some(2));
        let k = |r| RowKey::new(0, r);
        c.install(k(1), AlignedBuf::zeroed(4), 0);
        c.install(k(2), AlignedBuf::zeroed(4), 0);
        assert!(c.get_fresh(k(1), 0).map(|_| ()).is_some());
        c.install(k(3), AlignedBuf::zeroed(4), 0);
        assert_eq!(c.len(), 2);
        assert!(
            c.get_fresh(k(2), 0).map(|_| ()).is_none(),
            "row 2 was least recently used"
        );
        assert!(c.get_fresh(k(1), 0).map(|_| ()).is_some());
    }
}
