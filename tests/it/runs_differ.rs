//! Processes whose applications do different numbers of runs (issue 46: early stopping
//! decided per process) fail, both of them and within seconds, naming the process that
//! left and the runs, instead of hanging — over TCP and in one OS process, in every mode.

use crate::util::{over_tcp_results, within};
use iterstore::{Cluster, Config, Mode};
use std::time::{Duration, Instant};

/// One process's application: a table, (in virtual mode) a virtual iteration, `runs`
/// epochs each followed by an all-gather and a snapshot, as the softmax did.
fn app(cluster: &mut Cluster, runs: usize) -> iterstore::Result<()> {
    let t = cluster.create_table::<f32>("w", 4)?;
    let body = |w: &mut iterstore::Worker<'_>| {
        for c in 0..3u64 {
            let mut row = [0.0f32; 4];
            w.read(&t, c % 2, &mut row)?;
            w.update(&t, c % 2, &[1.0; 4])?;
            w.clock()?;
        }
        Ok(())
    };
    if cluster.config().mode == Mode::Virtual {
        cluster.virtual_iteration(body)?;
    }
    for _ in 0..runs {
        cluster.run(body)?;
        cluster.all_gather(&[1.0f64])?;
        cluster.snapshot(&t)?;
    }
    Ok(())
}

/// The results of rank 0 doing one run and rank 1 two, over TCP.
fn over_tcp(mode: Mode) -> Vec<iterstore::Result<()>> {
    over_tcp_results(Config::new(2).with_mode(mode), 2, |cluster| {
        let runs = 1 + cluster.rank();
        app(cluster, runs)
    })
}

/// What both processes must say: who left after which run, and who went on.
fn names_the_runs(e: &str) -> bool {
    e.contains("process 0 left the cluster after run") && e.contains("process 1 went on to run")
}

#[test]
fn processes_doing_different_numbers_of_runs_both_fail_over_tcp() {
    for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
        let started = Instant::now();
        let results = within(60, move || over_tcp(mode));
        let took = started.elapsed();
        for (rank, r) in results.iter().enumerate() {
            let e = match r {
                Ok(()) => panic!("{mode:?}: rank {rank} succeeded"),
                Err(e) => e.to_string(),
            };
            assert!(names_the_runs(&e), "{mode:?}: rank {rank}: {e}");
        }
        assert!(took < Duration::from_secs(30), "{mode:?}: took {took:?}");
    }
}

#[test]
fn processes_doing_different_numbers_of_runs_fail_in_one_os_process() {
    for mode in [Mode::Generic, Mode::FirstIter, Mode::Virtual] {
        let started = Instant::now();
        let result = within(60, move || {
            Cluster::run_local_processes(Config::new(2).with_mode(mode), 2, |cluster| {
                let runs = 1 + cluster.rank();
                app(cluster, runs)
            })
        });
        let e = result
            .expect_err("different numbers of runs succeeded")
            .to_string();
        assert!(names_the_runs(&e), "{mode:?}: {e}");
        assert!(started.elapsed() < Duration::from_secs(30), "{mode:?}");
    }
}
