//! The limit implementation of collapsed Gibbs LDA on a flat `i32` word–topic table.
//!
//! Worker `w` owns the documents [`partition`]`(D, W, w)` in their given order, stored as
//! one flat token array with its words mapped to dense local rows. Each iteration it copies
//! just those word rows and the topic totals into its private view, resamples every token
//! with the shared [`Sampler`] (dense or sparse, as configured; keyed by the corpus-wide document index), applying
//! each move to its view at once (read-my-writes), then turns the view into a delta
//! (view − start); the deltas are added into the shared table in worker order. Counts are
//! integers, so the merge is exact and one worker reproduces [`crate::lda::reference`]
//! bit for bit. Buffers live for the whole run; the hot loop does not allocate.
//!
//! It knows nothing of the parameter server; the math is [`crate::lda`].

use std::time::Instant;

use super::{add_parts, localize, par_each, par_map, par_rows, IterStats, LimitConfig, Part};
use crate::lda::{
    check_corpus, count_doc, doc_rng, doc_term, init_doc, topic_totals_term, word_rows_term,
    LdaConfig, LdaModel, Sampler,
};
use crate::partition;
use iterstore_data::Corpus;

/// The outcome of a limit LDA run.
#[derive(Debug, Clone)]
pub struct LdaRun {
    /// The final counts and assignments.
    pub model: LdaModel,
    /// Per iteration: time and log-likelihood `log p(w, z)`.
    pub stats: Vec<IterStats>,
}

/// One worker's documents and private rows.
struct Worker {
    /// Corpus index of the worker's first document.
    first_doc: usize,
    /// Token range of local document `d`: `offsets[d]..offsets[d + 1]`.
    offsets: Vec<usize>,
    /// Local word row of every token.
    words: Vec<u32>,
    /// Topic of every token.
    z: Vec<u32>,
    /// Sorted global ids of the words the worker's tokens use.
    rows: Vec<u32>,
    /// Private view of those rows (`rows × K`), a delta after [`Worker::sweep`].
    view: Vec<i32>,
    /// Private view of the topic totals, a delta after [`Worker::sweep`].
    totals: Vec<i32>,
    /// Scratch: the current document's topic counts.
    doc_topic: Vec<i32>,
    sampler: Sampler,
}

impl Worker {
    /// Loads documents `docs` of `corpus` and draws their initial topics.
    fn new(cfg: &LdaConfig, corpus: &Corpus, docs: std::ops::Range<usize>) -> Self {
        let k = cfg.topics;
        let mine = &corpus.docs[docs.clone()];
        let mut offsets = Vec::with_capacity(mine.len() + 1);
        offsets.push(0);
        for doc in mine {
            offsets.push(offsets.last().unwrap() + doc.len());
        }
        let (rows, words) = localize(mine.iter().flatten().copied(), corpus.vocab_size as usize);
        let mut z = vec![0; words.len()];
        for (d, w) in offsets.windows(2).enumerate() {
            init_doc(cfg, (docs.start + d) as u64, &mut z[w[0]..w[1]]);
        }
        Self {
            first_doc: docs.start,
            offsets,
            view: vec![0; rows.len() * k],
            rows,
            words,
            z,
            totals: vec![0; k],
            doc_topic: vec![0; k],
            sampler: Sampler::new(cfg, corpus.vocab_size),
        }
    }

    /// Sets the view to the counts of the initial topics (a delta against an empty model).
    fn count_initial(&mut self, k: usize) {
        self.view.fill(0);
        self.totals.fill(0);
        for (&w, &t) in self.words.iter().zip(&self.z) {
            self.view[w as usize * k + t as usize] += 1;
            self.totals[t as usize] += 1;
        }
    }

    /// Sweep `iter` against the start-of-iteration counts; leaves the deltas in the view.
    fn sweep(
        &mut self,
        k: usize,
        cfg: &LdaConfig,
        iter: usize,
        word_topic: &[i32],
        totals: &[i32],
    ) {
        for (dst, &row) in self.view.chunks_exact_mut(k).zip(&self.rows) {
            dst.copy_from_slice(&word_topic[row as usize * k..][..k]);
        }
        self.totals.copy_from_slice(totals);
        self.sampler.begin(&self.totals);
        let Self {
            offsets,
            words,
            z,
            view,
            totals: my_totals,
            doc_topic,
            sampler,
            ..
        } = self;
        for (d, range) in offsets.windows(2).enumerate() {
            let (words, z) = (&words[range[0]..range[1]], &mut z[range[0]..range[1]]);
            count_doc(z, doc_topic);
            sampler.start_doc(my_totals, doc_topic);
            let mut rng = doc_rng(cfg, iter as u64, (self.first_doc + d) as u64);
            for (&w, t) in words.iter().zip(z.iter_mut()) {
                let row = &mut view[w as usize * k..][..k];
                let new = sampler.sample(row, my_totals, doc_topic, *t, &mut rng) as usize;
                let old = *t as usize;
                if new != old {
                    row[old] -= 1;
                    row[new] += 1;
                    my_totals[old] -= 1;
                    my_totals[new] += 1;
                    doc_topic[old] -= 1;
                    doc_topic[new] += 1;
                    *t = new as u32;
                }
            }
        }
        for (dst, &row) in view.chunks_exact_mut(k).zip(&self.rows) {
            for (x, &s) in dst.iter_mut().zip(&word_topic[row as usize * k..][..k]) {
                *x -= s;
            }
        }
        for (x, &s) in my_totals.iter_mut().zip(totals) {
            *x -= s;
        }
    }

