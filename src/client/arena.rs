//! [`ProcessArena`]: the specialized process cache — every planned row in one contiguous
//! arena, indexed by the plan's read-only map, refreshed chunk by chunk as whole slices.
//!
//! Readers never lock: each chunk is a sequence lock (a version counter that is odd while
//! its writer rewrites the chunk), and the arena is made of `AtomicU64` words read and
//! written with relaxed loads and stores, so a reader that raced a writer simply retries.
//! Each chunk carries the data clock of its last refresh. A chunk has one writer at a
//! time, its shard's refreshes in order: the communication thread (or the thread driving
//! the shard) writing a message's bytes, or a shard of this OS process writing straight
//! from its own arena ([`ProcessArena::write_chunk_from`]).
//!
//! **Zone copies.** On a machine of several NUMA zones a chunk the NUMA plan replicates
//! (its rows read from another zone more than once per refresh) also has a copy for that
//! zone, at the same word offsets in a zone array ([`ProcessArena::with_zone_copies`]),
//! bound there; the chunk's writer writes every copy of it inside the chunk's one
//! sequence lock, and a worker reads its own zone's copy where there is one
//! ([`ProcessArena::words_for`]). A zone array is allocated zeroed and untouched, so only
//! the pages of its replicated chunks ever take memory.

use super::ClientShared;
use crate::error::{Error, Result};
use crate::gather::phase_bit;
use crate::ids::{Clock, RowKey};
use crate::msg::{ToShard, WantedChunks};
use crate::plan::Plan;
use crate::topology::bind::MemBinder;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Marks a chunk never refreshed.
const EMPTY: Clock = Clock::MAX;

/// The specialized process cache (see module docs).
pub(crate) struct ProcessArena {
    pub(crate) plan: Plan,
    /// This plan's number (arena replies for other plans are stale and dropped).
    pub(crate) id: u32,
    words: Box<[AtomicU64]>,
    versions: Box<[AtomicU64]>,
    chunk_clocks: Box<[AtomicU64]>,
    /// Per shard: global index of its first chunk.
    first_chunk: Vec<u32>,
    /// Outstanding refresh requests: `(what, required clock)`. A request is shared only
    /// by readers with the same requirement: a reply to a higher one may wait for the
    /// very worker that needs a lower one.
    requested: Mutex<Vec<(Target, Clock)>>,
    batched: bool,
    /// Refresh requests sent so far (observability).
    pub(crate) requests_sent: AtomicU64,
    /// Of those, the requests for the chunks of one clock (batched prefetches).
    pub(crate) phase_requests: AtomicU64,
    /// Chunk refreshes received whole.
    pub(crate) whole_refreshes: AtomicU64,
    /// Chunk refreshes received as only the rows changed since the last one.
    pub(crate) partial_refreshes: AtomicU64,
    /// Of the chunk refreshes, those a shard of this OS process wrote straight from its
    /// arena ([`write_chunk_from`](Self::write_chunk_from)) rather than sent.
    pub(crate) local_refreshes: AtomicU64,
    /// Bytes of the arena bound to a NUMA node at allocation.
    pub(crate) bound_bytes: usize,
    /// Per zone: its copy of the arena's words, if any chunk is replicated into it.
    copies: Vec<Option<Box<[AtomicU64]>>>,
    /// Per chunk: the zones (bit `z`) holding a copy of it.
    chunk_copies: Box<[u64]>,
    /// Per local worker: its zone (which copies it reads; 0 without a NUMA plan).
    worker_zones: Vec<u8>,
}

/// Stores the words of `slices`, one after another, into the `spans` `(word, words)` of
/// `words` in order, each through `conv` (relaxed stores: the caller holds the chunk's
/// sequence counter odd). The slices need not match the spans one to one (a chunk's
/// ranges fill one span; a message's one slice fills every changed row's); their words
/// in all must be the spans' (checked by the caller), and no more are stored.
fn scatter<'a>(
    words: &[AtomicU64],
    spans: &[(usize, usize)],
    slices: impl IntoIterator<Item = &'a [u64]>,
    conv: impl Fn(u64) -> u64,
) {
    let mut spans = spans.iter().copied();
    let (mut at, mut left) = (0, 0);
    for mut src in slices {
        while !src.is_empty() {
            if left == 0 {
                let Some((word, n)) = spans.next() else {
                    return;
                };
                (at, left) = (word, n);
                continue;
            }
            let n = left.min(src.len());
            store(&words[at..at + n], &src[..n], &conv);
            (at, left, src) = (at + n, left - n, &src[n..]);
        }
    }
}

