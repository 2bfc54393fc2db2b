//! Integration tests of the store-backed apps (one test binary).
//!
//! Each app is checked against its oracle (`iterstore_algo::*::reference`), against its
//! limit implementation under BSP, across the three store modes (which must give identical
//! models under BSP), across in-process processes, and on planted data for the quality of
//! what it learns. The `iterstore` binary's tests are the CLI crate's (`apps/cli/tests`).

mod cnn;
mod cnn_partitioned;
mod dnn;
mod dnn_checks;
mod dnn_partitioned;
mod dnn_quorum;
mod dnn_server;
mod dnn_tune;
mod lda;
mod lda_tune;
mod local_processes;
mod logreg;
mod mf;
mod mf_tune;
mod pagerank;
mod util;
