//! [`ArenaShard`]: a shard's specialized storage — one arena holding every row some
//! process subscribed to, and per process a [`Subscription`]: its slot list, chunk
//! boundaries and workers' update layouts, tagged with the process's plan epoch.
//!
//! The arena only grows: a row keeps its place once it has one, so an update layout
//! resolved when a slab arrived stays valid after another process re-plans. Rows are laid
//! out in the order of the first subscription that names them, so a lone process's chunks
//! are single byte ranges; another process's chunk is gathered from the fewest ranges
//! its order allows. Update slabs are applied by walking pre-resolved rows. Nothing here
//! hashes per row except the index used for rows sent the generic way.
//!
//! **Refreshes ship what changed.** Every row remembers the data clock at which it last
//! changed, and every subscription the data clock of the last refresh of each chunk it was
//! sent. A refresh carries only the rows changed since then (with their positions in the
//! chunk), or the whole chunk when that is smaller or the process has none of it yet; a
//! row nobody updated is never sent again. Written straight into an arena in this OS
//! process, a changed row also costs its look-ups on both sides ([`LOCAL_ROW_BYTES`]
//! instead of a position's 4 bytes), so such a refresh copies the whole chunk sooner.
//! This is exact because a process's arena is
//! written only by these refreshes, which arrive in order (FIFO per pair of processes, or
//! written by the shard itself as it makes them for a process in its own OS process:
//! [`ArenaShard::refresh_rows`]), so its copy of a chunk is always the last one sent. Rows start as zeros and only ever have
//! deltas added (or are set to what adding to zeros gives, `Cluster::set_rows`), so a row
//! is never `-0.0` and adding an all-zero delta changes nothing: such deltas (rows a
//! worker's slab covers but it did not touch) are skipped.

use crate::buf::AlignedBuf;
use crate::element::{ElemType, Element};
use crate::ids::{Clock, ProcessId, RowKey, WorkerId};
use crate::slot::padded;
use crate::table::TableMeta;
use rustc_hash::FxHashMap;
use std::ops::Range;
use std::sync::Arc;

/// What a changed row's position costs a refresh sent as a message: its `u32`.
const POSITION_BYTES: usize = 4;

/// What a changed row costs a refresh written straight into an arena in this OS process,
/// beyond its bytes: finding it in the shard's arena and in the process arena's plan,
/// about as long as copying 64 bytes (measured on MF's 72-byte rows: a chunk refreshed
/// row by row took 13.5 µs where copying it whole took 8.5 µs, BENCHMARKS.md).
const LOCAL_ROW_BYTES: usize = 64;

/// One row in the arena: where it lives and how to add to it.
#[derive(Debug, Clone, Copy)]
struct Row {
    offset: usize,
    len: usize,
    elem: ElemType,
    /// Whether its table has an update rule: its deltas are gradients, folded by
    /// [`Fold`] instead of added.
    ruled: bool,
}

/// Where the deltas of a slab's rows of tables with an update rule go (gradients, to be
/// stepped through the rule: `shard::rules`), and which rows of the slab are applied.
pub(crate) enum Fold<'a> {
    /// Every row: sum rows' deltas added, rule rows' handed to the sink.
    All(&'a mut dyn FnMut(RowKey, &[u8])),
    /// Only the rule rows, handed to the sink (an asynchronous push, stepped as it
    /// arrives).
    Rules(&'a mut dyn FnMut(RowKey, &[u8])),
    /// Only the sum rows (the rest of such a push, added when its clock is complete).
    Sums,
}

impl Fold<'_> {
    /// Hands rule row `key`'s `delta` to the sink, if this fold takes rule rows.
    #[inline]
    fn gradient(&mut self, key: RowKey, delta: &[u8]) {
        match self {
            Fold::All(sink) | Fold::Rules(sink) => sink(key, delta),
            Fold::Sums => {}
        }
    }

    /// Whether sum rows are added.
    #[inline]
    fn sums(&self) -> bool {
        !matches!(self, Fold::Rules(_))
    }
}

/// The rows of one worker's update slab ([`SlabLayout`]), shared by the slabs laid out
/// for it.
pub(crate) type Layout = Arc<SlabLayout>;

/// The rows of one worker's update slab, as arena row numbers in slab order.
#[derive(Debug, Default)]
pub(crate) struct SlabLayout {
    rows: Box<[u32]>,
    /// When every row has one padded width (words) and one element type: those. A slab
    /// of such rows is sized and added without looking at each row's shape.
    uniform: Option<(usize, ElemType)>,
}

impl SlabLayout {
    /// Rows in the layout.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }
}

