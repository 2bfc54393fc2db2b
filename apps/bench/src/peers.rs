//! Peer systems timed on the same data: LIBMF (the `libmf` crate) for MF, and Python
//! scripts in `tools/` for LDA, PageRank, the DNN and logistic regression, skipped with a
//! message when unavailable.
//!
//! Each peer solves the same problem as our app: [`libmf()`] the same rank-`k` squared loss
//! with L2 weight `λ` on both factor tables, by the same per-row AdaGrad (see [`libmf()`]
//! for how the settings correspond); `tools/peer-lda` the same collapsed Gibbs
//! sampler and priors (the `lda` package, whose `loglikelihood()` is the same collapsed
//! `log p(w, z)` as ours, given the same vocabulary size); `tools/peer-tomotopy` LDA with
//! the same topics, priors and threads through tomotopy's sparse sampler (α held fixed;
//! the fastest LDA we know on a CPU); `tools/peer-pagerank` the same
//! fixed number of power-iteration steps, dangling rank spread uniformly; `tools/peer-dnn`
//! the same MLP, initialisation, step, decay, momentum and mini-batch in PyTorch on the CPU
//! with the same threads ([`PythonPeer::dnn`]); `tools/peer-logreg` scikit-learn's L-BFGS
//! on the objective of our logistic regression ([`PythonPeer::logreg`]). The Python peers
//! get their input as files in a work directory and answer with one JSON line shaped like
//! [`PeerResult`]; [`PythonPeer::from_env`] finds the interpreter that `tools/peer-env`
//! sets up.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use iterstore_algo::dnn::DnnConfig;
use iterstore_algo::{lda, mf, pagerank};
use iterstore_data::{fashion_mnist_paths, write_fashion_mnist, Corpus, Graph, ImageSet, Ratings};

mod logreg;
pub use logreg::LogRegPeerParams;

/// What a peer measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerResult {
    /// The peer and its version, e.g. `"libmf 0.4 (LIBMF)"` or `"lda 3.0.2 (Python)"`.
    pub peer: String,
    /// Iterations (passes, sweeps, steps) run.
    pub iterations: usize,
    /// Wall-clock seconds of the whole run, the peer's own setup included.
    pub total_s: f64,
    /// Seconds per iteration (setup excluded where the peer lets us measure it; see `note`).
    pub per_iter_s: f64,
    /// The quality measure and its value, e.g. `("test_rmse", 0.95)`.
    pub metric: Option<(String, f64)>,
    /// Training samples per second, for peers that train on samples (the DNN's).
    #[serde(default)]
    pub samples_per_s: Option<f64>,
    /// The share of held-out samples classified right, for a peer whose metric is
    /// something else (logistic regression's, whose metric is its objective).
    #[serde(default)]
    pub test_accuracy: Option<f64>,
    /// What else to know when comparing this peer with our apps.
    pub note: Option<String>,
}

/// How running a peer went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum PeerOutcome {
    /// The peer ran.
    Ran(PeerResult),
    /// The peer is not available here: why, and how to install it.
    Skipped(String),
    /// The peer is available but failed (rejected input, crash, timeout, bad output).
    Failed(String),
}

impl PeerOutcome {
    /// The result, if the peer ran.
    pub fn result(&self) -> Option<&PeerResult> {
        match self {
            PeerOutcome::Ran(r) => Some(r),
            _ => None,
        }
    }
}

/// Parameters of the [`libmf()`] peer (compare [`iterstore_algo::mf::MfConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LibmfParams {
    /// Latent factors per row.
    pub rank: usize,
    /// Passes over the training ratings.
    pub iterations: usize,
    /// LIBMF's `eta`: a row moves by `eta/√G` times its gradient, `G` being the row's
    /// accumulated mean squared gradient (starting at 1), which is our MF's learning rate.
    pub learning_rate: f32,
    /// L2 regularisation weight `λ` of both factor tables.
    pub lambda: f32,
    /// Worker threads.
    pub threads: usize,
}

