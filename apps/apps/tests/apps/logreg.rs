//! Logistic regression: Sandblaster L-BFGS on the shards follows the sequential L-BFGS
//! of `iterstore_algo::logreg` to rounding, gives the same bits in every mode, on several
//! processes, with and without backups and whatever the workers; resumes from a
//! checkpoint to the bits of an uninterrupted run; Downpour SGD lowers the objective.

use iterstore::{Cluster, Mode};
use iterstore_algo::logreg::{minimize, objective};
use iterstore_apps::logreg::{self, LogRegData, LogRegOutcome, LogRegParams, Solver};
use iterstore_apps::{AppConfig, AppError, CheckpointConfig};
use iterstore_data::ImageSpec;

fn data() -> LogRegData {
    LogRegData::Images(ImageSpec::preset("tiny").unwrap().generate())
}

fn params() -> LogRegParams {
    LogRegParams {
        history: 5,
        unit: 64,
        block: 100,
        lambda: 1e-3,
        ..LogRegParams::default()
    }
}

fn cfg(mode: Mode, workers: usize, shards: usize, iterations: usize) -> AppConfig {
    AppConfig {
        shards,
        ..crate::util::bsp(mode, workers, iterations)
    }
}

fn bits(o: &LogRegOutcome) -> (Vec<u64>, Vec<u64>) {
    (
        o.report
            .iterations
            .iter()
            .map(|i| i.objective.to_bits())
            .collect(),
        o.model.iter().map(|v| v.to_bits()).collect(),
    )
}

#[test]
fn lbfgs_on_the_shards_follows_the_sequential_lbfgs() {
    let (data, p) = (data(), params());
    let got = logreg::run_observed(&cfg(Mode::Virtual, 2, 3, 12), &p, &data, &mut |_| {}).unwrap();
    let shape = data.shape();
    let train = data.train();
    let mut f = |w: &[f64]| objective(shape, w, train, p.lambda);
    let (_, steps) = minimize(&mut f, vec![0.0; shape.len()], p.history, 12, 0.0);
    assert_eq!(got.report.iterations.len(), steps.len());
    for (i, (a, b)) in got.report.iterations.iter().zip(&steps).enumerate() {
        let rel = (a.objective - b.objective).abs() / b.objective;
        assert!(
            rel < 1e-9,
            "iteration {i}: {} vs {}",
            a.objective,
            b.objective
        );
    }
    let first = got.report.iterations[0].objective;
    let last = got.report.final_objective().unwrap();
    assert!(last < 0.5 * first, "{first} -> {last}");
    let acc = got.report.test_accuracy.unwrap();
    assert!(acc > 0.7, "test accuracy {acc}");
    assert_eq!(got.report.test_accuracy_per_iteration.len(), 12);
    // Every unit was done once; with 2 workers, worker 1 did them all (0 coordinates).
    let units = got.report.work_units.as_ref().unwrap();
    let batches = got.report.dataset["units"];
    assert_eq!(units.done.iter().sum::<u64>() % batches, 0);
    assert_eq!(units.done[0], 0);
    // The summary says who did them.
    let line = format!("work units by worker 1..: done [{}]", units.done[1]);
    assert!(
        got.report.summary().contains(&line),
        "{}",
        got.report.summary()
    );
}

