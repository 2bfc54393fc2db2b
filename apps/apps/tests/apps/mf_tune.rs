//! `iterstore tune mf`'s trainer ([`iterstore_apps::mf::tune`]): tuning the step size
//! and the staleness lowers the test RMSE of planted ratings, the tuned staleness is the
//! branch's own, and every process of a cluster takes the same decisions.

use iterstore::{Cluster, Mode, Staleness};
use iterstore_algo::mf::MfConfig;
use iterstore_apps::mf::tune::{tune_in, MfTuneConfig};
use iterstore_apps::AppError;
use iterstore_data::{split_ratings, Rating, Ratings, RatingsSpec};
use iterstore_tune::{Event, Options, Stop};

use crate::util::bsp;

/// Planted rank-3 ratings, split 90/10.
fn planted() -> (Ratings, Vec<Rating>) {
    let spec = RatingsSpec {
        num_users: 400,
        num_items: 100,
        rank: 3,
        ratings_per_user: 50,
        noise_std: 0.1,
        seed: 9,
    };
    let (train, test) = split_ratings(&spec.generate(), 0.1, 1);
    (train, test.ratings)
}

fn params() -> MfConfig {
    MfConfig {
        rank: 3,
        regularization: 0.001,
        init_scale: 0.3,
        seed: 1,
        ..MfConfig::default()
    }
}

fn config(staleness: Vec<u32>, target: Option<f64>, budget: f64) -> MfTuneConfig {
    MfTuneConfig {
        // Steps above ~0.3 fall fastest in a trial of two clocks and then stall above the
        // target (the tuner's short-horizon bias, README): the test searches below.
        lr_range: (0.003, 0.3),
        staleness,
        clock_batches: 1,
        options: Options {
            first_trial_clocks: 2,
            target,
            time_budget: Some(budget),
            ..Options::default()
        },
    }
}

#[test]
fn tuning_the_step_and_the_staleness_reaches_a_test_rmse() {
    let (train, test) = planted();
    let cfg = bsp(Mode::Virtual, 2, 1);
    let mut cluster = Cluster::start(cfg.store_config()).unwrap();
    let tuned = tune_in(
        &mut cluster,
        &cfg,
        &params(),
        &train,
        &test,
        &config(vec![0, 2], Some(-0.3), 120.0),
        &mut |_| {},
    )
    .unwrap();
    let o = &tuned.outcome;
    assert_eq!(o.stop, Stop::Target, "{:?}", o.timeline);
    assert!(tuned.rmse <= 0.3, "{}", tuned.rmse);
    assert_eq!(tuned.rmse, tuned.model.rmse(&test));
    let setting = o.setting.as_ref().unwrap();
    assert!([0.0, 2.0].contains(&setting.get("staleness").unwrap()));
    assert!(o.timeline.count("fork") >= 2);
    // Each trial set its own staleness; the cluster now runs the chosen one.
    assert_eq!(
        cluster.config().staleness,
        Staleness::Bounded(setting.get("staleness").unwrap() as u32)
    );
    assert_eq!(cluster.stats().unplanned_accesses, 0);
    cluster.shutdown().unwrap();
}

#[test]
fn every_process_takes_the_same_decisions() {
    let (train, test) = planted();
    let cfg = bsp(Mode::Virtual, 1, 1);
    let outs = Cluster::run_local_processes(cfg.store_config(), 2, |c| {
        let mut events = Vec::new();
        let t = tune_in(
            c,
            &cfg,
            &params(),
            &train,
            &test,
            &config(vec![0, 1], None, 2.0),
            &mut |e: &Event| events.push(e.clone()),
        )
        .map_err(|e| iterstore::Error::app(0, e))?;
        Ok((t.outcome, t.rmse, events))
    })
    .unwrap();
    assert!(outs[0].0.timeline.count("fork") >= 2);
    assert_eq!(outs[0], outs[1]);
}

#[test]
fn an_unbounded_staleness_is_refused_before_any_work() {
    let (train, test) = planted();
    let cfg = iterstore_apps::AppConfig {
        staleness: Staleness::Unbounded,
        ..bsp(Mode::Virtual, 1, 1)
    };
    let mut cluster = Cluster::start(cfg.store_config()).unwrap();
    let e = tune_in(
        &mut cluster,
        &cfg,
        &params(),
        &train,
        &test,
        &config(vec![], None, 1.0),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(matches!(e, AppError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("unbounded"), "{e}");
}
