//! The arena's memory: `AtomicU64` words allocated zeroed, stored into and copied out
//! with relaxed accesses (the chunks' sequence locks order them).

use std::sync::atomic::{AtomicU64, Ordering};

/// Stores the words of `slices`, one after another, into the `spans` `(word, words)` of
/// `words` in order, each through `conv` (relaxed stores: the caller holds the chunk's
/// sequence counter odd). The slices need not match the spans one to one (a chunk's
/// ranges fill one span; a message's one slice fills every changed row's); their words
/// in all must be the spans' (checked by the caller), and no more are stored.
pub(super) fn scatter<'a>(
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
pub(super) fn store(dst: &[AtomicU64], src: &[u64], conv: impl Fn(u64) -> u64) {
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
pub(super) fn copy_words(words: &[AtomicU64], dst: &mut [u8]) {
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

/// The arena's words, as
/// [`ProcessArena::read_chunk_in`](super::ProcessArena::read_chunk_in) lends them.
pub(crate) struct ArenaWords<'a>(pub(super) &'a [AtomicU64]);

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

pub(super) fn atomics(n: usize, v: u64) -> Box<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(v)).collect()
}

/// `n` zeroed words, allocated zeroed (calloc: untouched pages of a large array are never
/// faulted in).
pub(super) fn zeroed_words(n: usize) -> Box<[AtomicU64]> {
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
