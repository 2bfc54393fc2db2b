//! Software prefetch: a hint that a cache line will be read soon. The specialized store
//! knows its future accesses (the pattern), so it asks for them a few steps ahead.
//!
//! The one place this crate uses a platform intrinsic; elsewhere it is a no-op.

/// Asks the CPU to bring the cache line holding `value` into the L1 cache. Never faults,
/// reads nothing and changes nothing observable.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `value` is a valid reference, and a prefetch is only a hint: it cannot fault
    // or change memory. SSE (which provides the instruction) is part of x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// [`prefetch`] of the cache line holding element `at` of `slice`, which may be past its
/// end (then it hints an address that is never read: a prefetch cannot fault), so the
/// caller needs no bounds check.
#[inline(always)]
pub(crate) fn prefetch_at<T>(slice: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the pointer is only computed (wrapping, never dereferenced) and handed to
    // the prefetch instruction, which is a hint: it cannot fault or change memory, even
    // for an address outside any allocation. SSE is part of x86_64.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(slice.as_ptr().wrapping_add(at).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, at);
}
