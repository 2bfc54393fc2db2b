//! Server functions (DistBelief's Sandblaster, Angel's psFunc): code the application
//! registers once per process and each server shard runs on its own rows, so that dot
//! products, norms, `a·x + y` and scalings of vectors kept in tables never move the
//! vectors.
//!
//! A function sees its shard's rows through [`ShardRows`] — the rows of a table this shard
//! holds, read and written by row index — and returns a vector of numbers; the caller
//! gets the shards' vectors combined by the function's [`Reduce`], in shard order (so the
//! result does not depend on timing, and a cluster of `P` processes gives the result of
//! one process with as many shards bit for bit).
//!
//! This module holds the registry (shared by a process's cluster handle and its shards)
//! and the view; the shard's side of a call is `shard::functions`, the collective is
//! `crate::cluster::functions`.

use super::arena::ArenaShard;
use crate::buf::AlignedBuf;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ids::{Clock, RowKey, ShardId};
use crate::placement::Placement;
use crate::table::{Table, TableMeta};
use dashmap::DashMap;
use rustc_hash::FxBuildHasher;
use std::sync::{Arc, PoisonError, RwLock};

/// How the shards' results of a server function are combined into the caller's.
///
/// Every reduction folds the shards' vectors in global shard order, so its result is
/// the same whatever order the shards answered in.
#[derive(Clone)]
#[non_exhaustive]
pub enum Reduce {
    /// Element-wise sum (dot products, norms squared, counts).
    Sum,
    /// Element-wise maximum (a norm's `∞`, a largest error).
    Max,
    /// Element-wise minimum.
    Min,
    /// A reduction of the application's own: `fold(acc, next)` folds the next shard's
    /// vector into the accumulator, which starts as shard 0's.
    Custom(Arc<Fold>),
}

/// A custom reduction's step: folds the next shard's vector into the accumulator.
pub type Fold = dyn Fn(&mut Vec<f64>, &[f64]) + Send + Sync;

impl Reduce {
    /// Its name, which processes compare when they register a function.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Reduce::Sum => "sum",
            Reduce::Max => "max",
            Reduce::Min => "min",
            Reduce::Custom(_) => "custom",
        }
    }

    /// The shards' results folded in the order given; `Err` naming `function` when two
    /// lengths differ (a custom fold may accept any).
    pub(crate) fn fold(&self, function: &str, parts: Vec<Vec<f64>>) -> Result<Vec<f64>> {
        let mut parts = parts.into_iter().enumerate();
        let Some((_, mut acc)) = parts.next() else {
            return Ok(Vec::new());
        };
        for (shard, next) in parts {
            let elementwise = |acc: &mut Vec<f64>, f: fn(f64, f64) -> f64| {
                if acc.len() != next.len() {
                    return Err(Error::ServerFunction {
                        function: function.to_string(),
                        shard,
                        message: format!(
                            "returned {} values, shard 0 {} (an element-wise reduction needs \
                             equal lengths)",
                            next.len(),
                            acc.len()
                        ),
                    });
                }
                for (a, b) in acc.iter_mut().zip(&next) {
                    *a = f(*a, *b);
                }
                Ok(())
            };
            match self {
                Reduce::Sum => elementwise(&mut acc, |a, b| a + b)?,
                Reduce::Max => elementwise(&mut acc, f64::max)?,
                Reduce::Min => elementwise(&mut acc, f64::min)?,
                Reduce::Custom(fold) => fold(&mut acc, &next),
            }
        }
        Ok(acc)
    }
}

