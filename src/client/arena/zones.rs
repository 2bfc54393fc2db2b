//! Zone copies: a replicated chunk's copy in another NUMA zone's array, written with the
//! chunk and read by that zone's workers.

use super::words::zeroed_words;
use super::ProcessArena;
use crate::topology::bind::MemBinder;
use std::sync::atomic::AtomicU64;

impl ProcessArena {
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
}
