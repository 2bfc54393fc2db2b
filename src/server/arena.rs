//! [`ArenaShard`]: a shard's specialized storage — its planned rows in one contiguous
//! arena in the client's first-use order, a read-only index built once, per-worker update
//! layouts resolved to offsets, and chunk boundaries for refreshes.
//!
//! Replies are byte copies of arena ranges; update slabs are applied by walking pre-resolved
//! offsets. Nothing here hashes per row except the index used for rows sent the generic way.

use crate::msg::WorkerId;
use crate::{AlignedBuf, ElemType, RowKey, TableMeta};
use rustc_hash::FxHashMap;
use std::ops::Range;

/// One planned row: where it lives and how to add to it.
#[derive(Debug, Clone, Copy)]
struct Row {
    offset: usize,
    len: usize,
    elem: ElemType,
}

/// Specialized storage of one shard.
#[derive(Debug)]
pub(crate) struct ArenaShard {
    keys: Vec<RowKey>,
    rows: Vec<Row>,
    arena: AlignedBuf,
    index: FxHashMap<RowKey, u32>,
    chunks: Vec<Range<usize>>,
    updaters: FxHashMap<WorkerId, Vec<u32>>,
}

/// Bytes a row takes in an arena (rows start 8-byte aligned).
pub(crate) fn padded(len: usize) -> usize {
    len.div_ceil(8) * 8
}

impl ArenaShard {
    /// Lays out `keys` (all of known tables; checked by the caller) with zeroed values.
    pub(crate) fn new(
        tables: &[Option<TableMeta>],
        keys: Vec<RowKey>,
        chunk_ends: &[u32],
        updaters: Vec<(WorkerId, Vec<u32>)>,
    ) -> Result<Self, String> {
        let mut rows = Vec::with_capacity(keys.len());
        let mut offset = 0;
        for key in &keys {
            let meta = tables
                .get(key.table as usize)
                .and_then(Option::as_ref)
                .ok_or_else(|| format!("plan names unknown table #{}", key.table))?;
            rows.push(Row {
                offset,
                len: meta.row_bytes(),
                elem: meta.elem,
            });
            offset += padded(meta.row_bytes());
        }
        let mut chunks = Vec::with_capacity(chunk_ends.len());
        let mut start = 0usize;
        for &end in chunk_ends {
            let end = end as usize;
            if end < start || end > keys.len() {
                return Err(format!("bad chunk boundary {end}"));
            }
            let bytes = |slot: usize| rows.get(slot).map_or(offset, |r| r.offset);
            chunks.push(bytes(start)..bytes(end));
            start = end;
        }
        if start != keys.len() {
            return Err("chunks do not cover the plan".into());
        }
        for (_, slots) in &updaters {
            if slots.iter().any(|&s| s as usize >= keys.len()) {
                return Err("update layout names a slot outside the plan".into());
            }
        }
        let index = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (*k, i as u32))
            .collect();
        Ok(ArenaShard {
            keys,
            rows,
            arena: AlignedBuf::zeroed(offset),
            index,
            chunks,
            updaters: updaters.into_iter().collect(),
        })
    }

    /// The bytes of row `key` if it is planned here.
    pub(crate) fn row_mut(&mut self, key: RowKey) -> Option<(&mut [u8], ElemType)> {
        let row = self.rows[*self.index.get(&key)? as usize];
        Some((
            &mut self.arena.as_bytes_mut()[row.offset..row.offset + row.len],
            row.elem,
        ))
    }

    /// A copy of row `key` if it is planned here.
    pub(crate) fn row(&self, key: RowKey) -> Option<&[u8]> {
        let row = self.rows[*self.index.get(&key)? as usize];
        Some(&self.arena.as_bytes()[row.offset..row.offset + row.len])
    }

    /// Adds worker `worker`'s delta slab. A slab whose size does not match the worker's
    /// registered layout is refused whole.
    pub(crate) fn apply_slab(&mut self, worker: WorkerId, slab: &AlignedBuf) -> Result<(), String> {
        let slots = self.updaters.get(&worker).map(Vec::as_slice).unwrap_or(&[]);
        let expected: usize = slots
            .iter()
            .map(|&s| padded(self.rows[s as usize].len))
            .sum();
        if expected != slab.len() {
            return Err(format!(
                "update slab of worker {worker} has {} bytes, its layout {expected}",
                slab.len()
            ));
        }
        let arena = self.arena.as_bytes_mut();
        let src = slab.as_bytes();
        let mut at = 0;
        for &s in slots {
            let row = self.rows[s as usize];
            row.elem.add(
                &mut arena[row.offset..row.offset + row.len],
                &src[at..at + row.len],
            );
            at += padded(row.len);
        }
        Ok(())
    }

    /// Number of refresh chunks.
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }

    /// A copy of chunk `chunk`'s bytes.
    pub(crate) fn chunk_bytes(&self, chunk: usize) -> Option<AlignedBuf> {
        let range = self.chunks.get(chunk)?.clone();
        Some(AlignedBuf::from_bytes(&self.arena.as_bytes()[range]))
    }

    /// Every planned row with its value.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (RowKey, &[u8])> + '_ {
        self.keys
            .iter()
            .zip(&self.rows)
            .map(|(k, r)| (*k, &self.arena.as_bytes()[r.offset..r.offset + r.len]))
    }
}
