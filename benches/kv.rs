//! Key-value throughput over TCP on loopback, through the public API: one "server"
//! process whose worker does nothing, and one "worker" process that pushes or pulls
//! [`KEYS`] single-`f32` rows per request, every one of them held by the server process's
//! shard (chosen with [`Cluster::home_of`]), so every value crosses the network. Both
//! processes are threads of this benchmark, joined by the same TCP transport separate
//! processes use.
//!
//! - `kv/push`: one request is [`KEYS`] UPDATEs then a CLOCK (generic mode: one `Clock`
//!   message carrying the 1 000 rows), asynchronous (no waiting for the server's clock);
//!   the run ends when every update is applied (the run barrier).
//! - `kv/pull`: one request is a CLOCK then [`KEYS`] READs (virtual mode, BSP: the CLOCK
//!   makes the cached rows stale, so the first READ waits for the one refresh of all
//!   [`KEYS`] rows, a single `SlabFetch` answered with one contiguous chunk).
//!
//! Throughput is reported in values (elements) per second. ps-lite's `kv_app_benchmark`
//! measured 5.0 M values/s push on this kind of machine. See `BENCHMARKS.md`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use iterstore::deploy::{Membership, Secret};
use iterstore::{Cluster, Config, Mode, Staleness, Table};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Values per request.
const KEYS: usize = 1_000;

/// What the server thread is asked to do.
enum Cmd {
    /// Take part in one run (its worker finishes at once).
    Run,
    /// Shut down.
    Stop,
}

/// A two-process cluster: the worker process here, the server process on a thread.
struct Pair {
    cluster: Cluster,
    table: Table<f32>,
    keys: Vec<u64>,
    server: mpsc::Sender<Cmd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pair {
    fn start(mode: Mode, staleness: Staleness) -> Pair {
        let hosts = iterstore::deploy::loopback_hosts(2).unwrap();
        let secret = Secret::new(b"kv benchmark secret, not for use".to_vec()).unwrap();
        let config = |rank| {
            Config::new(1)
                .with_mode(mode)
                .with_staleness(staleness)
                .with_membership(Membership::new(rank, hosts.clone(), secret.clone()))
        };
        let (tx, rx) = mpsc::channel();
        let server_config = config(1);
        let thread = std::thread::spawn(move || {
            let mut c = Cluster::start(server_config).unwrap();
            c.create_table::<f32>("kv", 1).unwrap();
            if c.config().mode == Mode::Virtual {
                c.virtual_iteration(|_| Ok(())).unwrap();
            }
            while let Ok(Cmd::Run) = rx.recv() {
                c.run(|_| Ok(())).unwrap();
            }
            c.shutdown().unwrap();
        });
        let mut cluster = Cluster::start(config(0)).unwrap();
        let table = cluster.create_table::<f32>("kv", 1).unwrap();
        let keys: Vec<u64> = (0..)
            .filter(|&r| cluster.home_of(&table, r).unwrap() == 1)
            .take(KEYS)
            .collect();
        Pair {
            cluster,
            table,
            keys,
            server: tx,
            thread: Some(thread),
        }
    }

    /// Runs `f` on the worker process while the server process takes part in the run.
    fn run(&mut self, f: impl Fn(&mut iterstore::Worker<'_>) -> iterstore::Result<()> + Sync) {
        self.server.send(Cmd::Run).unwrap();
        self.cluster.run(f).unwrap();
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.server.send(Cmd::Stop);
        let _ = self.cluster.shutdown();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(5));

    let mut push = Pair::start(Mode::Generic, Staleness::Unbounded);
    group.bench_function("push", |b| {
        b.iter_custom(|iters| {
            let (t, keys) = (push.table, push.keys.clone());
            let started = Instant::now();
            push.run(|w| {
                for _ in 0..iters {
                    for &k in &keys {
                        w.update(&t, k, &[1.0])?;
                    }
                    w.clock()?;
                }
                Ok(())
            });
            started.elapsed()
        })
    });
    drop(push);

    let mut pull = Pair::start(Mode::Virtual, Staleness::BSP);
    let (t, keys) = (pull.table, pull.keys.clone());
    pull.cluster
        .virtual_iteration(|w| {
            let mut v = [0.0f32];
            for &k in &keys {
                w.read(&t, k, &mut v)?;
            }
            w.clock()
        })
        .unwrap();
    group.bench_function("pull", |b| {
        b.iter_custom(|iters| {
            let keys = keys.clone();
            let started = Instant::now();
            pull.run(|w| {
                let mut v = [0.0f32];
                let mut sum = 0.0;
                for _ in 0..iters {
                    w.clock()?;
                    for &k in &keys {
                        w.read(&t, k, &mut v)?;
                        sum += v[0];
                    }
                }
                std::hint::black_box(sum);
                Ok(())
            });
            started.elapsed()
        })
    });
    drop(pull);
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