/// What a process asks for in [`ToShard::Specialize`](crate::msg::ToShard::Specialize).
#[derive(Debug)]
pub(crate) struct Request<'a> {
    /// The process.
    pub(crate) process: ProcessId,
    /// Its plan epoch.
    pub(crate) epoch: u32,
    /// The shard's rows in the process's arena order.
    pub(crate) keys: &'a [RowKey],
    /// Exclusive end slot of each chunk.
    pub(crate) chunk_ends: &'a [u32],
    /// Per chunk: the clocks of an iteration in which the process reads it.
    pub(crate) chunk_phases: &'a [u64],
    /// Per worker of the process (global id): the slots of its slab.
    pub(crate) updaters: Vec<(WorkerId, Vec<u32>)>,
}

/// One process's view of the shard's arena.
#[derive(Debug)]
struct Subscription {
    epoch: u32,
    /// Per chunk: the arena byte ranges it is gathered from, in the process's order.
    chunks: Vec<Vec<Range<usize>>>,
    /// Per worker of the process (global id): its slab's rows.
    updaters: FxHashMap<WorkerId, Layout>,
    /// Per chunk: its arena rows, in the process's order.
    chunk_rows: Vec<Vec<u32>>,
    /// Per chunk: the data clock of the last refresh sent, if any.
    sent: Vec<Option<Clock>>,
    /// Per chunk: the clocks of an iteration in which the process reads it.
    phases: Vec<u64>,
}

/// One chunk's refresh: the whole chunk, or only the rows changed since the last one.
#[derive(Debug)]
pub(crate) struct Refresh {
    /// The bytes: the whole chunk, or the changed rows one after another.
    pub(crate) bytes: AlignedBuf,
    /// `None`: the whole chunk; else the changed rows' positions in the chunk.
    pub(crate) rows: Option<Vec<u32>>,
}

/// One chunk's refresh as a view of the shard's arena ([`ArenaShard::refresh_rows`]):
/// the rows changed since the last refresh (`positions`, in the chunk) or the whole
/// chunk, as word slices in the process's order.
pub(crate) struct RefreshRows<'a> {
    arena: &'a ArenaShard,
    /// The chunk's arena byte ranges, in the process's order.
    ranges: &'a [Range<usize>],
    /// The chunk's arena rows, in the process's order.
    rows: &'a [u32],
    positions: Option<Vec<u32>>,
    words: usize,
}

impl<'a> RefreshRows<'a> {
    /// `None`: the whole chunk; else the changed rows' positions in the chunk.
    pub(crate) fn positions(&self) -> Option<&[u32]> {
        self.positions.as_deref()
    }

    /// The refresh's words in all.
    pub(crate) fn words(&self) -> usize {
        self.words
    }

    /// The refresh's words, one slice after another: the chunk's ranges, or the changed
    /// rows (each its padded words).
    pub(crate) fn slices(&self) -> impl Iterator<Item = &'a [u64]> + '_ {
        let whole = self.positions.is_none().then(|| self.ranges());
        let changed = self.positions.as_ref().map_or(0, Vec::len);
        whole
            .into_iter()
            .flatten()
            .chain((0..changed).map(|k| self.changed_row(k)))
    }

    /// Word slices of the whole chunk's ranges, in the process's order (a whole refresh).
    pub(crate) fn ranges(&self) -> impl Iterator<Item = &'a [u64]> + '_ {
        let arena = &self.arena.arena;
        self.ranges.iter().map(|r| &arena[r.start / 8..r.end / 8])
    }

    /// The words of the `k`-th changed row (a partial refresh's, `k` below its
    /// positions' number).
    #[inline]
    pub(crate) fn changed_row(&self, k: usize) -> &'a [u64] {
        let positions = self.positions.as_deref().unwrap_or_default();
        let row = self.arena.rows[self.rows[positions[k] as usize] as usize];
        &self.arena.arena[row.offset / 8..(row.offset + padded(row.len)) / 8]
    }

    /// The refresh copied out, for a message.
    pub(crate) fn to_refresh(&self) -> Refresh {
        let bytes = match self.ranges {
            [one] if self.positions.is_none() => {
                AlignedBuf::from_bytes(&self.arena.bytes()[one.clone()])
            }
            _ => AlignedBuf::from_words(self.words, self.slices()),
        };
        Refresh {
            bytes,
            rows: self.positions.clone(),
        }
    }
}

/// Specialized storage of one shard (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ArenaShard {
    keys: Vec<RowKey>,
    rows: Vec<Row>,
    /// Per row: the data clock at which it last changed.
    changed: Vec<Clock>,
    arena: Vec<u64>,
    index: FxHashMap<RowKey, u32>,
    subs: FxHashMap<ProcessId, Subscription>,
}

