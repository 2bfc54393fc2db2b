//! Integration tests of iterstore through its public API (one test binary).

mod api_errors;
mod async_reads;
mod branches;
mod checkpoint;
mod cluster;
mod custom_rules;
mod functions;
mod fuzz_corpus;
mod many_rows;
mod messages;
mod metrics;
mod modes;
mod numa;
mod outer;
mod replicas;
mod rule_state;
mod rules;
mod runs_differ;
mod set_rows;
mod ssp_props;
mod tidy;
mod units;
mod update_bytes;
mod util;
mod worker_state;
