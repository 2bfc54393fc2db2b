//! The cluster's tables: [`Cluster::create_table`] (the coordinator, shard 0, assigns
//! the id; every shard learns the table), [`Cluster::create_table_on`] (every row on a
//! range of shards), the handle of an existing table ([`Cluster::table`]), where a row
//! lives ([`Cluster::home_of`]) and the servers' contents ([`Cluster::snapshot`]).
//!
//! It knows the table registry and the messages that declare, create and dump tables;
//! how rows are stored is the shards' (`server`), how they hash to shards `placement`'s,
//! and runs and plans are none of its business.

use super::Cluster;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ids::ShardId;
use crate::msg::ToShard;
use crate::rule::Rule;
use crate::table::{resolve, Table};
use std::sync::PoisonError;

impl Cluster {
    /// Creates a table of `width`-element rows of `T`. Every row starts as zeros.
    pub fn create_table<T: Element>(&mut self, name: &str, width: usize) -> Result<Table<T>> {
        self.declare::<T>(name, width, None, Rule::Sum)
    }

    /// [`create_table`](Self::create_table) of a table whose servers apply `rule` to the
    /// updates (see [`Rule`]): an UPDATE is then a gradient, summed per clock over the
    /// workers and stepped through the rule on the shards, which keep the rule's state per
    /// row (in an asynchronous cluster each push is stepped as it arrives); a READ returns
    /// the servers' value, without the worker's own gradients. `rows`:
    /// its row count, as [`create_table_sized`](Self::create_table_sized), or `None`.
    /// Every process must give the same rule (parameters compared bit for bit); a rule
    /// needs a float table and parameters in range, checked here.
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Rule};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let w = cluster.create_table_with_rule::<f64>("w", 1, Some(1), Rule::Sgd { lr: 0.5 })?;
    /// cluster.run(|worker| {
    ///     worker.update(&w, 0, &[1.0])?; // a gradient: each worker's is summed
    ///     worker.clock()
    /// })?;
    /// assert_eq!(cluster.snapshot(&w)?, vec![(0, vec![-1.0])]); // 0 - 0.5 * (1 + 1)
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_table_with_rule<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rows: Option<u64>,
        rule: Rule,
    ) -> Result<Table<T>> {
        self.check_rule::<T>(name, &rule)?;
        if let Some(rows) = rows {
            check_rows(name, rows)?;
        }
        self.declare::<T>(name, width, rows, rule)
    }

    /// [`create_table`](Self::create_table) of a table with rows `0..rows` only: reading
    /// or updating a row outside them is [`Error::RowOutOfRange`] naming the table, on
    /// every path (the check rides on the handle's width check). Every process must give
    /// the same count.
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Error};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let weights = cluster.create_table_sized::<f32>("weights", 785, 10)?;
    /// let refused = cluster.run(|w| {
    ///     let mut row = vec![0.0f32; 785];
    ///     w.read(&weights, 9, &mut row)?;
    ///     Ok(w.read(&weights, 10, &mut row).unwrap_err())
    /// })?;
    /// assert!(matches!(refused[0], Error::RowOutOfRange { row: 10, rows: 10, .. }));
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_table_sized<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rows: u64,
    ) -> Result<Table<T>> {
        check_rows(name, rows)?;
        self.declare::<T>(name, width, Some(rows), Rule::Sum)
    }

    /// Declares the table to the coordinator and creates it on every shard.
    fn declare<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rows: Option<u64>,
        rule: Rule,
    ) -> Result<Table<T>> {
        self.check()?;
        self.registry.check_new(name, width)?;
        // The coordinator (shard 0, on rank 0) assigns the id, once per name.
        let declare = ToShard::DeclareTable {
            from: self.shared.process,
            name: name.to_string(),
            width,
            elem: T::TYPE,
            rows,
            rule,
        };
        self.send(0, declare)?;
        let meta = self.shared.await_table(name)?;
        let meta = self.registry.insert(meta)?.clone();
        for shard in 0..self.shared.world.total_shards() {
            self.send(shard, ToShard::CreateTable { meta: meta.clone() })?;
        }
        self.shared
            .tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(meta.clone());
        Ok(Table::new(self.id, &meta))
    }

    /// [`create_table`](Self::create_table) with every row of the table on the global
    /// server shards `shards` (a non-empty range of `0..processes × Config::shards`;
    /// process `p`'s shards are `p × shards ..`): for example the weights of a model on
    /// dedicated parameter-server processes. Rows hash over those shards; locality
    /// placement leaves them there. Every process must create the table with the same
    /// range: this call all-gathers it and fails naming a process that differs.
    pub fn create_table_on<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        shards: std::ops::Range<usize>,
    ) -> Result<Table<T>> {
        self.check_shards(name, &shards)?;
        let table = self.create_table::<T>(name, width)?;
        self.keep_on(name, &table, shards)?;
        Ok(table)
    }

    /// [`create_table_with_rule`](Self::create_table_with_rule) on the global server
    /// shards `shards`, as [`create_table_on`](Self::create_table_on) places a table: a
    /// model's weights stepped by dedicated parameter-server processes.
    pub fn create_table_with_rule_on<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rows: Option<u64>,
        rule: Rule,
        shards: std::ops::Range<usize>,
    ) -> Result<Table<T>> {
        self.check_shards(name, &shards)?;
        let table = self.create_table_with_rule::<T>(name, width, rows, rule)?;
        self.keep_on(name, &table, shards)?;
        Ok(table)
    }

    /// A table of `rows` rows (as [`create_table_sized`](Self::create_table_sized)) whose
    /// row `r` is held by the same shard as row `r` of every other aligned table: the
    /// vectors of a batch optimizer, which [server functions](Self::register_function)
    /// combine row by row on the shards (`x · y`, `a·x + y`) without moving them. Rows
    /// spread over every shard by the hash of the row index; locality placement leaves
    /// them there. Every process must create it alike: this call all-gathers it.
    pub fn create_table_aligned<T: Element>(
        &mut self,
        name: &str,
        width: usize,
        rows: u64,
    ) -> Result<Table<T>> {
        let table = self.create_table_sized::<T>(name, width, rows)?;
        self.agree_placement(name, &table, None)?;
        Ok(table)
    }

    /// Refuses a shard range that is empty or beyond the cluster's shards.
    fn check_shards(&self, name: &str, shards: &std::ops::Range<usize>) -> Result<()> {
        let total = self.shared.world.total_shards();
        if shards.is_empty() || shards.end > total {
            return Err(Error::config(
                "shards",
                format!("table {name:?} on shards {shards:?}: the cluster has shards 0..{total}"),
            ));
        }
        Ok(())
    }

    /// Keeps every row of the new `table` on `shards`, after checking (an all-gather)
    /// that every process asks for the same range.
    fn keep_on<T: Element>(
        &mut self,
        name: &str,
        table: &Table<T>,
        shards: std::ops::Range<usize>,
    ) -> Result<()> {
        self.agree_placement(name, table, Some(shards))
    }

    /// Places the new `table` on `shards`, or aligned (`None`), after checking (an
    /// all-gather) that every process asks for the same.
    fn agree_placement<T: Element>(
        &mut self,
        name: &str,
        table: &Table<T>,
        shards: Option<std::ops::Range<usize>>,
    ) -> Result<()> {
        let (start, end) = shards
            .as_ref()
            .map_or((-1, -1), |s| (s.start as i64, s.end as i64));
        let mine = [i64::from(table.id()), start, end];
        let all = self.all_gather(&mine)?;
        if let Some(p) = all.iter().position(|other| other.as_slice() != mine) {
            let place = |start: i64, end: i64| match start {
                -1 => "aligned (on every shard, by row)".to_string(),
                _ => format!("on shards {start}..{end}"),
            };
            let at = |i: usize| all[p].get(i).copied().unwrap_or(0);
            return Err(Error::failed(
                format!("table {name:?}"),
                format!(
                    "process {p} put it {}, process {} {}",
                    place(at(1), at(2)),
                    self.shared.process,
                    place(start, end)
                ),
            ));
        }
        let mut placement = (*self.shared.placement()).clone();
        match shards {
            Some(shards) => placement.restrict(
                table.id(),
                shards.start as u32,
                (shards.end - shards.start) as u32,
            ),
            None => placement.align(table.id()),
        }
        self.shared.set_placement(placement);
        Ok(())
    }

    /// The handle of the existing table `name`, which must hold `T`.
    pub fn table<T: Element>(&self, name: &str) -> Result<Table<T>> {
        let meta = self.registry.by_name(name)?;
        if meta.elem != T::TYPE {
            return Err(Error::TypeMismatch {
                table: name.to_string(),
                actual: meta.elem.name(),
                requested: T::TYPE.name(),
            });
        }
        Ok(Table::new(self.id, meta))
    }

    /// The rank of the process whose shard holds row `row` of `table` (where its updates
    /// are applied and its reads served): for observability, and for applications or
    /// benchmarks that care where their rows live.
    pub fn home_of<T: Element>(&self, table: &Table<T>, row: u64) -> Result<usize> {
        resolve(self.registry.tables(), self.id, table)?;
        let shard = self.shared.placement().shard_of(table.key(row));
        Ok(shard as usize / self.shared.world.shards)
    }

    /// The current server-side contents of `table`: every row that exists, sorted by row.
    /// Meant for use between runs (values of a run in progress may be partial).
    pub fn snapshot<T: Element>(&self, table: &Table<T>) -> Result<Vec<(u64, Vec<T>)>> {
        self.snapshot_of_copy(table, 0)
    }

    /// [`snapshot`](Self::snapshot) of `table` as the shards' backups number `copy` hold
    /// it (`Config::shard_replicas`; copy 0 is the shards themselves): every shard's
    /// backup on the `copy`-th process after its own. For tests that check backups equal
    /// their primaries; not a stable API.
    #[doc(hidden)]
    pub fn snapshot_of_copy<T: Element>(
        &self,
        table: &Table<T>,
        copy: usize,
    ) -> Result<Vec<(u64, Vec<T>)>> {
        self.check()?;
        resolve(self.registry.tables(), self.id, table)?;
        let (world, replicas) = (self.shared.world, self.config.shard_replicas);
        if copy >= replicas {
            return Err(Error::config(
                "copy",
                format!("{copy}: the shards have {replicas} copies (shard_replicas)"),
            ));
        }
        for shard in 0..world.total_shards() as ShardId {
            let (to, backup) = match copy {
                0 => (shard, None),
                k => (world.backups_of(shard, replicas)[k - 1], Some(shard)),
            };
            let dump = ToShard::Dump {
                from: self.shared.process,
                table: table.id,
                backup,
            };
            self.send(to as usize, dump)?;
        }
        let mut rows: Vec<(u64, Vec<T>)> = self
            .shared
            .collect_dumps(self.shared.world.total_shards())?
            .into_iter()
            .map(|(k, b)| (k.row, b.cast::<T>().to_vec()))
            .collect();
        rows.sort_unstable_by_key(|(r, _)| *r);
        Ok(rows)
    }
}