/// Runs LIBMF on `train` and reports the RMSE on `test` (`test_rmse`), or on `train`
/// (`train_rmse`) without a (non-empty) test set. LIBMF's API times only whole fits, its
/// shuffling and scaling of the data included, so with more than one iteration it fits
/// twice, for one iteration and for all of them: the time per iteration is the
/// difference over the iterations added (setup cancels), and `total_s` the full fit's. A
/// non-finite RMSE is a failure (the model diverged), not a result.
///
/// How the settings correspond to [`iterstore_algo::mf`]: LIBMF's solver (squared loss,
/// `fun = 0`) is per-row AdaGrad with the same update order as ours — step
/// `eta/√G` from the row's accumulator `G` (starting at 1), then `G` grows by the row's
/// mean squared gradient — with `lambda_p2 = lambda_q2 = λ` applied per rating, so
/// `eta` = our `learning_rate` and `λ` = our `regularization`. The differences: LIBMF has
/// no bias terms and no global mean (our rows carry a bias each); it divides the ratings by
/// their standard deviation before training; it initialises factors with its own
/// generator; and its threads update disjoint blocks of the rating matrix without
/// staleness, so it needs neither our mini-batch CLOCKs nor our accumulators starting at
/// `W`.
pub fn libmf(train: &Ratings, test: Option<&Ratings>, params: &LibmfParams) -> PeerOutcome {
    let fail = |m: String| PeerOutcome::Failed(format!("libmf: {m}"));
    let int = |x: usize| x.min(i32::MAX as usize) as i32; // LIBMF rejects what it can't do
    let (rank, iters, threads) = (
        int(params.rank),
        int(params.iterations),
        int(params.threads),
    );
    let matrix = |r: &Ratings| {
        mf::check_ratings(&r.ratings, r.num_users, r.num_items)?;
        if r.num_users.max(r.num_items) > i32::MAX as u32 {
            return Err("more than 2^31 users or items".to_string());
        }
        let mut m = libmf::Matrix::with_capacity(r.ratings.len());
        for x in &r.ratings {
            m.push(x.user as i32, x.item as i32, x.value);
        }
        Ok(m)
    };
    let (train, test) = match (matrix(train), test.map(matrix).transpose()) {
        (Ok(a), Ok(b)) => (a, b.filter(|t| !t.is_empty())),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let fit = |iterations: i32| {
        let start = Instant::now();
        let model = libmf::Model::params()
            .factors(rank)
            .iterations(iterations)
            .learning_rate(params.learning_rate)
            .lambda_p2(params.lambda)
            .lambda_q2(params.lambda)
            .threads(threads)
            .bins(threads.saturating_mul(2).max(25))
            .quiet(true)
            .fit(&train);
        (model, start.elapsed().as_secs_f64())
    };
    // The one-iteration fit first (it also warms the caches for the full one).
    let setup_and_one = (iters > 1).then(|| fit(1).1);
    let (model, total_s) = fit(iters);
    let n = params.iterations.max(1) as f64;
    let (per_iter_s, timing) = match setup_and_one {
        Some(one) if total_s > one => (
            (total_s - one) / (n - 1.0),
            "per_iter_s excludes setup (a 1-iteration fit's time subtracted)",
        ),
        _ => (total_s / n, "per_iter_s includes setup"),
    };
    let (name, data) = match &test {
        Some(t) => ("test_rmse", t),
        None => ("train_rmse", &train),
    };
    let rmse = |m: &libmf::Model, d| m.rmse(d).map_err(|e| e.to_string());
    match model
        .map_err(|e| e.to_string())
        .and_then(|m| Ok((rmse(&m, data)?, rmse(&m, &train)?)))
    {
        Ok((value, train_rmse)) if !(value.is_finite() && train_rmse.is_finite()) => fail(format!(
            "diverged: {name} {value}, train_rmse {train_rmse} (try a smaller learning rate)"
        )),
        Ok((value, train_rmse)) => PeerOutcome::Ran(PeerResult {
            peer: "libmf 0.4 (LIBMF)".into(),
            iterations: params.iterations,
            total_s,
            per_iter_s,
            metric: Some((name.into(), value)),
            samples_per_s: None,
            test_accuracy: None,
            note: Some(format!(
                "train_rmse {train_rmse:.4}; {timing}; LIBMF scales ratings by their \
                 std-dev and adapts the step per row (AdaGrad) from learning_rate"
            )),
        }),
        Err(e) => fail(e),
    }
}

/// Parameters of the [`python_lda`] peer (compare [`iterstore_algo::lda::LdaConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LdaPeerParams {
    /// Number of topics `K`.
    pub topics: usize,
    /// Gibbs sweeps.
    pub iterations: usize,
    /// Document–topic prior `α`.
    pub alpha: f64,
    /// Topic–word prior `β` (the `lda` package's `eta`).
    pub beta: f64,
    /// The `lda` package's `random_state`.
    pub seed: u64,
}

