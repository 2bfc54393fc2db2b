//! LDA on the store: the log-likelihood rises and planted topics are recovered, the model
//! equals the sequential reference (one worker) and the limit implementation (any number
//! of workers) exactly under BSP, and every store mode gives the same model.

use iterstore::Mode;
use iterstore_algo::lda::{reference, LdaConfig, SamplerKind};
use iterstore_algo::limit::{self, LimitConfig};
use iterstore_apps::lda::run;
use iterstore_apps::AppError;
use iterstore_data::{Corpus, CorpusSpec, PlantedTopics};

use crate::util::{bsp, MODES};

fn tiny() -> (Corpus, PlantedTopics) {
    CorpusSpec::preset("tiny").unwrap().generate()
}

fn params(topics: usize) -> LdaConfig {
    LdaConfig {
        topics,
        alpha: 0.1,
        beta: 0.01,
        seed: 3,
        ..LdaConfig::default()
    }
}

/// [`params`] with the sparse sampler.
fn sparse(topics: usize) -> LdaConfig {
    LdaConfig {
        sampler: SamplerKind::Sparse,
        ..params(topics)
    }
}

/// The `n` words with the largest counts in column `topic` of `word_topic`.
fn top_words(word_topic: &[i32], topics: usize, topic: usize, n: usize) -> Vec<u32> {
    let mut words: Vec<u32> = (0..(word_topic.len() / topics) as u32).collect();
    words.sort_by_key(|&w| std::cmp::Reverse(word_topic[w as usize * topics + topic]));
    words.truncate(n);
    words
}

#[test]
fn log_likelihood_rises_and_planted_topics_are_recovered() {
    let (corpus, planted) = tiny();
    let k = planted.num_topics();
    let out = run(&bsp(Mode::Virtual, 2, 40), &params(k), &corpus).unwrap();
    let ll: Vec<f64> = out.report.iterations.iter().map(|r| r.objective).collect();
    assert!(
        ll[39] > ll[0] + 0.05 * ll[0].abs(),
        "{} -> {}",
        ll[0],
        ll[39]
    );
    assert!(ll[39] > ll[20] - 0.01 * ll[20].abs());
    let m = &out.model;
    // A planted topic is recovered when some learned topic's 10 most frequent words are
    // (almost) all the planted topic's own words.
    let recovered = (0..k)
        .filter(|&planted_topic| {
            (0..k).any(|learned| {
                let top = top_words(&m.word_topic, k, learned, 10);
                let own = top
                    .iter()
                    .filter(|&&w| planted.word_topic[w as usize] as usize == planted_topic)
                    .count();
                own >= 9
            })
        })
        .count();
    assert!(
        recovered >= k - 1,
        "{recovered} of {k} planted topics recovered"
    );
    assert!((m.log_likelihood(&params(k)) - ll[39]).abs() <= 1e-9 * ll[39].abs());
}

#[test]
fn one_worker_equals_the_sequential_reference_exactly() {
    let (corpus, _) = tiny();
    let (want, history) = reference(&corpus, &params(5), 6);
    let got = run(&bsp(Mode::Virtual, 1, 6), &params(5), &corpus).unwrap();
    assert_eq!(got.model, want);
    for (r, h) in got.report.iterations.iter().zip(&history) {
        assert!((r.objective - h).abs() <= 1e-9 * h.abs());
    }
}

#[test]
fn matches_the_limit_implementation_exactly_under_bsp() {
    let (corpus, _) = tiny();
    for (workers, cfg) in [
        (2, params(5)),
        (3, params(5)),
        (2, sparse(5)),
        (3, sparse(5)),
    ] {
        let limit = LimitConfig {
            threads: workers,
            iterations: 6,
        };
        let want = limit::lda::run(&cfg, &limit, &corpus).unwrap();
        let got = run(&bsp(Mode::Generic, workers, 6), &cfg, &corpus).unwrap();
        assert_eq!(
            got.model, want.model,
            "{workers} workers, {:?}",
            cfg.sampler
        );
        for (r, s) in got.report.iterations.iter().zip(&want.stats) {
            assert!((r.objective - s.objective).abs() <= 1e-9 * s.objective.abs());
        }
    }
}

#[test]
fn every_mode_gives_the_same_model() {
    let (corpus, _) = tiny();
    for (workers, cfg) in [(1, params(5)), (2, params(5)), (2, sparse(5))] {
        let runs: Vec<_> = MODES
            .iter()
            .map(|&mode| run(&bsp(mode, workers, 4), &cfg, &corpus).unwrap())
            .collect();
        for out in &runs[1..] {
            assert_eq!(out.model, runs[0].model, "{} × {workers}", out.report.mode);
        }
    }
}

#[test]
fn bad_input_is_rejected() {
    let corpus = Corpus {
        docs: vec![vec![0, 9]],
        vocab_size: 3,
    };
    let e = run(&bsp(Mode::Virtual, 2, 1), &params(2), &corpus).unwrap_err();
    assert!(e.to_string().contains("word 9"), "{e}");
    assert!(run(&bsp(Mode::Virtual, 2, 1), &params(0), &tiny().0).is_err());
}

#[test]
fn a_non_finite_log_likelihood_is_an_error() {
    // With α this large the log-gamma terms overflow: the objective is not finite.
    let (corpus, planted) = tiny();
    let p = LdaConfig {
        alpha: 1e307,
        ..params(planted.num_topics())
    };
    let e = run(&bsp(Mode::Virtual, 2, 3), &p, &corpus).unwrap_err();
    assert!(matches!(e, AppError::Diverged { app: "lda", .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with("lda diverged in iteration 1 of 3: log-likelihood is "),
        "{text}"
    );
}
