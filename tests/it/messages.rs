//! Worker-to-worker messages (`Worker::send_to`, `Worker::recv_from` and the polling
//! `Worker::try_recv_from`): in one process,
//! across processes in one OS process and over TCP, beside the store's rows; and every
//! way a receive can fail — a sender that stopped with an error, a timeout, a message of
//! the wrong shape — ends in an error naming the sender and tag, never a hang.

use crate::util::{over_tcp, within};
use iterstore::{Cluster, Config, Error, Mode, Worker};
use std::time::{Duration, Instant};

/// Three clocks of a ring: every worker sends its value to the next worker and adds what
/// it receives from the previous one into row `id` of a table, then all rows are summed.
/// Returns each worker's received values and the table's sum.
fn ring(w: &mut Worker<'_>, t: &iterstore::Table<f64>) -> iterstore::Result<(Vec<f64>, f64)> {
    let n = w.workers();
    let (next, prev) = ((w.id() + 1) % n, (w.id() + n - 1) % n);
    let mut got = Vec::new();
    let mut value = w.id() as f64 + 1.0;
    for c in 0..3u32 {
        w.send_to(next, c, &[value, -value])?;
        let mut v = [0.0f64; 2];
        w.recv_from(prev, c, &mut v)?;
        got.push(v[0]);
        value = v[0] * 2.0 + v[1];
        w.update(t, w.id() as u64, &[v[0]])?;
        w.clock()?;
    }
    let mut sum = 0.0;
    for r in 0..n as u64 {
        let mut row = [0.0];
        w.read(t, r, &mut row)?;
        sum += row[0];
    }
    Ok((got, sum))
}

fn ring_on(c: &mut Cluster) -> iterstore::Result<Vec<(Vec<f64>, f64)>> {
    let t = c.create_table::<f64>("ring", 1)?;
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(|w| ring(w, &t))?;
    }
    c.run(|w| ring(w, &t))
}

#[test]
fn workers_exchange_messages_in_one_process_and_across_processes_alike() {
    let one = within(30, || {
        let mut c = Cluster::start(Config::new(4)).unwrap();
        ring_on(&mut c).unwrap()
    });
    // Worker w receives w (from w - 1, 1-based value w) first, then w - 1 (2v - v).
    assert_eq!(one[0].0, vec![4.0, 3.0, 2.0]);
    assert_eq!(one[2].0, vec![2.0, 1.0, 4.0]);
    for mode in [Mode::Generic, Mode::Virtual] {
        let local = within(30, move || {
            Cluster::run_local_processes(Config::new(2).with_mode(mode), 2, ring_on).unwrap()
        });
        let flat: Vec<_> = local.into_iter().flatten().collect();
        assert_eq!(flat, one, "2 processes x 2 workers, {mode:?}");
    }
    let tcp = within(60, || over_tcp(Config::new(1), 4, ring_on));
    let flat: Vec<_> = tcp.into_iter().flatten().collect();
    assert_eq!(flat, one, "4 processes over TCP");
}

#[test]
fn a_virtual_iteration_sends_nothing_and_receives_zeros() {
    let got = within(30, || {
        let mut c = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
        let t = c.create_table::<f64>("t", 1).unwrap();
        c.virtual_iteration(|w| {
            let other = 1 - w.id();
            w.send_to(other, 0, &[5.0f64])?;
            let mut v = [9.0f64];
            w.recv_from(other, 0, &mut v)?;
            assert_eq!(v, [0.0]);
            w.update(&t, 0, &v)?;
            w.clock()
        })
        .unwrap();
        // Nothing the virtual iteration "sent" is waiting: the first receive gets the
        // real message.
        c.run(|w| {
            let other = 1 - w.id();
            w.send_to(other, 0, &[w.id() as f64 + 10.0])?;
            let mut v = [0.0f64];
            w.recv_from(other, 0, &mut v)?;
            Ok(v[0])
        })
        .unwrap()
    });
    assert_eq!(got, vec![11.0, 10.0]);
}

