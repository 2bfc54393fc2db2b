//! Errors and lifecycle: bad handles and widths, panicking and failing workers, use after
//! shutdown, repeated runs — each a clear error or a defined outcome, never a hang.

use crate::util::within;
use iterstore::{Cluster, Config, Error, Mode, Staleness};

#[test]
fn rejects_invalid_configuration_before_starting() {
    let err = Cluster::start(Config::new(0)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidConfig {
                field: "workers",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn shard_replicas_the_cluster_cannot_hold_are_refused_before_starting() {
    let refused = |e: Error| match e {
        Error::InvalidConfig { field, reason } => {
            assert_eq!(field, "shard_replicas");
            reason
        }
        e => panic!("not a configuration error: {e}"),
    };
    // One process cannot hold two copies of a shard.
    let one = Cluster::start(Config::new(1).with_shard_replicas(2)).unwrap_err();
    assert!(refused(one).contains("has 1"));
    let none = Cluster::start(Config::new(1).with_shard_replicas(0)).unwrap_err();
    refused(none);
    let three = Cluster::run_local_processes(Config::new(1).with_shard_replicas(3), 2, |_| Ok(()));
    assert!(refused(three.unwrap_err()).contains("has 2"));
    assert!(
        Cluster::run_local_processes(Config::new(1).with_shard_replicas(2), 2, |_| Ok(())).is_ok()
    );
}

#[test]
fn bad_tables_widths_and_columns_are_clear_errors() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(1)).unwrap();
        let t = cluster.create_table::<f32>("t", 3).unwrap();
        assert!(matches!(
            cluster.create_table::<f32>("t", 3),
            Err(Error::TableExists(_))
        ));
        let err = cluster.table::<i64>("t").unwrap_err();
        assert!(err.to_string().contains("f32"), "{err}");
        assert!(matches!(
            cluster.table::<f32>("nope"),
            Err(Error::UnknownTable(_))
        ));

        let mut other = Cluster::start(Config::new(1)).unwrap();
        let foreign = other.create_table::<f32>("t", 3).unwrap();

        let errors = cluster
            .run(|w| {
                let mut short = [0.0f32; 2];
                let width = w.read(&t, 0, &mut short).unwrap_err();
                let delta = w.update(&t, 0, &[1.0; 4]).unwrap_err();
                let column = w.update_col(&t, 0, 3, 1.0).unwrap_err();
                let unknown = w.read(&foreign, 0, &mut [0.0; 3]).unwrap_err();
                Ok(vec![width, delta, column, unknown])
            })
            .unwrap();
        let messages: Vec<String> = errors[0].iter().map(|e| e.to_string()).collect();
        assert!(matches!(
            errors[0][0],
            Error::WidthMismatch {
                expected: 3,
                actual: 2,
                ..
            }
        ));
        assert!(messages[0].contains("'t' row 0"), "{}", messages[0]);
        assert!(matches!(
            errors[0][1],
            Error::WidthMismatch { actual: 4, .. }
        ));
        assert!(matches!(
            errors[0][2],
            Error::ColumnOutOfRange { column: 3, .. }
        ));
        assert!(matches!(errors[0][3], Error::UnknownTable(_)));
    });
}

