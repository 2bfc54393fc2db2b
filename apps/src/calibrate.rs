//! Measures the hardware profile of the performance model (Yan et al., KDD'15) on this
//! machine: the costs of the dense kernels the DNN code uses ([`crate::dnn::kernels`]),
//! their slow-down when H threads run them at once, and the latency and bandwidth of the
//! store's own TCP transport between two processes.
//!
//! - `C_muladd`: seconds per multiply-add of the layer GEMMs (forward, back-propagation and
//!   weight update of a `size × size` layer over a batch, timed together).
//! - `C_act`, `C_err`: seconds per logistic activation and per error term (the element-wise
//!   passes, timed alone).
//! - `C_interf(H)`, `H = 1..threads`: the mean time of the same three GEMMs when H threads
//!   run them at once (each on its own matrices), over the time of one thread alone.
//! - `C_ncost`, `C_nbw`: two processes of a cluster on 127.0.0.1 (threads of this process
//!   joined by the TCP transport, as separate processes are) exchange values with
//!   [`Cluster::all_gather`] through rank 0: a round trip of 8 bytes gives the latency
//!   (`C_ncost` = half of it, one value for every thread count), 8 MB up and back give the
//!   bandwidth. This is loopback (memory copies, not a NIC) unless the caller runs it on
//!   an emulated link.
//!
//! Every figure is the median of several repetitions.

use crate::dnn::kernels;
use iterstore::{Cluster, Config, Membership, Secret};
use iterstore_perf::{spec::FORMAT_VERSION, Profile};
use std::time::{Duration, Instant};

/// How much to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Neurons per side of the timed layer.
    pub size: usize,
    /// Samples per batch.
    pub batch: usize,
    /// Repetitions per figure (the median is kept).
    pub repeats: usize,
    /// The most threads `C_interf` is measured for.
    pub threads: usize,
    /// Bytes of the bandwidth ping-pong.
    pub bandwidth_bytes: usize,
}

impl Settings {
    /// A thorough measurement (a few seconds per figure at most).
    pub fn full(threads: usize) -> Settings {
        Settings {
            size: 512,
            batch: 64,
            repeats: 9,
            threads,
            bandwidth_bytes: 8 << 20,
        }
    }

    /// A quick one (for tests and smoke runs).
    pub fn quick(threads: usize) -> Settings {
        Settings {
            size: 128,
            batch: 16,
            repeats: 3,
            threads,
            bandwidth_bytes: 1 << 20,
        }
    }
}

/// The median of `f`'s durations over `n` runs.
fn median(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut d: Vec<Duration> = (0..n.max(1)).map(|_| f()).collect();
    d.sort();
    d[d.len() / 2]
}

/// One layer's matrices.
struct Layer {
    w: Vec<f32>,
    x: Vec<f32>,
    y: Vec<f32>,
    delta_in: Vec<f32>,
}

impl Layer {
    fn new(size: usize, batch: usize) -> Layer {
        let fill = |n: usize, s: u32| -> Vec<f32> {
            (0..n)
                .map(|k| {
                    ((k as u32).wrapping_mul(2_654_435_761) ^ s) as f32 / u32::MAX as f32 - 0.5
                })
                .collect()
        };
        Layer {
            w: fill(size * size, 1),
            x: fill(batch * size, 2),
            y: vec![0.0; batch * size],
            delta_in: vec![0.0; batch * size],
        }
    }

    /// Forward, back-propagation and update once; returns the GEMM time only.
    fn step(&mut self, size: usize, batch: usize) -> Duration {
        let started = Instant::now();
        // The GEMMs alone: forward without the activation pass, and so on.
        let (b, n) = (batch, size);
        kernels::forward(&self.w, &self.x, &mut self.y, b, n, n);
        let forward = started.elapsed();
        let act = time_activation(&mut self.y);
        let started = Instant::now();
        kernels::backward(&self.w, &self.y, &self.x, &mut self.delta_in, b, n, n);
        let backward = started.elapsed();
        let err = time_error_terms(&mut self.delta_in, &self.x);
        let started = Instant::now();
        kernels::update(&mut self.w, &self.y, &self.x, 1e-6, b, n, n);
        let update = started.elapsed();
        (forward + backward + update).saturating_sub(act + err)
    }
}

fn time_activation(y: &mut [f32]) -> Duration {
    let started = Instant::now();
    kernels::activate(y);
    started.elapsed()
}

fn time_error_terms(d: &mut [f32], x: &[f32]) -> Duration {
    let started = Instant::now();
    kernels::error_terms(d, x);
    started.elapsed()
}

