//! Sandblaster L-BFGS (DistBelief): the iterate, the gradients and the history live on the
//! shards as aligned tables ([`super::vectors`]); the main thread of every process runs
//! the same small computation on scalars, and the workers compute gradients over work
//! units handed out by worker 0, with backup tasks.
//!
//! One iteration: [`lbfgs::direction`] on the Gram matrix of the history and the gradient
//! (every process alike, from the last call's answer), a call forming the direction and
//! the first trial point, then a backtracking line search (Armijo, `c = 1e-4`, halving
//! from a unit step, at most 40 trials) whose every trial is one run of the gradient
//! batch at `wt` and a call finishing it (and, after the first, a call setting
//! `wt = w + t·d`); finally a call accepting the step (the history keeps it when
//! `s·y > 0`, in a spare slot that becomes the newest), which answers with the next Gram
//! matrix. Three calls and one run per iteration when the unit step is taken. This is
//! [`iterstore_algo::logreg::minimize`] step for step, with the sums taken per shard.
//!
//! The gradient run: every worker reads `wt` (all its rows), worker 0 hands out units of
//! [`LogRegParams::unit`](super::LogRegParams::unit) samples
//! ([`Worker::work_units`]), and UPDATEs `raw` by their sum (gradient and loss, added in
//! unit order, so the batch is the same bit for bit whoever computed which unit); one
//! CLOCK.

use std::time::Instant;

use iterstore::units::{UnitsReport, WorkUnits};
use iterstore::{Cluster, Worker};
use iterstore_algo::lbfgs;
use iterstore_algo::logreg::{accuracy, loss_grad, Samples};

use super::vectors::{sub_gram, Functions, Layout, Vectors};
use super::{on_rank_0, LogRegData, LogRegParams};
use crate::checkpoint::{self, get_f64s, put_f64s, Cursor, RunId};
use crate::{
    check_finite, dense, preprocess, AppConfig, AppError, IterRecord, Observer, RunReport,
};

/// Samples between two checks whether a unit was finished elsewhere.
const POLL: usize = 64;
/// The line search's sufficient decrease (Armijo's `c`).
const ARMIJO: f64 = 1e-4;
/// The line search's most trials.
const MAX_TRIALS: usize = 40;

/// What the gradient run needs.
struct Batch<'a> {
    layout: Layout,
    v: &'a Vectors,
    data: &'a dyn Samples,
    units: WorkUnits,
    unit: usize,
}

/// A worker's state across runs: its copy of the trial point, and (worker 0) what the
/// coordinator saw of the last batch.
#[derive(Clone)]
struct State {
    weights: Vec<f64>,
    units: Option<UnitsReport>,
}

/// The gradient run of one worker (see the module docs).
fn gradient(w: &mut Worker<'_>, b: &Batch<'_>, st: &mut State) -> iterstore::Result<()> {
    let (block, n) = (b.layout.block, b.layout.shape.len());
    for (r, row) in st.weights.chunks_exact_mut(block).enumerate() {
        w.read(&b.v.wt, r as u64, row)?;
    }
    let weights = &st.weights[..n];
    let samples = b.data.len();
    let outcome = w.work_units(&b.units, |unit, out, stop| {
        let (start, end) = (unit * b.unit, ((unit + 1) * b.unit).min(samples));
        let mut loss = 0.0;
        let mut i = start;
        while i < end {
            if stop() {
                return Ok(false);
            }
            let next = (i + POLL).min(end);
            loss += loss_grad(b.layout.shape, weights, b.data, i..next, &mut out[..n]);
            i = next;
        }
        out[n] = loss;
        Ok(true)
    })?;
    if w.id() == 0 {
        // The coordinator pushes the batch's sum; in a virtual iteration, zeros (so the
        // gathered pattern has these updates).
        let mut sum = vec![0.0; b.layout.padded()];
        if let Some(o) = outcome {
            sum[..o.sum.len()].copy_from_slice(&o.sum);
            st.units = Some(o.report);
        }
        for (r, row) in sum.chunks_exact(block).enumerate() {
            w.update(&b.v.raw, r as u64, row)?;
        }
    }
    w.clock()
}

/// The history's order and the objective at the iterate: what the main thread keeps
/// between iterations (and a checkpoint with it).
#[derive(Debug, Clone, PartialEq)]
struct History {
    /// Slots of the history, oldest step first.
    slots: Vec<usize>,
    /// Slots not in use.
    free: Vec<usize>,
    /// The objective at `w`.
    fx: f64,
}