    /// The documents' share of `log p(z)`, summed in document order.
    fn doc_log_likelihood(&mut self, cfg: &LdaConfig) -> f64 {
        let mut sum = 0.0;
        for range in self.offsets.windows(2) {
            count_doc(&self.z[range[0]..range[1]], &mut self.doc_topic);
            sum += doc_term(cfg, &self.doc_topic);
        }
        sum
    }
}

/// The shared counts.
struct Shared {
    word_topic: Vec<i32>,
    totals: Vec<i32>,
}

impl Shared {
    /// Adds the workers' view deltas in worker order.
    fn merge(&mut self, workers: &[Worker], k: usize, threads: usize) {
        let parts: Vec<_> = workers
            .iter()
            .map(|w| Part {
                rows: &w.rows,
                data: &w.view,
                stride: k,
            })
            .collect();
        par_rows(&mut self.word_topic, k, threads, |first, rows| {
            add_parts(first, rows, k, &parts)
        });
        for w in workers {
            for (t, &d) in self.totals.iter_mut().zip(&w.totals) {
                *t += d;
            }
        }
    }

    /// `log p(w, z)`: word rows summed per row range in order, then the totals term, then
    /// the workers' document terms in worker order.
    fn log_likelihood(&self, cfg: &LdaConfig, vocab: u32, workers: &mut [Worker]) -> f64 {
        let (k, threads) = (cfg.topics, workers.len());
        let words = par_map(threads, |w| {
            let rows = partition(vocab as usize, threads, w);
            word_rows_term(cfg, &self.word_topic[rows.start * k..rows.end * k])
        });
        let docs = par_each(workers, |w| w.doc_log_likelihood(cfg));
        words.iter().sum::<f64>()
            + topic_totals_term(cfg, vocab, &self.totals)
            + docs.iter().sum::<f64>()
    }
}

