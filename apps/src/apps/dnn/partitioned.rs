//! The partitioned MLP: one epoch of one worker of a model replica that holds segment
//! copies of the layers ([`Layout`]), exchanging activations forward and error terms
//! backward with the replica's other workers (`Worker::send_to` / `recv_from`, so a
//! replica may span processes).
//!
//! Per mini-batch, every worker of a replica, in the same order:
//!
//! 1. **READ** the rows of every segment it holds (every `read_every` mini-batches).
//! 2. **Forward**, layer by layer: copy `(p, r)` of layer `l` gathers its samples' inputs
//!    (the images for layer 0; otherwise every lower copy's activations of the samples
//!    they share, tag `(l − 1, FWD)`), computes its rows' outputs and sends them to every
//!    upper copy sharing samples. The softmax needs a sample's every logit: when the
//!    output layer is split, segment 0 of each copy gathers the logits (`LOGITS`),
//!    computes the loss and the error terms, and hands every segment its columns back
//!    (`SOFTMAX`).
//! 3. **Backward**, top down: a copy's error terms (from the upper layer, `BACK`, through
//!    its activation's derivative) give its weight step `−rate δᵀx`. The error terms of the
//!    layer below are summed over this layer's output neurons in their canonical chunk
//!    order ([`kernels::backward_chunks`]): segment 0 starts from zeros, each segment adds
//!    its chunks and passes the sum on to the next (`CHAIN`), and the last segment sends
//!    each lower copy its samples' and neurons' part (`BACK`). So the sums are the ones one
//!    worker computes, bit for bit.
//! 4. **UPDATE** every held row by its velocity (momentum; summed over `write_every`
//!    mini-batches), then **CLOCK**. Between reads (`read_every > 1`) a replica adds its
//!    own steps to the weights it holds, and after a read it adds back the steps it has
//!    not written yet: it trains on the servers' weights plus its own progress.
//!
//! With one copy per layer (`R = 1`) every multiply-add happens in the same order as on
//! one worker, so a replica of 1, 2 or 4 workers trains bit-identical weights; copies of a
//! layer split the mini-batch's gradient, which the servers sum (as data-parallel workers'
//! steps are summed). The rows touched never depend on values, so a virtual iteration
//! skips the arithmetic and the messages. A worker in no replica (a dedicated
//! parameter-server process's) only CLOCKs.

use std::ops::Range;

use iterstore::{Element, Table, Worker};

use crate::apps::checkpoint::{self, Cursor};
use crate::data::ImageSet;
use crate::dnn::kernels;
use crate::dnn::layout::{samples, Layout};
use crate::dnn::loss::softmax_cross_entropy;
use crate::dnn::mlp::{epoch_order, fill_inputs, mini_batch};
use crate::dnn::{DnnConfig, MlpSpec};

/// Message kinds (a tag is `layer × KINDS + kind`).
const FWD: u32 = 0;
const LOGITS: u32 = 1;
const SOFTMAX: u32 = 2;
const CHAIN: u32 = 3;
const BACK: u32 = 4;
const KINDS: u32 = 5;

fn tag(l: usize, kind: u32) -> u32 {
    l as u32 * KINDS + kind
}

/// A segment copy a worker holds, with its buffers.
#[derive(Clone)]
struct Held {
    /// Layer, segment, copy.
    l: usize,
    p: usize,
    r: usize,
    /// The segment's rows.
    rows: Range<usize>,
    /// Its chunks, relative to `rows.start`.
    chunks: Vec<Range<usize>>,
    /// Floats per row (inputs and bias).
    width: usize,
    weights: Vec<f32>,
    step: Vec<f32>,
    velocity: Vec<f32>,
    /// Velocities summed since the last UPDATE.
    pending: Vec<f32>,
    /// Inputs of its samples (`samples × width`).
    x: Vec<f32>,
    /// Outputs (activations, or logits in the last layer) (`samples × rows`).
    out: Vec<f32>,
    /// Error terms (`samples × rows`).
    delta: Vec<f32>,
    /// The running sum of the error terms below (`samples × width`).
    back: Vec<f32>,
}

impl Held {
    fn len(&self) -> usize {
        self.rows.len()
    }
}

/// One worker's state across runs.
#[derive(Clone)]
pub(super) struct State {
    /// The copies it holds, bottom layer first.
    held: Vec<Held>,
    order: Vec<u32>,
    /// A message's values.
    buf: Vec<f32>,
    /// Positions of samples: a copy's own (`mine`), or those it shares with another copy.
    mine: Vec<usize>,
    at: Vec<usize>,
    /// The softmax's whole logits and error terms (segment 0 of a split output layer).
    full: Vec<f32>,
    full_delta: Vec<f32>,
    labels: Vec<u8>,
    pub(super) epoch: u64,
    pub(super) loss: f64,
    pub(super) samples: u64,
}

