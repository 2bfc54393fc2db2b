//! Asynchronous reads on the generic path (`Staleness::Unbounded`): a cached row older
//! than the reader's clock is served, and a newer one fetched without waiting, so a
//! worker that reads a row again later in the run sees the others' progress (Downpour
//! SGD's fetch every few steps) instead of its run's first value forever.

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
                        // Worker 1 has made 3 clocks of updates: within a few reads the
                        // row shows them, without this worker waiting on a clock.
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
