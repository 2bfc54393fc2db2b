//! Streaming stores: writing a buffer that another thread reads next (a CLOCK's update
//! slab, which a shard adds into its arena) without first reading each of its cache lines
//! into this core's cache. A plain store to a line not in the cache reads the line in
//! (from memory or another core) before it overwrites it; a streaming store collects whole
//! lines in write-combining buffers and writes them out. Elsewhere than x86_64, plain
//! copies. Also the plain way of taking a row into a slab ([`take`]: copy and zero in
//! one pass).

/// Whether this platform has streaming stores (elsewhere [`extend`] always copies
/// plainly).
pub(crate) const AVAILABLE: bool = cfg!(target_arch = "x86_64");

/// Appends `src` to `out`, with streaming stores if `streaming`. After streaming stores,
/// call [`fence`] before another thread may read `out`: they are not ordered with the
/// ordinary stores after them.
#[inline(always)]
pub(crate) fn extend(out: &mut Vec<u64>, src: &[u64], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        out.reserve(src.len());
        let at = out.len();
        let dst = out.spare_capacity_mut()[..src.len()]
            .as_mut_ptr()
            .cast::<i64>();
        for (i, &word) in src.iter().enumerate() {
            // SAFETY: `dst` has room for `src.len()` words (reserved, and sliced to that
            // length just above); `movnti` is SSE2, part of x86_64.
            unsafe { std::arch::x86_64::_mm_stream_si64(dst.add(i), word as i64) };
        }
        // SAFETY: the `src.len()` words after `at` were all written just above.
        unsafe { out.set_len(at + src.len()) };
        return;
    }
    let _ = streaming;
    out.extend_from_slice(src);
}

/// Appends `src` to `out` with plain stores and zeroes it, inline in pieces of four
/// words: for a row of a few words, the library calls of a copy then a fill cost more
/// than the row.
#[inline(always)]
pub(crate) fn take(src: &mut [u64], out: &mut Vec<u64>) {
    let n = src.len();
    out.reserve(n);
    let at = out.len();
    let spare = &mut out.spare_capacity_mut()[..n];
    let (dq, dr) = spare.as_chunks_mut::<4>();
    let (sq, sr) = src.as_chunks_mut::<4>();
    for (d, s) in dq.iter_mut().zip(sq) {
        let quad = std::mem::take(s);
        for (d, w) in d.iter_mut().zip(quad) {
            d.write(w);
        }
    }
    for (d, s) in dr.iter_mut().zip(sr) {
        d.write(std::mem::take(s));
    }
    // SAFETY: the `n` words after `at` (all of `spare`) were written just above.
    unsafe { out.set_len(at + n) };
}

/// Orders every streaming store this thread made before every store after it (`sfence`),
/// so that a thread that sees a later store (a message sent) sees the streamed data too.
#[inline(always)]
pub(crate) fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores; SSE is part of x86_64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_appends_and_zeroes_rows_of_any_length() {
        for n in 0..11u64 {
            let mut out = vec![7u64];
            let mut src: Vec<u64> = (1..=n).collect();
            take(&mut src, &mut out);
            let want: Vec<u64> = std::iter::once(7).chain(1..=n).collect();
            assert_eq!(out, want);
            assert!(src.iter().all(|&w| w == 0));
        }
    }

    #[test]
    fn both_ways_append_the_same_words() {
        for streaming in [false, true] {
            let mut out = vec![7u64, 8];
            extend(&mut out, &[1, 2, 3], streaming);
            extend(&mut out, &[], streaming);
            extend(&mut out, &[u64::MAX], streaming);
            fence();
            assert_eq!(out, [7, 8, 1, 2, 3, u64::MAX], "streaming {streaming}");
        }
    }
}