impl History {
    fn new(m: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: (0..=m).rev().collect(),
            fx: f64::NAN,
        }
    }

    /// As little-endian `f64`s: the slots (with their count), the free slots, `fx`.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let f = |s: &[usize]| s.iter().map(|&i| i as f64).collect::<Vec<_>>();
        out.extend_from_slice(&(self.slots.len() as u64).to_le_bytes());
        put_f64s(&mut out, &f(&self.slots));
        out.extend_from_slice(&(self.free.len() as u64).to_le_bytes());
        put_f64s(&mut out, &f(&self.free));
        out.extend_from_slice(&self.fx.to_le_bytes());
        out
    }

    /// What [`encode`](Self::encode) wrote, checked against a history of `m`.
    fn decode(bytes: &[u8], m: usize) -> Result<Self, String> {
        let mut c = Cursor::new(bytes);
        let mut list = |what: &str| -> Result<Vec<usize>, String> {
            let n = c.u64(what)? as usize;
            if n > m + 1 {
                return Err(format!("{n} {what}, more than {} slots", m + 1));
            }
            let v = get_f64s(&mut c, n, what)?;
            Ok(v.iter().map(|&x| x as usize).collect())
        };
        let slots = list("history slots")?;
        let free = list("free slots")?;
        let fx = f64::from_le_bytes(c.take(8, "objective")?.try_into().expect("8 bytes"));
        c.finish()?;
        let mut all: Vec<usize> = slots.iter().chain(&free).copied().collect();
        all.sort_unstable();
        if all != (0..=m).collect::<Vec<_>>() || slots.len() > m {
            return Err(format!(
                "slots {slots:?} and free {free:?} are not the {} slots of a history of {m}",
                m + 1
            ));
        }
        Ok(Self { slots, free, fx })
    }

    /// `[m, slots…]`: a call's first arguments.
    fn args(&self) -> Vec<f64> {
        let mut a = vec![self.slots.len() as f64];
        a.extend(self.slots.iter().map(|&s| s as f64));
        a
    }
}

/// What the main thread uses to drive the shards.
struct Driver<'a> {
    f: Functions,
    batch: Batch<'a>,
    states: Vec<State>,
    lambda: f64,
    m: usize,
    /// The full Gram matrix of the history's slots and `g` (as the last call gave it).
    gram: Vec<f64>,
    /// Over the run: units each worker did, duplicated and abandoned, backups.
    units: UnitsReport,
}

impl Driver<'_> {
    /// The objective at `wt` (and `gt`, its gradient, on the shards).
    fn evaluate(&mut self, cluster: &mut Cluster) -> Result<f64, AppError> {
        let batch = &self.batch;
        cluster.run_with(&mut self.states, |w, st| gradient(w, batch, st))?;
        if let Some(r) = self.states.first_mut().and_then(|s| s.units.take()) {
            add_units(&mut self.units, &r);
        }
        let scale = 1.0 / batch.data.len() as f64;
        let out = cluster.call(&self.f.finish, &[scale, self.lambda])?;
        Ok(out[0] + 0.5 * self.lambda * out[1])
    }

    /// Accepts the trial point into `slot` (none if negative) and keeps the new Gram
    /// matrix; returns `s·y`.
    fn accept(&mut self, cluster: &mut Cluster, slot: f64) -> Result<f64, AppError> {
        let mut out = cluster.call(&self.f.accept, &[slot])?;
        self.gram = out.split_off(1);
        Ok(out[0])
    }

    /// One iteration (see the module docs); `false` when there is no descent direction
    /// left (converged to rounding).
    fn iterate(&mut self, cluster: &mut Cluster, h: &mut History) -> Result<bool, AppError> {
        let m = h.slots.len();
        let gram = sub_gram(&self.gram, self.m + 1, &h.slots);
        let delta = lbfgs::direction(&gram, m);
        let k = 2 * m + 1;
        let slope: f64 = (0..k).map(|j| delta[j] * gram[j * k + 2 * m]).sum();
        if slope >= 0.0 || !slope.is_finite() {
            return Ok(false);
        }
        let mut call = h.args();
        call.extend_from_slice(&delta);
        call.push(1.0);
        cluster.call(&self.f.step, &call)?;
        let (mut t, mut trials) = (1.0, 0);
        let ft = loop {
            if trials > 0 {
                cluster.call(&self.f.trial, &[t])?;
            }
            let ft = self.evaluate(cluster)?;
            trials += 1;
            if ft <= h.fx + ARMIJO * t * slope || trials >= MAX_TRIALS {
                break ft;
            }
            t *= 0.5;
        };
        let spare = h.free.pop().expect("a history of m steps has a spare slot");
        let sy = self.accept(cluster, spare as f64)?;
        if sy > 0.0 {
            h.slots.push(spare);
            if h.slots.len() > self.m {
                h.free.push(h.slots.remove(0));
            }
        } else {
            h.free.push(spare);
        }
        h.fx = ft;
        Ok(true)
    }
}

/// Adds `r` into `total` (per-worker counts, growing as needed).
fn add_units(total: &mut UnitsReport, r: &UnitsReport) {
    let add = |t: &mut Vec<u64>, x: &[u64]| {
        t.resize(t.len().max(x.len()), 0);
        for (a, b) in t.iter_mut().zip(x) {
            *a += b;
        }
    };
    add(&mut total.done, &r.done);
    add(&mut total.duplicated, &r.duplicated);
    add(&mut total.abandoned, &r.abandoned);
    add(&mut total.passed_over, &r.passed_over);
    total.backups += r.backups;
}