/// Stores `src` through `conv` into `dst` (relaxed stores), as far as both go: four
/// words a step, as [`ArenaWords::copy_row`] loads them (atomic stores are not merged
/// into vector ones; unrolled, the loop's own work stops dominating a row of a few words).
#[inline(always)]
fn store(dst: &[AtomicU64], src: &[u64], conv: impl Fn(u64) -> u64) {
    let n = dst.len().min(src.len());
    let (dq, dr) = dst[..n].as_chunks::<4>();
    let (sq, sr) = src[..n].as_chunks::<4>();
    for (d, s) in dq.iter().zip(sq) {
        for k in 0..4 {
            d[k].store(conv(s[k]), Ordering::Relaxed);
        }
    }
    for (d, &s) in dr.iter().zip(sr) {
        d.store(conv(s), Ordering::Relaxed);
    }
}

/// Copies `words` (relaxed loads) into `dst`, whose length is at most theirs in bytes.
#[inline(always)]
fn copy_words(words: &[AtomicU64], dst: &mut [u8]) {
    if let Ok(dst) = bytemuck::try_cast_slice_mut::<u8, u64>(dst) {
        // The usual case: an 8-byte-aligned whole-word row, copied word by word.
        for (d, w) in dst.iter_mut().zip(words) {
            *d = u64::from_le(w.load(Ordering::Relaxed));
        }
        return;
    }
    let mut full = dst.chunks_exact_mut(8);
    for (d, w) in (&mut full).zip(words) {
        d.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    let rest = full.into_remainder();
    if !rest.is_empty() {
        let last = words[words.len() - 1].load(Ordering::Relaxed).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }
}

/// The arena's words, as [`ProcessArena::read_chunk_in`] lends them.
pub(crate) struct ArenaWords<'a>(&'a [AtomicU64]);

impl ArenaWords<'_> {
    /// Copies the `dst.len()` words starting at arena word `word` into `dst`.
    #[inline]
    pub(crate) fn copy_row(&self, word: u32, dst: &mut [u64]) {
        let (word, n) = (word as usize, dst.len());
        let src = &self.0[word..word + n];
        // Four words a step (atomic loads are not merged into vector ones; unrolled, the
        // loop's own work stops dominating a row of a few words).
        let (mut d, mut s) = (dst.chunks_exact_mut(4), src.chunks_exact(4));
        for (d, s) in (&mut d).zip(&mut s) {
            for k in 0..4 {
                d[k] = u64::from_le(s[k].load(Ordering::Relaxed)); // as `copy_words` does
            }
        }
        for (d, w) in d.into_remainder().iter_mut().zip(s.remainder()) {
            *d = u64::from_le(w.load(Ordering::Relaxed));
        }
    }
}

fn atomics(n: usize, v: u64) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(v)).collect()
}

/// `n` zeroed words, allocated zeroed (calloc: untouched pages of a large array are never
/// faulted in).
fn zeroed_words(n: usize) -> Box<[AtomicU64]> {
    if n == 0 {
        return Box::new([]);
    }
    // (`Box::new_zeroed_slice` does this from Rust 1.92.)
    let layout = std::alloc::Layout::array::<AtomicU64>(n).expect("an arena fits in memory");
    // SAFETY: `layout` has a non-zero size (`n > 0`).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `p` is a live allocation of `layout` (`n` `AtomicU64`s, by the global
    // allocator, as `Box` frees it), and all-zero bytes are a valid `AtomicU64`.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) }
}

impl ProcessArena {
    /// An arena for `plan`, every chunk empty. `batched`: refresh all chunks with one
    /// request per shard (prefetch batching) instead of chunk by chunk on demand.
    ///
    /// `binding`: a memory binder and, per chunk, the NUMA node (OS index) its rows belong
    /// to. Each chunk's memory is then bound to its node before anything touches it (the
    /// words are allocated, bound, then zeroed), so its pages are placed there; chunks
    /// sharing a page share its node, and a machine or build without area binding leaves
    /// everything where the first touch puts it.
    pub(crate) fn new(
        plan: Plan,
        id: u32,
        batched: bool,
        binding: Option<(&MemBinder, &[u32])>,
    ) -> Self {
        let chunks = plan.chunks.len();
        let mut first_chunk = vec![0u32; plan.shards.len()];
        for (i, c) in plan.chunks.iter().enumerate().rev() {
            first_chunk[c.shard as usize] = i as u32;
        }
        let n = plan.arena_bytes / 8;
        let mut words: Vec<AtomicU64> = Vec::with_capacity(n);
        let mut bound_bytes = 0;
        if let Some((binder, nodes)) = binding {
            let untouched = words.spare_capacity_mut();
            for (chunk, &node) in plan.chunks.iter().zip(nodes) {
                let range = chunk.bytes.start / 8..chunk.bytes.end / 8;
                if binder.bind_area(&untouched[range], node) {
                    bound_bytes += chunk.bytes.len();
                }
            }
        }
        words.extend((0..n).map(|_| AtomicU64::new(0))); // the first touch
        ProcessArena {
            words: words.into_boxed_slice(),
            bound_bytes,
            versions: atomics(chunks, 0),
            chunk_clocks: atomics(chunks, EMPTY),
            first_chunk,
            requested: Mutex::new(Vec::new()),
            requests_sent: AtomicU64::new(0),
            phase_requests: AtomicU64::new(0),
            whole_refreshes: AtomicU64::new(0),
            partial_refreshes: AtomicU64::new(0),
            local_refreshes: AtomicU64::new(0),
            batched,
            plan,
            id,
            copies: Vec::new(),
            chunk_copies: Box::new([]),
            worker_zones: Vec::new(),
        }
    }

