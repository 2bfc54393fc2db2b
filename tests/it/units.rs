//! Work units with backup tasks (issue 42): the batch's sum counts each unit once, in unit
//! order, bit for bit whatever the timing, the straggler and the number of processes; idle
//! workers take backups of a straggler's units and it stops the ones done elsewhere; a
//! failing unit stops the batch instead of hanging it; nothing is left for the next run.

use crate::util::{over_tcp, within};
use iterstore::units::{UnitsOutcome, WorkUnits};
use iterstore::{Cluster, Config, Error, Mode, Worker};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

const LEN: usize = 3;

/// Unit `u`'s result: values whose sum depends on the order they are added in.
fn result_of(u: usize, out: &mut [f64]) {
    out[0] = 1.0 / (u as f64 + 3.0);
    out[1] = (u as f64).sqrt() * 1e16;
    out[2] = -(u as f64) * 0.1;
}

/// The sum in unit order, as the batch must give it.
fn reference(units: usize) -> Vec<u64> {
    let mut sum = [0.0; LEN];
    let mut out = [0.0; LEN];
    for u in 0..units {
        result_of(u, &mut out);
        for (s, v) in sum.iter_mut().zip(&out) {
            *s += v;
        }
    }
    sum.iter().map(|v| v.to_bits()).collect()
}

