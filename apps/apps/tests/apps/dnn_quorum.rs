//! The DNN's epoch quorum (issue 41, Project Adam's): with a straggler, an epoch ends once
//! the quorum of replicas finished their shares; the straggler stops where it is and
//! carries what it did not reach into its next epoch, so every epoch's processed and
//! carried samples make the training set; at most `replicas − needed` replicas are cut;
//! a quorum of every replica never cuts; one process and two processes alike; and the
//! runs it cannot help are refused before any work.

use std::time::Duration;

use iterstore::{Mode, Staleness};
use iterstore_algo::dnn::{DnnConfig, Partitioning, ServerRule, Straggler};
use iterstore_apps::dnn::{run, run_in, run_partitioned_observed};
use iterstore_apps::{AppConfig, QuorumReport};
use iterstore_data::{ImageSet, ImageSpec};

use crate::dnn_checks::on_processes;
use crate::util::bsp;

fn small() -> ImageSet {
    ImageSpec::preset("small").unwrap().generate()
}

/// Downpour SGD (AdaGrad on the servers) with worker 3 sleeping `delay_ms` before each
/// mini-batch and an epoch quorum of `fraction`.
fn params(fraction: Option<f32>, delay_ms: u64) -> DnnConfig {
    DnnConfig {
        hidden: vec![32],
        learning_rate: 0.05,
        momentum: 0.0,
        batch: 64,
        seed: 7,
        server_rule: Some(ServerRule::AdaGrad),
        epoch_quorum: fraction,
        straggler: Some(Straggler {
            worker: 3,
            delay: Duration::from_millis(delay_ms),
        }),
        ..DnnConfig::default()
    }
}

fn asynchronous(workers: usize, epochs: usize) -> AppConfig {
    AppConfig {
        staleness: Staleness::Unbounded,
        ..bsp(Mode::Virtual, workers, epochs)
    }
}

/// Every epoch's processed and carried samples make the training set, and at most
/// `replicas − needed` replicas were cut.
fn check_accounting(q: &QuorumReport, replicas: usize, train: usize, epochs: usize) {
    assert_eq!(q.epochs, (0..epochs).collect::<Vec<_>>());
    for e in 0..epochs {
        assert_eq!(
            q.processed_samples[e] + q.carried_samples[e],
            train as u64,
            "epoch {e}: {q:?}"
        );
        assert!(q.cut_replicas[e] <= replicas - q.replicas_needed, "{q:?}");
        assert_eq!(q.cut_replicas[e] == 0, q.carried_samples[e] == 0, "{q:?}");
    }
    assert_eq!(
        q.total_carried_samples,
        q.carried_samples.iter().sum::<u64>()
    );
}

#[test]
fn a_straggler_is_cut_short_and_carries_its_samples_into_the_next_epoch() {
    let data = small();
    let out = run(&asynchronous(4, 3), &params(Some(0.75), 40), &data).unwrap();
    let q = out.report.epoch_quorum.as_ref().expect("a quorum report");
    assert_eq!((q.fraction, q.replicas_needed), (0.75, 3));
    check_accounting(q, 4, data.train.len(), 3);
    // The straggler sleeps 40 ms before each of the epoch's 94 mini-batches (3.8 s);
    // the others take a few ms each: it is cut every epoch.
    assert_eq!(q.cut_replicas, vec![1, 1, 1], "{q:?}");
    assert_eq!(out.report.params["epoch_quorum"], 0.75);
    assert!(out
        .report
        .summary()
        .contains("epoch quorum 0.75 (3 replicas)"));
    // It still learns (chance is 10 %).
    assert!(out.report.test_accuracy.unwrap() > 0.5, "{:?}", out.report);
}

#[test]
fn a_quorum_of_every_replica_never_cuts_an_epoch() {
    let data = small();
    let out = run(&asynchronous(4, 2), &params(Some(1.0), 5), &data).unwrap();
    let q = out.report.epoch_quorum.as_ref().unwrap();
    check_accounting(q, 4, data.train.len(), 2);
    assert_eq!((q.cut_epochs, q.total_carried_samples), (0, 0), "{q:?}");
    let without = run(&asynchronous(4, 1), &params(None, 0), &data).unwrap();
    assert!(without.report.epoch_quorum.is_none());
}

#[test]
fn two_processes_keep_the_quorum_as_one_does() {
    let data = small();
    let cfg = asynchronous(2, 2);
    let p = params(Some(0.75), 40);
    let got = on_processes(&cfg, 2, |c| run_in(c, &cfg, &p, &data, &mut |_| {}));
    for out in &got {
        let q = out.report.epoch_quorum.as_ref().unwrap();
        check_accounting(q, 4, data.train.len(), 2);
        assert_eq!(q.cut_replicas, vec![1, 1], "{q:?}");
    }
    // Every process reports the same epochs (the counts are gathered).
    assert_eq!(got[0].report.epoch_quorum, got[1].report.epoch_quorum);
}

#[test]
fn runs_a_quorum_cannot_help_are_refused_before_any_work() {
    let data = small();
    let refused = |cfg: &AppConfig, p: &DnnConfig| run(cfg, p, &data).unwrap_err().to_string();
    let e = refused(&bsp(Mode::Virtual, 4, 1), &params(Some(0.75), 0));
    assert!(e.contains("needs asynchronous replicas"), "{e}");
    let e = refused(&asynchronous(1, 1), &params(Some(0.75), 0));
    assert!(e.contains("needs two model replicas or more"), "{e}");
    let e = refused(&asynchronous(2, 1), &params(None, 0));
    assert!(
        e.contains("--straggler 3: the run's replicas are workers 0 to 1"),
        "{e}"
    );
    let e = run(
        &asynchronous(2, 1),
        &DnnConfig {
            epoch_quorum: Some(1.5),
            ..params(None, 0)
        },
        &data,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("epoch quorum 1.5"), "{e}");
    let partitioned = Partitioning {
        replicas: 1,
        partitions: vec![2, 2],
        replications: vec![1, 1],
        n_read: 0,
        n_write: 0,
        replica_workers: None,
        parameter_servers: None,
    };
    let e = run_partitioned_observed(
        &asynchronous(2, 1),
        &DnnConfig {
            straggler: None,
            ..params(Some(0.75), 0)
        },
        &data,
        Some(&partitioned),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("layer updates or a warm start with a partitioned replica"),
        "{e}"
    );
}
