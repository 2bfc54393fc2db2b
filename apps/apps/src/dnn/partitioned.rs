//! The partitioned network (an MLP or a CNN): one epoch of one worker of a model replica
//! that holds segment copies of the network's stages ([`Stack`], [`Layout`]: fully
//! connected layers, convolutions split by kernels, poolings split by channels),
//! exchanging activations forward and error terms backward with the replica's other
//! workers (`Worker::send_to` / `recv_from`, so a replica may span processes).
//!
//! Per mini-batch, every worker of a replica, in the same order:
//!
//! 1. **READ** the rows of every segment it holds that has weights (every `read_every`
//!    mini-batches).
//! 2. **Forward**, stage by stage: copy `(p, r)` of stage `l` gathers its samples' inputs
//!    (the images for stage 0; otherwise, from every lower copy sharing samples, the
//!    columns of its output the segment reads, [`Stage::need`], tag `(l − 1, FWD)`),
//!    computes its units' outputs (a GEMM, a convolution, a pooling) and sends every upper
//!    copy sharing samples the columns it reads. The softmax needs a sample's every logit:
//!    when the output layer is split, segment 0 of each copy gathers the logits
//!    (`LOGITS`), computes the loss and the error terms, and hands every segment its
//!    columns back (`SOFTMAX`).
//! 3. **Backward**, top down: a copy's error terms at its outputs (from the upper stage,
//!    `BACK`, then through its activation's derivative) give its weight step. The error
//!    terms below a fully connected layer are a sum over its neurons in their canonical
//!    chunk order ([`kernels::backward_chunks`]): segment 0 starts from zeros, each
//!    segment adds its chunks and passes the sum on to the next (`CHAIN`). A split
//!    convolution's other segments send the last one their kernels and error terms
//!    (`CHAIN`), and it computes the error terms below in one GEMM over every kernel, as
//!    one worker does (summing per chunk of kernels instead would cost a pass of `col2im`
//!    per chunk, 15 % of an epoch each). The last segment sends each lower copy its
//!    samples' and columns' part (`BACK`); a pooling's segment routes its channels' error
//!    terms alone and sends them itself. So the sums are the ones one worker computes,
//!    bit for bit.
//! 4. **UPDATE** every held row by its velocity (momentum; summed over `write_every`
//!    mini-batches), then **CLOCK**. Between reads (`read_every > 1`) a replica adds its
//!    own steps to the weights it holds, and after a read it adds back the steps it has
//!    not written yet: it trains on the servers' weights plus its own progress.
//!
//! With one copy per stage (`R = 1`) every multiply-add happens in the same order as on
//! one worker, so a replica of 1, 2 or 4 workers trains bit-identical weights; copies of a
//! stage split the mini-batch's gradient, which the servers sum (as data-parallel workers'
//! steps are summed). The rows touched never depend on values, so a virtual iteration
//! skips the arithmetic and the messages. A worker in no replica (a dedicated
//! parameter-server process's) only CLOCKs.

use std::ops::Range;

use iterstore::{Table, Worker};

use crate::checkpoint::{self, Cursor};
use iterstore_algo::dnn::layout::{samples, LayerLayout, Layout};
use iterstore_algo::dnn::loss::softmax_cross_entropy;
use iterstore_algo::dnn::mlp::{epoch_order, mini_batch};
use iterstore_algo::dnn::stack::{Op, Stack, Stage};
use iterstore_algo::dnn::{conv, kernels, pool, DnnConfig};
use iterstore_data::{ImageSet, Images};