impl State {
    /// The state of global worker `w` under `layout`, for mini-batch shares of at most
    /// `capacity` samples.
    pub(super) fn new(spec: &MlpSpec, layout: &Layout, w: usize, capacity: usize) -> Self {
        let (_, k) = layout.place(w);
        let held = layout
            .layers
            .iter()
            .enumerate()
            .filter(|_| !layout.is_idle(w))
            .filter_map(|(l, x)| {
                let (p, r) = x.copy_of(k)?;
                let rows = x.segment(p);
                let chunks = x.chunks[x.segment_chunks(p)]
                    .iter()
                    .map(|c| c.start - rows.start..c.end - rows.start)
                    .collect();
                let (width, n) = (spec.width(l), rows.len());
                let most = capacity.div_ceil(x.replications);
                Some(Held {
                    l,
                    p,
                    r,
                    chunks,
                    width,
                    weights: vec![0.0; n * width],
                    step: vec![0.0; n * width],
                    velocity: vec![0.0; n * width],
                    pending: vec![0.0; n * width],
                    x: vec![0.0; most * width],
                    out: vec![0.0; most * n],
                    delta: vec![0.0; most * n],
                    back: vec![0.0; most * width],
                    rows,
                })
            })
            .collect();
        Self {
            held,
            order: Vec::new(),
            buf: Vec::new(),
            mine: Vec::new(),
            at: Vec::new(),
            full: Vec::new(),
            full_delta: Vec::new(),
            labels: Vec::new(),
            epoch: 0,
            loss: 0.0,
            samples: 0,
        }
    }
}

impl super::Saved for State {
    fn progress(&self) -> (f64, u64) {
        (self.loss, self.samples)
    }

    fn save(&self) -> Vec<u8> {
        let mut out = self.epoch.to_le_bytes().to_vec();
        for h in &self.held {
            checkpoint::put_f32s(&mut out, &h.velocity);
            checkpoint::put_f32s(&mut out, &h.pending);
        }
        out
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        let mut c = Cursor::new(bytes);
        self.epoch = c.u64("epoch")?;
        for h in &mut self.held {
            let what = format!("layer {} segment {} copy {}", h.l, h.p, h.r);
            checkpoint::get_f32s(&mut c, &mut h.velocity, &format!("{what}'s velocity"))?;
            checkpoint::get_f32s(&mut c, &mut h.pending, &format!("{what}'s unwritten steps"))?;
        }
        c.finish()
    }
}

/// What an epoch needs besides the worker and its state.
#[derive(Clone, Copy)]
pub(super) struct Epoch<'a> {
    pub(super) tables: &'a [Table<f32>],
    pub(super) params: &'a DnnConfig,
    pub(super) spec: &'a MlpSpec,
    pub(super) layout: &'a Layout,
    pub(super) data: &'a ImageSet,
    pub(super) clocks: usize,
}

/// Positions (indices into `samples(len, r_mine)`) of the samples copy `mine` shares with
/// copy `other` of `r_other` copies, in order, written into `at` (reused: nothing is
/// allocated per mini-batch once it has grown).
fn shared(
    at: &mut Vec<usize>,
    len: usize,
    (r_mine, mine): (usize, usize),
    (r_other, other): (usize, usize),
) -> &[usize] {
    at.clear();
    at.extend(
        samples(len, r_mine, mine)
            .enumerate()
            .filter(|&(_, s)| s % r_other == other)
            .map(|(i, _)| i),
    );
    at
}

/// Copies rows `at` (of `cols` floats, columns `from`) of `src` into `buf`.
fn gather(src: &[f32], stride: usize, at: &[usize], from: Range<usize>, buf: &mut Vec<f32>) {
    buf.clear();
    for &i in at {
        buf.extend_from_slice(&src[i * stride + from.start..i * stride + from.end]);
    }
}

/// Copies `buf`'s rows into rows `at`, columns `to`, of `dst`.
fn scatter(buf: &[f32], dst: &mut [f32], stride: usize, at: &[usize], to: Range<usize>) {
    for (row, &i) in buf.chunks_exact(to.len().max(1)).zip(at) {
        dst[i * stride + to.start..i * stride + to.end].copy_from_slice(row);
    }
}

/// Receives `len` floats from `from` into `buf`.
fn recv(
    w: &mut Worker<'_>,
    from: usize,
    tag: u32,
    len: usize,
    buf: &mut Vec<f32>,
) -> iterstore::Result<()> {
    buf.clear();
    buf.resize(len, 0.0);
    w.recv_from(from, tag, buf)
}