fn receive_error(
    config: Config,
    f: impl Fn(&mut Worker<'_>) -> iterstore::Result<()> + Sync,
) -> Error {
    let mut c = Cluster::start(config).unwrap();
    c.run(f).unwrap_err()
}

#[test]
fn a_sender_that_stops_with_an_error_ends_the_wait_at_once() {
    let t = Instant::now();
    let e = within(30, || {
        receive_error(Config::new(2), |w| {
            if w.id() == 1 {
                return Err(Error::app(1, "worker 1 gives up"));
            }
            let mut v = [0.0f32];
            w.recv_from(1, 3, &mut v)
        })
    });
    // Worker 0's receive ended because worker 1 stopped: the run reports the cause.
    let text = e.to_string();
    assert!(text.contains("worker 1 gives up"), "{text}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "waited {:?}",
        t.elapsed()
    );
    // The same across processes (the stop travels as a message), also for a panic.
    let e = within(30, || {
        Cluster::run_local_processes(Config::new(1), 2, |c| {
            c.run(|w| {
                if w.id() == 1 {
                    panic!("worker 1 panics");
                }
                let mut v = [0.0f32];
                w.recv_from(1, 3, &mut v)
            })
        })
        .unwrap_err()
    });
    assert!(e.to_string().contains("worker 1"), "{e}");
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "waited {:?}",
        t.elapsed()
    );
}

#[test]
fn a_message_that_never_comes_times_out_naming_sender_and_tag() {
    let mut config = Config::new(2);
    config.message_timeout = Duration::from_millis(200);
    let e = within(30, move || {
        receive_error(config, |w| {
            if w.id() == 0 {
                let mut v = [0i64; 2];
                w.recv_from(1, 8, &mut v)?;
            }
            Ok(())
        })
    });
    assert!(
        e.to_string()
            .contains("worker 0: receiving tag 8 from worker 1: no message within 0.2 s"),
        "{e}"
    );
}

#[test]
fn a_message_of_another_shape_or_to_nobody_is_refused() {
    let e = within(30, || {
        receive_error(Config::new(2), |w| {
            let other = 1 - w.id();
            w.send_to(other, 0, &[1.0f32, 2.0])?;
            let mut v = [0.0f32; 3];
            w.recv_from(other, 0, &mut v)
        })
    });
    assert!(
        e.to_string()
            .contains("holds 2 values, the receiver expects 3"),
        "{e}"
    );
    let e = within(30, || {
        receive_error(Config::new(2), |w| {
            let other = 1 - w.id();
            w.send_to(other, 0, &[1.0f32])?;
            let mut v = [0.0f64];
            w.recv_from(other, 0, &mut v)
        })
    });
    assert!(
        e.to_string()
            .contains("holds F32 values, the receiver expects F64"),
        "{e}"
    );
    let e = within(30, || {
        receive_error(Config::new(2), |w| w.send_to(2, 0, &[1.0f32]))
    });
    assert!(e.to_string().contains("the cluster has 2 workers"), "{e}");
    let mut config = Config::new(1);
    config.message_timeout = Duration::ZERO;
    assert!(Cluster::start(config)
        .unwrap_err()
        .to_string()
        .contains("message_timeout"));
}

/// Run 1: worker 0 sends two messages (1.0, then 2.0), worker 1 receives one. Run 2: one
/// each (9.0). Returns per run the value worker 1 received (`None` for worker 0) or the
/// run's error.
fn unmatched(c: &mut Cluster) -> iterstore::Result<Vec<Result<Vec<Option<f32>>, String>>> {
    let mut runs = Vec::new();
    for (sends, value) in [(2, 1.0f32), (1, 9.0)] {
        let got = c.run(|w| {
            if w.id() == 0 {
                for i in 0..sends {
                    w.send_to(1, 5, &[value + i as f32])?;
                }
                return Ok(None);
            }
            let mut v = [0.0f32];
            w.recv_from(0, 5, &mut v)?;
            Ok(Some(v[0]))
        });
        runs.push(got.map_err(|e| e.to_string()));
    }
    // A third run, once the mismatch has been reported, works as usual.
    let third = c.run(|w| {
        if w.id() == 0 {
            w.send_to(1, 5, &[3.0f32])?;
            return Ok(None);
        }
        let mut v = [0.0f32];
        w.recv_from(0, 5, &mut v)?;
        Ok(Some(v[0]))
    })?;
    runs.push(Ok(third));
    Ok(runs)
}

