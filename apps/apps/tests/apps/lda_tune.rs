//! `iterstore tune lda`'s trainer ([`iterstore_apps::lda::tune`]): tuning the staleness
//! raises the log-likelihood, each trial runs with its own staleness, every access follows
//! the virtual sweep's tape, and every process of a cluster takes the same decisions.

use iterstore::{Cluster, Mode, Staleness};
use iterstore_algo::lda::LdaConfig;
use iterstore_apps::lda::tune::{tune_in, LdaTuneConfig};
use iterstore_data::{Corpus, CorpusSpec};
use iterstore_tune::{Event, Options};

use crate::util::bsp;

fn tiny() -> Corpus {
    CorpusSpec::preset("tiny").unwrap().generate().0
}

fn params() -> LdaConfig {
    LdaConfig {
        topics: 5,
        alpha: 0.1,
        beta: 0.01,
        seed: 3,
        ..LdaConfig::default()
    }
}

fn config(budget: f64) -> LdaTuneConfig {
    LdaTuneConfig {
        staleness: vec![0, 2],
        options: Options {
            first_trial_clocks: 2,
            time_budget: Some(budget),
            ..Options::default()
        },
    }
}

#[test]
fn tuning_the_staleness_raises_the_log_likelihood() {
    let corpus = tiny();
    let cfg = bsp(Mode::Virtual, 2, 1);
    let mut cluster = Cluster::start(cfg.store_config()).unwrap();
    let mut events = Vec::new();
    let tuned = tune_in(
        &mut cluster,
        &cfg,
        &params(),
        &corpus,
        &config(2.0),
        &mut |e| events.push(e.clone()),
    )
    .unwrap();
    let o = &tuned.outcome;
    let setting = o.setting.as_ref().expect("a staleness chosen");
    let s = setting.get("staleness").unwrap();
    assert!([0.0, 2.0].contains(&s), "{s}");
    assert_eq!(cluster.config().staleness, Staleness::Bounded(s as u32));
    assert!(o.timeline.count("fork") >= 2);
    // The first loss measured is the initial state's; training lowered it.
    let losses: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Train { loss, .. } => Some(*loss),
            _ => None,
        })
        .collect();
    let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
    assert!(
        -tuned.log_likelihood / (tokens as f64) < losses[0],
        "{losses:?}"
    );
    let stats = cluster.stats();
    assert_eq!(stats.unplanned_accesses, 0);
    assert!(stats.tape_accesses > 0);
    cluster.shutdown().unwrap();
}

#[test]
fn every_process_takes_the_same_decisions() {
    let corpus = tiny();
    let cfg = bsp(Mode::Virtual, 1, 1);
    let outs = Cluster::run_local_processes(cfg.store_config(), 2, |c| {
        let t = tune_in(c, &cfg, &params(), &corpus, &config(1.0), &mut |_| {})
            .map_err(|e| iterstore::Error::app(0, e))?;
        Ok((t.outcome, t.log_likelihood))
    })
    .unwrap();
    assert!(outs[0].0.timeline.count("fork") >= 2);
    assert_eq!(outs[0], outs[1]);
}