/// One epoch of global worker `w.id()`: the iteration both the virtual iteration and the
/// real ones run.
pub(super) fn iteration(w: &mut Worker<'_>, e: Epoch<'_>, s: &mut State) -> iterstore::Result<()> {
    let layout = e.layout;
    if layout.is_idle(w.id()) {
        // In no replica: it only keeps the clocks.
        for _ in 0..e.clocks {
            w.clock()?;
        }
        s.epoch += 1;
        return Ok(());
    }
    let (m, _) = layout.place(w.id());
    let train = &e.data.train;
    epoch_order(
        train.len(),
        layout.replicas,
        m,
        e.params.seed,
        s.epoch,
        &mut s.order,
    );
    s.loss = 0.0;
    s.samples = 0;
    let rate = e.params.rate(s.epoch);
    let real = !w.is_virtual();
    let order = std::mem::take(&mut s.order);
    for b in 0..e.clocks {
        if b % layout.read_every == 0 {
            for h in &mut s.held {
                let table = &e.tables[h.l];
                for (i, row) in h.weights.chunks_exact_mut(h.width).enumerate() {
                    w.read(table, (h.rows.start + i) as u64, row)?;
                }
                // The steps not written yet are this replica's too.
                if layout.write_every > 1 {
                    f32::add_slice(&mut h.weights, &h.pending);
                }
            }
        }
        if real {
            let batch = mini_batch(&order, e.clocks, b);
            forward(w, e, s, m, batch)?;
            backward(w, e, s, m, batch.len(), rate)?;
        }
        let write = (b + 1) % layout.write_every == 0 || b + 1 == e.clocks;
        for h in &mut s.held {
            for (v, &d) in h.velocity.iter_mut().zip(&h.step) {
                *v = e.params.momentum * *v + d;
            }
            // Between reads the replica trains on its own weights with its own steps.
            if layout.read_every > 1 {
                f32::add_slice(&mut h.weights, &h.velocity);
            }
            if layout.write_every == 1 {
                h.pending.copy_from_slice(&h.velocity);
            } else {
                f32::add_slice(&mut h.pending, &h.velocity);
            }
            if write {
                let table = &e.tables[h.l];
                for (i, row) in h.pending.chunks_exact(h.width).enumerate() {
                    w.update(table, (h.rows.start + i) as u64, row)?;
                }
                h.pending.fill(0.0);
            }
        }
        w.clock()?;
    }
    s.order = order;
    s.epoch += 1;
    Ok(())
}

/// The forward pass of mini-batch `batch` (sample indices) on replica `m`.
fn forward(
    w: &mut Worker<'_>,
    e: Epoch<'_>,
    s: &mut State,
    m: usize,
    batch: &[u32],
) -> iterstore::Result<()> {
    let (layout, spec) = (e.layout, e.spec);
    let len = batch.len();
    let last = spec.layers() - 1;
    for hi in 0..s.held.len() {
        let h = &mut s.held[hi];
        let (l, x_layout) = (h.l, &layout.layers[h.l]);
        s.mine.clear();
        s.mine.extend(samples(len, x_layout.replications, h.r));
        let n = s.mine.len();
        let width = h.width;
        let me = (x_layout.replications, h.r);
        if l == 0 {
            fill_inputs(
                spec,
                &e.data.train,
                s.mine.iter().map(|&i| batch[i] as usize),
                &mut h.x,
            );
        } else {
            let below = &layout.layers[l - 1];
            for r0 in 0..below.replications {
                let at = shared(&mut s.at, len, me, (below.replications, r0));
                if at.is_empty() {
                    continue;
                }
                for p0 in 0..below.partitions {
                    let cols = below.segment(p0);
                    let from = layout.global(m, below.worker(p0, r0));
                    recv(w, from, tag(l - 1, FWD), at.len() * cols.len(), &mut s.buf)?;
                    scatter(&s.buf, &mut h.x, width, at, cols);
                }
            }
            for row in h.x.chunks_exact_mut(width).take(n) {
                row[width - 1] = 1.0;
            }
        }
        let rows = h.len();
        kernels::linear(&h.weights, &h.x, &mut h.out, n, width, rows);
        if l < last {
            spec.activation.apply(&mut h.out[..n * rows]);
            let above = &layout.layers[l + 1];
            for r1 in 0..above.replications {
                let at = shared(&mut s.at, len, me, (above.replications, r1));
                if at.is_empty() {
                    continue;
                }
                gather(&h.out, rows, at, 0..rows, &mut s.buf);
                for p1 in 0..above.partitions {
                    let to = layout.global(m, above.worker(p1, r1));
                    w.send_to(to, tag(l, FWD), &s.buf)?;
                }
            }
            continue;
        }
        // The softmax over the whole output layer.
        s.labels.clear();
        s.labels.extend(
            s.mine
                .iter()
                .map(|&i| e.data.train.labels[batch[i] as usize]),
        );
        if x_layout.partitions == 1 {
            s.loss += softmax_cross_entropy(&mut h.out[..n * rows], &s.labels, &mut h.delta, rows);
            s.samples += n as u64;
            continue;
        }
        // Every sample of the copy, in order.
        s.at.clear();
        s.at.extend(0..n);
        let all = &s.at;
        let head = layout.global(m, x_layout.worker(0, h.r));
        if h.p != 0 {
            w.send_to(head, tag(l, LOGITS), &h.out[..n * rows])?;
            recv(w, head, tag(l, SOFTMAX), n * rows, &mut s.buf)?;
            h.delta[..n * rows].copy_from_slice(&s.buf);
            continue;
        }
        let classes = spec.classes();
        s.full.clear();
        s.full.resize(n * classes, 0.0);
        s.full_delta.clear();
        s.full_delta.resize(n * classes, 0.0);
        scatter(
            &h.out[..n * rows],
            &mut s.full,
            classes,
            all,
            x_layout.segment(0),
        );
        for p in 1..x_layout.partitions {
            let cols = x_layout.segment(p);
            let from = layout.global(m, x_layout.worker(p, h.r));
            recv(w, from, tag(l, LOGITS), n * cols.len(), &mut s.buf)?;
            scatter(&s.buf, &mut s.full, classes, all, cols);
        }
        s.loss += softmax_cross_entropy(&mut s.full, &s.labels, &mut s.full_delta, classes);
        s.samples += n as u64;
        for p in 1..x_layout.partitions {
            let to = layout.global(m, x_layout.worker(p, h.r));
            gather(&s.full_delta, classes, all, x_layout.segment(p), &mut s.buf);
            w.send_to(to, tag(l, SOFTMAX), &s.buf)?;
        }
        gather(&s.full_delta, classes, all, x_layout.segment(0), &mut s.buf);
        h.delta[..n * rows].copy_from_slice(&s.buf);
    }
    Ok(())
}