impl LdaPeerParams {
    /// The same hyper-parameters as our LDA's configuration.
    fn config(&self) -> lda::LdaConfig {
        let (topics, alpha, beta, seed) = (self.topics, self.alpha, self.beta, self.seed);
        lda::LdaConfig {
            topics,
            alpha,
            beta,
            seed,
            ..lda::LdaConfig::default()
        }
    }
}

/// Parameters of the [`PythonPeer::dnn`] peer: the DNN app's own settings, its epochs
/// and threads.
#[derive(Debug, Clone, PartialEq)]
pub struct DnnPeerParams {
    /// The network and SGD settings (hidden layers, the CNN's channels and kernel,
    /// activation, step and decay, momentum, mini-batch, seed).
    pub config: DnnConfig,
    /// Train the CNN (`iterstore run dnn --model cnn`) instead of the MLP.
    pub cnn: bool,
    /// Passes over the training images.
    pub epochs: usize,
    /// PyTorch's intra-op threads (`torch.set_num_threads`).
    pub threads: usize,
}

/// How to run the Python peers.
#[derive(Debug, Clone, PartialEq)]
pub struct PythonPeer {
    /// The Python interpreter.
    pub python: PathBuf,
    /// The directory holding the `peer-lda` and `peer-pagerank` scripts.
    pub tools_dir: PathBuf,
    /// A peer running longer than this is killed and reported as failed.
    pub timeout: Duration,
}

impl PythonPeer {
    /// The interpreter `$ITERSTORE_PEER_PYTHON` if set, else the venv made by
    /// `tools/peer-env` (`${ITERSTORE_DATA:-$HOME/.cache/iterstore-data}/peers-venv`) if it
    /// exists, else `python3`; this repository's `tools/`; a one-hour timeout.
    pub fn from_env() -> Self {
        let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
        let data = std::env::var_os("ITERSTORE_DATA")
            .map_or_else(|| home.join(".cache/iterstore-data"), PathBuf::from);
        let venv = data.join("peers-venv/bin/python");
        let python = match std::env::var_os("ITERSTORE_PEER_PYTHON") {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ if venv.exists() => venv,
            _ => PathBuf::from("python3"),
        };
        let tools_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools");
        let timeout = Duration::from_secs(3600);
        Self {
            python,
            tools_dir,
            timeout,
        }
    }

    /// Runs `tools/peer-lda` on `corpus`, written as LDA-C into `workdir`. The metric is the
    /// `lda` package's final `log_likelihood`; `per_iter_s` excludes its setup and
    /// log-likelihood evaluations.
    pub fn lda(&self, corpus: &Corpus, params: &LdaPeerParams, workdir: &Path) -> PeerOutcome {
        self.run_lda_script("peer-lda", corpus, params, &[], workdir)
    }

    /// Checks `params` and `corpus`, writes the corpus as LDA-C into `workdir` and runs
    /// `tools/<script>` on it with the LDA settings plus `extra`.
    fn run_lda_script(
        &self,
        script: &str,
        corpus: &Corpus,
        params: &LdaPeerParams,
        extra: &[(&str, String)],
        workdir: &Path,
    ) -> PeerOutcome {
        let path = workdir.join(format!("{script}.ldac"));
        let valid = params
            .config()
            .validate()
            .and_then(|()| lda::check_corpus(corpus));
        if let Err(e) = valid.and_then(|()| write_file(&path, |w| write_ldac(corpus, w))) {
            return PeerOutcome::Failed(e);
        }
        let mut args = vec![
            ("--corpus", path.display().to_string()),
            ("--topics", params.topics.to_string()),
            ("--iters", params.iterations.to_string()),
            ("--alpha", params.alpha.to_string()),
            ("--eta", params.beta.to_string()),
            ("--seed", params.seed.to_string()),
            ("--vocab", corpus.vocab_size.to_string()),
        ];
        args.extend_from_slice(extra);
        self.run(script, &args, workdir)
            .map_or_else(PeerOutcome::from, PeerOutcome::Ran)
    }

