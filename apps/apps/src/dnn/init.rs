//! The initial weights: every row's [`init_row`], keyed by seed, layer and row (the same
//! on any number of workers) — added by one worker's UPDATE in an init run, or, when the
//! servers step the weights (an UPDATE is a gradient there), set ([`Cluster::set_rows`]).

use iterstore::{Cluster, Table};
#[cfg(doc)]
use iterstore_algo::dnn::mlp::init_row;
use iterstore_algo::dnn::Network;

use crate::{timed_init_run, AppError};

/// The initialisation run: row `k` (counting the rows of all layers in order) gets its
/// [`init_row`] from global worker `k mod workers`; returns its time.
pub(super) fn init<N: Network, S: Send>(
    cluster: &mut Cluster,
    states: &mut [S],
    tables: &[Table<f32>],
    net: &N,
    seed: u64,
    workers: usize,
) -> Result<f64, AppError> {
    timed_init_run(cluster, states, |w, _| {
        let mut k = 0usize;
        for (l, table) in tables.iter().enumerate() {
            let mut row = vec![0.0f32; net.width(l)];
            for r in 0..net.rows(l) {
                if k % workers == w.id() {
                    net.init_row(seed, l, r, &mut row);
                    w.update(table, r as u64, &row)?;
                }
                k += 1;
            }
        }
        w.clock()
    })
}

/// The initialisation with a server rule: every row gets its [`init_row`] by
/// [`Cluster::set_rows`], row `k` (counting the rows of all layers) from process `k mod
/// processes`; returns its time.
pub(super) fn init_set<N: Network>(
    cluster: &mut Cluster,
    tables: &[Table<f32>],
    net: &N,
    seed: u64,
) -> Result<f64, AppError> {
    let (rank, processes) = (cluster.rank(), cluster.processes());
    let started = std::time::Instant::now();
    let mut k = 0usize;
    for (l, table) in tables.iter().enumerate() {
        let mut mine = Vec::new();
        for r in 0..net.rows(l) {
            if k % processes == rank {
                let mut row = vec![0.0f32; net.width(l)];
                net.init_row(seed, l, r, &mut row);
                mine.push((r as u64, row));
            }
            k += 1;
        }
        cluster.set_rows(table, &mine)?;
    }
    Ok(started.elapsed().as_secs_f64())
}
