//! Criterion benchmarks of branches of the training state (issue 40): on a virtual-mode
//! store of 2 workers holding one table of 16 384 rows of 64 `f32` (4 MiB, every row
//! planned), the wall time of a [`Cluster::fork`] followed by a [`Cluster::free`] (one
//! copy of every row on the shards), of a pair of [`Cluster::switch`]es there and back
//! (each keeps the live rows in a slot and installs the other branch's, and the process
//! drops its copies), of a run after such a pair against a run without one (the whole
//! refreshes a switch costs the next run), and of a [`Cluster::park`] with its
//! [`Cluster::unpark`], against a [`Cluster::checkpoint`] of the same store.

use criterion::{criterion_group, criterion_main, Criterion};
use iterstore::{Cluster, Config, Mode, Table, Worker};

const ROWS: u64 = 16_384;
const WIDTH: usize = 64;

/// Every worker reads every row and adds to its half of them.
fn iteration(w: &mut Worker<'_>, t: &Table<f32>) -> iterstore::Result<()> {
    let mut v = [0.0f32; WIDTH];
    let half = ROWS / 2;
    for r in 0..ROWS {
        w.read(t, r, &mut v)?;
    }
    v.fill(0.5);
    let base = half * w.id() as u64;
    for r in base..base + half {
        w.update(t, r, &v)?;
    }
    w.clock()
}

fn branches(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("iterstore-bench-branches-{}", std::process::id()));
    let mut cluster = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
    let t = cluster.create_table_sized::<f32>("w", WIDTH, ROWS).unwrap();
    cluster.virtual_iteration(|w| iteration(w, &t)).unwrap();
    cluster.run(|w| iteration(w, &t)).unwrap();
    let main = cluster.live_branch();
    let mut group = c.benchmark_group("branches/16k-rows-x64-f32");
    group.sample_size(20);
    group.bench_function("fork+free", |b| {
        b.iter(|| {
            let id = cluster.fork(main).unwrap();
            cluster.free(id).unwrap();
        })
    });
    let other = cluster.fork(main).unwrap();
    group.bench_function("switch-pair", |b| {
        b.iter(|| {
            cluster.switch(other).unwrap();
            cluster.switch(main).unwrap();
        })
    });
    group.bench_function("run", |b| {
        b.iter(|| cluster.run(|w| iteration(w, &t)).unwrap())
    });
    group.bench_function("switch-pair+run", |b| {
        b.iter(|| {
            cluster.switch(other).unwrap();
            cluster.switch(main).unwrap();
            cluster.run(|w| iteration(w, &t)).unwrap()
        })
    });
    group.bench_function("park+unpark", |b| {
        b.iter(|| {
            cluster.park(other, &dir).unwrap();
            cluster.unpark(other).unwrap();
        })
    });
    // A checkpoint is refused where one at its clock exists: a fresh directory each time.
    let mut n = 0;
    group.bench_function("checkpoint", |b| {
        b.iter(|| {
            n += 1;
            cluster
                .checkpoint(&dir.join(format!("ckpt-{n}")), "bench")
                .unwrap()
        })
    });
    group.finish();
    cluster.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, branches);
criterion_main!(benches);