/// Message kinds (a tag is `stage × KINDS + kind`).
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
    /// Stage, segment, copy.
    l: usize,
    p: usize,
    r: usize,
    /// What it computes, for the segment's units (a convolution's `out_channels` and a
    /// pooling's `channels` are the segment's).
    op: Op,
    /// The segment's units (rows of its table, if it has one).
    rows: Range<usize>,
    /// Its chunks, relative to `rows.start`.
    chunks: Vec<Range<usize>>,
    /// The columns of the stage below's output it reads, and its output columns.
    need: Range<usize>,
    out_cols: Range<usize>,
    /// Floats per sample of `x` (and `back`) and of `out` (and `delta`).
    x_width: usize,
    out_width: usize,
    /// Floats per table row (inputs and bias); 0 without weights.
    width: usize,
    weights: Vec<f32>,
    step: Vec<f32>,
    velocity: Vec<f32>,
    /// Velocities summed since the last UPDATE.
    pending: Vec<f32>,
    /// A convolution's kernels and biases unpacked from `weights`, and its step's.
    kernels: Vec<f32>,
    bias: Vec<f32>,
    grad_kernels: Vec<f32>,
    grad_bias: Vec<f32>,
    /// A convolution's im2col scratch.
    cols: Vec<f32>,
    /// The last segment of a split convolution (but the first): every segment's kernels
    /// and error terms, to compute the error terms below as one worker does.
    whole_kernels: Vec<f32>,
    whole_delta: Vec<f32>,
    /// A pooling's argmax.
    argmax: Vec<u32>,
    /// Inputs of its samples (`samples × x_width`).
    x: Vec<f32>,
    /// Outputs (activations, pooled values, or logits in the last stage)
    /// (`samples × out_width`).
    out: Vec<f32>,
    /// Error terms at the outputs (`samples × out_width`).
    delta: Vec<f32>,
    /// Error terms at the inputs: the running sum below (`samples × x_width`).
    back: Vec<f32>,
}

impl Held {
    fn new(stage: &Stage, x: &LayerLayout, (l, p, r): (usize, usize, usize), most: usize) -> Self {
        let rows = x.segment(p);
        let chunks = x.chunks[x.segment_chunks(p)]
            .iter()
            .map(|c| c.start - rows.start..c.end - rows.start)
            .collect();
        let n = rows.len();
        let op = match stage.op {
            Op::Conv(g) => Op::Conv(Stage::conv_of(g, n)),
            Op::Pool(g) => Op::Pool(Stage::pool_of(g, n)),
            dense => dense,
        };
        let (x_width, out_width) = (stage.x_width(&rows), n * stage.unit());
        let weights = if stage.weights.is_some() {
            n * stage.width()
        } else {
            0
        };
        let (taps, kernels) = match op {
            Op::Conv(g) => (g.taps(), n),
            _ => (0, 0),
        };
        let argmax = if matches!(op, Op::Pool(_)) {
            most * out_width
        } else {
            0
        };
        let gathers = l > 0 && x.partitions > 1 && p + 1 == x.partitions;
        let (whole_kernels, whole_delta) = match stage.op {
            Op::Conv(g) if gathers => (g.weights_len(), most * stage.out_len()),
            _ => (0, 0),
        };
        Self {
            l,
            p,
            r,
            op,
            chunks,
            need: stage.need(&rows),
            out_cols: stage.out_cols(&rows),
            x_width,
            out_width,
            width: stage.width(),
            weights: vec![0.0; weights],
            step: vec![0.0; weights],
            velocity: vec![0.0; weights],
            pending: vec![0.0; weights],
            kernels: vec![0.0; kernels * taps],
            bias: vec![0.0; kernels],
            grad_kernels: vec![0.0; kernels * taps],
            grad_bias: vec![0.0; kernels],
            cols: Vec::new(),
            whole_kernels: vec![0.0; whole_kernels],
            whole_delta: vec![0.0; whole_delta],
            argmax: vec![0; argmax],
            x: vec![0.0; most * x_width],
            out: vec![0.0; most * out_width],
            delta: vec![0.0; most * out_width],
            back: vec![0.0; most * x_width],
            rows,
        }
    }

    fn len(&self) -> usize {
        self.rows.len()
    }
}

