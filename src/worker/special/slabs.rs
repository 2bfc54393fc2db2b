//! A CLOCK's update slabs ([`SpecialWorker::take_slabs`]): per shard, the deltas of the rows
//! this worker updated in the clock, taken from their blocks (and zeroed for the next
//! clock) into one slab, whole (every row of the shard's layout, zeros where untouched)
//! or sparse (the touched rows with their positions), whichever is smaller; written with
//! plain or streaming stores as `slab_writes.rs` chooses.
//!
//! This file knows the slabs' format the servers expect and the per-shard directories it
//! walks; the blocks' format through `block.rs`; nothing of the op tape, reads or views.

use super::bits::{bit, count_bits, set_bits};
use super::block::{block_parts, rows_at, Header};
use super::{SpecialWorker, RUN_ROW};
use crate::buf::AlignedBuf;
use crate::ids::Clock;
use crate::slot::padded;
use crate::stream;

impl SpecialWorker {
    /// Whether updates of the current clock are waiting to be sent.
    pub(crate) fn has_updates(&self) -> bool {
        self.touched.iter().any(|&bits| bits != 0)
    }

    /// Takes this clock's delta slabs, one per shard, and starts a new clock. A slab is
    /// every row the worker updates on that shard in arena order (zeros where untouched),
    /// or, when that is smaller, only the touched rows with their positions.
    pub(crate) fn take_slabs(&mut self, clock: Clock, keep_recent: bool) -> Vec<Slab> {
        if keep_recent {
            // The touched bits go with the blocks: they say which rows were updated.
            let mut sent = Vec::with_capacity(self.words.len() + self.touched.len());
            sent.extend_from_slice(&self.words);
            sent.extend_from_slice(&self.touched);
            self.recent.push(clock, sent);
        }
        // Per shard, only the touched rows are visited (their bits), unless the slab is
        // sent whole: then every row of the shard takes its place in it. Timed, for the
        // choice of stores (`slab_writes.rs`).
        let streaming = self.writes.streaming();
        let timer = self.writes.timer();
        let mut slabs = Vec::with_capacity(self.shard_blocks.len());
        for shard in 0..self.shard_blocks.len() {
            let bytes = self.shard_bytes[shard];
            // Sparse when the touched rows with their positions are smaller than the
            // whole slab: certain from the widest row, impossible from the narrowest,
            // and otherwise (rows of several widths) their bytes are counted.
            let count = count_bits(&self.touched, self.shard_blocks[shard].clone());
            let (min, max) = (self.shard_min_row[shard], self.shard_max_row[shard]);
            let sparse = if count * (4 + max) < bytes {
                Some(count * max)
            } else if count * (4 + min) >= bytes {
                None
            } else {
                Some(self.touched_bytes(shard)).filter(|&t| t + 4 * count < bytes)
            };
            let slab = sparse.map(|size| self.sparse_slab(shard, count, size, streaming));
            if bytes > 0 {
                if slab.is_some() {
                    self.counters.partial_slabs += 1;
                } else {
                    self.counters.whole_slabs += 1;
                }
                self.counters.streamed_slabs += u64::from(streaming);
            }
            slabs.push(slab.unwrap_or_else(|| self.whole_slab(shard, streaming)));
        }
        self.release_held(keep_recent);
        self.touched.fill(0);
        if streaming {
            stream::fence(); // the slabs' streaming stores, before they are sent
        }
        if let Some(started) = timer {
            let written = slabs.iter().map(|s| s.bytes.len()).sum();
            self.writes.record(streaming, written, started.elapsed());
        }
        slabs
    }

    /// Bytes of `shard`'s touched rows, as a sparse slab holds them (padded).
    fn touched_bytes(&self, shard: usize) -> usize {
        set_bits(&self.touched, self.shard_blocks[shard].clone())
            .map(|r| match self.blocks[r] {
                e if e & RUN_ROW != 0 => 8, // a run's row: one word
                b => padded(Header::at(&self.words, b as usize).shape().0),
            })
            .sum()
    }

