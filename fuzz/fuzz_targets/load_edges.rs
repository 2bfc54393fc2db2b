//! The edge-list loader (see `iterstore_apps::fuzzing::edges`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| iterstore_apps::fuzzing::edges(data));
