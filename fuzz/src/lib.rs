//! Shared by the fuzz targets: a global allocator that enforces the allocation bound the
//! campaigns state (see `RELIABILITY.md`) without needing a sanitizer's malloc hooks.
//!
//! libFuzzer's `-malloc_limit_mb` only works through sanitizer hooks, and the campaigns
//! run without a sanitizer (the code under test has no `unsafe`), so the bound is checked
//! here: any single Rust allocation or reallocation larger than [`MAX_ALLOCATION`] aborts
//! the process, which libFuzzer reports as a crash and saves the input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// The largest single allocation a target may make: 256 MiB.
pub const MAX_ALLOCATION: usize = 256 << 20;

/// [`System`], aborting on an allocation over [`MAX_ALLOCATION`].
pub struct Bounded;

/// Reports an allocation over the bound and aborts (writing to stderr does not allocate).
fn over(size: usize) -> ! {
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "==fuzz== allocation of {size} bytes exceeds the {MAX_ALLOCATION}-byte bound"
    );
    std::process::abort()
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the `GlobalAlloc`
// contract; the only addition is aborting before an oversized request.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            over(layout.size());
        }
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            over(layout.size());
        }
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc` is passed on unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            over(new_size);
        }
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