    /// Runs `tools/peer-tomotopy` on `corpus` (written as LDA-C into `workdir`) with
    /// `threads` workers: tomotopy's LDA with the same topics, priors and seed, α fixed.
    /// The metric is tomotopy's `ll_per_word` (not our collapsed log-likelihood);
    /// `per_iter_s` excludes adding the documents and the first assignment.
    pub fn tomotopy(
        &self,
        corpus: &Corpus,
        params: &LdaPeerParams,
        threads: usize,
        workdir: &Path,
    ) -> PeerOutcome {
        let threads = [("--threads", threads.to_string())];
        self.run_lda_script("peer-tomotopy", corpus, params, &threads, workdir)
    }

    /// Runs `tools/peer-pagerank` on `graph`, written as an edge list into `workdir`, for
    /// exactly `iterations` steps. The metric is the L1 distance of its ranks to those of
    /// [`pagerank::reference`] (`l1_vs_reference`); an igraph timing, if any, is in the note.
    pub fn pagerank(&self, graph: &Graph, iters: usize, damping: f64, dir: &Path) -> PeerOutcome {
        let cfg = pagerank::PageRankConfig { damping };
        if let Err(e) = cfg.validate().and_then(|()| pagerank::check_graph(graph)) {
            return PeerOutcome::Failed(e);
        }
        let edges = dir.join("peer-pagerank.edges");
        let ranks = dir.join("peer-pagerank.ranks");
        let written = write_file(&edges, |w| {
            (graph.edges.iter()).try_for_each(|(u, v)| writeln!(w, "{u} {v}"))
        });
        let _ = std::fs::remove_file(&ranks); // a stale file from an earlier run
        if let Err(e) = written {
            return PeerOutcome::Failed(e);
        }
        let args = [
            ("--edges", edges.display().to_string()),
            ("--vertices", graph.num_vertices.to_string()),
            ("--iters", iters.to_string()),
            ("--damping", damping.to_string()),
            ("--ranks-out", ranks.display().to_string()),
        ];
        let mut result = match self.run("peer-pagerank", &args, dir) {
            Ok(r) => r,
            Err(not_ran) => return not_ran.into(),
        };
        let text = std::fs::read_to_string(&ranks).unwrap_or_default();
        let got: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if got.len() != graph.num_vertices as usize || got.len() != text.lines().count() {
            let n = graph.num_vertices;
            let why = format!("{}: not {n} numbers, one a line", ranks.display());
            return PeerOutcome::Failed(format!("peer-pagerank: {why}"));
        }
        let l1 = pagerank::l1_change(&got, &pagerank::reference(graph, &cfg, iters));
        result.metric = Some(("l1_vs_reference".into(), l1));
        PeerOutcome::Ran(result)
    }