impl ArenaShard {
    /// Subscribes `req.process` at `req.epoch` to `req.keys` (in its arena order), cut
    /// into chunks ending at the slot indices `req.chunk_ends`, with its workers' slab
    /// layouts (slot lists). Rows new to the arena start from `initial(key)`, or zeros.
    /// A plan of an epoch not newer than the process's current one is refused.
    pub(crate) fn subscribe(
        &mut self,
        tables: &[Option<TableMeta>],
        req: Request<'_>,
        mut initial: impl FnMut(RowKey) -> Option<AlignedBuf>,
    ) -> Result<(), String> {
        let Request {
            process,
            epoch,
            keys,
            chunk_ends,
            chunk_phases,
            updaters,
        } = req;
        if let Some(old) = self.subs.get(&process) {
            if epoch <= old.epoch {
                return Err(format!(
                    "plan epoch {epoch} of process {process} is not newer than its epoch {}",
                    old.epoch
                ));
            }
        }
        for key in keys {
            if tables
                .get(key.table as usize)
                .and_then(Option::as_ref)
                .is_none()
            {
                return Err(format!("plan names unknown table #{}", key.table));
            }
        }
        let mut start = 0usize;
        for &end in chunk_ends {
            if (end as usize) < start || end as usize > keys.len() {
                return Err(format!("bad chunk boundary {end}"));
            }
            start = end as usize;
        }
        if start != keys.len() {
            return Err("chunks do not cover the plan".into());
        }
        if chunk_phases.len() != chunk_ends.len() {
            return Err(format!(
                "{} chunk phases for {} chunks",
                chunk_phases.len(),
                chunk_ends.len()
            ));
        }
        if updaters
            .iter()
            .any(|(_, slots)| slots.iter().any(|&s| s as usize >= keys.len()))
        {
            return Err("update layout names a slot outside the plan".into());
        }
        // Checked: now the arena may grow.
        let rows: Vec<u32> = keys
            .iter()
            .map(|&key| self.row_or_insert(tables, key, &mut initial))
            .collect();
        let mut chunks = Vec::with_capacity(chunk_ends.len());
        let mut chunk_rows = Vec::with_capacity(chunk_ends.len());
        let mut start = 0usize;
        for &end in chunk_ends {
            chunks.push(self.ranges(&rows[start..end as usize]));
            chunk_rows.push(rows[start..end as usize].to_vec());
            start = end as usize;
        }
        let updaters = updaters
            .into_iter()
            .map(|(w, slots)| {
                let rows: Box<[u32]> = slots.iter().map(|&s| rows[s as usize]).collect();
                let shape = |r: &u32| {
                    let row = self.rows[*r as usize];
                    (padded(row.len) / 8, row.elem, row.ruled)
                };
                // Rule rows are folded one by one (`Fold`): never a uniform layout.
                let first = rows.first().map(shape);
                let uniform = first
                    .filter(|&f| f.0 > 0 && !f.2 && rows.iter().all(|r| shape(r) == f))
                    .map(|(words, elem, _)| (words, elem));
                (w, Arc::new(SlabLayout { rows, uniform }))
            })
            .collect();
        self.subs.insert(
            process,
            Subscription {
                epoch,
                sent: vec![None; chunks.len()],
                phases: chunk_phases.to_vec(),
                chunks,
                updaters,
                chunk_rows,
            },
        );
        Ok(())
    }

    /// The arena row of `key`, appended (from `initial`, or zeros) if it has none.
    fn row_or_insert(
        &mut self,
        tables: &[Option<TableMeta>],
        key: RowKey,
        initial: &mut impl FnMut(RowKey) -> Option<AlignedBuf>,
    ) -> u32 {
        if let Some(&r) = self.index.get(&key) {
            return r;
        }
        let meta = tables[key.table as usize]
            .as_ref()
            .expect("tables checked by the caller");
        let offset = self.arena.len() * 8;
        let len = meta.row_bytes();
        self.arena.resize(self.arena.len() + padded(len) / 8, 0);
        if let Some(value) = initial(key) {
            bytemuck::cast_slice_mut::<u64, u8>(&mut self.arena)[offset..offset + len]
                .copy_from_slice(value.as_bytes());
        }
        let r = self.rows.len() as u32;
        self.rows.push(Row {
            offset,
            len,
            elem: meta.elem,
            ruled: !meta.rule.is_sum(),
        });
        self.keys.push(key);
        self.changed.push(0);
        self.index.insert(key, r);
        r
    }

