//! The handshake against a stranger and between honest sides over a tampering channel (see `iterstore::fuzzing::handshake`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore::fuzzing::handshake(data));
