//! Latent Dirichlet allocation by collapsed Gibbs sampling on the parameter server.
//!
//! **Tables.** `lda.word_topic`: one row of `K` i32 counts `n_wk` per word (row id = word
//! id); `lda.topic_totals`: a single row 0 of the `K` totals `n_k`. Each worker keeps its
//! documents' topic assignments locally across runs (one `Mutex` per worker, only ever
//! locked by that worker); document–topic counts are recounted from them per document, as
//! in [`iterstore_algo::limit::lda`]. The math is [`iterstore_algo::lda`].
//!
//! **Iteration** (sweep `t`). Worker `w` owns the documents [`partition`]`(D, W, w)`. It
//! READs the totals row once, then for every token of its documents, in order, READs the
//! token's word row (lent, [`Worker::read_with`]), draws the new topic with
//! [`Sampler::sample`] (dense or sparse, [`LdaConfig::sampler`]; randomness keyed by
//! `(seed, t, corpus document index)`), and UPDATEs the word row once
//! ([`Worker::update_cols`]): `−1` at the old topic and `+1` at the new one, or nothing
//! when they are equal — still the row's UPDATE, so the accesses never depend on the
//! values read. Its own totals changes are applied to its copy of the totals row as it
//! goes and sent as one UPDATE before its single CLOCK. Under BSP this is exactly the
//! limit's computation (integer counts, same draws), so the models are identical.
//!
//! **Initialisation.** Topics are drawn with [`init_doc`] (a function of seed and document)
//! while the plans are built; the init run UPDATEs the word rows by `+1` per token and the
//! totals row once per worker.
//!
//! **Checkpoints.** A worker's checkpointed state is its assignments `z`; the draws are
//! keyed by `(seed, t, document)`, so no generator position needs keeping. A resume
//! concatenates every old worker's `z` (corpus order) and cuts it by this cluster's
//! partition, so it works on any number of workers.
//!
//! **Evaluation.** After each iteration the main thread snapshots both tables and adds the
//! workers' document terms: `log p(w, z)` as [`LdaModel::log_likelihood`] defines it (not
//! timed).
//!
//! **Model file** ([`LdaOutcome::write_model`], the CLI's `--output`): a comment line
//! `# iterstore lda model: topics=K vocab=V`, a line `totals<TAB>n_0<TAB>…<TAB>n_{K-1}`, then
//! one line per word `word<TAB>n_w0<TAB>…<TAB>n_w{K-1}` for words `0..V` (ids as in the corpus
//! file).

pub mod tune;

use std::io::{self, Write};

use iterstore::{Cluster, Table, Worker};

use super::checkpoint::{self, Cursor, Restart, RunId};
use super::fingerprint;
use super::{
    check_finite, dense, par_build, preprocess, timed, timed_init_run, timed_run, App, AppConfig,
    AppError, Input, IterRecord, Observer, RunReport,
};
use iterstore_algo::lda::{
    check_corpus, count_doc, doc_rng, doc_term, init_doc, topic_totals_term, word_rows_term,
    LdaConfig, LdaModel, Sampler,
};
use iterstore_algo::partition;
use iterstore_data::{load_corpus, Corpus, CorpusSpec};

/// The outcome of a store-backed LDA run.
#[derive(Debug, Clone)]
pub struct LdaOutcome {
    /// Timings and objectives.
    pub report: RunReport,
    /// The final counts and every token's topic.
    pub model: LdaModel,
}

impl LdaOutcome {
    /// Writes the model in the text format described in the module docs.
    pub fn write_model(&self, out: &mut dyn Write) -> io::Result<()> {
        let m = &self.model;
        let k = m.topics;
        writeln!(
            out,
            "# iterstore lda model: topics={k} vocab={}",
            m.vocab_size
        )?;
        write!(out, "totals")?;
        for n in &m.topic_totals {
            write!(out, "\t{n}")?;
        }
        writeln!(out)?;
        for (word, row) in m.word_topic.chunks_exact(k).enumerate() {
            write!(out, "{word}")?;
            for n in row {
                write!(out, "\t{n}")?;
            }
            writeln!(out)?;
        }
        Ok(())
    }
}