    /// `rows` as the fewest byte ranges that gather them in order.
    fn ranges(&self, rows: &[u32]) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        for &r in rows {
            let row = self.rows[r as usize];
            let bytes = row.offset..row.offset + padded(row.len);
            match out.last_mut() {
                Some(last) if last.end == bytes.start => last.end = bytes.end,
                _ => out.push(bytes),
            }
        }
        out
    }

    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.arena)
    }

    /// The bytes of row `key` if it is in the arena, to be changed so that the change
    /// becomes visible at data clock `now`.
    pub(crate) fn row_mut(&mut self, key: RowKey, now: Clock) -> Option<(&mut [u8], ElemType)> {
        let r = *self.index.get(&key)? as usize;
        let row = self.rows[r];
        self.changed[r] = now;
        let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut self.arena);
        Some((&mut bytes[row.offset..row.offset + row.len], row.elem))
    }

    /// The data clock at which row `key` last changed, if it is in the arena.
    pub(crate) fn changed(&self, key: RowKey) -> Option<Clock> {
        Some(self.changed[*self.index.get(&key)? as usize])
    }

    /// Row `key` if it is in the arena.
    pub(crate) fn row(&self, key: RowKey) -> Option<&[u8]> {
        let row = self.rows[*self.index.get(&key)? as usize];
        Some(&self.bytes()[row.offset..row.offset + row.len])
    }

    /// The slab layout of worker `worker` of `process` under `epoch`; `Err` if the
    /// process has no subscription of that epoch (a slab laid out for a plan the shard
    /// does not hold must not be applied).
    pub(crate) fn layout(
        &self,
        process: ProcessId,
        epoch: u32,
        worker: WorkerId,
    ) -> Result<Layout, String> {
        match self.subs.get(&process) {
            Some(sub) if sub.epoch == epoch => {
                Ok(sub.updaters.get(&worker).cloned().unwrap_or_default())
            }
            Some(sub) => Err(format!(
                "update slab of worker {worker} is laid out for plan epoch {epoch} of process \
                 {process}, whose current epoch is {}",
                sub.epoch
            )),
            None => Err(format!(
                "update slab of worker {worker} before process {process} sent any plan"
            )),
        }
    }

    /// Adds a slab laid out as `layout`, visible from data clock `now`: every row of the
    /// layout, or with `positions` (a sparse slab's, each below `layout.len()`) only the
    /// rows at those positions. A slab of the wrong size is refused whole. A whole slab's
    /// all-zero deltas (rows its worker did not touch) change nothing and are skipped; a
    /// sparse slab holds only touched rows, so its deltas are added without that check.
    /// Rows of tables with an update rule are not added: their deltas go to `fold`'s
    /// sink, and `fold` says which of the two kinds are applied.
    pub(crate) fn apply_slab(
        &mut self,
        layout: &SlabLayout,
        positions: Option<&[u32]>,
        slab: &AlignedBuf,
        now: Clock,
        fold: Fold<'_>,
    ) -> Result<(), String> {
        if let Some((words, elem)) = layout.uniform {
            let count = positions.map_or(layout.rows.len(), <[u32]>::len);
            check_slab_size(slab, count * words * 8)?;
            if !fold.sums() {
                return Ok(()); // a uniform layout holds no rule rows
            }
            let rows = &layout.rows;
            match positions {
                None => self.add_uniform(elem, rows.iter().copied(), words, slab, now, true),
                Some(p) => {
                    let at = p.iter().map(|&p| rows[p as usize]);
                    self.add_uniform(elem, at, words, slab, now, false);
                }
            }
            return Ok(());
        }
        let layout = &layout.rows;
        match positions {
            None => self.apply_rows(layout.iter().copied(), slab, (now, true), fold),
            // A sparse slab holds only touched rows: checking them for zeros is wasted.
            Some(positions) => self.apply_rows(
                positions.iter().map(|&p| layout[p as usize]),
                slab,
                (now, false),
                fold,
            ),
        }
    }

    /// The keys of the rows [`apply_slab`](Self::apply_slab) of the same slab changes, in
    /// the order it takes them: what a primary with backups replicates (its backups hold
    /// no layouts) and keeps pre-images of. A slab of the wrong size is refused whole, as
    /// `apply_slab` refuses it.
    pub(crate) fn slab_keys(
        &self,
        layout: &SlabLayout,
        positions: Option<&[u32]>,
        slab: &AlignedBuf,
    ) -> Result<Vec<RowKey>, String> {
        // A whole slab's rows are the layout's; a sparse one's, those at its positions.
        let sparse: Vec<u32>;
        let rows: &[u32] = match positions {
            None => &layout.rows,
            Some(p) => {
                sparse = p.iter().map(|&p| layout.rows[p as usize]).collect();
                &sparse
            }
        };
        let expected = rows
            .iter()
            .map(|&r| padded(self.rows[r as usize].len))
            .sum();
        check_slab_size(slab, expected)?;
        let (src, mut at, mut keys) = (slab.words(), 0, Vec::with_capacity(rows.len()));
        for &r in rows {
            let words = padded(self.rows[r as usize].len) / 8;
            let delta = &src[at..at + words];
            at += words;
            // A whole slab's all-zero deltas are skipped, a sparse slab's are not.
            if positions.is_none() && is_zero(delta) {
                continue;
            }
            keys.push(self.keys[r as usize]);
        }
        Ok(keys)
    }

    /// [`apply_slab`](Self::apply_slab) of the arena rows `rows`, in slab order;
    /// `skip_zeros`: skip all-zero deltas (a whole slab's untouched rows).
    fn apply_rows(
        &mut self,
        rows: impl Iterator<Item = u32> + Clone,
        slab: &AlignedBuf,
        (now, skip_zeros): (Clock, bool),
        mut fold: Fold<'_>,
    ) -> Result<(), String> {
        let expected: usize = rows
            .clone()
            .map(|r| padded(self.rows[r as usize].len))
            .sum();
        check_slab_size(slab, expected)?;
        // Word by word: rows are whole padded words in the arena and in the slab, and
        // the padding is zero in both, so adding it as elements changes nothing.
        let src = slab.words();
        let mut at = 0;
        for r in rows {
            let row = self.rows[r as usize];
            let words = padded(row.len) / 8;
            let delta = &src[at..at + words];
            at += words;
            if skip_zeros && is_zero(delta) {
                continue;
            }
            if row.ruled {
                fold.gradient(
                    self.keys[r as usize],
                    &bytemuck::cast_slice(delta)[..row.len],
                );
                continue;
            }
            if !fold.sums() {
                continue;
            }
            let start = row.offset / 8;
            row.elem
                .add_words(&mut self.arena[start..start + words], delta);
            self.changed[r as usize] = now;
        }
        Ok(())
    }

    /// [`apply_rows`](Self::apply_rows) of rows of `words` words of `elem`s each (a
    /// uniform layout's, the slab's size already checked): each delta added without
    /// looking up the row's shape or dispatching on its element type.
    fn add_uniform(
        &mut self,
        elem: ElemType,
        rows: impl Iterator<Item = u32>,
        words: usize,
        slab: &AlignedBuf,
        now: Clock,
        skip_zeros: bool,
    ) {
        match elem {
            ElemType::F32 => self.add_uniform_as::<f32>(rows, words, slab, now, skip_zeros),
            ElemType::F64 => self.add_uniform_as::<f64>(rows, words, slab, now, skip_zeros),
            ElemType::I32 => self.add_uniform_as::<i32>(rows, words, slab, now, skip_zeros),
            ElemType::I64 => self.add_uniform_as::<i64>(rows, words, slab, now, skip_zeros),
        }
    }

    /// [`add_uniform`](Self::add_uniform) of `T`s.
    #[inline(always)]
    fn add_uniform_as<T: Element>(
        &mut self,
        rows: impl Iterator<Item = u32>,
        words: usize,
        slab: &AlignedBuf,
        now: Clock,
        skip_zeros: bool,
    ) {
        for (r, delta) in rows.zip(slab.words().chunks_exact(words)) {
            if skip_zeros && is_zero(delta) {
                continue;
            }
            let start = self.rows[r as usize].offset / 8;
            T::add_slice(
                bytemuck::cast_slice_mut(&mut self.arena[start..start + words]),
                bytemuck::cast_slice(delta),
            );
            self.changed[r as usize] = now;
        }
    }

    /// The epoch of `process`'s subscription and, per chunk, the clocks of an iteration
    /// in which the process reads it.
    pub(crate) fn subscription(&self, process: ProcessId) -> Option<(u32, &[u64])> {
        self.subs.get(&process).map(|s| (s.epoch, &s.phases[..]))
    }

    /// The refresh of chunk `chunk` of `process`'s subscription at data clock `now`: the
    /// rows changed since the last refresh sent to it, or the whole chunk (see the module
    /// docs), copied out for a message; recorded as sent. The changed rows go with their
    /// positions unless the whole chunk takes fewer bytes ([`POSITION_BYTES`] a row).
    pub(crate) fn refresh(
        &mut self,
        process: ProcessId,
        chunk: usize,
        now: Clock,
    ) -> Option<Refresh> {
        self.changes(process, chunk, now, POSITION_BYTES)
            .map(|rows| rows.to_refresh())
    }

    /// [`refresh`](Self::refresh) as a view of the arena's words, for a process in this
    /// OS process to copy straight into its own arena; recorded as sent. There a changed
    /// row costs its look-ups besides its bytes ([`LOCAL_ROW_BYTES`]), so the whole chunk
    /// is copied once the changed rows' bytes and look-ups reach its size.
    pub(crate) fn refresh_rows(
        &mut self,
        process: ProcessId,
        chunk: usize,
        now: Clock,
    ) -> Option<RefreshRows<'_>> {
        self.changes(process, chunk, now, LOCAL_ROW_BYTES)
    }

    /// The refresh of [`refresh`](Self::refresh) and [`refresh_rows`](Self::refresh_rows),
    /// a changed row costing `row_cost` bytes beyond its own.
    fn changes(
        &mut self,
        process: ProcessId,
        chunk: usize,
        now: Clock,
        row_cost: usize,
    ) -> Option<RefreshRows<'_>> {
        let sub = self.subs.get_mut(&process)?;
        let last = sub.sent.get_mut(chunk)?.replace(now);
        let sub = &self.subs[&process];
        let positions = last.and_then(|last| self.changed_positions(sub, chunk, last, row_cost));
        let ranges = &sub.chunks[chunk];
        let words = match &positions {
            Some((_, bytes)) => bytes / 8,
            // Ranges are of whole padded rows: whole words.
            None => ranges.iter().map(|r| r.len()).sum::<usize>() / 8,
        };
        Some(RefreshRows {
            arena: self,
            ranges,
            rows: &sub.chunk_rows[chunk],
            positions: positions.map(|(p, _)| p),
            words,
        })
    }

    /// The positions in `sub`'s chunk `chunk` of its rows changed after data clock
    /// `last`, with their bytes, if their bytes plus `row_cost` a row are fewer than
    /// the whole chunk's. Stops as soon as they reach the chunk's size.
    fn changed_positions(
        &self,
        sub: &Subscription,
        chunk: usize,
        last: Clock,
        row_cost: usize,
    ) -> Option<(Vec<u32>, usize)> {
        let rows = &sub.chunk_rows[chunk];
        let whole: usize = sub.chunks[chunk].iter().map(|r| r.len()).sum();
        // Never grown: no more positions than the chunk has rows.
        let (mut changed, mut bytes) = (Vec::with_capacity(rows.len()), 0);
        for (i, &r) in rows.iter().enumerate() {
            if self.changed[r as usize] > last {
                changed.push(i as u32);
                bytes += padded(self.rows[r as usize].len);
                if bytes + changed.len() * row_cost >= whole {
                    return None;
                }
            }
        }
        Some((changed, bytes))
    }

    /// Forgets what was last sent to every subscription: each chunk's next refresh is
    /// whole. For rows set between runs, after which every process drops its copies.
    pub(crate) fn forget_sent(&mut self) {
        for sub in self.subs.values_mut() {
            sub.sent.fill(None);
        }
    }

    /// Every row in the arena with its value.
    pub(crate) fn rows(&self) -> impl Iterator<Item = (RowKey, &[u8])> + '_ {
        self.rows_of(&self.arena)
    }

    /// The arena's rows in place order and all its words: what a copy of its values
    /// needs (a branch of the training state, `shard/branches.rs`). Rows keep their
    /// place and the arena only grows, so such a copy stays a prefix of its layout.
    pub(crate) fn values(&self) -> (&[RowKey], &[u64]) {
        (&self.keys, &self.arena)
    }

    /// The rows a copy `words` of this arena's values ([`values`](Self::values), taken
    /// when it held fewer rows perhaps) holds, with their values in it.
    pub(crate) fn rows_of<'a>(
        &'a self,
        words: &'a [u64],
    ) -> impl Iterator<Item = (RowKey, &'a [u8])> + 'a {
        let bytes: &[u8] = bytemuck::cast_slice(words);
        self.keys
            .iter()
            .zip(&self.rows)
            .take_while(move |(_, r)| r.offset + r.len <= bytes.len())
            .map(move |(k, r)| (*k, &bytes[r.offset..r.offset + r.len]))
    }

    /// Every row takes its value from `words`, a copy of this arena's values
    /// ([`values`](Self::values)); rows past its end become zeros. Each counts as changed
    /// at data clock `now`.
    pub(crate) fn set_values(&mut self, words: &[u64], now: Clock) {
        let n = words.len().min(self.arena.len());
        self.arena[..n].copy_from_slice(&words[..n]);
        self.arena[n..].fill(0);
        self.changed.fill(now);
    }
}