#[test]
fn the_bits_do_not_depend_on_mode_workers_processes_or_backups() {
    let (data, p) = (data(), params());
    let one =
        bits(&logreg::run_observed(&cfg(Mode::Generic, 1, 4, 5), &p, &data, &mut |_| {}).unwrap());
    for mode in crate::util::MODES {
        for workers in [2, 3] {
            let got =
                logreg::run_observed(&cfg(mode, workers, 4, 5), &p, &data, &mut |_| {}).unwrap();
            assert_eq!(bits(&got), one, "{mode:?} with {workers} workers");
        }
    }
    let no_backups = LogRegParams {
        backups: false,
        ..p.clone()
    };
    let got = logreg::run_observed(
        &cfg(Mode::Virtual, 3, 4, 5),
        &no_backups,
        &data,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(bits(&got), one, "without backups");
    // 2 processes of 2 shards, 4 of 1: one process of 4 shards.
    let lift = |e: AppError| iterstore::Error::app(0, e);
    for processes in [2, 4] {
        let c = cfg(Mode::Virtual, 1, 4 / processes, 5);
        let got = Cluster::run_local_processes(c.store_config(), processes, |cluster| {
            logreg::run_in(cluster, &c, &p, &data, &mut |_| {}).map_err(lift)
        })
        .unwrap();
        for o in &got {
            assert_eq!(bits(o), one, "{processes} processes");
        }
        assert!(got[0].report.work_units.is_some() && got[1].report.work_units.is_none());
    }
}

#[test]
fn a_resumed_run_ends_with_the_bits_of_an_uninterrupted_one() {
    let (data, p) = (data(), params());
    let dir = std::env::temp_dir().join(format!("iterstore-logreg-resume-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let whole =
        bits(&logreg::run_observed(&cfg(Mode::Virtual, 2, 2, 6), &p, &data, &mut |_| {}).unwrap());
    let first = AppConfig {
        checkpoint: Some(CheckpointConfig {
            dir: dir.clone(),
            every: 2,
        }),
        ..cfg(Mode::Virtual, 2, 2, 4)
    };
    logreg::run_observed(&first, &p, &data, &mut |_| {}).unwrap();
    // Resumed with another count of workers: the history is the same on every worker.
    let rest = AppConfig {
        resume: Some(dir.clone()),
        ..cfg(Mode::Virtual, 3, 2, 6)
    };
    let resumed = logreg::run_observed(&rest, &p, &data, &mut |_| {}).unwrap();
    assert_eq!(resumed.report.resumed.as_ref().unwrap().iteration, 4);
    let (objectives, model) = bits(&resumed);
    assert_eq!(model, whole.1);
    assert_eq!(objectives, whole.0[4..]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn downpour_sgd_lowers_the_objective_and_learns() {
    let data = data();
    let p = LogRegParams {
        solver: Solver::Sgd,
        lr: 0.1,
        batch: 50,
        ..params()
    };
    let got = logreg::run_observed(&cfg(Mode::Virtual, 2, 2, 4), &p, &data, &mut |_| {}).unwrap();
    let objectives: Vec<f64> = got.report.iterations.iter().map(|i| i.objective).collect();
    let start = (data.shape().classes as f64).ln();
    assert!(objectives[0] < start, "{objectives:?}");
    assert!(objectives.windows(2).all(|w| w[1] < w[0]), "{objectives:?}");
    assert!(got.report.test_accuracy.unwrap() > 0.7);
    assert!(got.report.work_units.is_none());
}

#[test]
fn unusable_parameters_and_inputs_are_refused_by_name() {
    let bad = [
        (
            LogRegParams {
                history: 0,
                ..params()
            },
            "history",
        ),
        (
            LogRegParams {
                lambda: -1.0,
                ..params()
            },
            "lambda",
        ),
        (
            LogRegParams {
                unit: 0,
                ..params()
            },
            "unit",
        ),
        (
            LogRegParams {
                lr: f64::NAN,
                ..params()
            },
            "lr",
        ),
    ];
    for (p, name) in bad {
        let e = logreg::run_observed(&cfg(Mode::Generic, 1, 1, 1), &p, &data(), &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
    }
    let one_class = LogRegData::Images(iterstore_data::ImageSet {
        classes: 1,
        ..ImageSpec::preset("tiny").unwrap().generate()
    });
    let e = logreg::run_observed(
        &cfg(Mode::Generic, 1, 1, 1),
        &params(),
        &one_class,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("at least 2 classes"), "{e}");
}
