//! [`Worker::read_update`] and held rows: a float row read through `read_update` is held
//! by the worker until its next CLOCK. The worker's copy of the row (the snapshot plus
//! its updates so far, as a READ returns it) is kept, every later update of the row is
//! added to it one by one as well as to the update log, and reads return it. That is
//! what a hand-written SGD loop does with the rows of a step, and it lets the specialized
//! store lend its view of the row to `read_update` instead of building the row.
//!
//! The specialized store holds rows it keeps a view of in that view
//! (`special/held.rs`); every other row (the generic store's, a row without a view) is
//! held here, in the worker's held map, with the same additions in the same order, so
//! BSP reads stay bit-identical across modes. Integer rows are never held: one by one or
//! summed, their updates add up alike.

use super::{scratch_of, Worker};
use crate::buf::AlignedBuf;
use crate::element::Element;
use crate::error::Result;
use crate::ids::RowKey;
use crate::table::Table;

impl Worker<'_> {
    /// READs each row of `rows`, calls `f` with them and with `deltas` (one per row, each
    /// of its table's width, for `f` to fill), then UPDATEs each row by its delta: the
    /// accesses `read(rows[0])`, …, `read(rows[N - 1])`, `update(rows[0], deltas[0])`,
    /// …, `update(rows[N - 1], deltas[N - 1])` in this order, and what the pattern
    /// records. Returns what `f` returns.
    ///
    /// The rows of floats it reads are **held** until this worker's next
    /// [`clock`](Self::clock): each later update of a held row is added to the worker's
    /// copy of it one at a time (as a hand-written SGD loop adds each step to its rows),
    /// where a row not held shows the snapshot plus the sum of the worker's updates.
    /// Both include every update of the worker; they may differ only in float rounding,
    /// and every mode of the store rounds alike, so BSP reads are bit-identical across
    /// modes. Integer rows add up alike either way.
    ///
    /// On the specialized fast path (the next `2 N` accesses of the pattern are these
    /// rows' READs then their UPDATEs) the rows are lent to `f` without a copy and each
    /// delta is added once to the row and once to the update log: the cost of a
    /// hand-written loop's step. `f` must not call the worker (it cannot: the worker is
    /// borrowed).
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let users = cluster.create_table::<f32>("users", 2)?;
    /// let items = cluster.create_table::<f32>("items", 2)?;
    /// let rows = cluster.run(|w| {
    ///     let (mut du, mut di) = ([0.0f32; 2], [0.0f32; 2]);
    ///     for _ in 0..2 {
    ///         let rows = [(&users, 1), (&items, 3)];
    ///         w.read_update(rows, [&mut du, &mut di], |[u, i], [du, di]| {
    ///             du.fill(u[0] + 0.5); // a step computed from the rows
    ///             di.fill(i[0] + 0.25);
    ///         })?;
    ///     }
    ///     let mut u = [0.0f32; 2];
    ///     w.read(&users, 1, &mut u)?; // read-my-writes
    ///     w.clock()?;
    ///     Ok(u[0])
    /// })?;
    /// assert_eq!(rows, vec![1.5]); // 0.5, then (0.5 + 0.5)
    /// cluster.shutdown()?;
    /// # Ok(())
    /// # }
    /// ```
    #[inline(always)]
    pub fn read_update<T: Element, R, const N: usize>(
        &mut self,
        rows: [(&Table<T>, u64); N],
        mut deltas: [&mut [T]; N],
        f: impl FnOnce([&[T]; N], [&mut [T]; N]) -> R,
    ) -> Result<R> {
        let mut f = f;
        let mut checked = N > 0;
        let mut keys = [(RowKey { table: 0, row: 0 }, 0); N];
        for (i, (table, row)) in rows.iter().enumerate() {
            checked &= table.cluster == self.cluster && deltas[i].len() == table.width;
            keys[i] = (table.key(*row), table.width);
        }
        if checked && self.log.is_none() && self.held.is_empty() && self.special.is_some() {
            let required = self.required();
            if let Some(sp) = &mut self.special {
                match sp.read_update_fast(keys, required, &mut deltas, f) {
                    Ok(r) => return Ok(r),
                    Err(back) => f = back,
                }
            }
        }
        self.read_update_slow(rows, deltas, f)
    }

    /// [`read_update`](Self::read_update) off the fast path: every row held, then read
    /// into scratch, `f`, then every update, each through the general paths.
    #[inline(never)]
    fn read_update_slow<T: Element, R, const N: usize>(
        &mut self,
        rows: [(&Table<T>, u64); N],
        mut deltas: [&mut [T]; N],
        f: impl FnOnce([&[T]; N], [&mut [T]; N]) -> R,
    ) -> Result<R> {
        for ((table, row), delta) in rows.iter().zip(&deltas) {
            self.check(table, *row, delta.len())?;
        }
        if let Some(sp) = self.special.as_mut().filter(|_| self.log.is_none()) {
            sp.count_copied_read_update();
        }
        for &(table, row) in &rows {
            self.hold(table, row)?;
        }
        // The rows, one after another in scratch words (taken so the worker can read).
        let mut offsets = [0; N];
        let mut total = 0;
        for (offset, (table, _)) in offsets.iter_mut().zip(&rows) {
            *offset = total;
            total += (table.width * size_of::<T>()).div_ceil(8);
        }
        let mut words = std::mem::take(&mut self.held_scratch);
        words.resize(total.max(words.len()), 0);
        let result = (|| {
            for (i, &(table, row)) in rows.iter().enumerate() {
                let out = &mut bytemuck::cast_slice_mut::<u64, T>(&mut words[offsets[i]..])
                    [..table.width];
                self.read(table, row, out)?;
            }
            let mut views: [&[T]; N] = [&[]; N];
            for (i, view) in views.iter_mut().enumerate() {
                *view = &bytemuck::cast_slice::<u64, T>(&words[offsets[i]..])[..rows[i].0.width];
            }
            let r = f(views, deltas.each_mut().map(|d| &mut **d));
            for (&(table, row), delta) in rows.iter().zip(&deltas) {
                self.update(table, row, delta)?;
            }
            Ok(r)
        })();
        self.held_scratch = words;
        result
    }

    /// Holds `table`'s row `row` (see [`read_update`](Self::read_update)) if it is a row
    /// of floats not held yet: in the specialized store's view if it keeps one, else in
    /// the held map (a copy of the row as a READ returns it now). Logs no access and
    /// moves no cursor.
    fn hold<T: Element>(&mut self, table: &Table<T>, row: u64) -> Result<()> {
        if T::TYPE.exact() || self.virtual_only || !self.additive(table.id) {
            return Ok(());
        }
        let key = table.key(row);
        if self.held.contains_key(&key) {
            return Ok(());
        }
        let (required, shared) = (self.required(), self.shared);
        if let Some(sp) = &mut self.special {
            if sp.hold::<T>(shared, key, required)? {
                return Ok(());
            }
        }
        let mut words = Vec::new();
        let copy = scratch_of::<T>(&mut words, table.width);
        let data_clock = match self.special.as_ref().and_then(|sp| sp.locate_place(key)) {
            Some(place) => self.read_special(place, copy)?,
            None => self.fetch_fresh(key, |data| copy.copy_from_slice(data.cast()))?,
        };
        self.add_own(key, data_clock, copy);
        self.held.insert(key, AlignedBuf::from_slice(copy));
        Ok(())
    }

    /// Copies `key`'s held row into `out` if it is held here; `false` if not.
    #[inline]
    pub(super) fn read_held<T: Element>(&self, key: RowKey, out: &mut [T]) -> bool {
        self.held_row(key)
            .map(|row| out.copy_from_slice(row.cast()))
            .is_some()
    }

    /// `key`'s held row, if it is held here.
    #[inline]
    pub(super) fn held_row(&self, key: RowKey) -> Option<&AlignedBuf> {
        if self.held.is_empty() {
            return None;
        }
        self.held.get(&key)
    }

    /// Adds `delta` at element `column` of `key`'s held row, if it is held here.
    #[inline]
    pub(super) fn add_to_held<T: Element>(&mut self, key: RowKey, column: usize, delta: &[T]) {
        if self.held.is_empty() {
            return;
        }
        if let Some(row) = self.held.get_mut(&key) {
            T::add_slice(
                &mut row.cast_mut::<T>()[column..column + delta.len()],
                delta,
            );
        }
    }

    /// Releases every row held here (at a CLOCK).
    pub(super) fn release_held(&mut self) {
        self.held.clear();
    }
}