/// The two count tables.
#[derive(Clone, Copy)]
struct Tables {
    words: Table<i32>,
    totals: Table<i32>,
}

/// What a sweep needs besides the tables and the worker's assignments.
struct Sweep<'a> {
    cfg: &'a LdaConfig,
    vocab: u32,
    /// 0-based sweep index (keys the draws).
    iter: u64,
    /// The worker's documents and the corpus index of the first one.
    docs: &'a [Vec<u32>],
    first_doc: usize,
}

/// One sweep of one worker over its documents: the function both the virtual iteration and
/// the real iterations run. `z` holds the topics of the documents' tokens, concatenated.
fn iteration(w: &mut Worker<'_>, t: Tables, s: &Sweep<'_>, z: &mut [u32]) -> iterstore::Result<()> {
    let k = s.cfg.topics;
    let mut sampler = Sampler::new(s.cfg, s.vocab);
    let pattern_only = w.is_virtual();
    let mut totals = vec![0i32; k];
    let (mut delta, mut doc_topic) = (vec![0i32; k], vec![0i32; k]);
    w.read(&t.totals, 0, &mut totals)?;
    sampler.begin(&totals);
    let mut at = 0;
    for (d, doc) in s.docs.iter().enumerate() {
        let zd = &mut z[at..at + doc.len()];
        at += doc.len();
        count_doc(zd, &mut doc_topic);
        if !pattern_only {
            sampler.start_doc(&totals, &doc_topic);
        }
        let mut rng = doc_rng(s.cfg, s.iter, (s.first_doc + d) as u64);
        for (&word, topic) in doc.iter().zip(zd.iter_mut()) {
            let word_row = u64::from(word);
            // The row is lent, not copied: an integer view already holds this worker's
            // updates. A virtual iteration reads zeros and its pattern does not depend on
            // the topic drawn (only rows are gathered): skip the sampling arithmetic there.
            let new = w.read_with(&t.words, word_row, |row| {
                if pattern_only {
                    *topic
                } else {
                    sampler.sample(row, &totals, &doc_topic, *topic, &mut rng)
                }
            })?;
            let (old, new) = (*topic as usize, new as usize);
            // One sparse UPDATE of the word's row per token, empty when the token keeps
            // its topic (the access pattern does not depend on the draw).
            let moved = [(old, -1), (new, 1)];
            let cols = if old == new { &moved[..0] } else { &moved[..] };
            w.update_cols(&t.words, word_row, cols)?;
            if old != new {
                for counts in [&mut totals, &mut delta, &mut doc_topic] {
                    counts[old] -= 1;
                    counts[new] += 1;
                }
                *topic = new as u32;
            }
        }
    }
    w.update(&t.totals, 0, &delta)?;
    w.clock()
}

/// The initial topics of the documents `docs` (corpus indices), concatenated.
fn initial_topics(cfg: &LdaConfig, corpus: &Corpus, docs: std::ops::Range<usize>) -> Vec<u32> {
    let mut z = vec![0; corpus.docs[docs.clone()].iter().map(Vec::len).sum()];
    let mut at = 0;
    for d in docs {
        let len = corpus.docs[d].len();
        init_doc(cfg, d as u64, &mut z[at..at + len]);
        at += len;
    }
    z
}

/// A worker's topic assignments as a checkpoint keeps them: their count (`u64`), then
/// each topic (`u32`), little-endian.
fn encode_topics(z: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 4 * z.len());
    out.extend_from_slice(&(z.len() as u64).to_le_bytes());
    for t in z {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out
}

