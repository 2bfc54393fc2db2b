//! The bag-of-words corpus loader (see `iterstore_data::fuzzing::corpus`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore_data::fuzzing::corpus(data));