    /// Runs `tools/peer-dnn` (PyTorch on the CPU) on the IDX files in `idx_dir`, or, when
    /// that is `None`, on `data` written as gzipped IDX files into `workdir/dnn-idx`. The
    /// metric is the test accuracy after the last epoch and `samples_per_s` the training
    /// samples per second over all epochs; `per_iter_s` is the mean training time of an
    /// epoch (loading and test evaluation not timed).
    pub fn dnn(
        &self,
        data: &ImageSet,
        idx_dir: Option<&Path>,
        params: &DnnPeerParams,
        workdir: &Path,
    ) -> PeerOutcome {
        let fail = |m: String| PeerOutcome::Failed(format!("peer-dnn: {m}"));
        if let Err(e) = params.config.validate() {
            return fail(e);
        }
        let files = match idx_dir {
            Some(dir) => fashion_mnist_paths(dir),
            None => match write_fashion_mnist(&workdir.join("dnn-idx"), data) {
                Ok(files) => files,
                Err(e) => return fail(e.to_string()),
            },
        };
        let c = &params.config;
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let model = if params.cnn { "cnn" } else { "mlp" };
        let [train_images, train_labels, test_images, test_labels] =
            files.map(|f| f.display().to_string());
        let args = [
            ("--train-images", train_images),
            ("--train-labels", train_labels),
            ("--test-images", test_images),
            ("--test-labels", test_labels),
            ("--model", model.to_string()),
            ("--channels", list(&c.channels)),
            ("--kernel", c.kernel.to_string()),
            ("--hidden", list(&c.hidden)),
            ("--activation", c.activation.name().to_string()),
            ("--lr", c.learning_rate.to_string()),
            ("--lr-decay", c.lr_decay.to_string()),
            ("--momentum", c.momentum.to_string()),
            ("--batch", c.batch.to_string()),
            ("--epochs", params.epochs.to_string()),
            ("--threads", params.threads.to_string()),
            ("--seed", c.seed.to_string()),
        ];
        self.run("peer-dnn", &args, workdir)
            .map_or_else(PeerOutcome::from, PeerOutcome::Ran)
    }

    /// Runs `tools/<script> args…` with stdout and stderr in files under `dir`, waiting at
    /// most `self.timeout`, and parses the last line of its stdout. `Err` holds the outcome
    /// to report instead: exit status 3 (a missing package) or an interpreter that cannot
    /// be started means Skipped.
    fn run(&self, script: &str, args: &[(&str, String)], dir: &Path) -> Result<PeerResult, NotRan> {
        let fail = |m: String| NotRan::Failed(format!("{script}: {m}"));
        let path = self.tools_dir.join(script);
        if !path.is_file() {
            let why = format!("{} not found", path.display());
            return Err(NotRan::Skipped(why));
        }
        let out_path = dir.join(format!("{script}.stdout"));
        let err_path = dir.join(format!("{script}.stderr"));
        let open = |p: &Path| File::create(p).map_err(|e| fail(format!("{}: {e}", p.display())));
        let mut cmd = Command::new(&self.python);
        cmd.arg(&path).stdin(Stdio::null());
        cmd.stdout(open(&out_path)?).stderr(open(&err_path)?);
        for (flag, value) in args {
            cmd.arg(flag).arg(value);
        }
        let mut child = cmd.spawn().map_err(|e| {
            NotRan::Skipped(format!(
                "python interpreter `{}` cannot be run ({e}); run tools/peer-env or set \
                 ITERSTORE_PEER_PYTHON",
                self.python.display()
            ))
        })?;
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(format!("timed out after {:?}", self.timeout)));
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        let (stdout, stderr) = (read(&out_path), read(&err_path));
        let stderr = stderr.trim();
        match status.code() {
            Some(0) => {}
            Some(3) => return Err(NotRan::Skipped(stderr.to_string())),
            _ => return Err(fail(format!("{status}: {stderr}"))),
        }
        let line = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        serde_json::from_str(line).map_err(|e| fail(format!("bad output {line:?}: {e}")))
    }
}

/// A peer script that did not run to a result: [`PeerOutcome`]'s other two cases.
#[derive(Debug)]
enum NotRan {
    /// The peer is not available here.
    Skipped(String),
    /// The peer is available but failed.
    Failed(String),
}

impl From<NotRan> for PeerOutcome {
    fn from(not_ran: NotRan) -> Self {
        match not_ran {
            NotRan::Skipped(why) => PeerOutcome::Skipped(why),
            NotRan::Failed(why) => PeerOutcome::Failed(why),
        }
    }
}

/// [`PythonPeer::lda`] with the interpreter from [`PythonPeer::from_env`].
pub fn python_lda(corpus: &Corpus, params: &LdaPeerParams, workdir: &Path) -> PeerOutcome {
    PythonPeer::from_env().lda(corpus, params, workdir)
}

/// [`PythonPeer::pagerank`] with the interpreter from [`PythonPeer::from_env`].
pub fn python_pagerank(graph: &Graph, iters: usize, damping: f64, workdir: &Path) -> PeerOutcome {
    PythonPeer::from_env().pagerank(graph, iters, damping, workdir)
}