/// Appends the topics [`encode_topics`] wrote to `out`, refusing a topic `>= topics`.
fn decode_topics(bytes: &[u8], topics: usize, out: &mut Vec<u32>) -> Result<(), String> {
    let mut c = Cursor::new(bytes);
    let n = c.u64("the count")?;
    let n = usize::try_from(n).map_err(|_| format!("{n} topics"))?;
    let body = c.take(n.checked_mul(4).ok_or("too many topics")?, "the topics")?;
    c.finish()?;
    for (i, b) in body.chunks_exact(4).enumerate() {
        let t = u32::from_le_bytes(b.try_into().expect("4 bytes"));
        if t as usize >= topics {
            return Err(format!("token {i} has topic {t}, the run has {topics}"));
        }
        out.push(t);
    }
    Ok(())
}

/// This process's workers' assignments from a checkpoint's: every old worker's, which in
/// global worker order are every token's in corpus order (the partition is by contiguous
/// document ranges), cut by this cluster's partition. So a checkpoint resumes on any
/// number of workers.
fn restore_topics(
    r: &Restart,
    corpus: &Corpus,
    topics: usize,
    range: impl Fn(usize) -> std::ops::Range<usize>,
    first: usize,
    workers: usize,
) -> Result<Vec<Vec<u32>>, AppError> {
    let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
    let mut all = Vec::with_capacity(tokens);
    for (w, blob) in r.workers.iter().enumerate() {
        decode_topics(blob, topics, &mut all).map_err(|e| r.bad_state(w, e))?;
    }
    if all.len() != tokens {
        return Err(r.bad_state(
            r.workers.len().saturating_sub(1),
            format!(
                "{} topics in all, the corpus has {tokens} tokens",
                all.len()
            ),
        ));
    }
    let token_start = |d: usize| -> usize { corpus.docs[..d].iter().map(Vec::len).sum() };
    Ok((0..workers)
        .map(|l| {
            let docs = range(first + l);
            let at = token_start(docs.start);
            let len: usize = corpus.docs[docs].iter().map(Vec::len).sum();
            all[at..at + len].to_vec()
        })
        .collect())
}

/// The initialisation run: every token's initial topic counted into the tables; returns
/// its time.
fn init(
    cluster: &mut Cluster,
    z: &mut [Vec<u32>],
    t: Tables,
    corpus: &Corpus,
    k: usize,
    range: impl Fn(usize) -> std::ops::Range<usize> + Sync,
) -> Result<f64, AppError> {
    timed_init_run(cluster, z, |w, z| {
        let mut delta = vec![0i32; k];
        let words = corpus.docs[range(w.id())].iter().flatten();
        for (&word, &topic) in words.zip(z.iter()) {
            w.update_col(&t.words, u64::from(word), topic as usize, 1)?;
            delta[topic as usize] += 1;
        }
        w.update(&t.totals, 0, &delta)?;
        w.clock()
    })
}

/// The documents' share of `log p(z)` for one worker, summed in document order.
fn doc_terms(cfg: &LdaConfig, docs: &[Vec<u32>], z: &[u32]) -> f64 {
    let mut doc_topic = vec![0; cfg.topics];
    let mut at = 0;
    let mut sum = 0.0;
    for doc in docs {
        count_doc(&z[at..at + doc.len()], &mut doc_topic);
        at += doc.len();
        sum += doc_term(cfg, &doc_topic);
    }
    sum
}

/// The current counts, read back from the servers: `(word_topic, topic_totals)`.
fn snapshot(
    cluster: &Cluster,
    t: Tables,
    vocab: u32,
    k: usize,
) -> Result<(Vec<i32>, Vec<i32>), AppError> {
    Ok((
        dense(cluster.snapshot(&t.words)?, vocab as usize, k),
        dense(cluster.snapshot(&t.totals)?, 1, k),
    ))
}

/// Runs LDA on `corpus` with `cfg`. See the module docs for the tables and phases.
pub fn run(cfg: &AppConfig, params: &LdaConfig, corpus: &Corpus) -> Result<LdaOutcome, AppError> {
    run_observed(cfg, params, corpus, &mut |_| {})
}

