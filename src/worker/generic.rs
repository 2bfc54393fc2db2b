//! The generic path of a [`Worker`]: READ through the process cache (fetching on a miss
//! or a stale entry, then adding this worker's own updates the snapshot lacks), UPDATE into
//! the operation log. Rows outside a specialized plan take it too.

use super::Worker;
use crate::buf::AlignedBuf;
use crate::client::{CacheRef, WAIT_SLICE};
use crate::element::Element;
use crate::error::Result;
use crate::ids::{Clock, RowKey};
use crate::table::TableMeta;

impl<'a> Worker<'a> {
    /// [`read`](Self::read) through the generic store: the process cache, then this
    /// worker's own updates.
    #[inline(always)]
    pub(super) fn read_generic<T: Element>(&mut self, key: RowKey, out: &mut [T]) -> Result<()> {
        if self.read_held(key, out) {
            return Ok(());
        }
        let data_clock = self.fetch_fresh(key, |data| out.copy_from_slice(data.cast()))?;
        self.add_own(key, data_clock, out);
        Ok(())
    }

    /// [`read_with`](Self::read_with) through the generic store: lends the cached snapshot
    /// when this worker has no updates of the row to add, else copies and adds them.
    #[inline(always)]
    pub(super) fn read_with_generic<T: Element, R>(
        &mut self,
        key: RowKey,
        meta: &TableMeta,
        f: impl FnOnce(&[T]) -> R,
    ) -> Result<R> {
        if let Some(row) = self.held_row(key) {
            return Ok(f(row.cast()));
        }
        let own = (self.oplog.contains_key(&key)
            || self.recent.all().any(|l| l.contains_key(&key)))
            && self.additive(key.table);
        if !own {
            let entry = self.fresh_entry(key)?;
            return Ok(f(entry.data.cast()));
        }
        let fill = |w: &mut Self, row: &mut [T]| {
            w.fetch_fresh(key, |data| row.copy_from_slice(data.cast()))
        };
        self.lend_own_row(key, meta, fill, f)
    }

    /// [`update`](Self::update) through the generic store: into this worker's op log.
    #[inline(always)]
    pub(super) fn update_generic<T: Element>(&mut self, key: RowKey, delta: &[T]) {
        self.add_to_held(key, 0, delta);
        match self.oplog.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                T::add_slice(e.get_mut().cast_mut(), delta);
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(AlignedBuf::from_slice(delta));
            }
        }
    }

    /// Runs `copy` on a fresh-enough snapshot of `key`, fetching it first if needed;
    /// returns the snapshot's data clock.
    pub(super) fn fetch_fresh(&self, key: RowKey, copy: impl FnOnce(&AlignedBuf)) -> Result<Clock> {
        let entry = self.fresh_entry(key)?;
        copy(&entry.data);
        Ok(entry.data_clock)
    }

    /// The cached snapshot of `key`, fetched first if missing or too stale. The guard
    /// read-locks part of the process cache: drop it promptly.
    pub(super) fn fresh_entry(&self, key: RowKey) -> Result<CacheRef<'a>> {
        let required = self.required();
        if self.current(key.table) {
            // Asynchronous, and the servers step this table as pushes arrive (Downpour
            // SGD): a READ fetches their current value, not a cached one.
            self.shared.cache.forget(key);
        }
        // Fast path first: the reply-generation signal is only read on a miss.
        if let Some(entry) = self.shared.cache.get_fresh(key, required) {
            return Ok(entry);
        }
        // The wait for a fresh enough row, published for the metrics endpoint.
        let since = std::time::Instant::now();
        let entry = loop {
            let generation = self.shared.signal.generation();
            if let Some(entry) = self.shared.cache.get_fresh(key, required) {
                break entry;
            }
            self.request_and_wait(key, required, generation)?;
        };
        self.shared.live.waited(self.local, since);
        Ok(entry)
    }

    pub(super) fn request_and_wait(
        &self,
        key: RowKey,
        required: Clock,
        generation: u64,
    ) -> Result<()> {
        self.shared.check()?;
        let shared = self.shared;
        shared.fetcher.request(shared, key, required)?;
        if !shared.help() {
            shared.signal.wait(generation, WAIT_SLICE);
        }
        Ok(())
    }

    /// Whether `table`'s updates are deltas ([`Rule::Sum`]), which a READ adds to the
    /// snapshot; under any other rule they are gradients, which it does not.
    ///
    /// [`Rule::Sum`]: crate::rule::Rule::Sum
    #[inline]
    pub(super) fn additive(&self, table: crate::ids::TableId) -> bool {
        self.tables
            .get(table as usize)
            .is_none_or(|m| m.rule.is_sum())
    }

    /// Adds this worker's updates that a snapshot at `data_clock` does not include (none
    /// for a table with an update rule).
    #[inline(always)]
    pub(super) fn add_own<T: Element>(&self, key: RowKey, data_clock: Clock, dst: &mut [T]) {
        if (!self.recent.is_empty() || !self.oplog.is_empty()) && !self.additive(key.table) {
            return; // a table with an update rule: own updates are gradients, not values
        }
        if !self.recent.is_empty() {
            for log in self.recent.missing_from(data_clock) {
                if let Some(delta) = log.get(&key) {
                    T::add_slice(dst, delta.cast());
                }
            }
        }
        // In specialized mode the log holds only deviating rows, usually none: skip the hash.
        if self.oplog.is_empty() {
            return;
        }
        if let Some(delta) = self.oplog.get(&key) {
            T::add_slice(dst, delta.cast());
        }
    }
}