/// The backward pass and weight steps of a mini-batch of `len` samples on replica `m`.
fn backward(
    w: &mut Worker<'_>,
    e: Epoch<'_>,
    s: &mut State,
    m: usize,
    len: usize,
    rate: f32,
) -> iterstore::Result<()> {
    let (layout, spec) = (e.layout, e.spec);
    let last = spec.layers() - 1;
    for hi in (0..s.held.len()).rev() {
        let h = &mut s.held[hi];
        let (l, x_layout) = (h.l, &layout.layers[h.l]);
        let n = samples(len, x_layout.replications, h.r).count();
        let (rows, width) = (h.len(), h.width);
        let me = (x_layout.replications, h.r);
        if l < last {
            // This copy's error terms, summed by the last segment of each upper copy.
            let above = &layout.layers[l + 1];
            for r1 in 0..above.replications {
                let at = shared(&mut s.at, len, me, (above.replications, r1));
                if at.is_empty() {
                    continue;
                }
                let from = layout.global(m, above.worker(above.partitions - 1, r1));
                recv(w, from, tag(l + 1, BACK), at.len() * rows, &mut s.buf)?;
                scatter(&s.buf, &mut h.delta, rows, at, 0..rows);
            }
            spec.activation
                .derive(&mut h.delta[..n * rows], &h.out[..n * rows]);
        }
        kernels::step_into(&mut h.step, &h.delta, &h.x, rate, n, width, rows);
        if l == 0 {
            continue;
        }
        // The error terms below: this segment's chunks added to the running sum.
        if h.p == 0 {
            h.back[..n * width].fill(0.0);
        } else {
            let from = layout.global(m, x_layout.worker(h.p - 1, h.r));
            recv(w, from, tag(l, CHAIN), n * width, &mut s.buf)?;
            h.back[..n * width].copy_from_slice(&s.buf);
        }
        kernels::backward_chunks(&h.weights, &h.delta, &mut h.back, n, width, rows, &h.chunks);
        if h.p + 1 < x_layout.partitions {
            let to = layout.global(m, x_layout.worker(h.p + 1, h.r));
            w.send_to(to, tag(l, CHAIN), &h.back[..n * width])?;
            continue;
        }
        let below = &layout.layers[l - 1];
        for r0 in 0..below.replications {
            let at = shared(&mut s.at, len, me, (below.replications, r0));
            if at.is_empty() {
                continue;
            }
            for p0 in 0..below.partitions {
                gather(&h.back, width, at, below.segment(p0), &mut s.buf);
                let to = layout.global(m, below.worker(p0, r0));
                w.send_to(to, tag(l, BACK), &s.buf)?;
            }
        }
    }
    Ok(())
}
