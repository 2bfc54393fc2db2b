//! Server functions (issue 42): code each shard runs on its own rows. Dot products and
//! `a·x + y` computed where the rows are match a sequential reference; rows a function
//! writes are what every worker reads next, in every mode (caches, arenas and held copies
//! dropped); P processes give one process of as many shards bit for bit, over TCP too; a
//! function's error or panic fails the call, not the cluster; processes that register
//! different functions are refused.

use crate::util::{over_tcp, over_tcp_results, within};
use iterstore::functions::{Reduce, ServerFn};
use iterstore::{Cluster, Config, Error, Mode, Rule, Table, Worker};
use std::sync::Arc;

const ROWS: u64 = 40;
const WIDTH: usize = 3;

/// The value of row `r` of x and of y before any function ran.
fn x0(r: u64) -> [f64; WIDTH] {
    [r as f64 * 0.5, 1.0 / (r as f64 + 3.0), -(r as f64)]
}

fn y0(r: u64) -> [f64; WIDTH] {
    [1.0, r as f64 * 0.25 + 0.1, 2.0 / (r as f64 + 1.0)]
}

/// The functions under test: `dot(x, y)`, `y += args[0] · x`, and the largest absolute
/// element of y.
struct Functions {
    dot: ServerFn,
    axpy: ServerFn,
    max_abs: ServerFn,
}

fn register(c: &mut Cluster, x: Table<f64>, y: Table<f64>) -> iterstore::Result<Functions> {
    let dot = c.register_function("dot", Reduce::Sum, move |rows, _| {
        let (mut a, mut b, mut sum) = ([0.0; WIDTH], [0.0; WIDTH], 0.0);
        for r in rows.rows(&x)? {
            rows.read(&x, r, &mut a)?;
            rows.read(&y, r, &mut b)?;
            sum += a.iter().zip(&b).map(|(p, q)| p * q).sum::<f64>();
        }
        Ok(vec![sum])
    })?;
    let axpy = c.register_function("axpy", Reduce::Sum, move |rows, args| {
        let (mut a, mut b) = ([0.0; WIDTH], [0.0; WIDTH]);
        for r in rows.rows(&x)? {
            rows.read(&x, r, &mut a)?;
            rows.read(&y, r, &mut b)?;
            for (q, p) in b.iter_mut().zip(&a) {
                *q += args[0] * p;
            }
            rows.write(&y, r, &b)?;
        }
        Ok(Vec::new())
    })?;
    let max_abs = c.register_function("max_abs", Reduce::Max, move |rows, _| {
        let (mut b, mut m) = ([0.0; WIDTH], 0.0f64);
        for r in rows.rows(&y)? {
            rows.read(&y, r, &mut b)?;
            m = b.iter().fold(m, |m, v| m.max(v.abs()));
        }
        Ok(vec![m])
    })?;
    Ok(Functions { dot, axpy, max_abs })
}

/// Every worker reads every row of `t` (so each process caches, plans and holds them).
fn read_all(w: &mut Worker<'_>, t: &Table<f64>) -> iterstore::Result<Vec<f64>> {
    let mut all = vec![0.0; ROWS as usize * WIDTH];
    for (r, row) in all.chunks_exact_mut(WIDTH).enumerate() {
        w.read(t, r as u64, row)?;
    }
    Ok(all)
}

/// What [`program`] gives: the dot product before and after the axpy, the max, what
/// every worker read of y after the axpy (bits), per worker.
type Outcome = (u64, u64, u64, Vec<Vec<u64>>);

/// Fills x and y through a run of updates (worker 0 writes them), reads them in a run,
/// then dot, axpy with 0.75, dot, max, and a run reading y.
fn program(c: &mut Cluster) -> iterstore::Result<Outcome> {
    let x = c.create_table_aligned::<f64>("x", WIDTH, ROWS)?;
    let y = c.create_table_aligned::<f64>("y", WIDTH, ROWS)?;
    let f = register(c, x, y)?;
    let iteration = |w: &mut Worker<'_>| -> iterstore::Result<Vec<f64>> {
        let seen = read_all(w, &y)?;
        read_all(w, &x)?;
        w.clock()?;
        Ok(seen)
    };
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(iteration)?;
    }
    c.run(|w| {
        if w.id() == 0 {
            for r in 0..ROWS {
                w.update(&x, r, &x0(r))?;
                w.update(&y, r, &y0(r))?;
            }
        }
        w.clock()
    })?;
    c.run(iteration)?;
    let before = c.call(&f.dot, &[])?;
    assert!(c.call(&f.axpy, &[0.75])?.is_empty());
    let after = c.call(&f.dot, &[])?;
    let max = c.call(&f.max_abs, &[])?;
    let seen = c.run(iteration)?;
    let bits = |v: &[f64]| v.iter().map(|a| a.to_bits()).collect::<Vec<_>>();
    Ok((
        before[0].to_bits(),
        after[0].to_bits(),
        max[0].to_bits(),
        seen.iter().map(|s| bits(s)).collect(),
    ))
}