/// [`run`], calling `observer` after each iteration is evaluated.
pub fn run_observed(
    cfg: &AppConfig,
    params: &LdaConfig,
    corpus: &Corpus,
    observer: Observer<'_>,
) -> Result<LdaOutcome, AppError> {
    let (mut outcome, start_s) =
        super::with_cluster(cfg, |c| run_in(c, cfg, params, corpus, observer))?;
    outcome.report.setup_s += start_s;
    Ok(outcome)
}

/// [`run_observed`] on a cluster already started (for example one process of
/// [`Cluster::run_local_processes`]): this process's workers take their partitions by
/// global worker id, so every process of the cluster must call it alike. The cluster
/// stays up.
pub fn run_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &LdaConfig,
    corpus: &Corpus,
    observer: Observer<'_>,
) -> Result<LdaOutcome, AppError> {
    cfg.validate()?;
    super::check_cluster(cfg, cluster)?;
    params.validate()?;
    check_corpus(corpus)?;
    crate::budget::Footprint {
        what: "the word-topic table",
        rows: (u64::from(corpus.vocab_size), "words"),
        width: (params.topics as u64, "topics"),
        value_bytes: 4,
        flag: ("--topics", params.topics as u64),
    }
    .check()?;
    let mut report = RunReport::new("lda", "log_likelihood", cfg);
    report.processes = cluster.processes();
    let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
    report.dataset.insert("docs", corpus.docs.len() as u64);
    report.dataset.insert("vocab", corpus.vocab_size.into());
    report.dataset.insert("tokens", tokens as u64);
    report.param("topics", params.topics);
    report.param("alpha", params.alpha);
    report.param("beta", params.beta);
    report.param("seed", params.seed);
    fingerprint::input_digest(&mut report, fingerprint::corpus(corpus));
    fingerprint::agree(cluster, cfg, &report)?;

    // Partitions are by global worker id (`first + local` for this process's workers): P
    // processes of W workers split the corpus as one process of P * W workers does.
    let (k, vocab) = (params.topics, corpus.vocab_size);
    let (workers, total) = (cfg.workers, cluster.total_workers());
    let first = cluster.rank() * workers;
    let num_docs = corpus.docs.len();
    let range = |w: usize| partition(num_docs, total, w);
    let (setup, setup_s) = timed(|| -> Result<_, AppError> {
        let z: Vec<Vec<u32>> = par_build(workers, |l| {
            initial_topics(params, corpus, range(first + l))
        });
        let t = Tables {
            words: cluster.create_table::<i32>("lda.word_topic", k)?,
            totals: cluster.create_table::<i32>("lda.topic_totals", k)?,
        };
        Ok((z, t))
    });
    let (mut z, t) = setup?;
    report.setup_s = setup_s;
    let run_json = checkpoint::run_json(&report);
    let id = RunId {
        app: "lda",
        run: &run_json,
        clocks_per_iteration: 1,
        init_clocks: checkpoint::INIT_CLOCKS,
    };
    let restart = checkpoint::resume(cluster, cfg, &id)?;
    if let Some(r) = &restart {
        z = restore_topics(r, corpus, k, range, first, workers)?;
    }
    report.resumed = restart.as_ref().map(Restart::report);
    let start = restart.as_ref().map_or(0, |r| r.done);
    let sweep = |w: usize, iter: u64| Sweep {
        cfg: params,
        vocab,
        iter,
        docs: &corpus.docs[range(w)],
        first_doc: range(w).start,
    };

    let (pre_s, pattern) = preprocess(cluster, cfg, &z, |w, z| {
        iteration(w, t, &sweep(w.id(), 0), z)
    })?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;

    if restart.is_none() {
        report.init_s = init(cluster, &mut z, t, corpus, k, range)?;
    }

    // The model as the checkpoint holds it, in case no iteration is left to run.
    let (mut word_topic, mut topic_totals) = match start == cfg.iterations {
        true => snapshot(cluster, t, vocab, k)?,
        false => (Vec::new(), Vec::new()),
    };
    // First-iter mode records the first real iteration (not the initialisation run).
    for iter in start..cfg.iterations {
        let cost = timed_run(cluster, &mut z, |w, z| {
            iteration(w, t, &sweep(w.id(), iter as u64), z)
        })?;
        (word_topic, topic_totals) = snapshot(cluster, t, vocab, k)?;
        let parts: Vec<f64> = par_build(workers, |l| {
            doc_terms(params, &corpus.docs[range(first + l)], &z[l])
        });
        // Every process's parts in global worker order: the same sum as one process.
        let docs: f64 = cluster.all_gather(&parts)?.iter().flatten().sum();
        let objective = word_rows_term(params, &word_topic)
            + topic_totals_term(params, vocab, &topic_totals)
            + docs;
        check_finite("lda", iter, cfg.iterations, "log-likelihood", objective)?;
        let record = IterRecord {
            iter,
            seconds: cost.seconds,
            bytes_sent: cost.bytes_sent,
            messages_sent: cost.messages_sent,
            objective,
            test_rmse: None,
            test_accuracy: None,
            rss_bytes: None,
        };
        report.push_iteration(record, observer);
        let saved = checkpoint::after_iteration(cluster, cfg, &id, iter + 1, || {
            z.iter().map(|z| encode_topics(z)).collect()
        })?;
        report.record_checkpoint(saved);
    }
    report.record_store(cluster);
    // Every process's assignments, in global worker order.
    let mine: Vec<i32> = z.iter().flatten().map(|&t| t as i32).collect();
    let all = cluster.all_gather(&mine)?;
    let mut assignments = Vec::with_capacity(num_docs);
    let zs = all.iter().flatten().map(|&t| t as u32);
    let mut zs = zs.collect::<Vec<u32>>().into_iter();
    for w in 0..total {
        for doc in &corpus.docs[range(w)] {
            assignments.push(zs.by_ref().take(doc.len()).collect());
        }
    }
    let model = LdaModel {
        topics: k,
        vocab_size: vocab,
        word_topic,
        topic_totals,
        assignments,
    };
    Ok(LdaOutcome { report, model })
}