/// `(C_muladd, C_act, C_err)` in seconds.
pub fn compute_costs(s: &Settings) -> (f64, f64, f64) {
    let mut layer = Layer::new(s.size, s.batch);
    layer.step(s.size, s.batch); // warm up
    let gemm = median(s.repeats, || layer.step(s.size, s.batch));
    let muladds = 3.0 * (s.batch * s.size * s.size) as f64;
    let elems = (s.batch * s.size) as f64;
    let mut y = layer.y.clone();
    let act = median(s.repeats, || time_activation(&mut y));
    let mut d = layer.delta_in.clone();
    let err = median(s.repeats, || time_error_terms(&mut d, &layer.x));
    (
        gemm.as_secs_f64() / muladds,
        act.as_secs_f64() / elems,
        err.as_secs_f64() / elems,
    )
}

/// `C_interf(H)` for `H = 1..=s.threads`: the slow-down of H threads running the layer
/// at once over one thread alone (`C_interf(1) = 1`).
pub fn interference(s: &Settings) -> Vec<f64> {
    let run = |h: usize| -> Duration {
        median(s.repeats, || {
            let barrier = std::sync::Barrier::new(h);
            let total: Duration = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..h)
                    .map(|_| {
                        let barrier = &barrier;
                        scope.spawn(move || {
                            let mut layer = Layer::new(s.size, s.batch);
                            layer.step(s.size, s.batch);
                            barrier.wait();
                            layer.step(s.size, s.batch)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|t| t.join().unwrap_or_default())
                    .sum()
            });
            total / h as u32
        })
    };
    let one = run(1).as_secs_f64().max(1e-12);
    (1..=s.threads.max(1))
        .map(|h| {
            if h == 1 {
                1.0
            } else {
                (run(h).as_secs_f64() / one).max(1e-3)
            }
        })
        .collect()
}

/// `(C_ncost seconds, C_nbw bits per second)` over the store's TCP transport between two
/// processes on 127.0.0.1 (see the module docs).
pub fn network_costs(s: &Settings) -> iterstore::Result<(f64, f64)> {
    let hosts = iterstore::loopback_hosts(2).map_err(|e| iterstore::Error::app(0, e))?;
    let secret = Secret::new(b"calibration, loopback only".to_vec())?;
    let values = s.bandwidth_bytes / 8;
    let repeats = s.repeats;
    let results: Vec<iterstore::Result<Option<(f64, f64)>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let config = Config::new(1).with_membership(Membership::new(
                    rank,
                    hosts.clone(),
                    secret.clone(),
                ));
                scope.spawn(move || -> iterstore::Result<Option<(f64, f64)>> {
                    let mut c = Cluster::start(config)?;
                    // Rank 1 times round trips through rank 0 (where the coordinator is);
                    // rank 0 contributes nothing to the big exchange.
                    let small = [rank as f64];
                    c.all_gather(&small)?; // warm up
                    let mut rtt = Vec::with_capacity(repeats);
                    for _ in 0..repeats.max(5) {
                        let t = Instant::now();
                        c.all_gather(&small)?;
                        rtt.push(t.elapsed());
                    }
                    let big: Vec<f64> = if rank == 1 {
                        vec![0.5; values]
                    } else {
                        Vec::new()
                    };
                    let mut bw = Vec::with_capacity(repeats);
                    for _ in 0..repeats {
                        let t = Instant::now();
                        c.all_gather(&big)?;
                        bw.push(t.elapsed());
                    }
                    c.shutdown()?;
                    rtt.sort();
                    bw.sort();
                    let rtt = rtt[rtt.len() / 2].as_secs_f64();
                    let bw = bw[bw.len() / 2].as_secs_f64();
                    // Up and back: the payload crosses the link twice.
                    let bits = 2.0 * (values * 8) as f64 * 8.0;
                    Ok((rank == 1).then(|| (rtt / 2.0, bits / (bw - rtt).max(1e-9))))
                })
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
    let mut measured = None;
    for r in results {
        if let Some(m) = r? {
            measured = Some(m);
        }
    }
    measured.ok_or_else(|| iterstore::Error::app(0, "rank 1 measured nothing"))
}

/// The profile of this machine, named `name`, with `ps_read_alpha` as given (the model's
/// stated parameter; it is not measured).
pub fn calibrate(name: &str, s: &Settings, ps_read_alpha: f64) -> iterstore::Result<Profile> {
    let (c_muladd_s, c_act_s, c_err_s) = compute_costs(s);
    let c_interf = interference(s);
    let (c_ncost, c_nbw) = network_costs(s)?;
    Ok(Profile {
        version: FORMAT_VERSION,
        name: name.to_string(),
        c_muladd_s,
        c_act_s,
        c_err_s,
        c_interf,
        c_ncost_s: vec![c_ncost],
        c_nbw_bits_per_s: c_nbw,
        ps_read_alpha,
    })
}
