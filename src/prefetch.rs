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