/// The specialized fast path checks handles and widths itself (it skips the table
/// look-up): a wrong width or another cluster's handle at a step of the op tape is the same
/// error as in generic mode, and the worker is still on its tape afterwards.
#[test]
fn bad_widths_and_foreign_handles_are_errors_on_the_specialized_path() {
    within(30, || {
        let mut cluster = Cluster::start(Config::new(1).with_mode(Mode::Virtual)).unwrap();
        let t = cluster.create_table::<f32>("t", 3).unwrap();
        let mut other = Cluster::start(Config::new(1)).unwrap();
        let foreign = other.create_table::<f32>("t", 3).unwrap();
        let body = |w: &mut iterstore::Worker<'_>| {
            let mut row = [0.0f32; 3];
            w.read(&t, 0, &mut row)?;
            w.update(&t, 0, &[1.0; 3])?;
            w.clock()
        };
        cluster.virtual_iteration(body).unwrap();
        cluster.run(body).unwrap();
        let before = cluster.stats().tape_accesses;
        let errors = cluster
            .run(|w| {
                let mut short = [0.0f32; 2];
                let width = w.read(&t, 0, &mut short).unwrap_err();
                let foreign_read = w.read(&foreign, 0, &mut [0.0; 3]).unwrap_err();
                let delta = w.update(&t, 0, &[1.0; 4]).unwrap_err();
                let foreign_update = w.update(&foreign, 0, &[1.0; 3]).unwrap_err();
                let foreign_lent = w.read_with(&foreign, 0, |_| ()).unwrap_err();
                // The pattern, as the tape has it.
                let mut row = [0.0f32; 3];
                w.read(&t, 0, &mut row)?;
                w.update(&t, 0, &[1.0; 3])?;
                w.clock()?;
                Ok((
                    vec![width, foreign_read, delta, foreign_update, foreign_lent],
                    row,
                ))
            })
            .unwrap();
        let (errors, row) = &errors[0];
        assert!(matches!(
            errors[0],
            Error::WidthMismatch {
                expected: 3,
                actual: 2,
                ..
            }
        ));
        assert!(matches!(errors[1], Error::UnknownTable(_)), "{}", errors[1]);
        assert!(matches!(errors[2], Error::WidthMismatch { actual: 4, .. }));
        assert!(matches!(errors[3], Error::UnknownTable(_)), "{}", errors[3]);
        assert!(matches!(errors[4], Error::UnknownTable(_)), "{}", errors[4]);
        assert_eq!(row, &[1.0; 3], "the update of the run before is read back");
        assert_eq!(
            cluster.stats().tape_accesses - before,
            2,
            "both on the tape"
        );
    });
}

#[test]
fn a_panicking_worker_is_reported_and_does_not_hang_the_others() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(3)).unwrap();
        let t = cluster.create_table::<i64>("t", 1).unwrap();
        let err = cluster
            .run(|w| {
                if w.id() == 1 {
                    panic!("boom in worker code");
                }
                // BSP: these reads wait for worker 1 until it is known to be gone.
                for _ in 0..3 {
                    w.update(&t, 0, &[1])?;
                    w.clock()?;
                    w.read(&t, 0, &mut [0])?;
                }
                Ok(())
            })
            .unwrap_err();
        match err {
            Error::WorkerPanicked { worker, message } => {
                assert_eq!(worker, 1);
                assert!(message.contains("boom"));
            }
            other => panic!("unexpected {other}"),
        }
        // The cluster is still usable and the survivors' updates all landed.
        assert_eq!(cluster.snapshot(&t).unwrap(), vec![(0, vec![6])]);
    });
}

#[test]
fn a_failing_worker_returns_its_error_after_the_others_finish() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(2)).unwrap();
        let t = cluster.create_table::<f64>("t", 2).unwrap();
        let err = cluster
            .run(|w| {
                if w.id() == 0 {
                    return Err(Error::app(0, "bad input in worker 0"));
                }
                w.update(&t, 1, &[1.0, 2.0])?;
                w.clock()?;
                Ok(())
            })
            .unwrap_err();
        assert!(err.to_string().contains("bad input"), "{err}");
        assert_eq!(cluster.snapshot(&t).unwrap(), vec![(1, vec![1.0, 2.0])]);
    });
}

#[test]
fn use_after_shutdown_is_an_error_and_shutdown_is_idempotent() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(2).with_shards(3)).unwrap();
        let t = cluster.create_table::<i32>("t", 1).unwrap();
        cluster.shutdown().unwrap();
        cluster.shutdown().unwrap();
        assert!(matches!(
            cluster.create_table::<i32>("u", 1),
            Err(Error::ShutDown)
        ));
        assert!(matches!(cluster.run(|_| Ok(())), Err(Error::ShutDown)));
        assert!(matches!(cluster.snapshot(&t), Err(Error::ShutDown)));
    });
}

#[test]
fn dropping_a_cluster_never_hangs() {
    within(20, || {
        for shards in 1..4 {
            let mut c = Cluster::start(Config::new(2).with_shards(shards)).unwrap();
            let _ = c.create_table::<f32>("t", 8).unwrap();
            drop(c);
        }
    });
}

