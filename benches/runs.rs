//! Criterion benchmarks of what a run and a CLOCK cost around the application's work:
//! one [`Cluster::run`] of a tiny iteration (eight 64-wide reads, one update, then CLOCK)
//! on 2 workers of a virtual-mode store, with one CLOCK and with four per run, wall time
//! of the call. The difference between the two is the cost of a BSP CLOCK (slabs to the
//! shard, the refresh back, the other worker woken); what the one-clock run costs beyond
//! a CLOCK is the run's own: starting the workers, the end-of-run barrier, the caller
//! woken. Short runs (a PageRank iteration is a few hundred microseconds) feel both.

use criterion::{criterion_group, criterion_main, Criterion};
use iterstore::{Cluster, Config, Mode, Table, Worker};

const WIDTH: usize = 64;

/// Eight reads, one update of the worker's own row, one CLOCK.
fn step(w: &mut Worker<'_>, t: &Table<f64>) -> iterstore::Result<()> {
    let mut v = [0.0; WIDTH];
    for r in 0..8u64 {
        w.read(t, r, &mut v)?;
    }
    v[0] = 1.0;
    w.update(t, w.id() as u64, &v)?;
    w.clock()
}

fn runs(c: &mut Criterion) {
    let mut group = c.benchmark_group("run");
    for clocks in [1usize, 4] {
        let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
        let t = cluster.create_table::<f64>("rows", WIDTH).unwrap();
        let iteration = |w: &mut Worker<'_>| -> iterstore::Result<()> {
            for _ in 0..clocks {
                step(w, &t)?;
            }
            Ok(())
        };
        cluster.virtual_iteration(iteration).unwrap();
        group.bench_function(format!("{clocks}clock/2w"), |b| {
            b.iter(|| cluster.run(iteration).unwrap())
        });
        cluster.shutdown().unwrap();
    }
    group.finish();
}

criterion_group!(benches, runs);
criterion_main!(benches);
