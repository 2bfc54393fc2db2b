//! Hand-written in-memory implementations of each app on plain arrays ("the limit"): the
//! performance bound a parameter server is compared to.
//!
//! Each implementation runs `threads` workers with std scoped threads, partitions the data
//! exactly as the store-backed apps do ([`crate::partition`]) and follows BSP with one
//! clock per iteration: during an iteration every worker works on a private copy of the
//! rows it touches, taken at the start of the iteration, to which it applies its own
//! updates as it goes (read-my-writes); at the end the per-worker deltas are added into the
//! shared model in worker order `0..W` (per row), in parallel over row ranges. With one
//! thread this is plain sequential SGD / Gibbs sampling / power iteration. The DNN's limit
//! ([`dnn`]) has one clock per mini-batch instead, as its app does.
//!
//! The per-element math is the [`crate`] kernels, so a limit run and a store-backed
//! run compute the same model. This module owns only the threading, the private row
//! copies and the merge; it knows nothing of the parameter server.

mod barrier;
pub(crate) use barrier::SpinBarrier;
pub mod dnn;
pub mod lda;
pub mod mf;
pub mod pagerank;

pub use crate::IterStats;

use std::ops::AddAssign;
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A read lock for the limits' threads; a poisoned lock (a worker panicked, which the
/// thread scope re-raises) still yields the value.
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// A write lock, as [`read`].
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// A mutex's guard, as [`read`].
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a limit implementation runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitConfig {
    /// Number of worker threads `W` (also the number of data partitions).
    pub threads: usize,
    /// Number of iterations (passes over the data) after initialisation.
    pub iterations: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        Self {
            threads: 1,
            iterations: 10,
        }
    }
}

impl LimitConfig {
    /// Checks that there is at least one thread.
    pub fn validate(&self) -> Result<(), String> {
        if self.threads == 0 {
            return Err("limit: threads must be at least 1".into());
        }
        Ok(())
    }
}

/// The distinct rows named by `ids` (sorted ascending) and, for each id in order, the
/// index of its row in that list. `n` bounds the ids (a scratch map of `n` entries is used).
pub(crate) fn localize(ids: impl Iterator<Item = u32> + Clone, n: usize) -> (Vec<u32>, Vec<u32>) {
    let mut seen = vec![false; n];
    for id in ids.clone() {
        seen[id as usize] = true;
    }
    let touched: Vec<u32> = (0..n as u32).filter(|&i| seen[i as usize]).collect();
    drop(seen);
    let mut map = vec![u32::MAX; n];
    for (local, &row) in touched.iter().enumerate() {
        map[row as usize] = local as u32;
    }
    let local = ids.map(|id| map[id as usize]).collect();
    (touched, local)
}

/// Builds one value per worker `0..workers` in parallel (inline when there is one).
pub(crate) fn par_map<S: Send>(workers: usize, f: impl Fn(usize) -> S + Sync) -> Vec<S> {
    if workers == 1 {
        return vec![f(0)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                s.spawn({
                    let f = &f;
                    move || f(w)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("limit worker panicked"))
            .collect()
    })
}

/// Runs `f` on every worker state in parallel, one thread each (inline when there is
/// one); results in worker order.
pub(crate) fn par_each<S: Send, R: Send>(
    states: &mut [S],
    f: impl Fn(&mut S) -> R + Sync,
) -> Vec<R> {
    if states.len() == 1 {
        return vec![f(&mut states[0])];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = states
            .iter_mut()
            .map(|st| {
                s.spawn({
                    let f = &f;
                    move || f(st)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("limit worker panicked"))
            .collect()
    })
}

/// Rows per range when `rows` rows are cut into at most `threads` contiguous ranges (the
/// last may be shorter, later ones empty): how [`par_rows`] and the limits' own row
/// ranges split a table, so that partial results add up in the same range order.
pub(crate) fn rows_per_range(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads.max(1)).max(1)
}

/// Splits a row-major table of `width`-wide rows into at most `threads` contiguous row
/// ranges and runs `f(first_row, rows)` on each in parallel; results in range order.
pub(crate) fn par_rows<T: Send, R: Send>(
    table: &mut [T],
    width: usize,
    threads: usize,
    f: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let rows = table.len() / width;
    let per = rows_per_range(rows, threads);
    if rows <= per {
        return vec![f(0, table)];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = table
            .chunks_mut(per * width)
            .enumerate()
            .map(|(i, chunk)| {
                s.spawn({
                    let f = &f;
                    move || f(i * per, chunk)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("limit worker panicked"))
            .collect()
    })
}

/// One worker's contribution to a table: the sorted global ids of its rows and their
/// values, in the same order.
pub(crate) struct Part<'a, T> {
    /// Sorted global row ids.
    pub rows: &'a [u32],
    /// The values: row `i` is `data[i·stride..][..width]`.
    pub data: &'a [T],
    /// Distance between consecutive rows in `data` (at least the table's width).
    pub stride: usize,
}

impl<T> Clone for Part<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Part<'_, T> {}

/// Adds into `chunk` (the rows `first_row..` of a table) every part's rows that fall in it,
/// parts in order, so each row receives the workers' deltas in worker order.
pub(crate) fn add_parts<T: Copy + AddAssign>(
    first_row: usize,
    chunk: &mut [T],
    width: usize,
    parts: &[Part<'_, T>],
) {
    let end_row = first_row + chunk.len() / width;
    for part in parts {
        let start = part.rows.partition_point(|&r| (r as usize) < first_row);
        for (i, &row) in part.rows.iter().enumerate().skip(start) {
            let row = row as usize;
            if row >= end_row {
                break;
            }
            let dst = &mut chunk[(row - first_row) * width..][..width];
            for (d, &x) in dst.iter_mut().zip(&part.data[i * part.stride..][..width]) {
                *d += x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localize_maps_ids_to_sorted_distinct_rows() {
        let ids = [5u32, 2, 5, 9, 2];
        let (touched, local) = localize(ids.iter().copied(), 10);
        assert_eq!(touched, [2, 5, 9]);
        assert_eq!(local, [1, 0, 1, 2, 0]);
    }

    #[test]
    fn parts_are_added_per_range_in_order() {
        let a = Part {
            rows: &[0, 3, 4][..],
            data: &[1, 1, 2, 2, 3, 3][..],
            stride: 2,
        };
        let b = Part {
            rows: &[3][..],
            data: &[10, 20][..],
            stride: 2,
        };
        let c = Part {
            rows: &[1, 4][..],
            data: &[7, 7, 0, 5, 5][..],
            stride: 3,
        };
        for threads in 1..5 {
            let mut table = vec![100; 10]; // 5 rows × 2
            par_rows(&mut table, 2, threads, |first, chunk| {
                add_parts(first, chunk, 2, &[a, b, c])
            });
            assert_eq!(table, [101, 101, 107, 107, 100, 100, 112, 122, 108, 108]);
        }
    }
}
