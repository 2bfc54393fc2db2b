//! Asynchronous reads on the generic path (`Staleness::Unbounded`): a worker that reads a
//! row again later in the run sees the others' progress (Downpour SGD's fetch every few
//! steps) instead of its run's first value forever — a read needs the minimum clock the
//! shards have announced, so a cached row older than that is fetched anew — for a table
//! that adds updates and for one whose servers step them.

use crate::util::within;
use iterstore::{Cluster, Config, Mode, Rule, Staleness};
use std::time::{Duration, Instant};

#[test]
fn a_later_read_in_an_asynchronous_run_sees_the_others_progress() {
    within(60, || {
        for rule in [Rule::Sum, Rule::Sgd { lr: 1.0 }] {
            let config = Config::new(2)
                .with_mode(Mode::Generic)
                .with_staleness(Staleness::Unbounded);
            let mut c = Cluster::start(config).unwrap();
            let t = c.create_table_with_rule::<f64>("t", 1, None, rule).unwrap();
            let seen = c
                .run(|w| {
                    let mut row = [0.0f64];
                    if w.id() == 0 {
                        // Read once (cached at the run's first value), then clock ahead.
                        w.read(&t, 0, &mut row)?;
                        w.clock()?;
                        w.recv_from::<i32>(1, 0, &mut [0])?;
                        // Worker 1 has made 3 clocks of updates: once the shards announce
                        // the minimum clock past worker 0's first, a read shows them.
                        let deadline = Instant::now() + Duration::from_secs(20);
                        loop {
                            w.read(&t, 0, &mut row)?;
                            if row[0] != 0.0 || Instant::now() > deadline {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Ok(row[0])
                    } else {
                        for _ in 0..3 {
                            w.update(&t, 0, &[1.0])?;
                            w.clock()?;
                        }
                        w.send_to::<i32>(0, 0, &[1])?;
                        Ok(0.0)
                    }
                })
                .unwrap();
            assert_ne!(seen[0], 0.0, "{rule}: the run's first value forever");
            c.shutdown().unwrap();
        }
    });
}

/// Worker 1 pushes 1.0 three times (one per clock) while worker 0, which has not
/// clocked, waits for it, then reads: what worker 0 sees.
fn read_while_the_other_pushes(rule: Rule, staleness: Staleness) -> f64 {
    let config = Config::new(2)
        .with_mode(Mode::Virtual)
        .with_staleness(staleness);
    let config = crate::custom_rules::registered(config);
    let mut c = Cluster::start(config).unwrap();
    let t = c.create_table_with_rule::<f64>("t", 1, None, rule).unwrap();
    let body = |w: &mut iterstore::Worker<'_>| {
        let mut row = [0.0f64];
        if w.id() == 0 {
            w.read(&t, 0, &mut row)?;
            if !w.is_virtual() {
                w.recv_from::<i32>(1, 0, &mut [0])?;
            }
            w.read(&t, 0, &mut row)?;
            w.clock()?;
        } else {
            for _ in 0..3 {
                w.update(&t, 0, &[1.0])?;
                w.clock()?;
            }
            if !w.is_virtual() {
                w.send_to::<i32>(0, 0, &[1])?;
            }
        }
        Ok(row[0])
    };
    c.virtual_iteration(body).unwrap();
    let seen = c.run(body).unwrap();
    // The row is planned, rule or not: its pushes travel in slabs, and the shard steps
    // a rule row's as they arrive.
    let stats = c.stats();
    assert_eq!(stats.planned_rows, 1);
    assert_eq!(stats.planned_rule_rows, usize::from(!rule.is_sum()));
    assert!(stats.whole_slabs + stats.partial_slabs > 0);
    c.shutdown().unwrap();
    seen[0]
}

#[test]
fn asynchronous_servers_step_each_push_as_it_arrives_and_reads_see_it() {
    within(60, || {
        // Downpour: three steps of −1 · 1.0, visible although worker 0 is at clock 0.
        assert_eq!(
            read_while_the_other_pushes(Rule::Sgd { lr: 1.0 }, Staleness::Unbounded),
            -3.0
        );
        // A rule of the application's own alike: three steps of −1 · min(1.0, 0.5).
        let clipped = crate::custom_rules::registered(Config::new(1))
            .rule("clipped_sgd", &[1.0, 0.5])
            .unwrap();
        assert_eq!(
            read_while_the_other_pushes(clipped, Staleness::Unbounded),
            -1.5
        );
        // A summing table keeps exact snapshots: nothing of clocks worker 0 has not
        // finished.
        assert_eq!(
            read_while_the_other_pushes(Rule::Sum, Staleness::Unbounded),
            0.0
        );
        // Under SSP (a bound of 3 holds nobody back here) the servers step once a clock
        // is complete: nothing yet.
        assert_eq!(
            read_while_the_other_pushes(Rule::Sgd { lr: 1.0 }, Staleness::Bounded(3)),
            0.0
        );
    });
}