/// LDA as [`App`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lda;

impl App for Lda {
    const NAME: &'static str = "lda";
    const ABOUT: &'static str = "LDA by collapsed Gibbs sampling (input: a bag-of-words corpus)";
    const INPUT: &'static str = "corpus";
    type Params = LdaConfig;
    type Data = Corpus;
    type Outcome = LdaOutcome;

    fn validate(params: &LdaConfig) -> Result<(), AppError> {
        Ok(params.validate()?)
    }

    fn load(input: &Input, _: &LdaConfig) -> Result<Corpus, AppError> {
        Ok(match input {
            Input::File(path) => load_corpus(path)?,
            Input::Synthetic(size) => CorpusSpec::preset(size)?.generate().0,
        })
    }

    fn counts(corpus: &Corpus) -> String {
        let tokens: usize = corpus.docs.iter().map(Vec::len).sum();
        format!(
            "{} documents, {} words, {tokens} tokens",
            corpus.docs.len(),
            corpus.vocab_size
        )
    }

    fn run(
        cfg: &AppConfig,
        params: &LdaConfig,
        corpus: &Corpus,
        observer: Observer<'_>,
    ) -> Result<LdaOutcome, AppError> {
        run_observed(cfg, params, corpus, observer)
    }

    fn write_output(outcome: &LdaOutcome, _: &Corpus, out: &mut dyn Write) -> io::Result<()> {
        outcome.write_model(out)
    }

    fn into_report(outcome: LdaOutcome) -> RunReport {
        outcome.report
    }
}