    /// The zone of local worker `w` (0 if not planned).
    pub(crate) fn worker_zone(&self, w: usize) -> u8 {
        self.worker_zones.get(w).copied().unwrap_or(0)
    }

    /// This arena with a copy of each chunk `c` in every zone `z` whose bit is set in
    /// `chunk_copies[c]` (see the module docs), read by the local workers of the zones
    /// `worker_zones` (one per worker); `binding`: the memory binder and each
    /// zone's NUMA node (OS index), to bind every copied chunk to its zone before its
    /// first touch.
    pub(crate) fn with_zone_copies(
        mut self,
        chunk_copies: Vec<u64>,
        worker_zones: Vec<u8>,
        binding: Option<(&MemBinder, &[u32])>,
    ) -> Self {
        assert_eq!(chunk_copies.len(), self.plan.chunks.len());
        self.worker_zones = worker_zones;
        let zones = chunk_copies
            .iter()
            .map(|m| 64 - m.leading_zeros() as usize)
            .max()
            .unwrap_or(0);
        let n = self.words.len();
        self.copies = (0..zones)
            .map(|z| {
                let bit = 1u64 << z;
                let mine: Vec<usize> = (0..chunk_copies.len())
                    .filter(|&c| chunk_copies[c] & bit != 0)
                    .collect();
                if mine.is_empty() {
                    return None;
                }
                let words = zeroed_words(n);
                for &c in &mine {
                    let span = &self.plan.chunks[c].bytes;
                    if let Some((binder, nodes)) = binding {
                        binder.bind_area(&words[span.start / 8..span.end / 8], nodes[z]);
                    }
                }
                Some(words)
            })
            .collect();
        self.chunk_copies = chunk_copies.into_boxed_slice();
        self
    }

    /// Bytes of the chunks copied into other zones, over all copies.
    pub(crate) fn zone_copy_bytes(&self) -> usize {
        self.plan
            .chunks
            .iter()
            .zip(self.chunk_copies.iter())
            .map(|(c, m)| c.bytes.len() * m.count_ones() as usize)
            .sum()
    }

    /// The words a worker of `zone` reads chunk `chunk` from: its zone's copy if the
    /// chunk has one, else the arena's.
    #[inline(always)]
    pub(crate) fn words_for(&self, chunk: u32, zone: u8) -> &[AtomicU64] {
        if let Some(&mask) = self.chunk_copies.get(chunk as usize) {
            if mask & (1u64 << (zone & 63)) != 0 {
                if let Some(Some(copy)) = self.copies.get(zone as usize) {
                    return copy;
                }
            }
        }
        &self.words
    }

    /// Whether a worker of `zone` reads chunk `chunk` from a zone copy.
    pub(crate) fn has_copy(&self, chunk: u32, zone: u8) -> bool {
        !std::ptr::eq(self.words_for(chunk, zone), &*self.words)
    }

    /// Bytes of the arena's own buffers (rows, per-chunk versions and clocks; the plan is
    /// counted apart).
    pub(crate) fn bytes(&self) -> usize {
        (self.words.len() + self.versions.len() + self.chunk_clocks.len()) * 8
            + self.first_chunk.capacity() * 4
    }

    /// The slot of `key`, if planned.
    #[inline]
    pub(crate) fn slot(&self, key: RowKey) -> Option<u32> {
        self.plan.index.get(&key).copied()
    }

    /// Copies slot `slot` into `dst` (its length) if its chunk holds a snapshot with data
    /// clock `>= required`; returns that data clock.
    #[cfg(test)]
    pub(crate) fn read_fresh(&self, slot: u32, required: Clock, dst: &mut [u8]) -> Option<Clock> {
        let s = &self.plan.slots[slot as usize];
        self.read_at(s.chunk, s.word(), required, dst)
    }

    /// [`read_fresh`](Self::read_fresh) of the row at arena word `word` of chunk `chunk`,
    /// both resolved ahead of time (no look-up in the plan).
    #[cfg(test)]
    pub(crate) fn read_at(
        &self,
        chunk: u32,
        word: u32,
        required: Clock,
        dst: &mut [u8],
    ) -> Option<Clock> {
        self.read_at_in(0, chunk, word, required, dst)
    }

