//! The data-parallel epoch (module docs of [`super`]): every model replica trains the
//! whole network on its share of each mini-batch, reading the weights every
//! `read_every` mini-batches and writing its steps (or, with a server rule, its
//! gradients) every `write_every`; with an epoch quorum ([`DnnConfig::epoch_quorum`]) a
//! replica stops where it is once enough of the others have finished their shares
//! ([`super::quorum`]).

use iterstore::{Table, Worker};

use super::quorum::Quorum;
use super::Saved;
use crate::checkpoint::{self, Cursor};
use iterstore_algo::dnn::mlp::{add_momentum, add_momentum_row, epoch_order, mini_batch};
use iterstore_algo::dnn::network::add_layers;
use iterstore_algo::dnn::quorum::carry_over;
use iterstore_algo::dnn::{DnnConfig, Network};
use iterstore_algo::partition;
use iterstore_data::ImageSet;

/// What an iteration needs besides the worker and its state.
#[derive(Clone, Copy)]
pub(super) struct Step<'a> {
    pub(super) tables: &'a [Table<f32>],
    pub(super) params: &'a DnnConfig,
    pub(super) data: &'a ImageSet,
    /// Model replicas: global workers `0..replicas`, one each; the others only CLOCK.
    pub(super) replicas: usize,
    /// Mini-batches between READs and between UPDATEs (1: every mini-batch).
    pub(super) read_every: usize,
    pub(super) write_every: usize,
    /// Mini-batches (CLOCKs) per epoch.
    pub(super) clocks: usize,
    /// With an epoch quorum: how many replicas' finished shares end an epoch.
    pub(super) quorum: Option<usize>,
}

/// One worker's state across runs: the weights it read, its step, its buffers, its epoch
/// and its running loss.
#[derive(Clone)]
pub(super) struct State<N: Network> {
    weights: N,
    step: Vec<Vec<f32>>,
    /// The velocity: what the worker UPDATEs (its step, with momentum).
    velocity: Vec<Vec<f32>>,
    /// Velocities not UPDATEd yet (when it writes every few mini-batches).
    pending: Vec<Vec<f32>>,
    /// With layer updates: each layer's factors not UPDATEd yet, error terms (times the
    /// step) and inputs, one sample after another (empty between epochs).
    factors: Vec<(Vec<f32>, Vec<f32>)>,
    scratch: N::Scratch,
    order: Vec<u32>,
    /// Samples the last epoch's quorum ended before this worker reached them: first in
    /// this epoch's order.
    carried: Vec<u32>,
    /// Whether the quorum ended this worker's last epoch before its share was done.
    cut: bool,
    /// Epochs this worker has run (keys its sample order).
    epoch: u64,
    /// The next mini-batch of its epoch when it trains in slices ([`slice()`]; 0: a new
    /// epoch's order is due). Whole epochs ([`iteration`]) leave it 0.
    next: usize,
    /// Summed cross-entropy of this epoch's samples so far.
    loss: f64,
    /// Samples of this epoch so far.
    samples: u64,
}

impl<N: Network> State<N> {
    /// The state of a worker of `zeros`' shape (all-zero weights).
    pub(super) fn new(zeros: &N, capacity: usize) -> Self {
        Self {
            step: zeros.weights().to_vec(),
            velocity: zeros.weights().to_vec(),
            pending: zeros.weights().to_vec(),
            factors: vec![(Vec::new(), Vec::new()); zeros.layer_count()],
            weights: zeros.clone(),
            scratch: zeros.scratch(capacity),
            order: Vec::new(),
            carried: Vec::new(),
            cut: false,
            epoch: 0,
            next: 0,
            loss: 0.0,
            samples: 0,
        }
    }
}

impl<N: Network> State<N> {
    /// Epochs this worker has finished.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Shuffles `worker`'s share of the training set into this epoch's order.
    fn order_epoch(&mut self, st: Step<'_>, worker: usize) {
        let n = st.data.train.len();
        epoch_order(
            n,
            st.replicas,
            worker,
            st.params.seed,
            self.epoch,
            &mut self.order,
        );
    }

    /// Re-cuts the epoch under way from `from` mini-batches to `to` (a branch forked
    /// with another batch): the next mini-batch is the one at the same fraction of it.
    pub(super) fn rebatch(&mut self, from: usize, to: usize) {
        self.next = self.next * to / from.max(1);
    }
}

impl<N: Network> Saved for State<N> {
    fn progress(&self) -> (f64, u64) {
        (self.loss, self.samples)
    }

