//! The logistic regression peer: `tools/peer-logreg`, scikit-learn's
//! `LogisticRegression(solver="lbfgs", C = 1/(λn))` on the objective our app minimizes
//! ([`iterstore_algo::logreg`]), run on the files the app read or on its generated images
//! written as IDX files ([`PythonPeer::logreg`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use iterstore_apps::logreg::LogRegData;
use iterstore_data::{write_fashion_mnist, SparseSet};

use super::{write_file, PeerOutcome, PythonPeer};

/// Parameters of the [`PythonPeer::logreg`] peer (compare
/// [`iterstore_apps::logreg::LogRegParams`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LogRegPeerParams {
    /// The L2 regularization `λ` of the mean loss (positive: scikit-learn's `C = 1/(λn)`).
    pub lambda: f64,
    /// The most L-BFGS iterations (`max_iter`); scikit-learn stops earlier when the
    /// largest gradient component falls under its tolerance (1e-4).
    pub max_iter: usize,
    /// BLAS and OpenMP threads (`OMP_NUM_THREADS` and the like).
    pub threads: usize,
}

impl PythonPeer {
    /// Runs `tools/peer-logreg` (scikit-learn's L-BFGS) on the input `data` was read from:
    /// `source`, a Fashion-MNIST directory or an svmlight file (with `test`, its held-out
    /// file), or, when `source` is `None`, `data` written into `workdir` (images as gzipped
    /// IDX files in `logreg-idx/`, samples as svmlight files). The metric is the objective
    /// at the fitted model (`objective`, recomputed by the script in `f64`), `iterations`
    /// the L-BFGS iterations run, `test_accuracy` the held-out accuracy and `per_iter_s`
    /// the fit's time over its iterations (loading and evaluation not timed).
    pub fn logreg(
        &self,
        data: &LogRegData,
        source: Option<&Path>,
        test: Option<&Path>,
        params: &LogRegPeerParams,
        workdir: &Path,
    ) -> PeerOutcome {
        let fail = |m: String| PeerOutcome::Failed(format!("peer-logreg: {m}"));
        if !(params.lambda.is_finite() && params.lambda > 0.0) {
            return fail(format!(
                "lambda {} must be positive (scikit-learn's C = 1/(λn))",
                params.lambda
            ));
        }
        if params.max_iter == 0 || params.threads == 0 {
            return fail("max_iter and threads must be at least 1".into());
        }
        let input = match input_args(data, source, test, workdir) {
            Ok(args) => args,
            Err(e) => return fail(e),
        };
        let mut args = input;
        args.extend([
            ("--lambda", params.lambda.to_string()),
            ("--max-iter", params.max_iter.to_string()),
            ("--threads", params.threads.to_string()),
        ]);
        let mut result = match self.run("peer-logreg", &args, workdir) {
            Ok(r) => r,
            Err(not_ran) => return not_ran.into(),
        };
        // Whether scikit-learn stopped by its tolerance, from the same output line.
        let stdout = std::fs::read_to_string(workdir.join("peer-logreg.stdout"));
        let converged = stdout.ok().and_then(|text| {
            let line = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())?
                .to_owned();
            serde_json::from_str::<serde_json::Value>(&line).ok()?["converged"].as_bool()
        });
        let stop = match converged {
            Some(true) => "converged (gradient under its tolerance)",
            Some(false) => "stopped at max_iter, not converged",
            None => "convergence not reported",
        };
        let said = result
            .note
            .take()
            .map_or(String::new(), |n| format!("; {n}"));
        result.note = Some(format!(
            "{} L-BFGS iterations of at most {}, {stop}{said}",
            result.iterations, params.max_iter
        ));
        PeerOutcome::Ran(result)
    }
}