/// Runs `limit.iterations` BSP sweeps of collapsed Gibbs sampling over `corpus` with
/// `limit.threads` workers, after the initial assignment of [`init_doc`]. Reports the
/// log-likelihood after each sweep.
pub fn run(cfg: &LdaConfig, limit: &LimitConfig, corpus: &Corpus) -> Result<LdaRun, String> {
    cfg.validate()?;
    limit.validate()?;
    check_corpus(corpus)?;
    let (k, threads, vocab) = (cfg.topics, limit.threads, corpus.vocab_size);
    let num_docs = corpus.docs.len();
    let mut workers = par_map(threads, |w| {
        Worker::new(cfg, corpus, partition(num_docs, threads, w))
    });
    let mut shared = Shared {
        word_topic: vec![0; vocab as usize * k],
        totals: vec![0; k],
    };
    par_each(&mut workers, |w| w.count_initial(k));
    shared.merge(&workers, k, threads);
    let mut stats = Vec::with_capacity(limit.iterations.min(1024));
    for iter in 0..limit.iterations {
        let start = Instant::now();
        par_each(&mut workers, |w| {
            w.sweep(k, cfg, iter, &shared.word_topic, &shared.totals)
        });
        shared.merge(&workers, k, threads);
        let seconds = start.elapsed().as_secs_f64();
        let objective = shared.log_likelihood(cfg, vocab, &mut workers);
        stats.push(IterStats {
            iter,
            seconds,
            objective,
            held_out: None,
        });
    }
    let mut assignments = Vec::with_capacity(num_docs);
    for w in &workers {
        assignments.extend(w.offsets.windows(2).map(|r| w.z[r[0]..r[1]].to_vec()));
    }
    let model = LdaModel {
        topics: k,
        vocab_size: vocab,
        word_topic: shared.word_topic,
        topic_totals: shared.totals,
        assignments,
    };
    Ok(LdaRun { model, stats })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lda::{reference, SamplerKind};
    use crate::Rng64;

    /// 3 planted topics over 30 words (topic t uses words 10t..10t+10); 40 documents of
    /// 30..50 tokens, each mostly from one topic with some of a second.
    fn planted() -> Corpus {
        let mut rng = Rng64::from_key(&[11]);
        let docs = (0..40)
            .map(|d| {
                let (main, other) = (d % 3, (d / 3) % 3);
                let len = 30 + rng.below(21);
                (0..len)
                    .map(|_| {
                        let topic = if rng.next_f64() < 0.8 { main } else { other };
                        10 * topic + rng.below(10)
                    })
                    .collect()
            })
            .collect();
        Corpus {
            docs,
            vocab_size: 30,
        }
    }

    fn cfg() -> LdaConfig {
        LdaConfig {
            topics: 3,
            alpha: 0.1,
            beta: 0.05,
            seed: 5,
            ..LdaConfig::default()
        }
    }

    #[test]
    fn one_thread_equals_the_sequential_reference_exactly() {
        let corpus = planted();
        let (want, history) = reference(&corpus, &cfg(), 10);
        let got = run(
            &cfg(),
            &LimitConfig {
                threads: 1,
                iterations: 10,
            },
            &corpus,
        )
        .unwrap();
        assert_eq!(got.model, want);
        for (s, h) in got.stats.iter().zip(&history) {
            assert!(
                (s.objective - h).abs() <= 1e-9 * h.abs(),
                "{} vs {h}",
                s.objective
            );
        }
    }

    #[test]
    fn the_sparse_samplers_log_likelihood_stays_in_the_dense_samplers_range() {
        let corpus = planted();
        let final_ll = |sampler, seed| {
            let cfg = LdaConfig {
                sampler,
                seed,
                ..cfg()
            };
            let limit = LimitConfig {
                threads: 2,
                iterations: 30,
            };
            let run = run(&cfg, &limit, &corpus).unwrap();
            run.stats.iter().map(|s| s.objective).collect::<Vec<f64>>()
        };
        let dense: Vec<Vec<f64>> = (1..=4).map(|s| final_ll(SamplerKind::Dense, s)).collect();
        for seed in 1..=2 {
            let sparse = final_ll(SamplerKind::Sparse, seed);
            // From iteration 10 on, each iteration's log-likelihood lies within the dense
            // runs' range for that iteration, widened by 1 %.
            for it in 10..30 {
                let lo = dense.iter().map(|d| d[it]).fold(f64::INFINITY, f64::min);
                let hi = dense
                    .iter()
                    .map(|d| d[it])
                    .fold(f64::NEG_INFINITY, f64::max);
                let slack = 0.01 * lo.abs();
                assert!(
                    (lo - slack..=hi + slack).contains(&sparse[it]),
                    "seed {seed}, iteration {it}: {} outside [{lo}, {hi}]",
                    sparse[it]
                );
            }
        }
    }

    #[test]
    fn log_likelihood_rises_and_counts_stay_consistent() {
        let corpus = planted();
        let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
        for threads in [1, 2, 3] {
            let run = run(
                &cfg(),
                &LimitConfig {
                    threads,
                    iterations: 30,
                },
                &corpus,
            )
            .unwrap();
            let (first, last) = (run.stats[0].objective, run.stats[29].objective);
            assert!(
                last > first + 0.05 * first.abs(),
                "threads {threads}: {first} -> {last}"
            );
            let m = &run.model;
            assert_eq!(m.topic_totals.iter().sum::<i32>() as usize, tokens);
            assert!(m.word_topic.iter().all(|&n| n >= 0));
            for t in 0..3 {
                let column: i32 = m.word_topic.iter().skip(t).step_by(3).sum();
                assert_eq!(column, m.topic_totals[t]);
            }
            let mut recount = LdaModel {
                word_topic: vec![0; 90],
                topic_totals: vec![0; 3],
                ..m.clone()
            };
            for (doc, z) in corpus.docs.iter().zip(&m.assignments) {
                for (&w, &t) in doc.iter().zip(z) {
                    recount.word_topic[w as usize * 3 + t as usize] += 1;
                    recount.topic_totals[t as usize] += 1;
                }
            }
            assert_eq!(
                &recount, m,
                "threads {threads}: counts must match the assignments"
            );
            assert!((m.log_likelihood(&cfg()) - last).abs() <= 1e-9 * last.abs());
        }
    }

    #[test]
    fn bad_corpus_is_rejected() {
        let corpus = Corpus {
            docs: vec![vec![1, 7]],
            vocab_size: 5,
        };
        assert!(run(&cfg(), &LimitConfig::default(), &corpus)
            .unwrap_err()
            .contains("word 7"));
    }
}