/// Unit `u` taking `ms` ms, polling `stop` each ms: its result, or `false` once stopped.
fn sleepy_unit(
    ms: u64,
    u: usize,
    out: &mut [f64],
    stop: &mut dyn FnMut() -> bool,
) -> iterstore::Result<bool> {
    for _ in 0..ms {
        if stop() {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    result_of(u, out);
    Ok(true)
}

/// One batch on worker `w`: units take `slow` ms (polling `stop` each ms) on worker
/// `straggler`, a seeded 0-2 ms elsewhere.
fn batch(
    w: &mut Worker<'_>,
    units: usize,
    backups: bool,
    straggler: usize,
    slow: u64,
) -> iterstore::Result<Option<UnitsOutcome>> {
    let me = w.id();
    let spec = WorkUnits {
        units,
        len: LEN,
        backups,
    };
    w.work_units(&spec, |u, out, stop| {
        let ms = if me == straggler {
            slow
        } else {
            ((u * 7 + me * 3) % 3) as u64
        };
        sleepy_unit(ms, u, out, stop)
    })
}

fn sum_bits(o: &UnitsOutcome) -> Vec<u64> {
    o.sum.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn the_sum_counts_each_unit_once_in_unit_order_whatever_the_timing() {
    within(120, || {
        let want = reference(40);
        for (workers, backups) in [(1, false), (2, false), (4, false), (4, true)] {
            let mut c = Cluster::start(Config::new(workers)).unwrap();
            for straggler in [1, 3] {
                let got = c.run(|w| batch(w, 40, backups, straggler, 15)).unwrap();
                let o = got[0].as_ref().expect("worker 0 coordinates");
                assert_eq!(sum_bits(o), want, "{workers} workers, backups {backups}");
                assert_eq!(o.report.done.iter().sum::<u64>(), 40);
                assert!(got[1..].iter().all(Option::is_none));
            }
            c.shutdown().unwrap();
        }
    });
}

#[test]
fn idle_workers_back_up_a_straggler_which_stops_what_others_finished() {
    within(120, || {
        let mut c = Cluster::start(Config::new(4)).unwrap();
        // Worker 3 takes 400 ms a unit, the others at most 2 ms: its units are backed up
        // and finished elsewhere long before it would.
        let got = c.run(|w| batch(w, 30, true, 3, 400)).unwrap();
        let o = got[0].as_ref().unwrap();
        assert_eq!(sum_bits(o), reference(30));
        let r = &o.report;
        assert!(r.backups >= 1, "{r:?}");
        assert_eq!(r.done[3], 0, "{r:?}");
        assert!(r.abandoned[3] >= 1, "{r:?}");
        assert_eq!(r.done[0], 0, "the coordinator computes nothing: {r:?}");
        // Nothing is left over: another batch and a run with messages of their own.
        let again = c.run(|w| batch(w, 5, false, 9, 0)).unwrap();
        assert_eq!(sum_bits(again[0].as_ref().unwrap()), reference(5));
        c.run(|w| {
            let other = w.id() ^ 1;
            w.send_to(other, 1, &[w.id() as f64])?;
            let mut v = [0.0];
            w.recv_from(other, 1, &mut v)
        })
        .unwrap();
        c.shutdown().unwrap();
    });
}

#[test]
fn processes_give_one_process_of_as_many_workers_bit_for_bit() {
    within(120, || {
        let want = reference(25);
        let program = |c: &mut Cluster| -> iterstore::Result<Option<Vec<u64>>> {
            let got = c.run(|w| batch(w, 25, true, 2, 30))?;
            Ok(got.into_iter().flatten().next().map(|o| sum_bits(&o)))
        };
        let local = Cluster::run_local_processes(Config::new(2), 2, program).unwrap();
        let tcp = over_tcp(Config::new(2), 2, program);
        for got in [local, tcp] {
            assert_eq!(got[0].as_ref(), Some(&want));
            assert_eq!(got[1], None);
        }
    });
}

#[test]
fn a_failing_unit_stops_the_batch_and_a_virtual_iteration_runs_one_unit_each() {
    within(60, || {
        let mut c = Cluster::start(Config::new(3).with_mode(Mode::Virtual)).unwrap();
        c.create_table::<f64>("t", 1).unwrap();
        let spec = WorkUnits {
            units: 6,
            len: 1,
            backups: true,
        };
        let ran = AtomicUsize::new(0);
        c.virtual_iteration(|w| {
            let got = w.work_units(&spec, |u, out, _| {
                ran.fetch_add(1, Ordering::Relaxed);
                out[0] = u as f64;
                Ok(true)
            })?;
            assert!(got.is_none(), "a virtual iteration has no outcome");
            w.clock()
        })
        .unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 3, "one unit per worker");
        let err = c
            .run(|w| {
                w.work_units(&spec, |u, out, _| {
                    if u == 4 {
                        return Err(Error::app(9, "unit 4 fails"));
                    }
                    out[0] = 1.0;
                    Ok(true)
                })
            })
            .unwrap_err();
        assert!(err.to_string().contains("unit 4 fails"), "{err}");
        c.shutdown().unwrap();
    });
}

#[test]
fn a_backup_goes_to_another_process_once_per_unit() {
    within(60, || {
        // 2 processes of 2 workers: 0 (coordinator) and 1 on process 0, 2 and 3 on 1.
        // Worker 2 straggles; worker 3, on its process, must not back it up.
        let started = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = started.clone();
        let got = Cluster::run_local_processes(Config::new(2), 2, move |c| {
            let log = log.clone();
            c.run(move |w| {
                let me = w.id();
                let spec = WorkUnits {
                    units: 3,
                    len: LEN,
                    backups: true,
                };
                w.work_units(&spec, |u, out, stop| {
                    log.lock().unwrap().push((me, u));
                    sleepy_unit(if me == 2 { 5_000 } else { 20 }, u, out, stop)
                })
            })
        })
        .unwrap();
        let o = got[0][0].as_ref().expect("worker 0 coordinates");
        assert_eq!(sum_bits(o), reference(3));
        let started = started.lock().unwrap().clone();
        let slow = started
            .iter()
            .find(|(w, _)| *w == 2)
            .expect("worker 2 ran a unit")
            .1;
        let runners: Vec<usize> = started
            .iter()
            .filter(|(_, u)| *u == slow)
            .map(|p| p.0)
            .collect();
        assert_eq!(
            runners.len(),
            2,
            "one backup of the straggler's unit: {started:?}"
        );
        assert!(runners.contains(&1) && !runners.contains(&3), "{started:?}");
        assert_eq!(o.report.abandoned[2], 1);
    });
}

#[test]
fn a_unit_given_back_unasked_is_handed_out_again() {
    within(60, || {
        for backups in [false, true] {
            let mut c = Cluster::start(Config::new(3)).unwrap();
            let refused = AtomicUsize::new(0);
            let got = c
                .run(|w| {
                    let spec = WorkUnits {
                        units: 6,
                        len: LEN,
                        backups,
                    };
                    w.work_units(&spec, |u, out, _| {
                        // The first run of unit 4 gives up without being told to stop.
                        if u == 4 && refused.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Ok(false);
                        }
                        result_of(u, out);
                        Ok(true)
                    })
                })
                .unwrap();
            let o = got[0].as_ref().unwrap();
            assert_eq!(sum_bits(o), reference(6), "backups {backups}");
            assert_eq!(o.report.done.iter().sum::<u64>(), 6);
            assert_eq!(o.report.abandoned.iter().sum::<u64>(), 1);
            c.shutdown().unwrap();
        }
    });
}

/// One batch of `units` on 4 computing workers (5 in all): units take `fast` ms on
/// workers 1-3 and `slow` ms on worker 4, polling `stop` each ms; the outcome on worker 0.
fn timed_batch(
    c: &mut Cluster,
    units: usize,
    backups: bool,
    (fast, slow): (u64, u64),
) -> UnitsOutcome {
    let got = c
        .run(|w| {
            let me = w.id();
            let spec = WorkUnits {
                units,
                len: LEN,
                backups,
            };
            w.work_units(&spec, |u, out, stop| {
                sleepy_unit(if me == 4 { slow } else { fast }, u, out, stop)
            })
        })
        .unwrap();
    let o = got
        .into_iter()
        .next()
        .flatten()
        .expect("worker 0 coordinates");
    assert_eq!(sum_bits(&o), reference(units));
    o
}

#[test]
fn a_straggler_known_from_earlier_batches_gets_no_fresh_unit_while_the_others_suffice() {
    within(120, || {
        for backups in [true, false] {
            let mut c = Cluster::start(Config::new(5)).unwrap();
            // The first batch (without backups, so that worker 4 ends its unit) teaches
            // the coordinator that worker 4 is slow.
            let first = timed_batch(&mut c, 6, false, (3, 300));
            assert_eq!(first.report.passed_over, vec![0; 5], "{:?}", first.report);
            let (mut passed, mut done) = (0, 0);
            for batch in 2..=4 {
                let r = timed_batch(&mut c, 6, backups, (3, 300)).report;
                passed += r.passed_over[4];
                done += r.done[4];
                if backups {
                    // The other three end 6 units before worker 4 would end one: it is
                    // passed over (unless it asked only once they were all handed out).
                    assert_eq!((r.done[4], r.abandoned[4]), (0, 0), "batch {batch}: {r:?}");
                } else {
                    // Without backups, units go to whoever asks, as DistBelief's plain
                    // Sandblaster does.
                    assert_eq!(r.passed_over, vec![0; 5], "batch {batch}: {r:?}");
                }
            }
            match backups {
                true => assert!(passed >= 1, "never passed over"),
                false => assert!(done >= 1, "worker 4 never got a unit without backups"),
            }
            c.shutdown().unwrap();
        }
    });
}

#[test]
fn backups_go_only_where_they_can_win() {
    within(120, || {
        let mut c = Cluster::start(Config::new(5)).unwrap();
        // Equal workers, 8 units on 4: every batch ends with the second round, whose units
        // a backup could not end sooner. Estimates come from the first batch; from then
        // on backups are handed out only to units overdue by a quarter.
        timed_batch(&mut c, 8, true, (40, 40));
        let backups: u64 = (0..3)
            .map(|_| timed_batch(&mut c, 8, true, (40, 40)).report.backups)
            .sum();
        // Handing a backup of the oldest running unit to every idle worker gave 3 a
        // batch (9 here).
        assert!(backups <= 2, "{backups} backups in 3 batches");
        c.shutdown().unwrap();
    });
}