/// One worker's state across runs.
#[derive(Clone)]
pub(super) struct State {
    /// The copies it holds, bottom stage first.
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
    /// The state of global worker `w` under `layout` for the network `stack`, for
    /// mini-batch shares of at most `capacity` samples.
    pub(super) fn new(stack: &Stack, layout: &Layout, w: usize, capacity: usize) -> Self {
        let (_, k) = layout.place(w);
        let held = layout
            .layers
            .iter()
            .zip(&stack.stages)
            .enumerate()
            .filter(|_| !layout.is_idle(w))
            .filter_map(|(l, (x, stage))| {
                let (p, r) = x.copy_of(k)?;
                let most = capacity.div_ceil(x.replications);
                Some(Held::new(stage, x, (l, p, r), most))
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
    /// One table per weight layer.
    pub(super) tables: &'a [Table<f32>],
    pub(super) params: &'a DnnConfig,
    pub(super) stack: &'a Stack,
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

/// The copies `(r, p)` of the stage below (`x`, `stage`) whose outputs a copy reading
/// columns `need` of them takes, each with the columns it takes: where its inputs come
/// from going forward, and where its error terms below go back.
fn below_links<'a>(
    x: &'a LayerLayout,
    stage: &'a Stage,
    need: &'a Range<usize>,
) -> impl Iterator<Item = (usize, usize, Range<usize>)> + 'a {
    let cols = move |p| overlap(&stage.out_cols(&x.segment(p)), need);
    copies(x)
        .map(move |(r, p)| (r, p, cols(p)))
        .filter(|l| !l.2.is_empty())
}

/// The copies `(r, p)` of the stage above (`x`, `stage`) that read columns of `out` (a
/// copy's output columns), each with the columns it reads: where its outputs go forward,
/// and where its error terms come from back.
fn above_links<'a>(
    x: &'a LayerLayout,
    stage: &'a Stage,
    out: &'a Range<usize>,
) -> impl Iterator<Item = (usize, usize, Range<usize>)> + 'a {
    let cols = move |p| overlap(out, &stage.need(&x.segment(p)));
    copies(x)
        .map(move |(r, p)| (r, p, cols(p)))
        .filter(|l| !l.2.is_empty())
}

/// Every copy `(r, p)` of a stage laid out as `x`, copy by copy.
fn copies(x: &LayerLayout) -> impl Iterator<Item = (usize, usize)> + '_ {
    (0..x.replications).flat_map(move |r| (0..x.partitions).map(move |p| (r, p)))
}

/// The columns two ranges share (empty if none).
fn overlap(a: &Range<usize>, b: &Range<usize>) -> Range<usize> {
    a.start.max(b.start)..a.end.min(b.end).max(a.start.max(b.start))
}

