//! Tables: named collections of fixed-width rows of one element type.
//!
//! [`Table<T>`] is the typed handle user code holds; [`TableMeta`] is the untyped
//! description the client and the servers share. A handle remembers the cluster it came
//! from, so a handle from another cluster is rejected instead of silently aliasing a table.

use crate::element::{ElemType, Element};
use crate::error::{Error, Result};
use crate::ids::{RowKey, TableId};
use crate::rule::Rule;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// The untyped description of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMeta {
    /// Dense id (creation order).
    pub id: TableId,
    /// Unique name.
    pub name: String,
    /// Elements per row.
    pub width: usize,
    /// Element type.
    pub elem: ElemType,
    /// Its number of rows, if declared with one ([`Cluster::create_table_sized`]): rows
    /// `0..rows`; `None`: any `u64` row.
    ///
    /// [`Cluster::create_table_sized`]: crate::cluster::Cluster::create_table_sized
    pub rows: Option<u64>,
    /// How its servers apply updates ([`Rule::Sum`]: add them).
    #[serde(default)]
    pub rule: Rule,
}

impl TableMeta {
    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.width * self.elem.size()
    }

    /// Bytes of update-rule state per row (the state a checkpoint or a migration carries
    /// with the row), or `None` if its rule is a sum (its rows keep no state).
    pub fn state_bytes(&self) -> Option<usize> {
        (!self.rule.is_sum()).then(|| self.row_bytes() * self.rule.state_per_element())
    }
}

/// A typed handle to a table, obtained from [`Cluster::create_table`] or
/// [`Cluster::table`]. Cheap to copy.
///
/// [`Cluster::create_table`]: crate::Cluster::create_table
/// [`Cluster::table`]: crate::Cluster::table
#[derive(Debug)]
pub struct Table<T> {
    pub(crate) cluster: u64,
    pub(crate) id: TableId,
    pub(crate) width: usize,
    /// Rows `0..rows` exist (`u64::MAX` for a table declared without a count).
    pub(crate) rows: u64,
    _elem: PhantomData<fn() -> T>,
}

impl<T> Clone for Table<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Table<T> {}

impl<T: Element> Table<T> {
    pub(crate) fn new(cluster: u64, meta: &TableMeta) -> Self {
        Table {
            cluster,
            id: meta.id,
            width: meta.width,
            rows: meta.rows.unwrap_or(u64::MAX),
            _elem: PhantomData,
        }
    }

    /// Its number of rows, if it was declared with one.
    pub fn rows(&self) -> Option<u64> {
        (self.rows != u64::MAX).then_some(self.rows)
    }

    /// Elements per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The table's id within its cluster.
    pub fn id(&self) -> TableId {
        self.id
    }

    /// The key of `row` in this table.
    pub fn key(&self, row: u64) -> RowKey {
        RowKey::new(self.id, row)
    }
}

/// The tables of one cluster, in creation order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    tables: Vec<TableMeta>,
}

impl Registry {
    /// Checks that table `name` of `width` columns may be created here.
    pub(crate) fn check_new(&self, name: &str, width: usize) -> Result<()> {
        if name.is_empty() {
            return Err(Error::config("table name", "must not be empty"));
        }
        if width == 0 {
            return Err(Error::config(
                "table width",
                format!("table '{name}' must have at least one column"),
            ));
        }
        if self.tables.iter().any(|t| t.name == name) {
            return Err(Error::TableExists(name.to_string()));
        }
        if TableId::try_from(self.tables.len()).is_err() {
            return Err(Error::config("tables", "too many tables"));
        }
        Ok(())
    }

    /// Adds a table whose id the cluster's coordinator assigned. Ids are positions, so
    /// every process must create its tables in the same order.
    pub(crate) fn insert(&mut self, meta: TableMeta) -> Result<&TableMeta> {
        self.check_new(&meta.name, meta.width)?;
        if meta.id as usize != self.tables.len() {
            return Err(Error::config(
                "tables",
                format!(
                    "table '{}' has cluster id {} but is this process's table #{}: every \
                     process must create the same tables in the same order",
                    meta.name,
                    meta.id,
                    self.tables.len()
                ),
            ));
        }
        self.tables.push(meta);
        Ok(self.tables.last().expect("pushed"))
    }

    /// Table `id`'s rule becomes `rule` (after every process agreed).
    pub(crate) fn set_rule(&mut self, id: TableId, rule: Rule) {
        if let Some(m) = self.tables.get_mut(id as usize) {
            m.rule = rule;
        }
    }

    /// Declares the next table locally (tests).
    #[cfg(test)]
    pub(crate) fn create(
        &mut self,
        name: &str,
        width: usize,
        elem: ElemType,
    ) -> Result<&TableMeta> {
        self.check_new(name, width)?;
        let id = self.tables.len() as TableId;
        self.insert(TableMeta {
            id,
            name: name.to_string(),
            width,
            elem,
            rows: None,
            rule: crate::rule::Rule::Sum,
        })
    }

    pub(crate) fn by_name(&self, name: &str) -> Result<&TableMeta> {
        self.tables
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| Error::UnknownTable(format!("'{name}'")))
    }

    pub(crate) fn tables(&self) -> &[TableMeta] {
        &self.tables
    }
}

/// Checks that `table` belongs to `cluster` and returns its metadata.
pub(crate) fn resolve<'a, T: Element>(
    tables: &'a [TableMeta],
    cluster: u64,
    table: &Table<T>,
) -> Result<&'a TableMeta> {
    if table.cluster != cluster {
        return Err(Error::UnknownTable(format!(
            "#{} (the handle belongs to another cluster)",
            table.id
        )));
    }
    tables
        .get(table.id as usize)
        .ok_or_else(|| Error::UnknownTable(format!("#{}", table.id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_rejects_duplicates_and_zero_width() {
        let mut r = Registry::default();
        assert_eq!(r.create("a", 4, ElemType::F32).unwrap().id, 0);
        assert!(matches!(
            r.create("a", 4, ElemType::F32),
            Err(Error::TableExists(_))
        ));
        assert!(r.create("b", 0, ElemType::F32).is_err());
        assert_eq!(r.by_name("a").unwrap().row_bytes(), 16);
        assert!(matches!(r.by_name("zz"), Err(Error::UnknownTable(_))));
    }

    #[test]
    fn foreign_handles_are_rejected() {
        let mut r = Registry::default();
        let meta = r.create("a", 2, ElemType::I64).unwrap().clone();
        let t = Table::<i64>::new(7, &meta);
        assert!(resolve(r.tables(), 7, &t).is_ok());
        assert!(matches!(
            resolve(r.tables(), 8, &t),
            Err(Error::UnknownTable(_))
        ));
    }
}
