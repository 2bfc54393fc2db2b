//! `iterstore tune lda`: LDA's staleness tuned by [`iterstore_tune`]'s loop over the
//! cluster's branches.
//!
//! **A tuner clock** is one sweep (LDA's iteration is one CLOCK). Its loss is the
//! negated log-likelihood per token after the sweep, which needs the whole model (a
//! snapshot of both tables and every worker's document terms, as `run`'s evaluation
//! computes it): so each sweep is a run of its own, measured after it, and its seconds
//! include the measurement. The run barrier between sweeps takes away the waiting that
//! a staleness bound saves within a run, though not the fetches it saves (a worker's
//! cached rows stay usable across runs within the bound): the tuning compares what a
//! staleness does to progress per sweep and to a sweep's fetches. The validation is the
//! same log-likelihood (total, as `run lda` reports it: higher is better).
//!
//! **A branch** is the store's branch of the count tables plus each worker's topic
//! assignments and sweep count (which key the draws), and its staleness (one of
//! [`LdaTuneConfig::staleness`], set on the branch: [`Cluster::set_staleness`]).

use std::time::Instant;

use iterstore::{BranchId as StoreBranch, BranchStates, Cluster, Staleness};
use iterstore_algo::lda::{check_corpus, topic_totals_term, word_rows_term, LdaConfig};
use iterstore_algo::partition;
use iterstore_data::Corpus;
use iterstore_tune::{
    BranchId, Event, Measured, Options, Outcome, Setting, Space, Trainer, Tunable, Tuner,
};

use super::{doc_terms, init, initial_topics, iteration, snapshot, Sweep, Tables};
use crate::tuning::{live, measured, Alive};
use crate::{par_build, preprocess, AppConfig, AppError};

/// What `iterstore tune lda` tunes, and how.
#[derive(Clone, Debug)]
pub struct LdaTuneConfig {
    /// The staleness values to choose from (at least one).
    pub staleness: Vec<u32>,
    /// The loop's options; `epoch_clocks` is set to one sweep (validation after each).
    pub options: Options,
}

/// What an LDA tuning gives back.
#[derive(Debug)]
pub struct LdaTuned {
    /// The tuning: why it stopped, its setting, its timeline.
    pub outcome: Outcome,
    /// The log-likelihood of the branch trained last.
    pub log_likelihood: f64,
    /// Seconds of setup: tables, the virtual sweep, the initial counts.
    pub setup_s: f64,
}

/// One worker's state in one branch: its documents' topics and the sweeps it has run.
#[derive(Clone)]
struct Tuned {
    z: Vec<u32>,
    sweeps: u64,
}

/// The [`Trainer`] over a cluster's branches.
struct LdaTrainer<'a> {
    cluster: &'a mut Cluster,
    t: Tables,
    params: &'a LdaConfig,
    corpus: &'a Corpus,
    tokens: f64,
    states: BranchStates<Tuned>,
    alive: Alive,
}

impl LdaTrainer<'_> {
    /// The worker `w`'s documents' range (global worker ids).
    fn range(&self, w: usize) -> std::ops::Range<usize> {
        partition(self.corpus.docs.len(), self.cluster.total_workers(), w)
    }

    /// The log-likelihood of `b` as it is (`run lda`'s objective), the same on every
    /// process.
    fn log_likelihood(&mut self, b: BranchId) -> Result<f64, AppError> {
        live(self.cluster, b)?;
        let (k, vocab) = (self.params.topics, self.corpus.vocab_size);
        let (word_topic, topic_totals) = snapshot(self.cluster, self.t, vocab, k)?;
        let first = self.cluster.rank() * self.cluster.config().workers;
        let ranges: Vec<_> = (0..self.cluster.config().workers)
            .map(|l| self.range(first + l))
            .collect();
        let (params, corpus) = (self.params, self.corpus);
        let states = self.states.of_mut(StoreBranch(b))?;
        let parts: Vec<f64> = par_build(states.len(), |l| {
            doc_terms(params, &corpus.docs[ranges[l].clone()], &states[l].z)
        });
        let docs: f64 = self.cluster.all_gather(&parts)?.iter().flatten().sum();
        Ok(word_rows_term(params, &word_topic)
            + topic_totals_term(params, vocab, &topic_totals)
            + docs)
    }
}

