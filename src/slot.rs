//! The arena slot layout, a wire format: every row in an arena (the process's, a
//! shard's, a worker's update slab) starts 8-byte aligned and takes its length rounded up
//! to 8 bytes. Slabs and refresh chunks are concatenations of such slots.

/// Bytes a row of `len` bytes takes in an arena.
#[inline]
pub(crate) const fn padded(len: usize) -> usize {
    len.div_ceil(8) * 8
}

/// 8-byte words a row of `len` bytes takes in an arena.
#[inline]
pub(crate) const fn padded_words(len: usize) -> usize {
    len.div_ceil(8)
}