/// A slab of `expected` bytes, or the error that refuses it whole.
fn check_slab_size(slab: &AlignedBuf, expected: usize) -> Result<(), String> {
    if slab.len() == expected {
        return Ok(());
    }
    Err(format!(
        "update slab has {} bytes, its layout {expected}",
        slab.len()
    ))
}

/// Whether a delta is all zero (a whole slab's row its worker did not touch).
#[inline(always)]
fn is_zero(delta: &[u64]) -> bool {
    delta.iter().fold(0, |acc, &w| acc | w) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<Option<TableMeta>> {
        vec![Some(TableMeta {
            id: 0,
            name: "t".into(),
            width: 1,
            elem: ElemType::I32,
            rows: None,
            rule: crate::rule::Rule::Sum,
        })]
    }

    fn req<'a>(
        process: ProcessId,
        epoch: u32,
        keys: &'a [RowKey],
        chunk_ends: &'a [u32],
        updaters: Vec<(WorkerId, Vec<u32>)>,
    ) -> Request<'a> {
        const EVERY_CLOCK: [u64; 64] = [u64::MAX; 64];
        Request {
            process,
            epoch,
            keys,
            chunk_ends,
            chunk_phases: &EVERY_CLOCK[..chunk_ends.len()],
            updaters,
        }
    }

    fn keys(rows: &[u64]) -> Vec<RowKey> {
        rows.iter().map(|&r| RowKey::new(0, r)).collect()
    }

    #[test]
    fn two_processes_share_rows_in_their_own_orders() {
        let t = tables();
        let mut a = ArenaShard::default();
        let k = keys(&[1, 2, 3]);
        a.subscribe(&t, req(0, 1, &k, &[3], vec![(0, vec![0, 2])]), |_| None)
            .unwrap();
        // Process 1 orders the rows differently and adds one.
        let k = keys(&[3, 4, 1]);
        a.subscribe(&t, req(1, 1, &k, &[1, 3], vec![(1, vec![1])]), |k| {
            Some(AlignedBuf::from_slice(&[k.row as i32 * 10]))
        })
        .unwrap();
        let l0 = a.layout(0, 1, 0).unwrap();
        a.apply_slab(
            &l0,
            None,
            &AlignedBuf::from_slice(&[5i32, 0, 7, 0]),
            1,
            Fold::Sums,
        )
        .unwrap();
        let l1 = a.layout(1, 1, 1).unwrap();
        a.apply_slab(
            &l1,
            None,
            &AlignedBuf::from_slice(&[1i32, 0]),
            1,
            Fold::Sums,
        )
        .unwrap();
        // A first refresh is the whole chunk, copied out or as slices of the arena alike.
        let mut whole = |p: ProcessId, chunk: usize| {
            let rows = a.refresh_rows(p, chunk, 1).unwrap();
            assert_eq!(rows.positions(), None);
            let words: Vec<u64> = rows.slices().flatten().copied().collect();
            assert_eq!(words.len(), rows.words());
            let refresh = rows.to_refresh();
            assert_eq!(refresh.bytes.words(), &words[..]);
            refresh.bytes
        };
        // Process 0's one chunk is one contiguous range: rows 1, 2, 3.
        assert_eq!(whole(0, 0).cast::<i32>(), &[5, 0, 0, 0, 7, 0]);
        // Process 1's chunks are gathered in its order: [3], [4, 1].
        assert_eq!(whole(1, 0).cast::<i32>(), &[7, 0]);
        assert_eq!(whole(1, 1).cast::<i32>(), &[41, 0, 5, 0]);
        assert_eq!(a.row(RowKey::new(0, 4)), Some(&41i32.to_le_bytes()[..]));
    }

    #[test]
    fn a_layout_of_one_shape_adds_its_slabs_as_one_of_several_does() {
        let f32s = |id: u32, width: usize| TableMeta {
            id,
            name: format!("t{id}"),
            width,
            elem: ElemType::F32,
            rows: None,
            rule: crate::rule::Rule::Sum,
        };
        // Table 0: three f32s a row (two words padded); table 1: two (one word).
        let t = vec![Some(f32s(0, 3)), Some(f32s(1, 2))];
        let k = [RowKey::new(0, 0), RowKey::new(0, 1), RowKey::new(1, 0)];
        let mut a = ArenaShard::default();
        let updaters = vec![(0, vec![0, 1]), (1, vec![0, 2])];
        a.subscribe(&t, req(0, 1, &k, &[3], updaters), |_| None)
            .unwrap();
        let (one, mixed) = (a.layout(0, 1, 0).unwrap(), a.layout(0, 1, 1).unwrap());
        assert_eq!(one.uniform, Some((2, ElemType::F32)));
        assert_eq!(mixed.uniform, None);
        let slab = |v: &[f32]| AlignedBuf::from_slice(v);
        a.apply_slab(
            &one,
            None,
            &slab(&[1., 2., 3., 0., 4., 5., 6., 0.]),
            1,
            Fold::Sums,
        )
        .unwrap();
        a.apply_slab(&one, Some(&[1]), &slab(&[0.5, 0.5, 0.5, 0.]), 2, Fold::Sums)
            .unwrap();
        a.apply_slab(
            &mixed,
            None,
            &slab(&[1., 1., 1., 0., 7., 8.]),
            3,
            Fold::Sums,
        )
        .unwrap();
        let row =
            |a: &ArenaShard, key| bytemuck::cast_slice::<u8, f32>(a.row(key).unwrap()).to_vec();
        assert_eq!(row(&a, k[0]), [2., 3., 4.]);
        assert_eq!(row(&a, k[1]), [4.5, 5.5, 6.5]);
        assert_eq!(row(&a, k[2]), [7., 8.]);
        assert_eq!(a.changed[..3], [3, 2, 3]);
        // A slab of the wrong size is refused whole, uniform or not.
        for layout in [&one, &mixed] {
            let err = a.apply_slab(layout, None, &slab(&[1.; 10]), 4, Fold::Sums);
            assert!(err.unwrap_err().contains("update slab has"));
        }
        assert_eq!(row(&a, k[0]), [2., 3., 4.]);
    }

    #[test]
    fn stale_and_foreign_epochs_are_refused() {
        let t = tables();
        let mut a = ArenaShard::default();
        a.subscribe(&t, req(0, 2, &keys(&[1]), &[1], vec![(0, vec![0])]), |_| {
            None
        })
        .unwrap();
        assert!(a
            .subscribe(&t, req(0, 2, &keys(&[1]), &[1], vec![]), |_| None)
            .is_err());
        let err = a.layout(0, 1, 0).unwrap_err();
        assert!(
            err.contains("epoch 1") && err.contains("current epoch is 2"),
            "{err}"
        );
        assert!(a.layout(1, 2, 0).unwrap_err().contains("process 1"));
        assert!(a
            .apply_slab(
                &a.layout(0, 2, 0).unwrap(),
                None,
                &AlignedBuf::from_slice(&[1i32]),
                1,
                Fold::Sums
            )
            .is_err());
        // A re-plan keeps rows where they are: old layouts stay valid.
        let old = a.layout(0, 2, 0).unwrap();
        a.subscribe(
            &t,
            req(0, 3, &keys(&[9, 1]), &[2], vec![(0, vec![1])]),
            |_| None,
        )
        .unwrap();
        a.apply_slab(
            &old,
            None,
            &AlignedBuf::from_slice(&[3i32, 0]),
            1,
            Fold::Sums,
        )
        .unwrap();
        assert_eq!(a.row(RowKey::new(0, 1)), Some(&3i32.to_le_bytes()[..]));
        assert!(a
            .subscribe(&t, req(0, 4, &keys(&[1]), &[2], vec![]), |_| None)
            .is_err());
    }

    #[test]
    fn refreshes_ship_only_the_rows_changed_since_the_last_one() {
        let t = tables();
        let mut a = ArenaShard::default();
        let k = keys(&[0, 1, 2, 3, 4, 5, 6, 7]);
        a.subscribe(&t, req(0, 1, &k, &[8], vec![(0, vec![1, 6])]), |_| None)
            .unwrap();
        let layout = a.layout(0, 1, 0).unwrap();
        // The first refresh is the whole chunk.
        let first = a.refresh(0, 0, 0).unwrap();
        assert_eq!((first.rows, first.bytes.len()), (None, 64));
        // Row 6 changes at data clock 1; row 1's delta is zero (untouched): not a change.
        a.apply_slab(
            &layout,
            None,
            &AlignedBuf::from_slice(&[0i32, 0, 9, 0]),
            1,
            Fold::Sums,
        )
        .unwrap();
        let second = a.refresh(0, 0, 1).unwrap();
        assert_eq!(second.rows, Some(vec![6]));
        assert_eq!(second.bytes.cast::<i32>(), &[9, 0]);
        // Nothing changed since: an empty refresh that only moves the data clock.
        let third = a.refresh(0, 0, 2).unwrap();
        assert_eq!((third.rows, third.bytes.len()), (Some(vec![]), 0));
        // Most of the chunk changed: the whole chunk is smaller than rows + positions.
        for r in 0..8 {
            a.row_mut(RowKey::new(0, r), 3).unwrap().0[0] = 1;
        }
        let fourth = a.refresh(0, 0, 3).unwrap();
        assert_eq!((fourth.rows, fourth.bytes.len()), (None, 64));
    }

    #[test]
    fn a_refresh_in_this_process_copies_the_chunk_whole_sooner_than_a_message() {
        let t = tables();
        let mut a = ArenaShard::default();
        let k = keys(&(0..64).collect::<Vec<_>>());
        a.subscribe(&t, req(0, 1, &k, &[64], vec![]), |_| None)
            .unwrap();
        assert_eq!(a.refresh_rows(0, 0, 0).unwrap().positions(), None); // the first
        let change = |a: &mut ArenaShard, rows: u64, now: Clock| {
            for r in 0..rows {
                a.row_mut(RowKey::new(0, r), now).unwrap().0[0] += 1;
            }
        };
        // Two of 64 changed rows (8 bytes each): row by row, in this process or not.
        change(&mut a, 2, 1);
        assert_eq!(
            a.refresh_rows(0, 0, 1).unwrap().positions(),
            Some(&[0, 1][..])
        );
        change(&mut a, 2, 2);
        assert_eq!(a.refresh(0, 0, 2).unwrap().rows, Some(vec![0, 1]));
        // Ten: their bytes and look-ups cost more than the whole chunk's 512 bytes in this
        // process (10 · (8 + LOCAL_ROW_BYTES)), their bytes and positions less on the wire.
        change(&mut a, 10, 3);
        let local = a.refresh_rows(0, 0, 3).unwrap();
        assert_eq!((local.positions(), local.words()), (None, 64));
        change(&mut a, 10, 4);
        let wire = a.refresh(0, 0, 4).unwrap();
        assert_eq!(wire.rows, Some((0..10).collect()));
        assert_eq!(wire.bytes.len(), 80);
    }
}