/// Trains with Sandblaster L-BFGS on a cluster whose tables are not yet created, filling
/// `report`; returns the model (`classes × (features + 1)`).
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
    let layout = Layout {
        shape: data.shape(),
        block: params.block,
    };
    let v = Vectors::create(cluster, layout, params.history)?;
    let f = Functions::register(cluster, layout, &v)?;
    let units = train.len().div_ceil(params.unit);
    report.dataset.insert("units", units as u64);
    let run_json = checkpoint::run_json(report);
    let id = RunId {
        app: "logreg",
        run: &run_json,
        clocks_per_iteration: 0,
        init_clocks: checkpoint::INIT_CLOCKS,
    };
    let restart = checkpoint::resume(cluster, cfg, &id)?;
    let mut history = match &restart {
        Some(r) => {
            // The history is the same on every worker: any count of workers resumes it.
            let blob = r
                .workers
                .first()
                .ok_or_else(|| r.bad_state(0, "no workers"))?;
            History::decode(blob, params.history).map_err(|e| r.bad_state(0, e))?
        }
        None => History::new(params.history),
    };
    report.resumed = restart.as_ref().map(checkpoint::Restart::report);
    let start = restart.as_ref().map_or(0, |r| r.done);
    let state = State {
        weights: vec![0.0; layout.padded()],
        units: None,
    };
    let mut driver = Driver {
        f,
        batch: Batch {
            layout,
            v: &v,
            data: train,
            units: WorkUnits {
                units,
                len: layout.len(),
                backups: params.backups,
            },
            unit: params.unit,
        },
        states: vec![state; cfg.workers],
        lambda: params.lambda,
        m: params.history,
        gram: Vec::new(),
        units: UnitsReport::default(),
    };
    report.setup_s = setup.elapsed().as_secs_f64();
    let batch = &driver.batch;
    let (pre_s, pattern) =
        preprocess(cluster, cfg, &driver.states, |w, st| gradient(w, batch, st))?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;
    if restart.is_none() {
        // The objective and gradient at w = 0 (wt is 0 as created), taken as the iterate.
        let init = Instant::now();
        history.fx = driver.evaluate(cluster)?;
        driver.accept(cluster, -1.0)?;
        report.init_s = init.elapsed().as_secs_f64();
    } else {
        driver.gram = cluster.call(&driver.f.gram, &[])?;
    }
    report.param("initial_objective", history.fx);
    let shape = layout.shape;
    let mut accuracies = Vec::new();
    for iter in start..cfg.iterations {
        let before = cluster.stats();
        let began = Instant::now();
        let descended = driver.iterate(cluster, &mut history)?;
        let seconds = began.elapsed().as_secs_f64();
        let after = cluster.stats();
        let mine = [
            (after.bytes_sent - before.bytes_sent) as i64,
            (after.frames_sent - before.frames_sent) as i64,
        ];
        let all = cluster.all_gather(&mine)?;
        check_finite("logreg", iter, cfg.iterations, "objective", history.fx)?;
        if let Some(test) = data.test() {
            let acc = on_rank_0(cluster, |c| {
                Ok(vec![accuracy(shape, &model(c, &v, layout)?, test)])
            })?;
            accuracies.push(acc[0]);
        }
        let record = IterRecord {
            iter,
            seconds,
            bytes_sent: all.iter().map(|p| p[0] as u64).sum(),
            messages_sent: all.iter().map(|p| p[1] as u64).sum(),
            objective: history.fx,
            test_rmse: None,
            test_accuracy: data.test().and(accuracies.last().copied()),
            rss_bytes: None,
        };
        report.push_iteration(record, observer);
        let saved = checkpoint::after_iteration(cluster, cfg, &id, iter + 1, || {
            vec![history.encode(); cfg.workers]
        })?;
        report.record_checkpoint(saved);
        if !descended {
            break;
        }
    }
    report.set_test_accuracy(accuracies);
    if cluster.rank() == 0 {
        report.work_units = Some(driver.units.clone());
    }
    report.record_store(cluster);
    model(cluster, &v, layout)
}

/// The iterate `w`, read back from the shards.
fn model(cluster: &Cluster, v: &Vectors, layout: Layout) -> Result<Vec<f64>, AppError> {
    let mut w = dense(
        cluster.snapshot(&v.w)?,
        layout.rows() as usize,
        layout.block,
    );
    w.truncate(layout.shape.len());
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_round_trips_and_a_foreign_one_is_refused() {
        let h = History {
            slots: vec![2, 0],
            free: vec![1, 3],
            fx: 0.25,
        };
        assert_eq!(History::decode(&h.encode(), 3).unwrap(), h);
        assert!(History::decode(&h.encode(), 4).is_err());
        let bad = History {
            slots: vec![2, 2],
            ..h.clone()
        };
        assert!(History::decode(&bad.encode(), 3).is_err());
        assert!(History::decode(&h.encode()[..10], 3).is_err());
        let fresh = History::new(3);
        assert_eq!((fresh.slots.len(), fresh.free.len()), (0, 4));
    }
}
