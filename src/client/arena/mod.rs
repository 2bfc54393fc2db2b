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

mod refresh;
mod request;
mod words;
mod zones;

use request::Target;
pub(crate) use words::ArenaWords;
use words::{atomics, copy_words};

use super::ClientShared;
use crate::ids::{Clock, RowKey};
use crate::plan::Plan;
use crate::topology::bind::MemBinder;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;

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
}

#[cfg(test)]
mod tests;