impl Trainer for LdaTrainer<'_> {
    type Error = AppError;

    fn root(&self) -> BranchId {
        0
    }

    fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, AppError> {
        self.alive
            .fork(self.cluster, &mut self.states, parent, setting)
    }

    fn train(&mut self, b: BranchId, clocks: u64) -> Result<Vec<Measured>, AppError> {
        let mut out = Vec::with_capacity(clocks as usize);
        for _ in 0..clocks {
            let started = Instant::now();
            live(self.cluster, b)?;
            let (params, corpus, t) = (self.params, self.corpus, self.t);
            let (docs, total) = (corpus.docs.len(), self.cluster.total_workers());
            let vocab = corpus.vocab_size;
            let states = self.states.of_mut(StoreBranch(b))?;
            self.cluster.run_with(states, |w, s| {
                let range = partition(docs, total, w.id());
                let sweep = Sweep {
                    cfg: params,
                    vocab,
                    iter: s.sweeps,
                    docs: &corpus.docs[range.clone()],
                    first_doc: range.start,
                };
                iteration(w, t, &sweep, &mut s.z)?;
                s.sweeps += 1;
                Ok(())
            })?;
            let ll = self.log_likelihood(b)?;
            out.push(measured(self.cluster, started, -ll / self.tokens)?);
        }
        Ok(out)
    }

    fn loss(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let value = -self.log_likelihood(b)? / self.tokens;
        measured(self.cluster, started, value)
    }

    fn evaluate(&mut self, b: BranchId) -> Result<Measured, AppError> {
        let started = Instant::now();
        let value = self.log_likelihood(b)?;
        measured(self.cluster, started, value)
    }

    fn free(&mut self, b: BranchId) -> Result<(), AppError> {
        self.alive.free(self.cluster, &mut self.states, b)
    }
}

/// Tunes LDA's staleness on `cluster` (started for `cfg`, its staleness bounded): the
/// tables, the virtual sweep (virtual mode), the initial counts, then [`Tuner::run`] over
/// the cluster's branches, calling `on_event` with each event. `options.target`, if any,
/// is a total log-likelihood.
pub fn tune_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &LdaConfig,
    corpus: &Corpus,
    config: &LdaTuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<LdaTuned, AppError> {
    cfg.validate()?;
    crate::check_cluster(cfg, cluster)?;
    params.validate()?;
    check_corpus(corpus)?;
    if matches!(cfg.staleness, Staleness::Unbounded) {
        return Err(AppError::Invalid(
            "lda tune: branches switch bounded staleness only (not unbounded)".into(),
        ));
    }
    if config.staleness.is_empty() {
        return Err(AppError::Invalid(
            "lda tune: give at least one staleness to choose from".into(),
        ));
    }
    let values: Vec<f64> = config.staleness.iter().map(|&s| f64::from(s)).collect();
    let space = Space::new(vec![Tunable::choice("staleness", values)])
        .map_err(|e| AppError::Invalid(format!("lda tune: {e}")))?;
    let mut options = config.options.clone();
    options.epoch_clocks = 1;
    options.max_trial_clocks = options.max_trial_clocks.max(options.first_trial_clocks);
    let tuner = Tuner::new(space, options)
        .map_err(|e| AppError::Invalid(format!("lda tune: {e}")))?
        .observe(on_event);

    let setup = Instant::now();
    let k = params.topics;
    let (workers, total) = (cfg.workers, cluster.total_workers());
    let first = cluster.rank() * workers;
    let docs = corpus.docs.len();
    let range = |w: usize| partition(docs, total, w);
    let mut z: Vec<Vec<u32>> = par_build(workers, |l| {
        initial_topics(params, corpus, range(first + l))
    });
    let t = Tables {
        words: cluster.create_table::<i32>("lda.word_topic", k)?,
        totals: cluster.create_table::<i32>("lda.topic_totals", k)?,
    };
    let vocab = corpus.vocab_size;
    preprocess(cluster, cfg, &z, |w, z| {
        let r = range(w.id());
        let sweep = Sweep {
            cfg: params,
            vocab,
            iter: 0,
            docs: &corpus.docs[r.clone()],
            first_doc: r.start,
        };
        iteration(w, t, &sweep, z)
    })?;
    init(cluster, &mut z, t, corpus, k, range)?;
    let setup_s = setup.elapsed().as_secs_f64();

    let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
    let states = z.into_iter().map(|z| Tuned { z, sweeps: 0 }).collect();
    let mut trainer = LdaTrainer {
        cluster,
        t,
        params,
        corpus,
        tokens: tokens.max(1) as f64,
        states: BranchStates::new(states),
        alive: Alive::new(),
    };
    let outcome = tuner.run(&mut trainer)?;
    let log_likelihood = trainer.log_likelihood(outcome.branch.unwrap_or(0))?;
    Ok(LdaTuned {
        outcome,
        log_likelihood,
        setup_s,
    })
}

/// [`tune_in`] on a cluster of its own started for `cfg`; returns the tuning and the
/// seconds to start the cluster.
pub fn tune(
    cfg: &AppConfig,
    params: &LdaConfig,
    corpus: &Corpus,
    config: &LdaTuneConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(LdaTuned, f64), AppError> {
    crate::with_cluster(cfg, |c| tune_in(c, cfg, params, corpus, config, on_event))
}
