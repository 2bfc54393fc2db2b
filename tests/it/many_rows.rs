//! `Worker::read_rows` / `update_rows` (issue 46): many consecutive rows in one dense
//! buffer, through the same paths as single rows — the same answers as row-by-row code
//! in every mode, on the specialized tape in virtual mode, and a clear error for a buffer
//! that is not whole rows.

use crate::util::within;
use iterstore::{Cluster, Config, Error, Mode};

const ROWS: u64 = 8;
const WIDTH: usize = 3;

/// Four iterations of a worker updating all rows by its id and reading them back, with
/// `many` choosing the dense calls or one call per row; the final rows.
fn program(mode: Mode, many: bool) -> (Vec<(u64, Vec<f64>)>, iterstore::stats::Stats) {
    let mut c = Cluster::start(Config::new(2).with_mode(mode)).unwrap();
    let t = c.create_table::<f64>("t", WIDTH).unwrap();
    let body = |w: &mut iterstore::Worker<'_>| -> iterstore::Result<f64> {
        let mut seen = 0.0;
        for _ in 0..4 {
            let mut all = vec![0.0f64; ROWS as usize * WIDTH];
            if many {
                w.read_rows(&t, 0, &mut all)?;
            } else {
                for (r, row) in all.chunks_exact_mut(WIDTH).enumerate() {
                    w.read(&t, r as u64, row)?;
                }
            }
            seen += all.iter().sum::<f64>();
            let deltas: Vec<f64> = (0..all.len()).map(|i| (w.id() + i) as f64).collect();
            if many {
                w.update_rows(&t, 0, &deltas)?;
            } else {
                for (r, d) in deltas.chunks_exact(WIDTH).enumerate() {
                    w.update(&t, r as u64, d)?;
                }
            }
            w.clock()?;
        }
        Ok(seen)
    };
    if mode == Mode::Virtual {
        c.virtual_iteration(body).unwrap();
    }
    c.run(body).unwrap();
    let mut rows = c.snapshot(&t).unwrap();
    rows.sort_by_key(|(r, _)| *r);
    let stats = c.stats();
    c.shutdown().unwrap();
    (rows, stats)
}

#[test]
fn dense_reads_and_updates_of_many_rows_equal_row_by_row_code_in_every_mode() {
    within(120, || {
        let (want, _) = program(Mode::Generic, false);
        assert_eq!(want.len(), ROWS as usize);
        for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
            let (got, stats) = program(mode, true);
            assert_eq!(got, want, "{mode:?}");
            if mode == Mode::Virtual {
                assert_eq!(stats.indexed_accesses, 0, "{mode:?}: off the tape");
                assert!(stats.tape_accesses > 0, "{mode:?}: not specialized");
            }
        }
    });
}

#[test]
fn a_buffer_that_is_not_whole_rows_is_an_error() {
    within(30, || {
        let mut c = Cluster::start(Config::new(1)).unwrap();
        let t = c.create_table::<f32>("t", WIDTH).unwrap();
        let errors = c
            .run(|w| {
                let mut short = [0.0f32; WIDTH + 1];
                let read = w.read_rows(&t, 0, &mut short).unwrap_err();
                let update = w.update_rows(&t, u64::MAX, &[0.0; 2 * WIDTH]).unwrap_err();
                w.clock()?;
                Ok((read, update))
            })
            .unwrap();
        let (read, update) = &errors[0];
        assert!(
            matches!(read, Error::WidthMismatch { actual: 4, .. }),
            "{read}"
        );
        assert!(matches!(update, Error::RowOutOfRange { .. }), "{update}");
        assert!(read.to_string().contains("table 't'"), "{read}");
    });
}

/// A table declared with a row count refuses rows outside it on every access path, in
/// generic and in virtual mode (the specialized fast paths too), and creates none:
/// the snapshot lists only rows inside it. Processes must declare the same count.
#[test]
fn a_sized_table_refuses_rows_outside_it_on_every_path() {
    within(60, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let mut c = Cluster::start(Config::new(2).with_mode(mode)).unwrap();
            let t = c.create_table_sized::<f32>("model", 2, 10).unwrap();
            assert_eq!(t.rows(), Some(10));
            let body = |w: &mut iterstore::Worker<'_>| -> iterstore::Result<()> {
                let mut row = [0.0f32; 2];
                w.read(&t, 9, &mut row)?;
                w.update(&t, 9, &[1.0, 1.0])?;
                w.clock()
            };
            if mode == Mode::Virtual {
                c.virtual_iteration(body).unwrap();
            }
            c.run(body).unwrap();
            let refused = c
                .run(|w| {
                    let mut row = [0.0f32; 2];
                    let mut d = [0.0f32; 2];
                    let errors = vec![
                        w.read(&t, 10, &mut row).unwrap_err(),
                        w.read(&t, u64::MAX, &mut row).unwrap_err(),
                        w.update(&t, 10, &[1.0, 1.0]).unwrap_err(),
                        w.read_with(&t, 10, |_| ()).unwrap_err(),
                        w.update_col(&t, 11, 0, 1.0).unwrap_err(),
                        w.read_update([(&t, 12)], [&mut d], |_, _| ()).unwrap_err(),
                        w.read_rows(&t, 9, &mut [0.0; 4]).unwrap_err(),
                    ];
                    body(w)?; // still on its pattern
                    Ok(errors)
                })
                .unwrap();
            for e in &refused[0] {
                assert!(
                    matches!(e, iterstore::Error::RowOutOfRange { rows: 10, .. }),
                    "{mode:?}: {e}"
                );
                assert!(e.to_string().contains("table 'model'"), "{e}");
            }
            let rows: Vec<u64> = c
                .snapshot(&t)
                .unwrap()
                .into_iter()
                .map(|(r, _)| r)
                .collect();
            assert_eq!(rows, [9], "{mode:?}");
            assert!(c.create_table_sized::<f32>("zero", 2, 0).is_err());
            c.shutdown().unwrap();
        }
        let e = Cluster::run_local_processes(Config::new(1), 2, |c| {
            c.create_table_sized::<f32>("m", 1, 10 + c.rank() as u64)?;
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("10 rows") && e.contains("11 rows"), "{e}");
    });
}