/// The sequential reference: dot before and after, the max, y after.
fn reference() -> (f64, f64, f64, Vec<f64>) {
    let dot = |y: &dyn Fn(u64) -> [f64; WIDTH]| -> f64 {
        (0..ROWS)
            .map(|r| x0(r).iter().zip(&y(r)).map(|(a, b)| a * b).sum::<f64>())
            .sum()
    };
    let y1 = |r: u64| {
        let (a, mut b) = (x0(r), y0(r));
        for (q, p) in b.iter_mut().zip(&a) {
            *q += 0.75 * p;
        }
        b
    };
    let max = (0..ROWS).flat_map(y1).fold(0.0f64, |m, v| m.max(v.abs()));
    (dot(&y0), dot(&y1), max, (0..ROWS).flat_map(y1).collect())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn vector_operations_run_on_the_shards_and_the_next_run_reads_what_they_wrote() {
    within(120, || {
        let (dot0, dot1, max, y1) = reference();
        for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
            let mut c = Cluster::start(Config::new(2).with_shards(3).with_mode(mode)).unwrap();
            let (b, a, m, seen) = program(&mut c).unwrap();
            c.shutdown().unwrap();
            assert!(close(f64::from_bits(b), dot0), "{mode:?}");
            assert!(close(f64::from_bits(a), dot1), "{mode:?}");
            assert_eq!(f64::from_bits(m), max, "{mode:?}");
            for s in seen {
                // a·x + y is element-wise: exact.
                let s: Vec<f64> = s.into_iter().map(f64::from_bits).collect();
                assert_eq!(s, y1, "{mode:?}: a worker read stale rows after the call");
            }
        }
    });
}

#[test]
fn processes_give_one_process_of_as_many_shards_bit_for_bit() {
    within(180, || {
        let one = {
            let mut c = Cluster::start(Config::new(4).with_shards(4)).unwrap();
            let r = program(&mut c).unwrap();
            c.shutdown().unwrap();
            r
        };
        let local =
            Cluster::run_local_processes(Config::new(2).with_shards(2), 2, program).unwrap();
        let tcp = over_tcp(
            Config::new(2).with_shards(2).with_mode(Mode::Virtual),
            2,
            program,
        );
        for (name, got) in [("one OS process", local), ("TCP", tcp)] {
            for p in &got {
                assert_eq!((p.0, p.1, p.2), (one.0, one.1, one.2), "{name}");
            }
            let seen: Vec<_> = got.into_iter().flat_map(|p| p.3).collect();
            assert_eq!(seen, one.3, "{name}");
        }
    });
}