/// The script's input options for `data` read from `source` (with `test`), or for `data`
/// written into `workdir`.
fn input_args(
    data: &LogRegData,
    source: Option<&Path>,
    test: Option<&Path>,
    workdir: &Path,
) -> Result<Vec<(&'static str, String)>, String> {
    let shown = |p: &Path| p.display().to_string();
    Ok(match (data, source) {
        (LogRegData::Images(_), Some(dir)) => vec![("--fashion-mnist", shown(dir))],
        (LogRegData::Images(set), None) => {
            let dir = workdir.join("logreg-idx");
            write_fashion_mnist(&dir, set).map_err(|e| e.to_string())?;
            vec![("--fashion-mnist", shown(&dir))]
        }
        (LogRegData::Sparse { .. }, Some(file)) => {
            let mut args = vec![("--train", shown(file))];
            args.extend(test.map(|t| ("--test", shown(t))));
            args
        }
        (LogRegData::Sparse { train, test }, None) => {
            let path = |name: &str| workdir.join(format!("peer-logreg.{name}.svm"));
            let train_path = path("train");
            write_file(&train_path, |w| write_svmlight(train, w))?;
            let mut args = vec![("--train", shown(&train_path))];
            if let Some(test) = test {
                let test_path: PathBuf = path("test");
                write_file(&test_path, |w| write_svmlight(test, w))?;
                args.push(("--test", shown(&test_path)));
            }
            args
        }
    })
}

/// Writes `set` as svmlight: per sample its original label, then `index:value` with
/// 1-based indices (what [`iterstore_data::load_svmlight`] reads back).
fn write_svmlight(set: &SparseSet, w: &mut dyn Write) -> std::io::Result<()> {
    for (i, &class) in set.labels.iter().enumerate() {
        write!(w, "{}", set.class_labels[class as usize])?;
        let (idx, val) = set.row(i);
        for (&j, &v) in idx.iter().zip(val) {
            write!(w, " {}:{v}", j + 1)?;
        }
        writeln!(w)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{ran_or_skipped, TempDir};
    use super::*;
    use iterstore_algo::logreg::{minimize, objective};
    use iterstore_data::{load_svmlight, ImageSpec};

    fn params(max_iter: usize) -> LogRegPeerParams {
        LogRegPeerParams {
            lambda: 1e-2,
            max_iter,
            threads: 1,
        }
    }

    #[test]
    fn svmlight_round_trips_through_our_loader() {
        let dir = TempDir::new("svmlight");
        let set = SparseSet {
            row_starts: vec![0, 2, 2, 3],
            indices: vec![0, 3, 1],
            values: vec![0.5, -1.25, 3.0],
            labels: vec![1, 0, 1],
            classes: 2,
            class_labels: vec![-1, 7],
            features: 4,
        };
        let path = dir.0.join("s.svm");
        write_file(&path, |w| write_svmlight(&set, w)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "7 1:0.5 4:-1.25\n-1\n7 2:3\n");
        assert_eq!(load_svmlight(&path, Some(4)).unwrap(), set);
    }

    #[test]
    fn scikit_learn_reaches_our_objective_or_skips() {
        let dir = TempDir::new("logreg");
        let data = LogRegData::Images(
            ImageSpec {
                train: 300,
                test: 100,
                ..ImageSpec::preset("tiny").unwrap()
            }
            .generate(),
        );
        let peer = PythonPeer::from_env();
        let outcome = peer.logreg(&data, None, None, &params(200), &dir.0);
        let Some(r) = ran_or_skipped(outcome) else {
            return;
        };
        let (name, f) = r.metric.clone().unwrap();
        assert_eq!(name, "objective");
        // Our L-BFGS on the same objective ends where scikit-learn's does.
        let (shape, train) = (data.shape(), data.train());
        let mut f_grad = |w: &[f64]| objective(shape, w, train, 1e-2);
        let (_, steps) = minimize(&mut f_grad, vec![0.0; shape.len()], 20, 200, 0.0);
        let ours = steps.last().unwrap().objective;
        assert!(
            (f - ours).abs() < 1e-4,
            "peer {f} against ours {ours}: {r:?}"
        );
        assert!(r.iterations > 0 && r.iterations <= 200, "{r:?}");
        let accuracy = r.test_accuracy.unwrap();
        assert!(accuracy > 0.5 && accuracy <= 1.0, "{r:?}");
        assert!(r.peer.contains("1 threads"), "{}", r.peer);
        assert!(r.note.unwrap().contains("of at most 200"));
        assert_eq!(train.len(), 300);
    }

    #[test]
    fn a_penalty_scikit_learn_cannot_express_fails_before_running() {
        let dir = TempDir::new("logreg-lambda");
        let data = LogRegData::Images(ImageSpec::preset("tiny").unwrap().generate());
        let zero = LogRegPeerParams {
            lambda: 0.0,
            ..params(5)
        };
        let outcome = PythonPeer::from_env().logreg(&data, None, None, &zero, &dir.0);
        assert!(
            matches!(&outcome, PeerOutcome::Failed(m) if m.contains("positive")),
            "{outcome:?}"
        );
    }
}