impl Cluster {
    /// Changes `table`'s rule between runs to `rule`, of the same kind (new parameters:
    /// a learning-rate schedule, a decay changed as training goes; the rows' state is
    /// kept). A collective: every process calls it at the same point with the same rule,
    /// checked first ([`Error::Disagreement`] naming the ranks' rules otherwise); every
    /// step of the following runs uses it.
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Rule};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(1))?;
    /// let w = cluster.create_table_with_rule::<f64>("w", 1, Some(1), Rule::Sgd { lr: 0.5 })?;
    /// let step = |worker: &mut iterstore::Worker<'_>| {
    ///     worker.update(&w, 0, &[1.0])?;
    ///     worker.clock()
    /// };
    /// cluster.run(step)?;
    /// cluster.set_rule(&w, Rule::Sgd { lr: 0.25 })?;
    /// cluster.run(step)?;
    /// assert_eq!(cluster.snapshot(&w)?, vec![(0, vec![-0.75])]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_rule<T: Element>(&mut self, table: &Table<T>, rule: Rule) -> Result<()> {
        self.check()?;
        let meta = resolve(self.registry.tables(), self.id, table)?;
        let name = meta.name.clone();
        if !meta.rule.same_kind(&rule) {
            return Err(Error::config(
                "rule",
                format!(
                    "table {name:?}: rule {} cannot become {rule} (another kind: its state \
                     would not fit)",
                    meta.rule
                ),
            ));
        }
        self.check_rule::<T>(&name, &rule)?;
        self.agree(&[(&format!("rule of table '{name}'"), &rule.to_string())])?;
        self.install_rule(table.id, rule)
    }

    /// The rule [`Config::with_rule`](crate::Config::with_rule) registered as `name`, with
    /// `params` (as many as it names, checked by it): see [`UpdateRule`](crate::UpdateRule).
    pub fn rule(&self, name: &str, params: &[f64]) -> Result<Rule> {
        (self.config.rules.rule(name, params)).map_err(|e| {
            let rank = self.shared.process;
            Error::config("rule", format!("{e} on process {rank}"))
        })
    }

    /// `Ok` if `rule` applies to table `name` of `T`s: its parameters in range, a custom
    /// rule registered here with them.
    fn check_rule<T: Element>(&self, name: &str, rule: &Rule) -> Result<()> {
        (rule.check(T::TYPE))
            .and_then(|()| self.config.rules.check(rule))
            .map_err(|e| {
                let rank = self.shared.process;
                Error::config("rule", format!("table {name:?}: {e} on process {rank}"))
            })
    }

    /// Table `table`'s rule becomes `rule` (checked, and the same on every process) on
    /// every shard and in this process: [`set_rule`](Self::set_rule) once agreed, and a
    /// resume for the rules its checkpoint holds.
    pub(super) fn install_rule(&mut self, table: u32, rule: Rule) -> Result<()> {
        let from = self.shared.process;
        for shard in 0..self.shared.world.total_shards() {
            self.send(shard, ToShard::SetRule { from, table, rule })?;
        }
        self.registry.set_rule(table, rule);
        if let Some(m) = self
            .shared
            .tables
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(table as usize)
        {
            m.rule = rule;
        }
        Ok(())
    }
}

/// `Err` unless `rows` is a table's row count: from 1 to `u64::MAX - 1`.
fn check_rows(name: &str, rows: u64) -> Result<()> {
    if rows == 0 || rows == u64::MAX {
        return Err(Error::config(
            "rows",
            format!("table {name:?}: {rows} rows (a count from 1 to u64::MAX - 1)"),
        ));
    }
    Ok(())
}
