//! Integration tests of the `iterstore` command (one test binary): each runs the built
//! binary (`CARGO_BIN_EXE_iterstore`), as one process or as a cluster of processes, and
//! checks what it prints, writes and refuses. The apps' own tests are the `iterstore-apps`
//! crate's (`apps/apps/tests`).

mod bench_cli;
mod bench_dnn;
mod bench_logreg;
mod checkpoint;
mod cli;
mod cluster;
mod cnn;
mod cnn_partitioned;
mod dnn;
mod dnn_partitioned;
mod faults;
mod hostile;
mod join_env;
mod launcher;
mod metrics;
mod peers;
mod plan_cli;
mod procs;
mod replicas;
mod restarts;
mod tune;
mod util;