    /// The slab of `shard`'s `count` touched rows with their positions, built in capacity
    /// for `size` bytes of rows (at least theirs, so it never grows).
    fn sparse_slab(&mut self, shard: usize, count: usize, size: usize, streaming: bool) -> Slab {
        let range = self.shard_blocks[shard].clone();
        let mut rows = Vec::with_capacity(count);
        let mut out = Vec::with_capacity(size / 8);
        if let (Some(n), false) = (self.shard_row_words[shard], streaming) {
            // Every block of the shard is one row of `n` words: its delta is at the same
            // offset in each (from the block's first word), and is taken without decoding
            // the block's header.
            let at = rows_at(0, n, self.views).1;
            let (blocks, words) = (&self.blocks, &mut self.words);
            for r in set_bits(&self.touched, range.clone()) {
                let delta = blocks[r] as usize + at;
                stream::take(&mut words[delta..delta + n], &mut out);
                rows.push((r - range.start) as u32);
            }
            return Slab {
                bytes: AlignedBuf::from_word_vec(out),
                rows: Some(rows),
            };
        }
        let mut runs = RunCursor::new(self, range.start);
        for r in set_bits(&self.touched, range.clone()) {
            let delta = match self.blocks[r] {
                e if e & RUN_ROW != 0 => {
                    let (_, first, deltas) = runs.run_of(self, r);
                    deltas + r - first..deltas + r - first + 1
                }
                b => block_parts(&self.words, self.views, b as usize).1,
            };
            take_delta(&mut self.words[delta], &mut out, streaming);
            rows.push((r - range.start) as u32);
        }
        Slab {
            bytes: AlignedBuf::from_word_vec(out),
            rows: Some(rows),
        }
    }

    /// `shard`'s whole slab: every row's delta in order, zeros where untouched.
    fn whole_slab(&mut self, shard: usize, streaming: bool) -> Slab {
        let (range, bytes) = (self.shard_blocks[shard].clone(), self.shard_bytes[shard]);
        let mut runs = RunCursor::new(self, range.start);
        let mut out = Vec::with_capacity(bytes / 8);
        let mut r = range.start;
        while r < range.end {
            let touched = |r: usize| bit(&self.touched, r);
            let entry = self.blocks[r];
            if entry & RUN_ROW == 0 {
                let b = entry as usize;
                let delta = block_parts(&self.words, self.views, b).1;
                if touched(r) {
                    take_delta(&mut self.words[delta], &mut out, streaming);
                } else {
                    out.resize(out.len() + delta.len(), 0);
                }
                r += 1;
                continue;
            }
            // The rest of the run holding `r`, a word a row.
            let (b, first, deltas) = runs.run_of(self, r);
            let end = (first + Header::at(&self.words, b).shape().1).min(range.end);
            let run_deltas = &self.words[deltas + r - first..deltas + end - first];
            out.extend(
                (r..end)
                    .zip(run_deltas)
                    .map(|(i, &delta)| if touched(i) { delta } else { 0 }),
            );
            r = end;
        }
        Slab {
            bytes: AlignedBuf::from_word_vec(out),
            rows: None,
        }
    }
}

/// One shard's part of a CLOCK in specialized mode.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    /// The deltas, each padded to 8 bytes.
    pub(crate) bytes: AlignedBuf,
    /// `None`: every row of the worker's layout for the shard; else the positions in that
    /// layout of the rows `bytes` holds.
    pub(crate) rows: Option<Vec<u32>>,
}

/// Finds the runs of rows in ascending arena order (a CLOCK's walk over a shard's rows),
/// moving over the runs as the rows do.
pub(super) struct RunCursor {
    /// The run the last row asked for was in (or the first that may hold the next).
    run: usize,
}

impl RunCursor {
    /// A cursor for rows from index `start` on.
    pub(super) fn new(sp: &SpecialWorker, start: usize) -> Self {
        let end = |&b: &u32| {
            let header = Header::at(&sp.words, b as usize);
            header.index() + header.shape().1
        };
        RunCursor {
            run: sp.runs.partition_point(|b| end(b) <= start),
        }
    }

    /// The run holding row `r` (a run's row at or after the last asked for): its block,
    /// its first row's index and the word of its first delta.
    #[inline(always)]
    pub(super) fn run_of(&mut self, sp: &SpecialWorker, r: usize) -> (usize, usize, usize) {
        loop {
            let b = sp.runs[self.run] as usize;
            let header = Header::at(&sp.words, b);
            let (first, count) = (header.index(), header.shape().1);
            if r < first + count {
                return (b, first, rows_at(b, count, sp.views).1);
            }
            self.run += 1;
        }
    }
}

/// Appends the delta words `delta` to a slab's `out` (with streaming stores if
/// `streaming`: [`SpecialWorker::take_slabs`] fences them) and zeroes them: the next clock's
/// delta starts at zero (see [`add_to_block_in`](super::update::add_to_block_in)).
#[inline(always)]
fn take_delta(delta: &mut [u64], out: &mut Vec<u64>, streaming: bool) {
    stream::extend(out, delta, streaming);
    delta.fill(0);
}
