//! The ratings loader (see `iterstore_apps::fuzzing::ratings`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore_apps::fuzzing::ratings(data));
