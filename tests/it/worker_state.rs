//! Per-worker state kept across runs (`Cluster::run_with`), and the virtual iteration's
//! throw-away copies of it (`Cluster::virtual_iteration_with`): an app that keeps local
//! state gets the same answers in every mode without checking `Worker::is_virtual`.

use crate::util::within;
use iterstore::{Cluster, Config, Error, Mode, Worker};

/// A worker's local state: a running mean of what it reads, as an app would keep.
#[derive(Debug, Clone, Default, PartialEq)]
struct Local {
    runs: u32,
    /// 1 / (the value last read): infinite if computed from a virtual read's zero.
    inverse: f64,
}

fn body(
    w: &mut Worker<'_>,
    t: &iterstore::Table<f64>,
    local: &mut Local,
) -> iterstore::Result<f64> {
    let mut row = [0.0];
    w.read(t, w.id() as u64, &mut row)?;
    local.runs += 1;
    local.inverse = 1.0 / row[0];
    w.update(t, w.id() as u64, &[1.0])?;
    w.clock()?;
    Ok(local.inverse)
}

#[test]
fn states_persist_across_runs_and_the_virtual_iteration_only_sees_copies() {
    for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
        let got = within(30, move || {
            let mut cluster = Cluster::start(Config::new(2).with_mode(mode)).unwrap();
            let t = cluster.create_table::<f64>("t", 1).unwrap();
            let mut states = vec![Local::default(); 2];
            cluster
                .virtual_iteration_with(&states, |w, local| body(w, &t, local))
                .unwrap();
            assert_eq!(states, vec![Local::default(); 2], "{mode:?}: copies only");
            let mut seen = Vec::new();
            for _ in 0..3 {
                seen.push(
                    cluster
                        .run_with(&mut states, |w, local| body(w, &t, local))
                        .unwrap(),
                );
            }
            assert!(states.iter().all(|s| s.runs == 3), "{mode:?}: {states:?}");
            seen
        });
        // Each run reads the sum of the earlier runs' updates: 0, 1, 2.
        assert_eq!(
            got,
            vec![vec![f64::INFINITY; 2], vec![1.0; 2], vec![0.5; 2]],
            "{mode:?}"
        );
    }
}

#[test]
fn one_state_per_worker_is_required() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(2)).unwrap();
        let mut states = vec![0u8; 3];
        let err = cluster.run_with(&mut states, |_, _| Ok(())).unwrap_err();
        assert!(
            matches!(
                err,
                Error::StateCount {
                    given: 3,
                    workers: 2
                }
            ),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("3 per-worker states given for 2 workers"));
        let err = cluster
            .virtual_iteration_with(&states[..1], |_, _| Ok(()))
            .unwrap_err();
        assert!(matches!(err, Error::StateCount { given: 1, .. }), "{err}");
        let err = cluster
            .init_run_with(&mut [], |_, _: &mut u8| Ok(()))
            .unwrap_err();
        assert!(matches!(err, Error::StateCount { given: 0, .. }), "{err}");
        // The cluster is still usable.
        cluster
            .run_with(&mut states[..2], |_, s| {
                *s += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(states, vec![1, 1, 0]);
    });
}

/// Worker `w` runs on the same thread in every run (and in the virtual iteration), so its
/// pinning and the memory it first touched survive from run to run.
#[test]
fn every_run_uses_the_same_worker_threads() {
    within(20, || {
        let mut cluster = Cluster::start(Config::new(3).with_mode(Mode::Virtual)).unwrap();
        let ids = |c: &mut Cluster| c.run(|_| Ok(std::thread::current().id())).unwrap();
        let first = ids(&mut cluster);
        let mut distinct = first.clone();
        distinct.sort_by_key(|id| format!("{id:?}"));
        distinct.dedup();
        assert_eq!(distinct.len(), 3);
        cluster
            .virtual_iteration(|w| {
                assert_eq!(std::thread::current().id(), first[w.id()]);
                Ok(())
            })
            .unwrap();
        assert_eq!(ids(&mut cluster), first);
    });
}
