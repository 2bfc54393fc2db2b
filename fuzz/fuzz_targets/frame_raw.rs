//! Raw bytes through the frame decoder and message decoding (see `iterstore::fuzzing::frame_raw`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore::fuzzing::frame_raw(data));
