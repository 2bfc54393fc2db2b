//! MF on the store: quality on planted low-rank data, convergence with the default
//! parameters at every worker count, agreement with the limit implementation under BSP,
//! identical models in every store mode, and a clear error when training diverges.

use iterstore::Mode;
use iterstore_algo::limit::{self, LimitConfig};
use iterstore_algo::mf::{clocks, width, MfConfig};
use iterstore_apps::mf::run;
use iterstore_apps::AppError;
use iterstore_data::{split_ratings, Rating, Ratings, RatingsSpec};

use crate::util::{bsp, MODES};

/// Standard deviation of the noise on the planted ratings.
const NOISE: f64 = 0.1;

/// Planted rank-3 ratings (400 users × 100 items, ~50 per user), split 90/10.
fn planted() -> (Ratings, Vec<Rating>) {
    let spec = RatingsSpec {
        num_users: 400,
        num_items: 100,
        rank: 3,
        ratings_per_user: 50,
        noise_std: NOISE as f32,
        seed: 9,
    };
    let (train, test) = split_ratings(&spec.generate(), 0.1, 1);
    (train, test.ratings)
}

fn params() -> MfConfig {
    MfConfig {
        rank: 3,
        learning_rate: 0.1,
        regularization: 0.001,
        init_scale: 0.3,
        seed: 1,
        ..MfConfig::default()
    }
}

/// Planted rank-8 ratings (3000 users × 600 items, ~12 per user: ~36 K ratings, so an
/// iteration makes several CLOCKs), split 90/10.
fn larger() -> (Ratings, Vec<Rating>) {
    let spec = RatingsSpec {
        num_users: 3000,
        num_items: 600,
        rank: 8,
        ratings_per_user: 12,
        noise_std: NOISE as f32,
        seed: 5,
    };
    let (train, test) = split_ratings(&spec.generate(), 0.1, 2);
    (train, test.ratings)
}

#[test]
fn the_defaults_converge_at_every_worker_count() {
    let (train, test) = larger();
    assert!(clocks(train.ratings.len()) >= 3, "{}", train.ratings.len());
    let mut finals = Vec::new();
    for workers in [1, 2, 4, 8, 16] {
        let out = run(
            &bsp(Mode::Virtual, workers, 10),
            &MfConfig::default(),
            &train,
            &test,
        )
        .unwrap();
        let it = &out.report.iterations;
        let (first, last) = (
            it[0].test_rmse.unwrap(),
            it.last().unwrap().test_rmse.unwrap(),
        );
        // Never worse than the first iteration, and close to one worker's result.
        assert!(
            it.iter().all(|r| r.test_rmse.unwrap() <= first + 1e-3),
            "{workers} workers: {it:?}"
        );
        finals.push(last);
    }
    for (w, &f) in finals.iter().enumerate() {
        assert!(
            f < 0.45 && f < 1.1 * finals[0],
            "test RMSE per worker count {finals:?} ({w})"
        );
    }
}

#[test]
fn a_diverging_run_fails_naming_the_app_iteration_and_objective() {
    let (train, test) = planted();
    let p = MfConfig {
        learning_rate: 1e4,
        ..params()
    };
    let e = run(&bsp(Mode::Virtual, 2, 5), &p, &train, &test).unwrap_err();
    assert!(matches!(e, AppError::Diverged { app: "mf", .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("mf diverged in iteration ") && text.contains("RMSE is "),
        "{text}"
    );
    assert!(text.contains("--lr"), "{text}");
}

#[test]
fn planted_data_is_learned_to_the_noise_level() {
    let (train, test) = planted();
    let out = run(&bsp(Mode::Virtual, 2, 60), &params(), &train, &test).unwrap();
    let it = &out.report.iterations;
    let last = it.last().unwrap();
    assert!(
        last.objective < 1.2 * NOISE,
        "train RMSE {}",
        last.objective
    );
    let test_rmse = last.test_rmse.unwrap();
    assert!(test_rmse < 1.5 * NOISE, "test RMSE {test_rmse}");
    assert!(it[0].objective > 3.0 * last.objective);
    assert_eq!(out.model.users.len(), 400 * width(3));
}

#[test]
fn matches_the_limit_implementation_exactly_under_bsp() {
    // The app holds a rating's rows through `read_update`, so each step is added to the
    // worker's copy of the rows as the limit adds it to its private rows: the models
    // are the same bit for bit (every mode gives the app's model, see below).
    let (train, test) = planted();
    for workers in [1, 2, 3] {
        let limit = LimitConfig {
            threads: workers,
            iterations: 8,
        };
        let want = limit::mf::run(&params(), &limit, &train, Some(&test)).unwrap();
        let got = run(&bsp(Mode::Generic, workers, 8), &params(), &train, &test).unwrap();
        assert!(got.model.users == want.model.users, "{workers} workers");
        assert!(got.model.items == want.model.items, "{workers} workers");
        for (a, b) in got.report.iterations.iter().zip(&want.stats) {
            assert!(
                (a.objective - b.objective).abs() < 1e-9,
                "{workers} workers"
            );
            assert!((a.test_rmse.unwrap() - b.held_out.unwrap()).abs() < 1e-9);
        }
    }
}

#[test]
fn every_mode_gives_the_same_model() {
    let (train, test) = planted();
    for workers in [1, 2] {
        let runs: Vec<_> = MODES
            .iter()
            .map(|&mode| run(&bsp(mode, workers, 4), &params(), &train, &test).unwrap())
            .collect();
        for out in &runs[1..] {
            assert_eq!(out.model, runs[0].model, "{} × {workers}", out.report.mode);
        }
    }
}

#[test]
fn bad_input_is_rejected_before_work_starts() {
    let (train, _) = planted();
    let bad = [Rating {
        user: 400,
        item: 0,
        value: 1.0,
    }];
    let e = run(&bsp(Mode::Virtual, 2, 1), &params(), &train, &bad).unwrap_err();
    assert!(e.to_string().contains("test set"), "{e}");
    let mut p = params();
    p.rank = 0;
    assert!(run(&bsp(Mode::Virtual, 2, 1), &p, &train, &[]).is_err());
}