/// `r` shifted down by `by`.
fn shift(r: &Range<usize>, by: usize) -> Range<usize> {
    r.start - by..r.end - by
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

/// Writes columns `need` of images `which` (pixels scaled to `[0, 1]`, as the one-worker
/// networks scale them) into rows of `width` floats of `x`.
fn fill_images(
    images: &Images,
    which: impl Iterator<Item = usize>,
    need: &Range<usize>,
    x: &mut [f32],
    width: usize,
) {
    for (b, i) in which.enumerate() {
        let row = &mut x[b * width..][..need.len()];
        for (v, &p) in row.iter_mut().zip(&images.image(i)[need.clone()]) {
            *v = f32::from(p) * (1.0 / 255.0);
        }
    }
}

/// Copies a convolution's rows (taps, then bias) into its kernels and biases.
fn unpack(h: &mut Held) {
    let taps = h.width - 1;
    for ((row, kernel), b) in h
        .weights
        .chunks_exact(h.width)
        .zip(h.kernels.chunks_exact_mut(taps))
        .zip(h.bias.iter_mut())
    {
        kernel.copy_from_slice(&row[..taps]);
        *b = row[taps];
    }
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
    let weighted = |h: &Held| e.stack.stages[h.l].weights.map(|t| &e.tables[t]);
    for b in 0..e.clocks {
        if b % layout.read_every == 0 {
            for h in &mut s.held {
                let Some(table) = weighted(h) else { continue };
                for (i, row) in h.weights.chunks_exact_mut(h.width).enumerate() {
                    w.read(table, (h.rows.start + i) as u64, row)?;
                }
                // The steps not written yet are this replica's too.
                if layout.write_every > 1 {
                    add_into(&mut h.weights, &h.pending);
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
            let Some(table) = weighted(h) else { continue };
            for (v, &d) in h.velocity.iter_mut().zip(&h.step) {
                *v = e.params.momentum * *v + d;
            }
            // Between reads the replica trains on its own weights with its own steps.
            if layout.read_every > 1 {
                add_into(&mut h.weights, &h.velocity);
            }
            if layout.write_every == 1 {
                h.pending.copy_from_slice(&h.velocity);
            } else {
                add_into(&mut h.pending, &h.velocity);
            }
            if write {
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
    let (layout, stack) = (e.layout, e.stack);
    let len = batch.len();
    let last = stack.len() - 1;
    for hi in 0..s.held.len() {
        let h = &mut s.held[hi];
        let (l, x_layout) = (h.l, &layout.layers[h.l]);
        s.mine.clear();
        s.mine.extend(samples(len, x_layout.replications, h.r));
        let n = s.mine.len();
        let me = (x_layout.replications, h.r);
        if l == 0 {
            let which = s.mine.iter().map(|&i| batch[i] as usize);
            fill_images(&e.data.train, which, &h.need, &mut h.x, h.x_width);
        } else {
            let (below, stage) = (&layout.layers[l - 1], &stack.stages[l - 1]);
            for (r0, p0, cols) in below_links(below, stage, &h.need) {
                let at = shared(&mut s.at, len, me, (below.replications, r0));
                if at.is_empty() {
                    continue;
                }
                let from = layout.global(m, below.worker(p0, r0));
                recv(w, from, tag(l - 1, FWD), at.len() * cols.len(), &mut s.buf)?;
                scatter(&s.buf, &mut h.x, h.x_width, at, shift(&cols, h.need.start));
            }
        }
        let activation = stack.activation;
        match h.op {
            Op::Dense => {
                for row in h.x.chunks_exact_mut(h.x_width).take(n) {
                    row[h.x_width - 1] = 1.0;
                }
                kernels::linear(&h.weights, &h.x, &mut h.out, n, h.x_width, h.rows.len());
                if l < last {
                    activation.apply(&mut h.out[..n * h.out_width]);
                }
            }
            Op::Conv(g) => {
                unpack(h);
                let bias = Some(&h.bias[..]);
                conv::forward(
                    &g,
                    &h.kernels,
                    bias,
                    &h.x,
                    &mut h.out,
                    n,
                    activation,
                    &mut h.cols,
                );
            }
            Op::Pool(g) => pool::max_forward(&g, &h.x, &mut h.out, &mut h.argmax, n),
        }
        if l < last {
            let (above, stage) = (&layout.layers[l + 1], &stack.stages[l + 1]);
            let mut gathered = None;
            for (r1, p1, cols) in above_links(above, stage, &h.out_cols) {
                let at = shared(&mut s.at, len, me, (above.replications, r1));
                if at.is_empty() {
                    continue;
                }
                // Upper segments of a copy reading the same columns take the same message.
                if gathered.as_ref() != Some(&(r1, cols.clone())) {
                    let from = shift(&cols, h.out_cols.start);
                    gather(&h.out, h.out_width, at, from, &mut s.buf);
                    gathered = Some((r1, cols));
                }
                let to = layout.global(m, above.worker(p1, r1));
                w.send_to(to, tag(l, FWD), &s.buf)?;
            }
            continue;
        }
        softmax(w, e, s, hi, m, batch)?;
    }
    Ok(())
}

/// The softmax over the whole output stage, held copy `hi` (the last stage's) of replica
/// `m`: its loss and error terms, with the other segments of its copy if it is split.
fn softmax(
    w: &mut Worker<'_>,
    e: Epoch<'_>,
    s: &mut State,
    hi: usize,
    m: usize,
    batch: &[u32],
) -> iterstore::Result<()> {
    let layout = e.layout;
    let h = &mut s.held[hi];
    let x_layout = &layout.layers[h.l];
    let (n, rows) = (s.mine.len(), h.len());
    s.labels.clear();
    s.labels.extend(
        s.mine
            .iter()
            .map(|&i| e.data.train.labels[batch[i] as usize]),
    );
    if x_layout.partitions == 1 {
        s.loss += softmax_cross_entropy(&mut h.out[..n * rows], &s.labels, &mut h.delta, rows);
        s.samples += n as u64;
        return Ok(());
    }
    // Every sample of the copy, in order.
    s.at.clear();
    s.at.extend(0..n);
    let all = &s.at;
    let (l, classes) = (h.l, e.stack.classes);
    let head = layout.global(m, x_layout.worker(0, h.r));
    if h.p != 0 {
        w.send_to(head, tag(l, LOGITS), &h.out[..n * rows])?;
        recv(w, head, tag(l, SOFTMAX), n * rows, &mut s.buf)?;
        h.delta[..n * rows].copy_from_slice(&s.buf);
        return Ok(());
    }
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
    let (layout, stack) = (e.layout, e.stack);
    let last = stack.len() - 1;
    for hi in (0..s.held.len()).rev() {
        let h = &mut s.held[hi];
        let (l, x_layout) = (h.l, &layout.layers[h.l]);
        let n = samples(len, x_layout.replications, h.r).count();
        let me = (x_layout.replications, h.r);
        if l < last {
            // This copy's error terms: from the last segment of each upper copy whose
            // error terms below are a sum, else from every segment reading its columns.
            let (above, stage) = (&layout.layers[l + 1], &stack.stages[l + 1]);
            for (r1, p1, cols) in above_links(above, stage, &h.out_cols) {
                if stage.sums_below() && p1 + 1 != above.partitions {
                    continue;
                }
                let at = shared(&mut s.at, len, me, (above.replications, r1));
                if at.is_empty() {
                    continue;
                }
                let from = layout.global(m, above.worker(p1, r1));
                recv(w, from, tag(l + 1, BACK), at.len() * cols.len(), &mut s.buf)?;
                let to = shift(&cols, h.out_cols.start);
                scatter(&s.buf, &mut h.delta, h.out_width, at, to);
            }
            if !matches!(h.op, Op::Pool(_)) {
                stack
                    .activation
                    .derive(&mut h.delta[..n * h.out_width], &h.out[..n * h.out_width]);
            }
        }
        step(h, n, rate);
        if l == 0 {
            continue;
        }
        let stage = &stack.stages[l];
        let parts = x_layout.partitions;
        match (h.op, stage.op) {
            (Op::Dense, _) => {
                // The error terms below: this segment's chunks added to the running sum.
                if h.p == 0 {
                    h.back[..n * h.x_width].fill(0.0);
                } else {
                    let from = layout.global(m, x_layout.worker(h.p - 1, h.r));
                    recv(w, from, tag(l, CHAIN), n * h.x_width, &mut s.buf)?;
                    h.back[..n * h.x_width].copy_from_slice(&s.buf);
                }
                kernels::backward_chunks(
                    &h.weights,
                    &h.delta,
                    &mut h.back,
                    n,
                    h.x_width,
                    h.rows.len(),
                    &h.chunks,
                );
                if h.p + 1 < parts {
                    let to = layout.global(m, x_layout.worker(h.p + 1, h.r));
                    w.send_to(to, tag(l, CHAIN), &h.back[..n * h.x_width])?;
                    continue;
                }
            }
            (Op::Conv(g), _) if parts == 1 => {
                conv::backward(&g, &h.kernels, &h.delta, &mut h.back, n, &mut h.cols);
            }
            (Op::Conv(_), _) if h.p + 1 < parts => {
                // The last segment computes the error terms below from every segment's
                // kernels and error terms.
                s.buf.clear();
                s.buf.extend_from_slice(&h.kernels);
                s.buf.extend_from_slice(&h.delta[..n * h.out_width]);
                let to = layout.global(m, x_layout.worker(parts - 1, h.r));
                w.send_to(to, tag(l, CHAIN), &s.buf)?;
                continue;
            }
            (Op::Conv(_), Op::Conv(whole)) => {
                let (taps, width) = (whole.taps(), stage.out_len());
                s.mine.clear();
                s.mine.extend(0..n);
                for p in 0..parts {
                    let units = x_layout.segment(p);
                    let (k, cols) = (units.len() * taps, stage.out_cols(&units));
                    if p == h.p {
                        s.buf.clear();
                        s.buf.extend_from_slice(&h.kernels);
                        s.buf.extend_from_slice(&h.delta[..n * h.out_width]);
                    } else {
                        let from = layout.global(m, x_layout.worker(p, h.r));
                        recv(w, from, tag(l, CHAIN), k + n * cols.len(), &mut s.buf)?;
                    }
                    h.whole_kernels[units.start * taps..units.end * taps]
                        .copy_from_slice(&s.buf[..k]);
                    scatter(&s.buf[k..], &mut h.whole_delta, width, &s.mine, cols);
                }
                let (kernels, delta) = (&h.whole_kernels, &h.whole_delta);
                conv::backward(&whole, kernels, delta, &mut h.back, n, &mut h.cols);
            }
            (Op::Pool(g), _) => pool::max_backward(&g, &h.delta, &h.argmax, &mut h.back, n),
            (Op::Conv(_), _) => unreachable!("a convolution's stage is a convolution"),
        }
        let (below, stage) = (&layout.layers[l - 1], &stack.stages[l - 1]);
        for (r0, p0, cols) in below_links(below, stage, &h.need) {
            let at = shared(&mut s.at, len, me, (below.replications, r0));
            if at.is_empty() {
                continue;
            }
            gather(
                &h.back,
                h.x_width,
                at,
                shift(&cols, h.need.start),
                &mut s.buf,
            );
            let to = layout.global(m, below.worker(p0, r0));
            w.send_to(to, tag(l, BACK), &s.buf)?;
        }
    }
    Ok(())
}

/// Copy `h`'s weight step over its `n` samples: `−rate · Σ ∇`, computed as one worker
/// computes it for these rows.
/// Adds `src` into `dst` element-wise.
fn add_into(dst: &mut [f32], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

fn step(h: &mut Held, n: usize, rate: f32) {
    match h.op {
        Op::Dense => {
            kernels::step_into(
                &mut h.step,
                &h.delta,
                &h.x,
                rate,
                n,
                h.x_width,
                h.rows.len(),
            );
        }
        Op::Conv(g) => {
            h.grad_kernels.fill(0.0);
            h.grad_bias.fill(0.0);
            let bias = Some(&mut h.grad_bias[..]);
            conv::update(
                &g,
                &mut h.grad_kernels,
                bias,
                &h.delta,
                &h.x,
                rate,
                n,
                &mut h.cols,
            );
            let taps = h.width - 1;
            for ((row, kernel), &b) in h
                .step
                .chunks_exact_mut(h.width)
                .zip(h.grad_kernels.chunks_exact(taps))
                .zip(&h.grad_bias)
            {
                row[..taps].copy_from_slice(kernel);
                row[taps] = b;
            }
        }
        Op::Pool(_) => {}
    }
}