    /// A read of the row at a pre-resolved word and chunk (as `read_at`) by a worker of
    /// `zone` (from its zone's copy of the chunk, if any).
    #[inline]
    pub(crate) fn read_at_in(
        &self,
        zone: u8,
        chunk: u32,
        word: u32,
        required: Clock,
        dst: &mut [u8],
    ) -> Option<Clock> {
        let word = word as usize;
        let words = &self.words_for(chunk, zone)[word..word + dst.len().div_ceil(8)];
        self.read_chunk_in(zone, chunk, required, |_| copy_words(words, dst))
    }

    /// Runs `copy` on the arena's words while chunk `chunk` holds a snapshot with data
    /// clock `>= required`, and returns that clock; `None` if the chunk is older. If the
    /// communication thread rewrote the chunk meanwhile, `copy` runs again: it must only
    /// copy (out of the chunk's rows, through [`ArenaWords::copy_row`]).
    /// By a worker of `zone`, `copy` gets its zone's copy of the chunk, if any.
    #[inline(always)]
    pub(crate) fn read_chunk_in(
        &self,
        zone: u8,
        chunk: u32,
        required: Clock,
        mut copy: impl FnMut(&ArenaWords<'_>),
    ) -> Option<Clock> {
        let words = self.words_for(chunk, zone);
        let chunk = chunk as usize;
        loop {
            let v1 = self.versions[chunk].load(Ordering::Acquire);
            if v1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let clock = self.chunk_clocks[chunk].load(Ordering::Relaxed);
            if clock == EMPTY || clock < required {
                return None;
            }
            copy(&ArenaWords(words));
            fence(Ordering::Acquire);
            if self.versions[chunk].load(Ordering::Relaxed) == v1 {
                return Some(clock);
            }
        }
    }

    /// Hints that the row starting at arena word `word` will be read soon.
    #[inline(always)]
    pub(crate) fn prefetch(&self, word: u32) {
        if let Some(w) = self.words.get(word as usize) {
            crate::prefetch::prefetch(w);
        }
    }

    /// Writes a refreshed chunk (`chunk` is shard-local) that arrived as a message: the
    /// whole chunk, or with `rows` only the rows at those positions of the chunk (`bytes`
    /// holds them one after another, little-endian words), the others being unchanged
    /// since the last refresh. One writer per chunk: its shard's refreshes arrive in
    /// order, through the communication thread or the thread driving the shard. A chunk of
    /// the wrong size or index is an error, and so is a partial refresh of a chunk this
    /// arena does not hold as of an older data clock.
    pub(crate) fn write_chunk(
        &self,
        shard: u32,
        chunk: u32,
        data_clock: Clock,
        rows: Option<&[u32]>,
        bytes: &[u8],
    ) -> Result<()> {
        let spans = self.refresh_spans(shard, chunk, data_clock, rows, bytes.len())?;
        let Some((global, spans)) = spans else {
            return Ok(());
        };
        self.begin_write(global);
        match bytemuck::try_cast_slice::<u8, u64>(bytes) {
            Ok(words) => scatter(&self.words, &spans, [words], u64::from_le),
            // Unaligned bytes (refreshes arrive in aligned buffers; tests may not).
            Err(_) => {
                let words: Vec<u64> = bytes
                    .chunks_exact(8)
                    .map(bytemuck::pod_read_unaligned)
                    .collect();
                scatter(&self.words, &spans, [&words[..]], u64::from_le);
            }
        }
        self.end_write(global, data_clock, &spans);
        Ok(())
    }

    /// [`write_chunk`](Self::write_chunk) of a refresh from a shard in this OS process,
    /// straight from its arena ([`LocalArena`]): the whole chunk, `words` words in all as
    /// the slices of `whole` one after another (its ranges in the shard's arena); or
    /// with `rows`, the changed row at each position of it as `changed(k)` for the
    /// `k`-th one.
    ///
    /// [`LocalArena`]: crate::server::LocalArena
    pub(crate) fn write_chunk_from<'a, I: Iterator<Item = &'a [u64]>>(
        &self,
        (shard, chunk, data_clock): (u32, u32, Clock),
        rows: Option<&[u32]>,
        (words, whole): (usize, impl FnOnce() -> I),
        changed: impl Fn(usize) -> &'a [u64],
    ) -> Result<()> {
        self.local_refreshes.fetch_add(1, Ordering::Relaxed);
        let spans = self.refresh_spans(shard, chunk, data_clock, rows, words * 8)?;
        let Some((global, spans)) = spans else {
            return Ok(());
        };
        self.begin_write(global);
        match rows {
            None => scatter(&self.words, &spans, whole(), |w| w),
            // One span a changed row, in order: copied row by row.
            Some(_) => {
                for (k, &(word, n)) in spans.iter().enumerate() {
                    let src = changed(k);
                    debug_assert_eq!(src.len(), n, "the shard's row and the plan's slot");
                    store(&self.words[word..word + n], src, |w| w);
                }
            }
        }
        self.end_write(global, data_clock, &spans);
        Ok(())
    }

    /// Where a refresh of `bytes` bytes of chunk `chunk` of shard `shard` at `data_clock`
    /// goes: the global chunk and the arena spans `(word, words)` its words fill in
    /// order, or `None` when this arena holds a newer snapshot of the chunk (a whole
    /// refresh never replaces one). Counts the refresh, whole or partial.
    #[allow(clippy::type_complexity)]
    fn refresh_spans(
        &self,
        shard: u32,
        chunk: u32,
        data_clock: Clock,
        rows: Option<&[u32]>,
        bytes: usize,
    ) -> Result<Option<(usize, Vec<(usize, usize)>)>> {
        let bad = |why: String| Err(Error::failed(format!("server shard {shard}"), why));
        let Some(global) = self
            .first_chunk
            .get(shard as usize)
            .map(|f| (f + chunk) as usize)
            .filter(|&g| self.plan.chunks.get(g).is_some_and(|c| c.shard == shard))
        else {
            return bad(format!("sent unknown chunk {chunk}"));
        };
        let old = self.chunk_clocks[global].load(Ordering::Relaxed);
        let Some(rows) = rows else {
            self.whole_refreshes.fetch_add(1, Ordering::Relaxed);
            let span = &self.plan.chunks[global].bytes;
            if span.len() != bytes {
                return bad(format!(
                    "chunk {chunk} has {bytes} bytes, the plan {}",
                    span.len()
                ));
            }
            if old != EMPTY && old > data_clock {
                return Ok(None); // never replace a newer snapshot
            }
            return Ok(Some((global, vec![(span.start / 8, span.len() / 8)])));
        };
        self.partial_refreshes.fetch_add(1, Ordering::Relaxed);
        let slots = self.plan.chunks[global].slots.clone();
        if old == EMPTY || old > data_clock {
            return bad(format!(
                "sent changed rows of chunk {chunk} at data clock {data_clock}, but this \
                 process holds it at {}",
                if old == EMPTY {
                    "none".to_string()
                } else {
                    old.to_string()
                }
            ));
        }
        let mut spans = Vec::with_capacity(rows.len());
        let mut total = 0;
        for &i in rows {
            let Some(slot) = self
                .plan
                .slots
                .get(slots.start + i as usize)
                .filter(|_| (i as usize) < slots.len())
            else {
                return bad(format!(
                    "sent row {i} of chunk {chunk}, which has {}",
                    slots.len()
                ));
            };
            let len = crate::slot::padded(slot.len);
            spans.push((slot.offset / 8, len / 8));
            total += len;
        }
        if total != bytes {
            return bad(format!(
                "sent {bytes} bytes for {} changed rows of chunk {chunk}, which take {total}",
                rows.len()
            ));
        }
        Ok(Some((global, spans)))
    }

    /// Starts writing global chunk `global`: readers retry until [`end_write`].
    ///
    /// [`end_write`]: Self::end_write
    fn begin_write(&self, global: usize) {
        let v = self.versions[global].load(Ordering::Relaxed);
        self.versions[global].store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Ends writing global chunk `global` (its arena `spans` written): copies them into
    /// the zones holding a copy of the chunk, and publishes it as a snapshot at
    /// `data_clock`.
    fn end_write(&self, global: usize, data_clock: Clock, spans: &[(usize, usize)]) {
        let mask = self.chunk_copies.get(global).copied().unwrap_or(0);
        let zone_copies = self
            .copies
            .iter()
            .enumerate()
            .filter(|(z, _)| mask & (1u64 << z) != 0)
            .filter_map(|(_, c)| c.as_deref());
        for copy in zone_copies {
            for &(word, n) in spans {
                let (src, dst) = (&self.words[word..word + n], &copy[word..word + n]);
                for (d, s) in dst.iter().zip(src) {
                    d.store(s.load(Ordering::Relaxed), Ordering::Relaxed);
                }
            }
        }
        let v = self.versions[global].load(Ordering::Relaxed);
        self.chunk_clocks[global].store(data_clock, Ordering::Relaxed);
        self.versions[global].store(v + 1, Ordering::Release);
    }

    /// Marks every chunk empty again (its words stay, unread) and forgets every request:
    /// after rows were set between runs, when no refresh is on its way and the shards
    /// will send each chunk whole ([`ToClient::RowsSet`](crate::msg::ToClient::RowsSet)).
    pub(crate) fn forget_chunks(&self) {
        self.requested
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        for global in 0..self.chunk_clocks.len() {
            self.begin_write(global);
            let v = self.versions[global].load(Ordering::Relaxed);
            self.chunk_clocks[global].store(EMPTY, Ordering::Relaxed);
            self.versions[global].store(v + 1, Ordering::Release);
        }
    }

    /// Makes sure a refresh that will satisfy `required` has been asked for. With
    /// batching: the chunks read in the iteration's clock `phase` (one request per shard
    /// holding some), or, when `slot` is given and its chunk is not read in that clock (an
    /// access off the pattern), that chunk alone. Without batching, only the chunk
    /// holding `slot` (if given).
    pub(crate) fn request(
        &self,
        shared: &ClientShared,
        required: Clock,
        phase: u32,
        slot: Option<u32>,
    ) -> Result<()> {
        let chunk = slot.map(|s| self.plan.slots[s as usize].chunk);
        let bit = phase_bit(u64::from(phase));
        let target = match (self.batched, chunk) {
            (true, Some(c)) if self.plan.chunk_phases[c as usize] & bit == 0 => Target::Chunk(c),
            (true, _) => Target::Phase(phase),
            (false, Some(c)) => Target::Chunk(c),
            (false, None) => return Ok(()),
        };
        if target == Target::Phase(phase) && !self.plan.chunk_phases.iter().any(|&p| p & bit != 0) {
            return Ok(()); // nothing is read in this clock
        }
        {
            let mut requested = self
                .requested
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Forget requests every chunk they cover has been refreshed for (a chunk never
            // filled has not, whatever the clock asked for).
            requested.retain(|&(t, r)| !self.covers(t, r));
            // Asked already (not yet answered in full), or answered already: another
            // worker of this process asked first. Checked in this order under the lock,
            // with snapshots only ever getting newer, one of the two holds for a request
            // another worker made, however its answer and this call interleave.
            if requested.contains(&(target, required)) || self.covers(target, required) {
                return Ok(());
            }
            requested.push((target, required));
        }
        let send = |shard: u32, want: WantedChunks| {
            self.requests_sent.fetch_add(1, Ordering::Relaxed);
            let msg = ToShard::SlabFetch {
                from: shared.process,
                epoch: self.id,
                required,
                want,
            };
            shared.send_shard(shard, msg)
        };
        match target {
            Target::Phase(p) => {
                self.phase_requests.fetch_add(1, Ordering::Relaxed);
                let mut last = None;
                for (c, span) in self.plan.chunks.iter().enumerate() {
                    if self.plan.chunk_phases[c] & bit != 0 && last != Some(span.shard) {
                        last = Some(span.shard);
                        send(span.shard, WantedChunks::Phase(p))?;
                    }
                }
            }
            Target::Chunk(c) => {
                let shard = self.plan.chunks[c as usize].shard;
                send(
                    shard,
                    WantedChunks::Chunk(c - self.first_chunk[shard as usize]),
                )?;
            }
        }
        Ok(())
    }

    /// Whether every chunk `target` covers holds a snapshot a read requiring `required`
    /// takes (as [`read_chunk_in`](Self::read_chunk_in) decides: filled, and at least
    /// that clock).
    fn covers(&self, target: Target, required: Clock) -> bool {
        let fresh = |c: &AtomicU64| {
            let clock = c.load(Ordering::Acquire);
            clock != EMPTY && clock >= required
        };
        match target {
            Target::Chunk(c) => fresh(&self.chunk_clocks[c as usize]),
            Target::Phase(p) => {
                let bit = phase_bit(u64::from(p));
                self.chunk_clocks
                    .iter()
                    .zip(&self.plan.chunk_phases)
                    .filter(|(_, &phases)| phases & bit != 0)
                    .all(|(c, _)| fresh(c))
            }
        }
    }
}

/// What a refresh request covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// One chunk (global index).
    Chunk(u32),
    /// The chunks read in the iteration's clock `p`.
    Phase(u32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ElemType;
    use crate::gather::{Access, AccessLog, AccessPattern};
    use crate::plan::{build, PlanConfig};
    use crate::table::TableMeta;

    #[test]
    fn zeroed_words_are_zero_of_any_length() {
        assert!(zeroed_words(0).is_empty());
        let w = zeroed_words(1000);
        assert_eq!(w.len(), 1000);
        assert!(w.iter().all(|x| x.load(Ordering::Relaxed) == 0));
        w[999].store(7, Ordering::Relaxed);
        assert_eq!(w[999].load(Ordering::Relaxed), 7);
    }

    fn arena() -> ProcessArena {
        let mut log = AccessLog::default();
        for r in 0..10 {
            log.record(RowKey::new(0, r), Access::Read);
        }
        let tables = [TableMeta {
            id: 0,
            name: "t".into(),
            width: 3,
            elem: ElemType::I32,
            rows: None,
            rule: crate::rule::Rule::Sum,
        }];
        let cfg = PlanConfig {
            workers: 1,
            chunks: 2,
            thread_caches: false,
            contention_threshold: 1.0,
        };
        ProcessArena::new(
            build(
                &AccessPattern::from_logs(vec![log]),
                &tables,
                &crate::placement::Placement::hashed(1),
                &cfg,
            ),
            1,
            true,
            None,
        )
    }

    #[test]
    fn reads_only_fresh_chunks_and_keeps_newer_snapshots() {
        let a = arena();
        let slot = a.slot(RowKey::new(0, 7)).unwrap();
        let mut dst = [0u8; 12];
        assert_eq!(a.read_fresh(slot, 0, &mut dst), None, "never refreshed");
        let chunk = &a.plan.chunks[1];
        let mut bytes = vec![0u8; chunk.bytes.len()];
        let at = a.plan.slots[slot as usize].offset - chunk.bytes.start;
        bytes[at..at + 12].copy_from_slice(bytemuck::cast_slice(&[1i32, 2, 3]));
        a.write_chunk(0, 1, 4, None, &bytes).unwrap();
        assert_eq!(a.read_fresh(slot, 4, &mut dst), Some(4));
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&dst), &[1, 2, 3]);
        assert_eq!(a.read_fresh(slot, 5, &mut dst), None, "stale for clock 5");
        a.write_chunk(0, 1, 3, None, &vec![0u8; chunk.bytes.len()])
            .unwrap();
        assert_eq!(
            a.read_fresh(slot, 4, &mut dst),
            Some(4),
            "older snapshot ignored"
        );
        assert!(a.write_chunk(0, 1, 5, None, &[0u8; 3]).is_err());
        assert!(a.write_chunk(0, 9, 5, None, &bytes).is_err());
    }

    #[test]
    fn a_partial_refresh_writes_only_its_rows_and_needs_the_chunk_first() {
        let a = arena();
        let slot = a.slot(RowKey::new(0, 7)).unwrap();
        let chunk = &a.plan.chunks[1];
        let pos = slot - chunk.slots.start as u32;
        let row = bytemuck::cast_slice::<i32, u8>(&[4, 5, 6, 0]).to_vec(); // padded to 16
        let err = a.write_chunk(0, 1, 2, Some(&[pos]), &row).unwrap_err();
        assert!(err.to_string().contains("holds it at none"), "{err}");
        let mut whole = vec![0u8; chunk.bytes.len()];
        whole[..4].copy_from_slice(&9i32.to_le_bytes());
        a.write_chunk(0, 1, 1, None, &whole).unwrap();
        a.write_chunk(0, 1, 2, Some(&[pos]), &row).unwrap();
        let mut dst = [0u8; 12];
        assert_eq!(a.read_fresh(slot, 2, &mut dst), Some(2));
        assert_eq!(bytemuck::cast_slice::<u8, i32>(&dst), &[4, 5, 6]);
        // The chunk's other rows kept their values.
        let first = chunk.slots.start as u32;
        if first != slot {
            let mut other = [0u8; 12];
            a.read_fresh(first, 2, &mut other).unwrap();
            assert_eq!(bytemuck::cast_slice::<u8, i32>(&other)[0], 9);
        }
        assert!(
            a.write_chunk(0, 1, 1, Some(&[pos]), &row).is_err(),
            "older than held"
        );
        assert!(
            a.write_chunk(0, 1, 3, Some(&[999]), &row).is_err(),
            "no such row"
        );
        assert!(
            a.write_chunk(0, 1, 3, Some(&[pos]), &row[..8]).is_err(),
            "wrong size"
        );
    }

    /// The words of global chunk `c` of `a`, as its readers see them.
    fn chunk_words(a: &ProcessArena, c: usize) -> Vec<u64> {
        let span = &a.plan.chunks[c].bytes;
        let words = &a.words[span.start / 8..span.end / 8];
        words.iter().map(|w| w.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn a_refresh_written_from_slices_is_the_one_written_from_bytes() {
        let (sent, local) = (arena(), arena());
        let chunk = &sent.plan.chunks[1];
        let words: Vec<u64> = (1..=(chunk.bytes.len() / 8) as u64).collect();
        // Whole: the same words in one buffer, or in slices cut anywhere (a chunk
        // gathered from several ranges of a shard's arena).
        sent.write_chunk(0, 1, 2, None, bytemuck::cast_slice(&words))
            .unwrap();
        let (a, b) = words.split_at(3);
        let (b, c) = b.split_at(1);
        let none = |_: usize| -> &[u64] { unreachable!("a whole refresh") };
        local
            .write_chunk_from(
                (0, 1, 2),
                None,
                (words.len(), || [a, b, c].into_iter()),
                none,
            )
            .unwrap();
        assert_eq!(chunk_words(&local, 1), chunk_words(&sent, 1));
        assert_eq!(chunk_words(&local, 1), words);
        // Partial: each changed row's padded words.
        let rows = [0u32, 2];
        let row = |i: u64| [100 + i, 200 + i];
        let changed = [row(0), row(2)].concat();
        sent.write_chunk(0, 1, 3, Some(&rows), bytemuck::cast_slice(&changed))
            .unwrap();
        let (r0, r2) = (row(0), row(2));
        let changed = |k: usize| -> &[u64] { [&r0[..], &r2[..]][k] };
        let no_ranges = || std::iter::empty::<&[u64]>();
        local
            .write_chunk_from((0, 1, 3), Some(&rows), (4, no_ranges), changed)
            .unwrap();
        assert_eq!(chunk_words(&local, 1), chunk_words(&sent, 1));
        assert_ne!(chunk_words(&local, 1), words, "the rows changed");
        let mut dst = [0u8; 12];
        assert_eq!(
            local.read_fresh(chunk.slots.start as u32, 3, &mut dst),
            Some(3)
        );
        // The same checks: a wrong size or row is an error, not a write.
        assert!(local
            .write_chunk_from((0, 1, 4), Some(&rows), (3, no_ranges), changed)
            .is_err());
        assert!(local
            .write_chunk_from((0, 1, 4), Some(&[99]), (2, no_ranges), changed)
            .is_err());
        assert_eq!(
            local.read_fresh(chunk.slots.start as u32, 4, &mut dst),
            None
        );
        // Counted apart from the refreshes that arrived as messages.
        assert_eq!(local.local_refreshes.load(Ordering::Relaxed), 4);
        assert_eq!(sent.local_refreshes.load(Ordering::Relaxed), 0);
        assert_eq!(local.partial_refreshes.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn store_writes_every_word_through_conv_as_far_as_both_go() {
        for n in 0..11u64 {
            let words: Vec<AtomicU64> = (0..n + 1).map(|_| AtomicU64::new(0)).collect();
            let src: Vec<u64> = (1..=n).collect();
            store(&words, &src, |w| w * 10);
            let got: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
            let want: Vec<u64> = (1..=n).map(|w| w * 10).chain([0]).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn scatter_fills_spans_from_slices_cut_anywhere() {
        let words: Vec<AtomicU64> = (0..10).map(|_| AtomicU64::new(0)).collect();
        let spans = [(1, 2), (5, 3), (9, 1)];
        let src: Vec<u64> = (1..=6).collect();
        scatter(
            &words,
            &spans,
            [&src[..1], &src[1..4], &[], &src[4..]],
            |w| w * 10,
        );
        let got: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(got, [0, 10, 20, 0, 0, 30, 40, 50, 0, 60]);
    }

    #[test]
    fn a_zone_copy_is_written_with_its_chunk_and_read_by_that_zone_only() {
        let plain = arena();
        let chunks = plain.plan.chunks.len();
        let mut copies = vec![0u64; chunks];
        copies[1] = 0b10; // chunk 1 copied into zone 1
        let workers = vec![0, 1];
        let a = plain.with_zone_copies(copies, workers, None);
        assert_eq!(a.zone_copy_bytes(), a.plan.chunks[1].bytes.len());
        assert_eq!((a.worker_zone(0), a.worker_zone(1)), (0, 1));
        assert!(a.has_copy(1, 1) && !a.has_copy(1, 0) && !a.has_copy(0, 1));
        let slot = a.slot(RowKey::new(0, 7)).unwrap();
        let s = a.plan.slots[slot as usize];
        let chunk = &a.plan.chunks[1];
        let mut bytes = vec![0u8; chunk.bytes.len()];
        let at = s.offset - chunk.bytes.start;
        bytes[at..at + 12].copy_from_slice(bytemuck::cast_slice(&[7i32, 8, 9]));
        a.write_chunk(0, 1, 3, None, &bytes).unwrap();
        for zone in [0, 1] {
            let mut dst = [0u8; 12];
            let word = s.word();
            assert_eq!(a.read_at_in(zone, 1, word, 3, &mut dst), Some(3));
            assert_eq!(
                bytemuck::cast_slice::<u8, i32>(&dst),
                &[7, 8, 9],
                "zone {zone}"
            );
        }
        // Zone 1 really reads its copy: the two arrays are different memory.
        assert!(!std::ptr::eq(a.words_for(1, 1), a.words_for(1, 0)));
    }

    #[test]
    fn an_arena_bound_to_its_chunks_nodes_reads_as_before() {
        let plain = arena();
        let binder = MemBinder::new();
        let nodes = vec![0; plain.plan.chunks.len()];
        let bound = ProcessArena::new(plain.plan.clone(), 1, true, Some((&binder, &nodes)));
        let expected = if binder.supports_area_binding() {
            bound.plan.arena_bytes
        } else {
            0
        };
        assert_eq!(bound.bound_bytes, expected);
        assert_eq!(plain.bound_bytes, 0);
        assert_eq!(bound.words.len(), plain.words.len());
        assert!(bound.words.iter().all(|w| w.load(Ordering::Relaxed) == 0));
    }
}
