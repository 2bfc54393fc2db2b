//! Rank-k updates sent as factors (`Worker::update_outer`, issue 41's layer updates):
//! under BSP a run equals the same run whose workers multiply the factors out and UPDATE
//! the rows — bit for bit, in one process, in two, over TCP and in virtual mode — while
//! far fewer bytes leave the workers (`Cluster::update_bytes`); misuse is refused before
//! anything is sent.

use crate::util::{over_tcp, within};
use iterstore::stats::TableUpdates;
use iterstore::{Cluster, Config, Mode, Rule};

const ROWS: u64 = 33;
const WIDTH: usize = 64;
const K: usize = 2;
const CLOCKS: u64 = 3;

/// Factors that depend on what worker `w` read at clock `c`: wrong reads, wrong model.
fn factors(read: &[Vec<f32>], w: usize, c: u64) -> (Vec<f32>, Vec<f32>) {
    let left = (0..K * ROWS as usize)
        .map(|i| {
            0.01 * ((i * 7 + w * 3 + c as usize) % 11) as f32 - 0.05 + read[i % 6][i % 5] * 1e-3
        })
        .collect();
    let right = (0..K * WIDTH)
        .map(|j| ((j * 13 + w + 2 * c as usize) % 17) as f32 * 0.1 - 0.8)
        .collect();
    (left, right)
}

/// Row `first + i`'s delta `Σ_s left[s·n + i] · right[s]` in `s` order, a multiply then
/// an add: what the shard computes.
fn multiplied_out(left: &[f32], right: &[f32], n: usize, i: usize) -> Vec<f32> {
    (0..WIDTH)
        .map(|j| {
            (0..K).fold(0.0f32, |acc, s| {
                acc + left[s * n + i] * right[s * WIDTH + j]
            })
        })
        .collect()
}

/// `CLOCKS` clocks: every worker reads every row, then UPDATEs rows `1..ROWS` by factors
/// (`by_factors`) or by the multiplied-out deltas; returns the final rows and the bytes
/// sent.
fn train(
    c: &mut Cluster,
    by_factors: bool,
) -> iterstore::Result<(Vec<Vec<f32>>, Vec<TableUpdates>)> {
    let rule = Rule::AdaGrad {
        lr: 0.1,
        eps: 1e-6,
        initial: 0.1,
    };
    let t = c.create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)?;
    let body = |w: &mut iterstore::Worker<'_>| -> iterstore::Result<()> {
        for clock in 0..CLOCKS {
            let mut read = vec![vec![0.0f32; WIDTH]; ROWS as usize];
            for (r, row) in read.iter_mut().enumerate() {
                w.read(&t, r as u64, row)?;
            }
            let (left, right) = factors(&read, w.id(), clock);
            let n = ROWS as usize - 1;
            let left = &left[..K * n];
            if by_factors {
                w.update_outer(&t, 1..ROWS, left, &right)?;
            } else {
                for i in 0..n {
                    w.update(&t, 1 + i as u64, &multiplied_out(left, &right, n, i))?;
                }
            }
            w.clock()?;
        }
        Ok(())
    };
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(body)?;
    }
    c.run(body)?;
    let rows = c.snapshot(&t)?.into_iter().map(|(_, v)| v).collect();
    Ok((rows, c.update_bytes()))
}