    fn cut_short(&self) -> Option<usize> {
        self.cut.then_some(self.carried.len())
    }

    /// The epoch, the velocities, the unwritten steps, then (with an epoch quorum, if
    /// any) the carried samples: their count and each as 4 bytes.
    fn save(&self) -> Vec<u8> {
        let mut out = self.epoch.to_le_bytes().to_vec();
        for layer in self.velocity.iter().chain(&self.pending) {
            checkpoint::put_f32s(&mut out, layer);
        }
        if !self.carried.is_empty() {
            out.extend_from_slice(&(self.carried.len() as u64).to_le_bytes());
            for i in &self.carried {
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
        out
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut c = Cursor::new(bytes);
        self.epoch = c.u64("epoch")?;
        for (l, layer) in self.velocity.iter_mut().enumerate() {
            checkpoint::get_f32s(&mut c, layer, &format!("layer {l}'s velocity"))?;
        }
        for (l, layer) in self.pending.iter_mut().enumerate() {
            checkpoint::get_f32s(&mut c, layer, &format!("layer {l}'s unwritten steps"))?;
        }
        self.carried.clear();
        if !c.is_empty() {
            let n = c.u64("carried samples")?;
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= bytes.len() / 4)
                .ok_or_else(|| format!("{n} carried samples: more than the state holds"))?;
            let raw = c.take(n * 4, "carried samples")?;
            self.carried.extend(
                raw.chunks_exact(4)
                    .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
            );
        }
        c.finish()
    }
}

/// One epoch of one worker, one CLOCK per mini-batch: the function both the virtual
/// iteration and the real iterations run.
pub(super) fn iteration<N: Network>(
    w: &mut Worker<'_>,
    st: Step<'_>,
    s: &mut State<N>,
) -> iterstore::Result<()> {
    if w.id() >= st.replicas {
        // In no replica (a dedicated parameter server's worker): it only keeps the clocks.
        for _ in 0..st.clocks {
            w.clock()?;
        }
        s.epoch += 1;
        return Ok(());
    }
    let train = &st.data.train;
    s.order_epoch(st, w.id());
    carry_over(&mut s.order, &s.carried);
    s.carried.clear();
    s.cut = false;
    s.loss = 0.0;
    s.samples = 0;
    let mut quorum = st
        .quorum
        .map(|needed| Quorum::new(needed, w.id(), st.replicas));
    // With a server rule a worker UPDATEs gradients: its share of the mini-batch's mean
    // gradient (gradient_step's step at the rate −1/batch), no velocity of its own.
    let server = st.params.server_rule.is_some();
    let (rate, momentum) = if server {
        (-1.0 / st.params.batch as f32, 0.0)
    } else {
        (st.params.rate(s.epoch), st.params.momentum)
    };
    for b in 0..st.clocks {
        if let Some(slow) = st.params.straggler {
            if slow.worker == w.id() && !s.cut && !w.is_virtual() {
                std::thread::sleep(slow.delay);
            }
        }
        if !s.cut && b > 0 {
            if let Some(q) = &mut quorum {
                if q.reached(w)? {
                    // The epoch is over: what this worker did not reach comes first in
                    // its next one, and its unwritten steps go now.
                    s.cut = true;
                    let done = partition(s.order.len(), st.clocks, b).start;
                    s.carried.extend_from_slice(&s.order[done..]);
                    // Mini-batches 0..b ran, and a write follows every write_every-th.
                    if b % st.write_every != 0 {
                        flush(w, st, s)?;
                    }
                }
            }
        }
        if s.cut {
            // The clocks go on (a worker's clocks count its mini-batches in every run).
            w.clock()?;
            continue;
        }
        // Whether this mini-batch ends with a write of what is pending.
        let write_due = (b + 1) % st.write_every == 0 || b + 1 == st.clocks;
        if b % st.read_every == 0 {
            read(w, st, &mut s.weights)?;
            // The steps not written yet are this worker's too (gradients are not steps).
            if st.write_every > 1 && !server {
                add_layers(s.weights.weights_mut(), &s.pending);
            }
        }
        // The rows touched do not depend on the values: a virtual iteration skips the
        // arithmetic.
        if !w.is_virtual() {
            let which = mini_batch(&s.order, st.clocks, b);
            s.loss += s
                .weights
                .gradient_step(train, which, rate, &mut s.scratch, &mut s.step);
            s.samples += which.len() as u64;
        }
        if st.params.layer_updates {
            // Project Adam: the layers' factors go to the servers, which multiply them out.
            if !w.is_virtual() {
                let k = mini_batch(&s.order, st.clocks, b).len();
                for (l, (left, right)) in s.factors.iter_mut().enumerate() {
                    let (errors, inputs) = s
                        .weights
                        .factors(&s.scratch, l, k)
                        .expect("layer updates are refused for networks without factors");
                    left.extend(errors.iter().map(|e| -rate * e));
                    right.extend_from_slice(inputs);
                }
            }
            if write_due {
                flush(w, st, s)?;
            }
            w.clock()?;
            continue;
        }
        if st.read_every == 1 && st.write_every == 1 {
            // The common case: each row's velocity folded and UPDATEd in one pass.
            write_with_momentum(w, st, s, momentum)?;
            w.clock()?;
            continue;
        }
        add_momentum(&mut s.velocity, &s.step, momentum);
        // Between reads a worker trains on its own weights with its own steps; with a
        // server rule on the weights it last fetched (Downpour SGD).
        if st.read_every > 1 && !server {
            add_layers(s.weights.weights_mut(), &s.velocity);
        }
        if st.write_every == 1 {
            write(w, st, &s.velocity, &s.weights)?;
        } else {
            add_layers(&mut s.pending, &s.velocity);
            if write_due {
                flush(w, st, s)?;
            }
        }
        w.clock()?;
    }
    if let Some(q) = &mut quorum {
        q.finish(w, s.samples)?;
    }
    s.epoch += 1;
    Ok(())
}

/// How a branch trains when `iterstore tune` runs it ([`super::tune`]): at which
/// learning rate, momentum and batch (the branch's setting), the step decaying by
/// [`DnnConfig::lr_decay`](iterstore_algo::dnn::DnnConfig::lr_decay) over the epochs
/// since `from_epoch` (when the setting was chosen).
#[derive(Clone, Copy, Debug)]
pub(super) struct Slice {
    pub(super) batch: usize,
    pub(super) learning_rate: f32,
    pub(super) momentum: f32,
    pub(super) from_epoch: u64,
}

/// `mini_batches` mini-batches of one worker, one CLOCK each, continuing its epoch
/// where its last slice stopped (a new epoch's order when one ends): the data-parallel
/// step of [`iteration`] (READ every row, step with momentum, UPDATE every row by the
/// velocity), without quorum, layer updates, server rule or reads/writes every few
/// mini-batches (refused before tuning starts). Pushes each mini-batch's summed
/// cross-entropy and sample count onto `losses`. Every mini-batch touches every row in
/// the same order, so a virtual iteration of one mini-batch is the tape of any slice.
pub(super) fn slice<N: Network>(
    w: &mut Worker<'_>,
    st: Step<'_>,
    s: &mut State<N>,
    sl: Slice,
    mini_batches: usize,
    losses: &mut Vec<(f64, u64)>,
) -> iterstore::Result<()> {
    let train = &st.data.train;
    // The branch's batch makes its epoch's mini-batches (every one touches every row).
    let clocks = iterstore_algo::dnn::mlp::clocks(train.len(), sl.batch);
    for _ in 0..mini_batches {
        if s.next == 0 {
            s.order_epoch(st, w.id());
        }
        read(w, st, &mut s.weights)?;
        if !w.is_virtual() {
            let since = s.epoch.saturating_sub(sl.from_epoch) as f64;
            let decayed =
                f64::from(sl.learning_rate) / (1.0 + f64::from(st.params.lr_decay) * since);
            let rate = (decayed / sl.batch as f64) as f32;
            let which = mini_batch(&s.order, clocks, s.next);
            let loss = s
                .weights
                .gradient_step(train, which, rate, &mut s.scratch, &mut s.step);
            losses.push((loss, which.len() as u64));
        }
        write_with_momentum(w, st, s, sl.momentum)?;
        w.clock()?;
        s.next += 1;
        if s.next == clocks {
            s.next = 0;
            s.epoch += 1;
        }
    }
    Ok(())
}

/// DistBelief's warm start ([`DnnConfig::warm_start`]): replica 0 alone trains `n`
/// mini-batches of its share, reading and writing every one, before the others join; the
/// other workers only CLOCK as many times. Its epoch count, velocity and running loss are
/// left as they were: epoch 0 follows as usual.
pub(super) fn warm_up<N: Network>(
    w: &mut Worker<'_>,
    st: Step<'_>,
    s: &mut State<N>,
    n: usize,
) -> iterstore::Result<()> {
    if w.id() != 0 {
        for _ in 0..n {
            w.clock()?;
        }
        return Ok(());
    }
    let train = &st.data.train;
    // Its own sample order, keyed apart from every epoch's.
    epoch_order(
        train.len(),
        st.replicas,
        0,
        st.params.seed,
        u64::MAX,
        &mut s.order,
    );
    let rate = match st.params.server_rule {
        Some(_) => -1.0 / st.params.batch as f32,
        None => st.params.rate(0),
    };
    for b in 0..n {
        read(w, st, &mut s.weights)?;
        if !w.is_virtual() {
            let which = mini_batch(&s.order, st.clocks, b % st.clocks);
            s.weights
                .gradient_step(train, which, rate, &mut s.scratch, &mut s.step);
        }
        write(w, st, &s.step, &s.weights)?;
        w.clock()?;
    }
    Ok(())
}

/// READs every row of every layer into `weights`.
fn read<N: Network>(w: &mut Worker<'_>, st: Step<'_>, weights: &mut N) -> iterstore::Result<()> {
    for (l, table) in st.tables.iter().enumerate() {
        let width = weights.width(l);
        for (r, row) in weights.weights_mut()[l].chunks_exact_mut(width).enumerate() {
            w.read(table, r as u64, row)?;
        }
    }
    Ok(())
}

/// UPDATEs every row of every layer by `deltas` (shaped as `shape`'s weights).
fn write<N: Network>(
    w: &mut Worker<'_>,
    st: Step<'_>,
    deltas: &[Vec<f32>],
    shape: &N,
) -> iterstore::Result<()> {
    for (l, table) in st.tables.iter().enumerate() {
        let width = shape.width(l);
        for (r, delta) in deltas[l].chunks_exact(width).enumerate() {
            w.update(table, r as u64, delta)?;
        }
    }
    Ok(())
}

/// Folds the step into the velocity ([`add_momentum`]'s arithmetic) and UPDATEs every
/// row of every layer by it, a row at a time: the velocity row is still in cache when it
/// is written, one pass over the velocities fewer than folding them all first.
fn write_with_momentum<N: Network>(
    w: &mut Worker<'_>,
    st: Step<'_>,
    s: &mut State<N>,
    momentum: f32,
) -> iterstore::Result<()> {
    for (l, table) in st.tables.iter().enumerate() {
        let width = s.weights.width(l);
        let rows = s.velocity[l]
            .chunks_exact_mut(width)
            .zip(s.step[l].chunks_exact(width));
        for (r, (velocity, step)) in rows.enumerate() {
            add_momentum_row(velocity, step, momentum);
            w.update(table, r as u64, velocity)?;
        }
    }
    Ok(())
}

/// UPDATEs what this worker has not written yet: its pending steps, or with layer
/// updates each layer's pending factors (one rank-k UPDATE a layer).
fn flush<N: Network>(w: &mut Worker<'_>, st: Step<'_>, s: &mut State<N>) -> iterstore::Result<()> {
    if !st.params.layer_updates {
        write(w, st, &s.pending, &s.weights)?;
        for l in &mut s.pending {
            l.fill(0.0);
        }
        return Ok(());
    }
    for (l, (table, (left, right))) in st.tables.iter().zip(&mut s.factors).enumerate() {
        w.update_outer(table, 0..s.weights.rows(l) as u64, left, right)?;
        left.clear();
        right.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_algo::dnn::{Activation, Mlp, MlpSpec};

    #[test]
    fn a_checkpoint_keeps_the_carried_samples_and_reads_one_without_them() {
        let spec = MlpSpec {
            sizes: vec![3, 2, 2],
            activation: Activation::Relu,
        };
        let zeros = Mlp::zeros(&spec);
        let mut s = State::new(&zeros, 4);
        s.epoch = 5;
        s.velocity[1][2] = 0.5;
        s.carried = vec![9, 4, 7];
        let mut back = State::new(&zeros, 4);
        back.restore(&s.save()).unwrap();
        assert_eq!((back.epoch, back.carried.clone()), (5, vec![9, 4, 7]));
        assert_eq!(back.velocity, s.velocity);
        // A state saved with nothing carried (or before quorums existed) has no tail.
        s.carried.clear();
        back.restore(&s.save()).unwrap();
        assert!(back.carried.is_empty());
        // A tail that claims more samples than it holds is refused.
        let mut bad = s.save();
        bad.extend_from_slice(&1000u64.to_le_bytes());
        bad.extend_from_slice(&3u32.to_le_bytes());
        let e = back.restore(&bad).unwrap_err();
        assert!(e.contains("carried samples"), "{e}");
    }
}
