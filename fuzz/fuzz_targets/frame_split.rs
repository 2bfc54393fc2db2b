//! Valid frames split at arbitrary points (see `iterstore::fuzzing::frame_split`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore::fuzzing::frame_split(data));