#[test]
fn factors_train_the_model_multiplied_out_deltas_train_bit_for_bit() {
    let (reference, row_bytes) = within(60, || {
        let mut c = Cluster::start(Config::new(2).with_shards(3)).unwrap();
        train(&mut c, false).unwrap()
    });
    for mode in [Mode::Generic, Mode::Virtual] {
        let (one, bytes) = within(60, move || {
            let mut c = Cluster::start(Config::new(2).with_shards(3).with_mode(mode)).unwrap();
            train(&mut c, true).unwrap()
        });
        assert!(one == reference, "{mode:?}: one process differs");
        // Per clock and worker: 32 rows of 12 + 256 bytes against k = 2 factors of 32 + 64
        // values, the right one to each of the (up to) 3 shards, and 8 bytes a row.
        let n = ROWS - 1;
        assert_eq!(
            row_bytes[0].bytes,
            2 * CLOCKS * n * (12 + 4 * WIDTH as u64),
            "{row_bytes:?}"
        );
        let most = 2 * CLOCKS * (n * 8 + 4 * K as u64 * (n + 3 * WIDTH as u64));
        assert!(
            bytes[0].bytes <= most && bytes[0].bytes * 3 < row_bytes[0].bytes,
            "{mode:?}: {bytes:?} against {row_bytes:?}"
        );
    }
    let two = within(60, || {
        Cluster::run_local_processes(Config::new(1).with_shards(2), 2, |c| train(c, true)).unwrap()
    });
    let tcp = within(60, || {
        over_tcp(Config::new(1).with_shards(2), 2, |c| train(c, true))
    });
    for (rank, (rows, _)) in two.iter().chain(&tcp).enumerate() {
        assert!(*rows == reference, "process {rank} differs");
    }
}

#[test]
fn a_rank_k_update_the_store_cannot_apply_is_refused_at_the_call() {
    let e = within(60, || {
        let mut c = Cluster::start(Config::new(1)).unwrap();
        let sum = c.create_table_sized::<f32>("sum", 2, 4).unwrap();
        let ints = c
            .create_table_with_rule::<i64>("ints", 2, Some(4), Rule::Sum)
            .unwrap();
        let sgd = c
            .create_table_with_rule::<f32>("sgd", 2, Some(4), Rule::Sgd { lr: 0.1 })
            .unwrap();
        c.run(|w| {
            let errors = [
                w.update_outer(&sum, 0..2, &[1.0, 2.0], &[1.0, 1.0]),
                w.update_outer(&ints, 0..2, &[1, 2], &[1, 1]),
                w.update_outer(&sgd, 0..2, &[1.0, 2.0, 3.0], &[1.0, 1.0]),
                w.update_outer(&sgd, 3..5, &[1.0, 2.0], &[1.0, 1.0]),
                w.update_outer(&sgd, 2..2, &[], &[]),
            ];
            Ok(errors.map(|e| e.unwrap_err().to_string()))
        })
        .unwrap()
    });
    let want = [
        "table 'sum': it has no update rule",
        "table 'ints'",
        "3 left and 2 right values for 2 rows of width 2",
        "row 4",
        "no rows in 2..2",
    ];
    for (got, want) in e[0].iter().zip(want) {
        assert!(got.contains(want), "{got} (wanted {want})");
    }
}

#[test]
fn rows_smaller_than_their_factors_are_multiplied_out_by_the_worker_alike() {
    // Two rows of 64 from 8 samples: 8 × (2 + 64) factors against 2 rows of 64.
    let run = |by_factors: bool| {
        within(60, move || {
            let mut c = Cluster::start(Config::new(2).with_shards(2)).unwrap();
            let rule = Rule::Sgd { lr: 0.5 };
            let t = c
                .create_table_with_rule::<f64>("few", 64, Some(2), rule)
                .unwrap();
            c.run(|w| {
                let left: Vec<f64> = (0..16).map(|i| 0.1 * i as f64 - w.id() as f64).collect();
                let right: Vec<f64> = (0..8 * 64).map(|j| (j % 7) as f64 * 0.3 - 1.0).collect();
                if by_factors {
                    w.update_outer(&t, 0..2, &left, &right)?;
                } else {
                    for i in 0..2 {
                        let delta: Vec<f64> = (0..64)
                            .map(|j| {
                                (0..8).fold(0.0, |a, s| a + left[s * 2 + i] * right[s * 64 + j])
                            })
                            .collect();
                        w.update(&t, i as u64, &delta)?;
                    }
                }
                w.clock()
            })
            .unwrap();
            (c.snapshot(&t).unwrap(), c.update_bytes())
        })
    };
    let (factors, bytes) = run(true);
    let (rows, row_bytes) = run(false);
    assert!(factors == rows, "the weights differ");
    // The worker sent rows, not factors: 2 workers × 2 rows × (12 + 512) bytes.
    assert_eq!(bytes[0].bytes, 2 * 2 * (12 + 512), "{bytes:?}");
    assert_eq!(bytes, row_bytes);
}