impl std::fmt::Debug for Reduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The code of a server function: its shard's rows and the call's arguments in, its
/// shard's result out.
pub(crate) type Body = dyn Fn(&mut ShardRows<'_>, &[f64]) -> Result<Vec<f64>> + Send + Sync;

/// One registered function.
pub(crate) struct Registered {
    /// Its name (unique in the process).
    pub(crate) name: String,
    /// How its results are combined.
    pub(crate) reduce: Reduce,
    /// Its code.
    pub(crate) body: Arc<Body>,
}

/// A process's server functions, by id (registration order, the same on every process),
/// and the placement of rows the calls assume; shared by the process's cluster handle,
/// which registers and calls, and its shards, which run them.
#[derive(Default)]
pub(crate) struct Functions {
    registered: RwLock<Vec<Arc<Registered>>>,
    placement: RwLock<Option<Arc<Placement>>>,
}

impl Functions {
    /// Registers `f`; its id.
    pub(crate) fn register(&self, f: Registered) -> u32 {
        let mut all = self
            .registered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        all.push(Arc::new(f));
        (all.len() - 1) as u32
    }

    /// Function `id`, if registered.
    pub(crate) fn get(&self, id: u32) -> Option<Arc<Registered>> {
        let all = self
            .registered
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        all.get(id as usize).cloned()
    }

    /// How many functions are registered.
    pub(crate) fn count(&self) -> usize {
        self.registered
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether a function is named `name`.
    pub(crate) fn has(&self, name: &str) -> bool {
        let all = self
            .registered
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        all.iter().any(|f| f.name == name)
    }

    /// Sets the placement the next calls assume (the process's current one).
    pub(crate) fn set_placement(&self, placement: Arc<Placement>) {
        *self
            .placement
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(placement);
    }

    /// The placement the calls assume, if set.
    pub(crate) fn placement(&self) -> Option<Arc<Placement>> {
        self.placement
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl std::fmt::Debug for Functions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let all = self
            .registered
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_list().entries(all.iter().map(|r| &r.name)).finish()
    }
}

/// One shard's rows as a server function sees them: the rows of each table whose home is
/// this shard (the others are on other shards; reading or writing one is an error),
/// read and written by row index. A row never updated reads as zeros, as it does
/// everywhere; writing it makes the shard hold it.
///
/// Only tables whose updates are summed ([`Rule::Sum`](crate::rule::Rule::Sum)) are open
/// to functions: a table with a server-side update rule keeps optimizer state beside its
/// rows that a write would leave stale.
pub struct ShardRows<'a> {
    pub(crate) shard: ShardId,
    pub(crate) tables: &'a [Option<TableMeta>],
    pub(crate) rows: &'a DashMap<RowKey, AlignedBuf, FxBuildHasher>,
    pub(crate) arena: &'a mut ArenaShard,
    /// Which shard holds each row.
    pub(crate) placement: &'a Placement,
    /// The data clock a write becomes part of (the shard's minimum clock).
    pub(crate) now: Clock,
    /// Whether the function wrote a row (the processes then drop their copies).
    pub(crate) wrote: bool,
}

impl ShardRows<'_> {
    /// The global index of this shard (`0..` processes × shards per process).
    pub fn shard(&self) -> usize {
        self.shard as usize
    }

    /// The rows of `table` this shard holds, in increasing order: every row ever
    /// updated, set or written whose home is this shard. Rows of a table declared with a
    /// count are all of its rows whose home is here only once each has been written.
    pub fn rows<T: Element>(&self, table: &Table<T>) -> Result<Vec<u64>> {
        let id = self.meta(table)?.id;
        let mut rows: Vec<u64> = self
            .rows
            .iter()
            .filter(|e| e.key().table == id)
            .map(|e| e.key().row)
            .collect();
        rows.extend(
            self.arena
                .rows()
                .filter(|(k, _)| k.table == id)
                .map(|(k, _)| k.row),
        );
        rows.sort_unstable();
        Ok(rows)
    }

    /// The rows of `table`, a table declared with a row count
    /// ([`Cluster::create_table_sized`](crate::Cluster::create_table_sized) or
    /// [`create_table_aligned`](crate::Cluster::create_table_aligned)), whose home is this
    /// shard, written or not, in increasing order (it asks the placement of each of the
    /// table's rows: meant for tables of vectors, not of millions of rows). Rows of
    /// aligned tables with one index are on one shard, so a function combining them
    /// (`a·x + y`) can walk this list of any of them.
    pub fn home_rows<T: Element>(&self, table: &Table<T>) -> Result<Vec<u64>> {
        let meta = self.meta(table)?;
        if table.rows == u64::MAX {
            return Err(Error::config(
                "server function",
                format!(
                    "table '{}' was created without a row count; ShardRows::home_rows \
                     needs one (ShardRows::rows lists the rows it holds)",
                    meta.name
                ),
            ));
        }
        let id = meta.id;
        Ok((0..table.rows)
            .filter(|&row| self.placement.shard_of(RowKey::new(id, row)) == self.shard)
            .collect())
    }

    /// Row `row` of `table` into `out` (zeros if this shard does not hold it).
    pub fn read<T: Element>(&self, table: &Table<T>, row: u64, out: &mut [T]) -> Result<()> {
        let meta = self.checked(table, row, out.len())?;
        let key = RowKey::new(meta.id, row);
        if let Some(bytes) = self.arena.row(key) {
            out.copy_from_slice(bytemuck::cast_slice(bytes));
        } else if let Some(value) = self.rows.get(&key) {
            out.copy_from_slice(value.cast::<T>());
        } else {
            out.fill(T::default());
        }
        Ok(())
    }

    /// Sets row `row` of `table` to `values`. The processes' cached copies of this
    /// shard's rows are dropped once the call is over.
    pub fn write<T: Element>(&mut self, table: &Table<T>, row: u64, values: &[T]) -> Result<()> {
        let meta = self.checked(table, row, values.len())?;
        let key = RowKey::new(meta.id, row);
        self.wrote = true;
        match self.arena.row_mut(key, self.now) {
            Some((bytes, _)) => bytes.copy_from_slice(bytemuck::cast_slice(values)),
            None => match self.rows.get_mut(&key) {
                Some(mut value) => value.cast_mut::<T>().copy_from_slice(values),
                None => {
                    self.rows.insert(key, AlignedBuf::from_slice(values));
                }
            },
        }
        Ok(())
    }

    /// `table`'s description on this shard, checked against the handle.
    fn meta<T: Element>(&self, table: &Table<T>) -> Result<&TableMeta> {
        let meta = self
            .tables
            .get(table.id as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                Error::UnknownTable(format!("#{} (on shard {})", table.id, self.shard))
            })?;
        if meta.elem != T::TYPE || meta.width != table.width {
            return Err(Error::UnknownTable(format!(
                "#{} (this handle is of {} × {}, the table of {} × {})",
                table.id,
                T::TYPE,
                table.width,
                meta.elem,
                meta.width
            )));
        }
        if !meta.rule.is_sum() {
            return Err(Error::config(
                "server function",
                format!(
                    "table '{}' has a server-side update rule ({}); server functions read \
                     and write only tables whose updates are summed",
                    meta.name, meta.rule
                ),
            ));
        }
        Ok(meta)
    }

    /// [`meta`](Self::meta), with `row` in range, its home this shard and `len` the
    /// table's width.
    fn checked<T: Element>(&self, table: &Table<T>, row: u64, len: usize) -> Result<&TableMeta> {
        let meta = self.meta(table)?;
        if row >= table.rows {
            return Err(Error::RowOutOfRange {
                table: meta.name.clone(),
                row,
                rows: table.rows,
            });
        }
        let home = self.placement.shard_of(RowKey::new(meta.id, row));
        if home != self.shard {
            return Err(Error::config(
                "server function",
                format!(
                    "row {row} of table '{}' is held by shard {home}, not shard {}: a \
                     function reads and writes only its own shard's rows (ShardRows::rows)",
                    meta.name, self.shard
                ),
            ));
        }
        if len != meta.width {
            return Err(Error::WidthMismatch {
                table: meta.name.clone(),
                row,
                expected: meta.width,
                actual: len,
            });
        }
        Ok(meta)
    }
}
