//! The LIBSVM / svmlight loader (see `iterstore_data::fuzzing::svmlight`).
#![no_main]

#[global_allocator]
static ALLOC: iterstore_fuzz::Bounded = iterstore_fuzz::Bounded;

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore_data::fuzzing::svmlight(data));
