//! Refreshes: a shard's chunk written into the arena, whole or only its changed rows,
//! from a message's bytes or straight from a local shard's arena, inside the chunk's
//! sequence lock.

use super::words::{scatter, store};
use super::{ProcessArena, EMPTY};
use crate::error::{Error, Result};
use crate::ids::Clock;
use std::sync::atomic::{fence, Ordering};
use std::sync::PoisonError;

impl ProcessArena {
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
}