#[test]
fn runs_continue_from_the_clock_the_last_one_reached() {
    within(20, || {
        let mut cluster =
            Cluster::start(Config::new(2).with_staleness(Staleness::Bounded(1))).unwrap();
        let t = cluster.create_table::<i64>("t", 1).unwrap();
        for round in 1..=3i64 {
            let seen = cluster
                .run(|w| {
                    // Worker 1 does one more clock than worker 0 in every run.
                    for _ in 0..(2 + w.id()) {
                        w.update(&t, 0, &[1])?;
                        w.clock()?;
                    }
                    let mut v = [0];
                    w.read(&t, 0, &mut v)?;
                    Ok((w.current_clock(), v[0]))
                })
                .unwrap();
            // Every run starts at the previous maximum clock (3 per run).
            assert_eq!(seen[1].0, 3 * round as u64);
            // Each worker sees at least everything before the run started.
            assert!(seen.iter().all(|(_, v)| *v >= 5 * (round - 1)), "{seen:?}");
        }
        assert_eq!(cluster.snapshot(&t).unwrap(), vec![(0, vec![15])]);
    });
}

#[test]
fn a_reader_never_waits_on_a_request_with_a_higher_requirement() {
    // Worker 1 runs three clocks ahead and asks for row 0 (its reply must wait for
    // worker 0); worker 0 then asks for the same row at clock 0 and must be served.
    within(20, || {
        let mut cluster = Cluster::start(Config::new(2)).unwrap();
        let t = cluster.create_table::<i64>("t", 1).unwrap();
        cluster
            .run(|w| {
                if w.id() == 1 {
                    for _ in 0..3 {
                        w.clock()?;
                    }
                    w.read(&t, 0, &mut [0])?;
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    w.read(&t, 0, &mut [0])?;
                }
                Ok(())
            })
            .unwrap();
    });
}

/// What would be a silent no-op is said (issue 46): a virtual iteration outside virtual
/// mode, a virtual-mode run before any virtual iteration, an iteration without a CLOCK —
/// each once, counted in `Stats::diagnostics` and listed by `Cluster::diagnostics`; a
/// proper virtual-mode program says nothing.
#[test]
fn would_be_silent_no_ops_are_diagnosed_once_each() {
    within(60, || {
        let with_clock = |t: &iterstore::Table<f32>| {
            let t = *t;
            move |w: &mut iterstore::Worker<'_>| {
                w.update(&t, 0, &[1.0])?;
                w.clock()
            }
        };
        // Generic mode: the virtual iteration specializes nothing.
        let mut c = Cluster::start(Config::new(1)).unwrap();
        let t = c.create_table::<f32>("t", 1).unwrap();
        c.virtual_iteration(with_clock(&t)).unwrap();
        c.virtual_iteration(with_clock(&t)).unwrap();
        assert_eq!(c.stats().diagnostics, 1, "{:?}", c.diagnostics());
        assert!(c.diagnostics()[0].contains("specializes nothing"));

        // Virtual mode, a run before any virtual iteration: it runs generic.
        let mut c = Cluster::start(Config::new(1).with_mode(Mode::Virtual)).unwrap();
        let t = c.create_table::<f32>("t", 1).unwrap();
        c.run(with_clock(&t)).unwrap();
        assert_eq!(c.stats().diagnostics, 1);
        assert!(c.diagnostics()[0].contains("before any virtual_iteration"));

        // An iteration without a CLOCK.
        let mut c = Cluster::start(Config::new(1).with_mode(Mode::Virtual)).unwrap();
        let t = c.create_table::<f32>("t", 1).unwrap();
        let t2 = t;
        c.virtual_iteration(move |w| w.update(&t2, 0, &[1.0]))
            .unwrap();
        assert!(
            c.diagnostics()[0].contains("no CLOCK"),
            "{:?}",
            c.diagnostics()
        );

        // A proper program: nothing to say.
        let mut c = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
        let t = c.create_table::<f32>("t", 1).unwrap();
        c.virtual_iteration(with_clock(&t)).unwrap();
        c.run(with_clock(&t)).unwrap();
        assert_eq!(c.stats().diagnostics, 0, "{:?}", c.diagnostics());
    });
}
