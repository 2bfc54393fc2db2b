//! The ratings loader (see `iterstore_data::fuzzing::ratings`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore_data::fuzzing::ratings(data));
