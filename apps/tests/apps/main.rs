//! Integration tests of the store-backed apps and the `iterstore` CLI (one test binary).
//!
//! Each app is checked against its oracle (`algo::*::reference`), against its limit
//! implementation under BSP, across the three store modes (which must give identical models
//! under BSP), and on planted data for the quality of what it learns. The CLI tests run the
//! built binary.

mod bench_cli;
mod bench_dnn;
mod checkpoint;
mod cli;
mod cluster;
mod cnn;
mod cnn_partitioned;
mod dnn;
mod dnn_checks;
mod dnn_partitioned;
mod faults;
mod fuzz_corpus;
mod lda;
mod mf;
mod pagerank;
mod plan_cli;
mod util;