/// Creates `path` (and its directory) and fills it through a buffer with `fill`.
fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), String> {
    let write = || {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
        let mut w = std::io::BufWriter::new(File::create(path)?);
        fill(&mut w)?;
        w.flush()
    };
    write().map_err(|e: std::io::Error| format!("{}: {e}", path.display()))
}

/// Writes `corpus` in LDA-C: per document `N id:count …` with ascending word ids.
fn write_ldac(corpus: &Corpus, w: &mut dyn Write) -> std::io::Result<()> {
    let mut words = Vec::new();
    for doc in &corpus.docs {
        words.clone_from(doc);
        words.sort_unstable();
        write!(w, "{}", words.chunk_by(|a, b| a == b).count())?;
        for run in words.chunk_by(|a, b| a == b) {
            write!(w, " {}:{}", run[0], run.len())?;
        }
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_data::{load_corpus, split_ratings, CorpusSpec, GraphSpec, RatingsSpec};

    /// A fresh directory under the system temp dir, removed on drop.
    pub(super) struct TempDir(pub(super) PathBuf);

    impl TempDir {
        pub(super) fn new(name: &str) -> Self {
            let pid = std::process::id();
            let dir = std::env::temp_dir().join(format!("iterstore-peers-{name}-{pid}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const LDA: LdaPeerParams = LdaPeerParams {
        topics: 5,
        iterations: 30,
        alpha: 0.1,
        beta: 0.01,
        seed: 1,
    };

    /// The graph 0 → 1.
    fn edge() -> Graph {
        Graph {
            num_vertices: 2,
            edges: vec![(0, 1)],
        }
    }

    /// A Python peer's result, or `None` after checking that it was skipped with a hint to
    /// run tools/peer-env (so the tests pass where the venv is missing).
    pub(super) fn ran_or_skipped(outcome: PeerOutcome) -> Option<PeerResult> {
        match outcome {
            PeerOutcome::Ran(r) => Some(r),
            PeerOutcome::Skipped(why) if why.contains("tools/peer-env") => {
                eprintln!("skipped: {why}");
                None
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn libmf_beats_the_mean() {
        let all = RatingsSpec::preset("tiny").unwrap().generate();
        let (train, test) = split_ratings(&all, 0.2, 7);
        let params = LibmfParams {
            rank: 4,
            iterations: 40,
            learning_rate: 0.1,
            lambda: 0.05,
            threads: 2,
        };
        let r = libmf(&train, Some(&test), &params)
            .result()
            .cloned()
            .unwrap();
        let sum: f32 = train.ratings.iter().map(|r| r.value).sum();
        let mean = sum / train.ratings.len() as f32;
        let sq = mf::squared_error_with(&test.ratings, |_, _| mean);
        let baseline = mf::rmse_from(sq, test.ratings.len());
        let (name, rmse) = r.metric.clone().unwrap();
        assert_eq!(name, "test_rmse");
        assert!(
            rmse < 0.7 * baseline,
            "libmf {rmse} vs mean {baseline}: {r:?}"
        );
        assert!(r.iterations == 40 && r.total_s > 0.0 && r.per_iter_s > 0.0);
        // Setup is left out by differencing two fits (unless timing noise made the
        // full fit no slower than one iteration's, which the note then says).
        let note = r.note.clone().unwrap();
        assert!(
            note.contains("excludes setup") && r.per_iter_s < r.total_s / 39.0
                || note.contains("includes setup"),
            "{r:?}"
        );
        let failed = libmf(&train, None, &LibmfParams { rank: 0, ..params });
        assert!(
            matches!(&failed, PeerOutcome::Failed(m) if m.contains("factors")),
            "{failed:?}"
        );
    }

    #[test]
    fn ldac_round_trips_through_our_loader() {
        let dir = TempDir::new("ldac");
        let docs = vec![vec![3, 0, 3, 1], vec![], vec![2]];
        let mut corpus = Corpus {
            docs,
            vocab_size: 4,
        };
        let path = dir.0.join("c.ldac");
        write_file(&path, |w| write_ldac(&corpus, w)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "3 0:1 1:1 3:2\n0\n1 2:1\n");
        corpus.docs.iter_mut().for_each(|d| d.sort_unstable());
        assert_eq!(load_corpus(&path).unwrap(), corpus);
    }

    #[test]
    fn python_lda_matches_our_log_likelihood_or_skips() {
        let dir = TempDir::new("lda");
        let (corpus, _) = CorpusSpec::preset("tiny").unwrap().generate();
        let Some(r) = ran_or_skipped(python_lda(&corpus, &LDA, &dir.0)) else {
            return;
        };
        let ours = *lda::reference(&corpus, &LDA.config(), 30).1.last().unwrap();
        let (name, ll) = r.metric.clone().unwrap();
        assert_eq!(name, "log_likelihood");
        assert!(
            ll < 0.0 && ((ll - ours) / ours).abs() < 0.05,
            "{ll} vs ours {ours}: {r:?}"
        );
        assert!(r.iterations == 30 && r.per_iter_s > 0.0 && r.total_s >= 30.0 * r.per_iter_s);
    }

    #[test]
    fn tomotopy_trains_the_same_corpus_or_skips() {
        let dir = TempDir::new("tomotopy");
        let (corpus, _) = CorpusSpec::preset("tiny").unwrap().generate();
        let peer = PythonPeer::from_env();
        let Some(r) = ran_or_skipped(peer.tomotopy(&corpus, &LDA, 2, &dir.0)) else {
            return;
        };
        let (name, ll) = r.metric.clone().unwrap();
        assert_eq!(name, "ll_per_word");
        // Per word, at most log(1) and at least the log of a uniform draw over the words.
        let uniform = -(corpus.vocab_size as f64).ln();
        assert!(ll < 0.0 && ll > uniform, "{ll} vs {uniform}: {r:?}");
        assert!(r.peer.contains("2 threads"), "{}", r.peer);
        assert!(r.iterations == 30 && r.per_iter_s > 0.0 && r.total_s >= 30.0 * r.per_iter_s);
    }

    #[test]
    fn python_pagerank_matches_reference_or_skips() {
        let dir = TempDir::new("pagerank");
        let graph = GraphSpec::preset("tiny").unwrap().generate();
        let Some(r) = ran_or_skipped(python_pagerank(&graph, 25, 0.85, &dir.0)) else {
            return;
        };
        let (name, l1) = r.metric.clone().unwrap();
        assert_eq!((name.as_str(), r.iterations), ("l1_vs_reference", 25));
        assert!(l1 < 1e-6, "{r:?}");
        assert!(
            r.peer.contains("1 thread"),
            "the thread count is stated: {}",
            r.peer
        );
    }

    #[test]
    fn pytorch_trains_the_same_mlp_or_skips() {
        let dir = TempDir::new("dnn");
        let data = iterstore_data::ImageSpec {
            train: 300,
            test: 100,
            ..iterstore_data::ImageSpec::preset("tiny").unwrap()
        }
        .generate();
        let params = DnnPeerParams {
            config: DnnConfig {
                hidden: vec![32],
                batch: 10,
                ..DnnConfig::default()
            },
            cnn: false,
            epochs: 3,
            threads: 1,
        };
        let outcome = PythonPeer::from_env().dnn(&data, None, &params, &dir.0);
        let Some(r) = ran_or_skipped(outcome) else {
            return;
        };
        let (name, accuracy) = r.metric.clone().unwrap();
        assert_eq!((name.as_str(), r.iterations), ("test_accuracy", 3));
        // Chance is 10 %; the synthetic classes are easy.
        assert!(accuracy > 0.5 && accuracy <= 1.0, "{r:?}");
        let rate = r.samples_per_s.unwrap();
        assert!(
            rate > 0.0 && (rate * r.per_iter_s - 300.0).abs() < 1e-6 * 300.0,
            "{r:?}"
        );
        assert!(r.peer.contains("1 threads") && r.note.unwrap().contains("mlp 144-32-10"));
    }

    #[test]
    fn pytorch_trains_the_same_cnn_or_skips() {
        let dir = TempDir::new("cnn");
        let data = iterstore_data::ImageSpec {
            train: 300,
            test: 100,
            noise_std: 0.05,
            ..iterstore_data::ImageSpec::preset("tiny").unwrap()
        }
        .generate();
        let params = DnnPeerParams {
            config: DnnConfig {
                channels: vec![4, 4],
                kernel: 3,
                hidden: vec![32],
                batch: 10,
                ..DnnConfig::default()
            },
            cnn: true,
            epochs: 2,
            threads: 1,
        };
        let outcome = PythonPeer::from_env().dnn(&data, None, &params, &dir.0);
        let Some(r) = ran_or_skipped(outcome) else {
            return;
        };
        assert_eq!(r.iterations, 2);
        // The same shape as the app's CNN describes itself.
        let note = r.note.clone().unwrap();
        assert!(note.contains("cnn 12x12-c3x4-p2-c3x4-p2-32-10"), "{r:?}");
        assert!(r.metric.unwrap().1 > 0.0, "{note}");
    }

    #[test]
    fn missing_interpreter_is_skipped_and_bad_input_fails() {
        let dir = TempDir::new("no-python");
        let python = dir.0.join("no/such/python");
        let peer = PythonPeer {
            python,
            ..PythonPeer::from_env()
        };
        let (corpus, _) = CorpusSpec::preset("tiny").unwrap().generate();
        let lda = peer.lda(&corpus, &LDA, &dir.0);
        let pagerank = peer.pagerank(&edge(), 2, 0.85, &dir.0);
        for outcome in [lda, pagerank] {
            let skipped = matches!(&outcome, PeerOutcome::Skipped(m) if m.contains("peer-env"));
            assert!(skipped, "{outcome:?}");
        }
        let bad = peer.pagerank(&edge(), 2, 1.5, &dir.0);
        assert!(
            matches!(&bad, PeerOutcome::Failed(m) if m.contains("damping")),
            "{bad:?}"
        );
    }

    /// Runs `script` through `/bin/sh` as a fake `peer-pagerank` on [`edge`].
    #[cfg(unix)]
    fn fake_pagerank(dir: &TempDir, script: &str, timeout: Duration) -> PeerOutcome {
        std::fs::write(dir.0.join("peer-pagerank"), script).unwrap();
        let (python, tools_dir) = ("/bin/sh".into(), dir.0.clone());
        let peer = PythonPeer {
            python,
            tools_dir,
            timeout,
        };
        peer.pagerank(&edge(), 3, 0.85, &dir.0)
    }

    #[cfg(unix)]
    #[test]
    fn script_failures_are_reported_not_panics() {
        let dir = TempDir::new("fake");
        let long = Duration::from_secs(10);
        let failed =
            |o: &PeerOutcome, why: &str| matches!(o, PeerOutcome::Failed(m) if m.contains(why));
        let skipped = fake_pagerank(
            &dir,
            "echo 'no scipy; run tools/peer-env' >&2; exit 3",
            long,
        );
        assert_eq!(
            skipped,
            PeerOutcome::Skipped("no scipy; run tools/peer-env".into())
        );
        let crashed = fake_pagerank(&dir, "echo boom >&2; exit 1", long);
        assert!(failed(&crashed, "boom"), "{crashed:?}");
        let garbage = fake_pagerank(&dir, "echo not json", long);
        assert!(failed(&garbage, "bad output"), "{garbage:?}");
        let json = r#"echo '{"peer": "x", "iterations": 3, "total_s": 1, "per_iter_s": 0.3}'"#;
        let no_ranks = fake_pagerank(&dir, json, long);
        assert!(failed(&no_ranks, "not 2 numbers"), "{no_ranks:?}");
        let started = Instant::now();
        let hung = fake_pagerank(&dir, "exec sleep 30", Duration::from_millis(200));
        assert!(
            failed(&hung, "timed out") && started.elapsed() < long,
            "{hung:?}"
        );
        // Ranks that disagree with the reference give a large metric, not an error.
        let wrong = format!(r#"printf '0.9\n0.1\n' > "${{10}}"; {json}"#);
        let r = fake_pagerank(&dir, &wrong, long).result().cloned().unwrap();
        assert!(r.metric.unwrap().1 > 0.1 && r.note.is_none());
    }
}