#[test]
fn a_failing_function_fails_its_call_naming_the_shard_and_the_cluster_goes_on() {
    within(60, || {
        let mut c = Cluster::start(Config::new(2).with_shards(3)).unwrap();
        let x = c.create_table_sized::<f64>("x", 2, 30).unwrap();
        let g = c
            .create_table_with_rule::<f32>("g", 2, None, Rule::Sgd { lr: 0.1 })
            .unwrap();
        let fails_on_1 = c
            .register_function("fails", Reduce::Sum, |rows, _| {
                if rows.shard() == 1 {
                    return Err(Error::app(0, "shard 1 says no"));
                }
                Ok(vec![1.0])
            })
            .unwrap();
        let panics = c
            .register_function("panics", Reduce::Sum, |rows, _| {
                assert!(rows.shard() != 2, "shard 2 panics");
                Ok(vec![1.0])
            })
            .unwrap();
        let foreign = c
            .register_function("foreign", Reduce::Sum, move |rows, _| {
                for r in 0..30 {
                    rows.write(&x, r, &[1.0, 1.0])?; // some rows belong to other shards
                }
                Ok(vec![])
            })
            .unwrap();
        let rule = c
            .register_function("rule", Reduce::Sum, move |rows, _| {
                rows.rows(&g)?;
                Ok(vec![])
            })
            .unwrap();
        let uneven = c
            .register_function("uneven", Reduce::Sum, |rows, _| {
                Ok(vec![1.0; rows.shard() + 1])
            })
            .unwrap();
        let expect = |e: Error, shard: usize, text: &str| match e {
            Error::ServerFunction {
                shard: s, message, ..
            } => {
                assert_eq!(s, shard, "{message}");
                assert!(message.contains(text), "{message}");
            }
            other => panic!("not a server function error: {other}"),
        };
        expect(c.call(&fails_on_1, &[]).unwrap_err(), 1, "shard 1 says no");
        expect(
            c.call(&panics, &[]).unwrap_err(),
            2,
            "panicked: shard 2 panics",
        );
        expect(c.call(&foreign, &[]).unwrap_err(), 0, "is held by shard");
        expect(
            c.call(&rule, &[]).unwrap_err(),
            0,
            "server-side update rule",
        );
        expect(c.call(&uneven, &[]).unwrap_err(), 1, "equal lengths");
        // The cluster goes on: a run, and a call that works.
        c.run(|w| {
            w.update(&x, 0, &[2.0, 3.0])?;
            w.clock()
        })
        .unwrap();
        let sum = c
            .register_function("sum", Reduce::Sum, move |rows, _| {
                let (mut v, mut s) = ([0.0; 2], 0.0);
                for r in rows.rows(&x)? {
                    rows.read(&x, r, &mut v)?;
                    s += v[0] + v[1];
                }
                Ok(vec![s])
            })
            .unwrap();
        // Two workers added (2, 3) to row 0; the failed "foreign" call wrote 1s to the
        // rows of shard 0 before it stopped (they stay written).
        let got = c.call(&sum, &[]).unwrap()[0];
        assert!(got >= 10.0, "{got}");
        // A custom reduction folds in shard order.
        let order = c
            .register_function(
                "order",
                Reduce::Custom(Arc::new(|acc: &mut Vec<f64>, next: &[f64]| {
                    acc.extend_from_slice(next)
                })),
                |rows, _| Ok(vec![rows.shard() as f64]),
            )
            .unwrap();
        assert_eq!(c.call(&order, &[]).unwrap(), vec![0.0, 1.0, 2.0]);
        c.shutdown().unwrap();
    });
}

#[test]
fn processes_that_register_different_functions_are_refused() {
    within(60, || {
        let got = over_tcp_results(Config::new(1), 2, |c| {
            let name = if c.rank() == 0 { "dot" } else { "norm" };
            c.register_function(name, Reduce::Sum, |_, _| Ok(vec![]))
                .map(|_| ())
        });
        for r in got {
            let e = r.unwrap_err();
            assert!(
                matches!(&e, Error::Disagreement { .. }) && e.to_string().contains("norm"),
                "{e}"
            );
        }
    });
}

#[test]
fn home_rows_list_every_row_of_a_shard_written_or_not_alike_for_aligned_tables() {
    within(60, || {
        const SHARDS: usize = 3;
        const N: u64 = 50;
        let mut c = Cluster::start(Config::new(1).with_shards(SHARDS)).unwrap();
        let x = c.create_table_aligned::<f64>("x", 2, N).unwrap();
        let y = c.create_table_aligned::<f64>("y", 2, N).unwrap();
        let unsized_table = c.create_table::<f64>("free", 2).unwrap();
        // Per shard its count of home rows; per row how many shards call it theirs.
        let homes = c
            .register_function("homes", Reduce::Sum, move |rows, _| {
                let xs = rows.home_rows(&x)?;
                if xs != rows.home_rows(&y)? {
                    return Err(Error::app(0, "x and y differ"));
                }
                let mut out = vec![0.0; SHARDS + N as usize];
                out[rows.shard()] = xs.len() as f64;
                for r in xs {
                    out[SHARDS + r as usize] += 1.0;
                }
                Ok(out)
            })
            .unwrap();
        let got = c.call(&homes, &[]).unwrap();
        assert!(got[SHARDS..].iter().all(|&n| n == 1.0), "{got:?}");
        assert_eq!(got[..SHARDS].iter().sum::<f64>(), N as f64);
        assert!(got[..SHARDS].iter().all(|&n| n > 0.0), "{got:?}");
        let free = c
            .register_function("free", Reduce::Sum, move |rows, _| {
                rows.home_rows(&unsized_table)?;
                Ok(Vec::new())
            })
            .unwrap();
        let e = c.call(&free, &[]).unwrap_err().to_string();
        assert!(e.contains("without a row count"), "{e}");
        c.shutdown().unwrap();
    });
}
