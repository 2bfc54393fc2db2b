//! # iterstore
//!
//! A parameter server for iterative machine learning. Workers share model parameters
//! stored in **tables** of fixed-width **rows** through three operations:
//!
//! - [`Worker::read`] — a row's value, at most `s` clocks stale
//!   ([Stale Synchronous Parallel](Staleness); `s = 0` is BSP), always including the
//!   worker's own updates;
//! - [`Worker::update`] — add a delta to a row (updates aggregate with `+`);
//! - [`Worker::clock`] — end of a unit of work: buffered updates are sent.
//!
//! A [`Cluster`] is started from a validated [`Config`]; [`Cluster::create_table`] makes
//! typed [`Table`]s; [`Cluster::run`] runs a closure on every worker thread.
//!
//! Internally, server shards (`server`) hold the authoritative rows and the workers'
//! clocks, the client side (`client`) caches snapshots and fetches on misses, and a
//! transport moves protocol messages between them. The consistency rules are a pure
//! state machine. See `ARCHITECTURE.md`.
//!
//! ```
//! use iterstore::{Cluster, Config};
//!
//! # fn main() -> iterstore::Result<()> {
//! let mut cluster = Cluster::start(Config::new(2))?; // 2 workers, BSP
//! let weights = cluster.create_table::<f32>("weights", 4)?;
//! let sums = cluster.run(|w| {
//!     let mut row = [0.0f32; 4];
//!     for _iteration in 0..3 {
//!         w.read(&weights, 0, &mut row)?; // READ
//!         w.update(&weights, 0, &[1.0, 0.0, 0.0, 0.0])?; // UPDATE
//!         w.clock()?; // CLOCK
//!     }
//!     w.read(&weights, 0, &mut row)?;
//!     Ok(row[0])
//! })?;
//! assert_eq!(sums, vec![6.0, 6.0]); // 2 workers x 3 iterations
//! cluster.shutdown()?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

mod buf;
mod client;
mod cluster;
mod config;
mod consistency;
mod element;
mod error;
mod gather;
mod msg;
mod plan;
mod prefetch;
mod server;
mod table;
mod transport;
mod worker;

pub use buf::AlignedBuf;
pub use cluster::{Cluster, Stats};
pub use config::{Config, Mode, Specializations, Staleness, MAX_SHARDS, MAX_WORKERS};
pub use consistency::Clock;
pub use element::{ElemType, Element};
pub use error::{Error, Result};
pub use gather::{AccessPattern, RowUse};
pub use table::{RowKey, Table, TableId, TableMeta};
pub use worker::Worker;
