//! Downpour SGD (DistBelief) for comparison: the weights are one table on the shards;
//! every worker takes mini-batches of its own share of the samples, READs the weights,
//! and UPDATEs them by `−lr·(mean gradient + λ·w)` (intercepts unregularized), one CLOCK
//! per mini-batch, as stale as the cluster's staleness lets the reads be. An iteration is
//! an epoch: one run in which every worker goes once through its share (every worker does
//! as many mini-batches as the largest share needs, so all clock alike). The objective
//! after each is computed from a snapshot, not timed.

use std::time::Instant;

use iterstore::{Cluster, Table, Worker};
use iterstore_algo::logreg::{accuracy, loss_grad, objective, Samples, Shape};
use iterstore_algo::partition;

use super::{on_rank_0, LogRegData, LogRegParams};
use crate::checkpoint::{self, RunId};
use crate::{
    check_finite, dense, preprocess, timed_init_run, timed_run, AppConfig, AppError, IterRecord,
    Observer, RunReport,
};

/// What every worker's epoch needs.
struct Epoch<'a> {
    shape: Shape,
    block: usize,
    rows: u64,
    weights: Table<f64>,
    data: &'a dyn Samples,
    total: usize,
    steps: usize,
    batch: usize,
    lr: f64,
    lambda: f64,
}

/// A worker's scratch: its copy of the weights and its gradient.
#[derive(Clone)]
struct State {
    weights: Vec<f64>,
    grad: Vec<f64>,
}

/// One epoch of one worker (see the module docs).
fn epoch(w: &mut Worker<'_>, e: &Epoch<'_>, st: &mut State) -> iterstore::Result<()> {
    let share = partition(e.data.len(), e.total, w.id());
    let (n, width, b) = (e.shape.len(), e.shape.width(), e.block);
    for step in 0..e.steps {
        let start = (share.start + step * e.batch).min(share.end);
        let end = (start + e.batch).min(share.end);
        for (r, row) in st.weights.chunks_exact_mut(b).enumerate() {
            w.read(&e.weights, r as u64, row)?;
        }
        st.grad.fill(0.0);
        if end > start {
            loss_grad(
                e.shape,
                &st.weights[..n],
                e.data,
                start..end,
                &mut st.grad[..n],
            );
            let scale = 1.0 / (end - start) as f64;
            for (i, g) in st.grad[..n].iter_mut().enumerate() {
                let reg = if i % width == e.shape.features {
                    0.0
                } else {
                    e.lambda * st.weights[i]
                };
                *g = -e.lr * (*g * scale + reg);
            }
        }
        for (r, row) in st.grad.chunks_exact(b).enumerate() {
            w.update(&e.weights, r as u64, row)?;
        }
        w.clock()?;
    }
    Ok(())
}

/// Trains with Downpour SGD on a cluster whose tables are not yet created, filling
/// `report`; returns the model.
pub(super) fn train(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &LogRegParams,
    data: &LogRegData,
    report: &mut RunReport,
    observer: Observer<'_>,
) -> Result<Vec<f64>, AppError> {
    let setup = Instant::now();
    let train = data.train();
    let shape = data.shape();
    let block = params.block;
    let rows = shape.len().div_ceil(block) as u64;
    let weights = cluster.create_table_sized::<f64>("logreg.sgd.w", block, rows)?;
    let total = cluster.total_workers();
    let largest = (0..total)
        .map(|w| partition(train.len(), total, w).len())
        .max()
        .unwrap_or(0);
    let e = Epoch {
        shape,
        block,
        rows,
        weights,
        data: train,
        total,
        steps: largest.div_ceil(params.batch).max(1),
        batch: params.batch,
        lr: params.lr,
        lambda: params.lambda,
    };
    let run_json = checkpoint::run_json(report);
    let id = RunId {
        app: "logreg",
        run: &run_json,
        clocks_per_iteration: e.steps as u64,
        init_clocks: checkpoint::INIT_CLOCKS,
    };
    let restart = checkpoint::resume(cluster, cfg, &id)?;
    report.resumed = restart.as_ref().map(checkpoint::Restart::report);
    let start = restart.as_ref().map_or(0, |r| r.done);
    let padded = rows as usize * block;
    let mut states = vec![
        State {
            weights: vec![0.0; padded],
            grad: vec![0.0; padded],
        };
        cfg.workers
    ];
    report.setup_s = setup.elapsed().as_secs_f64();
    let (pre_s, pattern) = preprocess(cluster, cfg, &states, |w, st| epoch(w, &e, st))?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;
    if restart.is_none() {
        // The weights start at zero: the initialisation run only clocks.
        report.init_s = timed_init_run(cluster, &mut states, |w, _| w.clock())?;
    }
    let mut accuracies = Vec::new();
    for iter in start..cfg.iterations {
        let cost = timed_run(cluster, &mut states, |w, st| epoch(w, &e, st))?;
        // The objective (and test accuracy), computed once on rank 0.
        let measured = on_rank_0(cluster, |c| {
            let model = snapshot(c, &e)?;
            let mut out = vec![objective(shape, &model, train, params.lambda).0];
            out.extend(data.test().map(|test| accuracy(shape, &model, test)));
            Ok(out)
        })?;
        let f = measured[0];
        check_finite("logreg", iter, cfg.iterations, "objective", f)?;
        accuracies.extend(measured.get(1));
        let record = IterRecord {
            iter,
            seconds: cost.seconds,
            bytes_sent: cost.bytes_sent,
            messages_sent: cost.messages_sent,
            objective: f,
            test_rmse: None,
            test_accuracy: measured.get(1).copied(),
            rss_bytes: None,
        };
        report.push_iteration(record, observer);
        let saved = checkpoint::after_iteration(cluster, cfg, &id, iter + 1, || {
            vec![Vec::new(); cfg.workers]
        })?;
        report.record_checkpoint(saved);
    }
    report.set_test_accuracy(accuracies);
    report.record_store(cluster);
    snapshot(cluster, &e)
}

/// The weights, read back from the shards.
fn snapshot(cluster: &Cluster, e: &Epoch<'_>) -> Result<Vec<f64>, AppError> {
    let mut model = dense(cluster.snapshot(&e.weights)?, e.rows as usize, e.block);
    model.truncate(e.shape.len());
    Ok(model)
}
