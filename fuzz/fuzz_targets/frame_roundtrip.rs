//! Generated messages must round-trip through a frame (see `iterstore::fuzzing::frame_roundtrip`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore::fuzzing::frame_roundtrip(data));
