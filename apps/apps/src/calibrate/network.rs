//! `C_ncost(H)` and `C_nbw(H)` for `H = 1..threads`: latency and bandwidth when H streams
//! communicate at once, over the store's own TCP transport on 127.0.0.1.
//!
//! Yan et al. (section 4.2.1, eq. 9) let the latency depend on H, "as this latency may
//! increase when both sender and receivers establish H concurrent connections", and give
//! each of H threads its share of the bandwidth. Here a stream is a pair of store
//! processes (two [`Cluster`]s joined by the TCP transport with its handshake, as separate
//! processes are, each with its own connections), and `threads` pairs are started once.
//! For each H, the first H pairs measure at the same time (a barrier starts them), each
//! exchanging values with [`Cluster::all_gather`] through its rank 0:
//!
//! - latency: the median of many round trips of 8 bytes, halved;
//! - bandwidth: the median time of 8 MB sent up and back (less one round trip), so
//!   `2 × bytes × 8 / time` bits per second for this stream.
//!
//! `C_ncost(H)` and `C_nbw(H)` are the means over the H streams. The streams overlap only
//! as far as their repetitions do (each runs its own; the barrier aligns their start), and
//! on loopback every "link" is memory copies through the kernel sharing the same cores as
//! the measuring threads, so a larger H also measures the CPU contention. On
//! `tools/emulate-cluster`'s links it would be the link.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use iterstore::deploy::{Membership, Secret};
use iterstore::{Cluster, Config};

use super::Settings;

/// What the streams measured, `H = 1..threads`.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkCosts {
    /// `C_ncost(H)`, seconds per message, entry `H − 1`.
    pub latency_s: Vec<f64>,
    /// `C_nbw(H)`, bits per second each stream got, entry `H − 1`.
    pub bandwidth_bits_per_s: Vec<f64>,
}

/// Round trips per latency figure, per repetition of the settings.
const ROUND_TRIPS_PER_REPEAT: usize = 5;

fn middle(mut d: Vec<Duration>) -> f64 {
    d.sort();
    d[d.len() / 2].as_secs_f64()
}

/// One stream's `(half round trip, bits per second)` on a started pair.
fn measure(c: &mut Cluster, rank: usize, s: &Settings) -> iterstore::Result<(f64, f64)> {
    let small = [rank as f64];
    c.all_gather(&small)?; // warm up
    let mut rtt = Vec::new();
    for _ in 0..s.repeats.max(1) * ROUND_TRIPS_PER_REPEAT {
        let t = Instant::now();
        c.all_gather(&small)?;
        rtt.push(t.elapsed());
    }
    // Rank 0 contributes nothing to the big exchange: rank 1's values go up and back.
    let values = s.bandwidth_bytes / 8;
    let big: Vec<f64> = if rank == 1 {
        vec![0.5; values]
    } else {
        Vec::new()
    };
    let mut bw = Vec::new();
    for _ in 0..s.repeats.max(1) {
        let t = Instant::now();
        c.all_gather(&big)?;
        bw.push(t.elapsed());
    }
    let (rtt, bw) = (middle(rtt), middle(bw));
    let bits = 2.0 * (values * 8) as f64 * 8.0;
    Ok((rtt / 2.0, bits / (bw - rtt).max(1e-9)))
}

/// `(half round trip, bits per second)` between the two processes of `cluster` (ranks 0
/// and 1 of a cluster of two, whatever network joins them: `iterstore calibrate --link`,
/// run on emulated links). Both processes call it; the figures are rank 1's, and rank 0
/// receives them by all-gather, so both return them.
pub fn link_costs(cluster: &mut Cluster, s: &Settings) -> iterstore::Result<(f64, f64)> {
    if cluster.processes() != 2 {
        return Err(iterstore::Error::app(
            0,
            format!(
                "a link is measured between 2 processes, not {}",
                cluster.processes()
            ),
        ));
    }
    let rank = cluster.rank();
    let mine = measure(cluster, rank, s)?;
    let all = cluster.all_gather(&[mine.0, mine.1])?;
    Ok((all[1][0], all[1][1]))
}

/// One process of pair `pair`: starts, then for every H measures if `pair < H`, between
/// barriers that every process of every pair passes (also after a failure, so none
/// waits forever; a failed process drops its cluster, which its partner notices). Rank 1
/// returns its stream's figures, `None` where it sat H out.
fn process(
    config: Config,
    rank: usize,
    pair: usize,
    s: &Settings,
    barrier: &Barrier,
) -> iterstore::Result<Vec<Option<(f64, f64)>>> {
    let (mut cluster, mut error) = match Cluster::start(config) {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e)),
    };
    let mut out = Vec::new();
    for h in 1..=s.threads.max(1) {
        barrier.wait();
        let measured = match cluster.as_mut() {
            Some(c) if pair < h => Some(measure(c, rank, s)),
            _ => None,
        };
        let figures = match measured {
            Some(Ok(m)) => Some(m),
            Some(Err(e)) => {
                (cluster, error) = (None, Some(e));
                None
            }
            None => None,
        };
        out.push(figures.filter(|_| rank == 1));
        barrier.wait();
    }
    match (cluster, error) {
        (_, Some(e)) => Err(e),
        (Some(mut c), None) => c.shutdown().map(|()| out),
        (None, None) => unreachable!("a cluster is dropped only with its error"),
    }
}

/// Measures `C_ncost(H)` and `C_nbw(H)` for `H = 1..s.threads` (module docs).
pub fn network_costs(s: &Settings) -> iterstore::Result<NetworkCosts> {
    let pairs = s.threads.max(1);
    let secret = Secret::new(b"calibration, loopback only".to_vec())?;
    let mut configs = Vec::new();
    for pair in 0..pairs {
        let hosts =
            iterstore::deploy::loopback_hosts(2).map_err(|e| iterstore::Error::app(0, e))?;
        for rank in 0..2 {
            let membership = Membership::new(rank, hosts.clone(), secret.clone());
            configs.push((pair, rank, Config::new(1).with_membership(membership)));
        }
    }
    let barrier = Barrier::new(2 * pairs);
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .into_iter()
            .map(|(pair, rank, config)| {
                let barrier = &barrier;
                scope.spawn(move || process(config, rank, pair, s, barrier))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(iterstore::Error::app(0, "calibration thread panicked"))
                })
            })
            .collect()
    });
    let mut per_h: Vec<Vec<(f64, f64)>> = vec![Vec::new(); pairs];
    for r in results {
        for (h, figures) in r?.into_iter().enumerate() {
            per_h[h].extend(figures);
        }
    }
    let mean = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
        v.iter().map(f).sum::<f64>() / v.len().max(1) as f64
    };
    if per_h.iter().enumerate().any(|(h, v)| v.len() != h + 1) {
        return Err(iterstore::Error::app(0, "a stream measured nothing"));
    }
    Ok(NetworkCosts {
        latency_s: per_h.iter().map(|v| mean(v, |m| m.0)).collect(),
        bandwidth_bits_per_s: per_h.iter().map(|v| mean(v, |m| m.1)).collect(),
    })
}