/// A message sent in a run and never received there fails the run, naming receiver,
/// sender and tag; it never reaches a later run's receive.
#[test]
fn a_message_a_run_never_receives_fails_it_and_never_reaches_the_next_run() {
    let runs = within(30, || {
        let mut c = Cluster::start(Config::new(2)).unwrap();
        unmatched(&mut c).unwrap()
    });
    let err = runs[0].clone().unwrap_err();
    assert!(
        err.contains("worker 1: receiving tag 5 from worker 0")
            && err.contains("1 message(s) sent to it in this run were never received"),
        "{err}"
    );
    assert_eq!(runs[1], Ok(vec![None, Some(9.0)]));
    assert_eq!(runs[2], Ok(vec![None, Some(3.0)]));
    // Across processes the leftover may still be on its way when run 1 ends: then run 1
    // succeeds with the first message's 1.0 and run 2's receive finds the leftover first
    // and fails. Either way one of the two runs fails naming it, and no run receives the
    // leftover's 2.0.
    let per_process = within(60, || {
        Cluster::run_local_processes(Config::new(1), 2, unmatched).unwrap()
    });
    let receiver = &per_process[1];
    let failed: Vec<&String> = receiver[..2]
        .iter()
        .filter_map(|r| r.as_ref().err())
        .collect();
    assert!(
        failed.len() == 1
            && failed[0].contains("receiving tag 5 from worker 0")
            && failed[0].contains("never received"),
        "{receiver:?}"
    );
    for run in receiver.iter().flatten() {
        assert!(!run.contains(&Some(2.0)), "{receiver:?}");
    }
    assert_eq!(receiver[2], Ok(vec![Some(3.0)]));
}

/// Worker 0 sends one message after a few clocks; every other worker polls for it
/// between clocks of its own and counts the polls that found nothing.
fn poll_on(c: &mut Cluster) -> iterstore::Result<Vec<(i64, bool)>> {
    c.run(|w| {
        if w.id() == 0 {
            std::thread::sleep(Duration::from_millis(30));
            for other in 1..w.workers() {
                w.send_to(other, 5, &[40 + other as i64])?;
            }
            return Ok((0, true));
        }
        let mut v = [0i64];
        let mut empty_polls = 0u32;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !w.try_recv_from(0, 5, &mut v)? {
            assert!(Instant::now() < deadline, "the message never came");
            empty_polls += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
        // One message was sent: the next poll finds nothing.
        let again = w.try_recv_from(0, 5, &mut v)?;
        Ok((v[0], empty_polls > 0 && !again))
    })
}

#[test]
fn a_worker_polls_for_a_message_without_waiting_in_one_process_and_across_processes() {
    let one = within(30, || {
        poll_on(&mut Cluster::start(Config::new(3)).unwrap()).unwrap()
    });
    assert_eq!(one, vec![(0, true), (41, true), (42, true)]);
    let three = within(30, || {
        Cluster::run_local_processes(Config::new(1), 3, poll_on).unwrap()
    });
    let flat: Vec<_> = three.into_iter().flatten().collect();
    assert_eq!(flat, one, "3 processes");
}

#[test]
fn a_poll_in_a_virtual_iteration_finds_nothing_and_a_stopped_sender_is_an_error() {
    within(30, || {
        let mut c = Cluster::start(Config::new(2).with_mode(Mode::Virtual)).unwrap();
        let t = c.create_table::<f64>("t", 1).unwrap();
        c.virtual_iteration(|w| {
            let mut v = [3.0f64];
            assert!(!w.try_recv_from(1 - w.id(), 0, &mut v)?);
            assert_eq!(v, [3.0], "untouched");
            let e = w.try_recv_from(7, 0, &mut v).unwrap_err();
            assert!(e.to_string().contains("the cluster has 2 workers"), "{e}");
            w.update(&t, 0, &v)?;
            w.clock()
        })
        .unwrap();
    });
    let e = within(30, || {
        receive_error(Config::new(2), |w| {
            if w.id() == 1 {
                return Err(Error::app(1, "worker 1 gives up"));
            }
            let mut v = [0.0f32];
            while !w.try_recv_from(1, 3, &mut v)? {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })
    });
    assert!(e.to_string().contains("worker 1 gives up"), "{e}");
}
