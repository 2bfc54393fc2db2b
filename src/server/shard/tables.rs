//! The tables a shard knows — their row shapes, against which every row it takes is
//! checked — and what shard 0 does for the whole cluster through its [`Coordinator`]:
//! table ids by name and all-gathers.
//!
//! It knows table metadata and the coordinator's answers; not where rows are stored,
//! clocks, runs or checkpoints.
//!
//! [`Coordinator`]: super::Coordinator

use super::Shard;
use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::ids::ProcessId;
use crate::msg::{Envelope, RowBatch, ToClient};
use crate::rule::Rule;
use crate::table::TableMeta;

impl Shard {
    /// `from` declares table `name`: shard 0 assigns it an id (or finds the one it has).
    pub(super) fn declare_table(
        &mut self,
        from: ProcessId,
        name: String,
        width: usize,
        (elem, rows, rule): (ElemType, Option<u64>, Rule),
        out: &mut Vec<Envelope>,
    ) {
        match self.coordinator.as_mut() {
            Some(c) => match c.declare(name, width, elem, rows, rule) {
                Ok(meta) => out.push(Envelope::Client(from, ToClient::TableDeclared { meta })),
                Err(reason) => self.reject(from, reason, out),
            },
            None => self.reject(from, "table declared to a shard other than 0".into(), out),
        }
    }

    /// `from`'s part of all-gather `round`: once shard 0 has every part, every process
    /// still in the cluster gets them all.
    pub(super) fn gather(
        &mut self,
        from: ProcessId,
        round: u64,
        values: AlignedBuf,
        out: &mut Vec<Envelope>,
    ) {
        match self
            .coordinator
            .as_mut()
            .map(|c| c.gather(from, round, values))
        {
            Some(Ok(Some(parts))) => {
                for p in self.staying() {
                    let parts = parts.clone();
                    out.push(Envelope::Client(p, ToClient::Gathered { round, parts }));
                }
            }
            Some(Ok(None)) => {}
            Some(Err(reason)) => self.reject_all(reason, out),
            None => self.reject(from, "all-gather sent to a shard other than 0".into(), out),
        }
    }

    /// Table `meta` is created (by every process, with the same id and shape).
    pub(super) fn create_table(&mut self, meta: TableMeta, out: &mut Vec<Envelope>) {
        let id = meta.id as usize;
        if self.tables.len() <= id {
            self.tables.resize(id + 1, None);
        }
        let checked =
            (meta.rule.check(meta.elem)).and_then(|()| self.update_rules.check(&meta.rule));
        if let Err(reason) = checked {
            return self.reject_all(format!("table '{}': {reason}", meta.name), out);
        }
        match &self.tables[id] {
            Some(known) if *known != meta => self.reject_all(
                format!(
                    "table #{id} declared as both '{}' and '{}'",
                    known.name, meta.name
                ),
                out,
            ),
            Some(_) => {}
            None => {
                self.tables[id] = Some(meta);
                self.table_changed(id as u32);
            }
        }
    }

    pub(super) fn table(&self, table: u32) -> Option<&TableMeta> {
        self.tables.get(table as usize).and_then(Option::as_ref)
    }

    /// `Ok` if every row of `rows` is of a known table and has its row size.
    pub(super) fn validate(&self, rows: &RowBatch) -> Result<(), String> {
        self.validate_as("update", rows)
    }

    /// [`Shard::validate`] for rows that arrive as `what` (an update, an adoption).
    pub(super) fn validate_as(&self, what: &str, rows: &RowBatch) -> Result<(), String> {
        for (key, delta) in rows {
            let meta = self
                .table(key.table)
                .ok_or_else(|| format!("{what} of unknown table #{}", key.table))?;
            if meta.row_bytes() != delta.len() {
                return Err(format!(
                    "{what} of table '{}' row {} has {} bytes, expected {}",
                    meta.name,
                    key.row,
                    delta.len(),
                    meta.row_bytes()
                ));
            }
        }
        Ok(())
    }
}
