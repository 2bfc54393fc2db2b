//! The performance model (Yan et al., KDD'15, section 4): a configuration's epoch time,
//! broken down per component and per layer.
//!
//! A [`Model`] holds the network's layer [`Shape`]s, the [`Profile`] and the [`Training`]
//! settings. For a configuration ([`Resources`] and one [`LayerConfig`] per layer) and the
//! remote traffic between adjacent layers ([`Traffic`], which the mapping of segments to
//! workers decides, see [`crate::mapping`]) it computes:
//!
//! - per segment and sample: feed-forward compute `U_f` (eq. 5, [`Model::compute`]),
//!   back-propagation compute `U_b` (section 4.1.2), weight-update compute `U_w` (eq. 8),
//!   each times the interference `C_interf(H)` (eq. 9), with `C_muladd` times the cache
//!   factor of the segment's working set ([`Model::working_set`]); remote activations
//!   `M_f` (eq. 6) and error terms `M_b` (eq. 7) over a per-thread bandwidth `C_nbw / H`
//!   with latency `C_ncost(H)` (eq. 9, [`comm_time`]);
//! - the data parallelism degree `Q(l) = H(l) × R(l) × N_mr` (sections 4.2.1-4.2.3);
//! - the parameter-server reads as NIC sharing ([`Model::ps_read`]): `k` replicas read at
//!   once ([`Model::reads_at_once`], `1 + alpha × (N_mr − 1)`), each at `min(N_wr, N_ps / k)`
//!   links (eq. 11 at `k = 1`, eq. 10 at `k = N_mr`), and the epoch's reads are served `k`
//!   at a time ([`Model::transfers_per_epoch`]);
//! - `T_epoch = M_w × N_sample / (k × N_read) + Σ_l [U_f + M_f + U_b + M_b + U_w] × N_sample / Q(l)`
//!   ([`Model::estimate`]); at `k = 1` the paper's.
//!
//! Where the paper is silent, this model chooses (and the tests pin down):
//! - the slowest segment decides a layer's time; segments are stripes of whole [`Shape::rows`]
//!   (neurons of a fully connected layer, kernels, i.e. output channels, of a convolution,
//!   channels of a pooling layer), so the slowest holds `ceil(rows / P)` rows. `M_f` and
//!   `M_b` are each taken at their own slowest segment;
//! - a convolution's segment reads all of the layer below (every kernel reads every input
//!   channel, [`Connectivity::Full`]); a pooling segment reads the same channels below and no
//!   more (`Local` with no halo). The paper stripes by output rows for clarity and notes its
//!   approach applies to any partitioning; this is the DNN app's (Krizhevsky's two-GPU split);
//! - no remote value means no message: `M = 0`, not `C_ncost`;
//! - the first layer reads its input locally (no `M_f`); the top layer computes its error
//!   terms from the labels (no `M_b`, and no `W'` in `U_b`);
//! - `U_b` uses `W'(l, p)`, the connections from layer `l + 1` into segment `p`, i.e. the
//!   connections of layer `l + 1` divided like layer `l`'s rows;
//! - a replicated layer keeps `R(l)` copies of its weights, so it reads `R(l) × W(l)` from the
//!   parameter servers (section 6.4: replication "incurs twice the weights communication");
//!   `W(l)` counts parameters (a convolution's shared kernels once), in bits;
//! - `C_muladd` depends on the layer's kind where the profile measured it apart
//!   ([`Profile::muladd`]: convolution through im2col and GEMM, pooling's window loops);
//!   the back-propagation through layer `l + 1`'s connections costs layer `l + 1`'s;
//! - a pooling layer has no activation: no `C_act` in its `U_f`, no `C_err` in its `U_b`;
//!   a layer without weights (pooling) has no `U_w`;
//! - `N_write` costs nothing: writes are asynchronous (section 4.2.3), unless the training
//!   settings make them synchronous;
//! - a worker's threads share one copy of its weights: it reads them once, at the NIC's
//!   `C_nbw(1)`, and they count once in its working set.
//!
//! This module knows nothing of the search; it evaluates one configuration.

use serde::{Deserialize, Serialize};

use crate::spec::{out_size, Layer, LayerKind, Network, Profile, Training};

/// How a layer's segments depend on the layer below.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Connectivity {
    /// Every segment reads every value below (fully connected, softmax, and convolution:
    /// each kernel reads every input channel).
    Full,
    /// A stripe reads the same stripe below (the same fraction of its rows) plus `halo`, a
    /// further fraction of the rows below. Pooling, striped by channel, has `halo` 0 (a
    /// stripe of output rows would need `(window − stride) / input width`).
    Local {
        /// The extra fraction of the rows below a stripe reads.
        halo: f64,
    },
}

/// What the model needs of one layer, derived from its [`Layer`] description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Layer name.
    pub name: String,
    /// Layer kind: which `C_muladd` its connections cost ([`Profile::muladd`]), and
    /// whether it has an activation (pooling has none).
    pub kind: LayerKind,
    /// Neurons (outputs) per sample.
    pub neurons: f64,
    /// The whole units a partition divides, and so the most partitions the layer can have:
    /// neurons (fully connected, softmax), kernels, i.e. output channels (convolution), or
    /// channels (pooling).
    pub rows: u64,
    /// Connections into the layer, `Σ_p W(l, p)`: multiply-adds per sample.
    pub connections: f64,
    /// Trainable parameters (what the parameter servers hold for this layer).
    pub params: f64,
    /// Bits per activation and error term.
    pub bits: f64,
    /// Values of the layer below (its neurons, or the network's input) per sample.
    pub below: f64,
    /// Dependence on the layer below.
    pub connectivity: Connectivity,
}

/// The [`Shape`] of every layer of `network` (validated), bottom first.
pub fn shapes(network: &Network) -> Vec<Shape> {
    let (mut channels, mut size) = (network.input.channels, network.input.size);
    let mut out = Vec::with_capacity(network.layers.len());
    for layer in &network.layers {
        let below = channels as f64 * (size * size) as f64;
        let kind = layer.kind();
        let shape = match layer {
            Layer::FullyConnected {
                name,
                neurons,
                bits,
            }
            | Layer::Softmax {
                name,
                neurons,
                bits,
            } => {
                let n = *neurons as f64;
                (channels, size) = (*neurons, 1);
                Shape {
                    name: name.clone(),
                    kind,
                    neurons: n,
                    rows: *neurons,
                    connections: n * below,
                    params: n * below,
                    bits: f64::from(*bits),
                    below,
                    connectivity: Connectivity::Full,
                }
            }
            Layer::Convolution {
                name,
                out_channels,
                kernel,
                stride,
                padding,
                bits,
            } => {
                let o = out_size(size, *kernel, *stride, *padding);
                let n = (*out_channels * o * o) as f64;
                let taps = channels as f64 * (kernel * kernel) as f64;
                (channels, size) = (*out_channels, o);
                // Segments of whole kernels: each output channel reads every channel below.
                Shape {
                    name: name.clone(),
                    kind,
                    neurons: n,
                    rows: *out_channels,
                    connections: n * taps,
                    params: *out_channels as f64 * taps,
                    bits: f64::from(*bits),
                    below,
                    connectivity: Connectivity::Full,
                }
            }
            Layer::Pooling {
                name,
                window,
                stride,
                padding,
                bits,
            } => {
                let o = out_size(size, *window, *stride, *padding);
                let n = channels as f64 * (o * o) as f64;
                size = o;
                // Segments of whole channels, each reading the same channels below.
                Shape {
                    name: name.clone(),
                    kind,
                    neurons: n,
                    rows: channels,
                    connections: n * (window * window) as f64,
                    params: 0.0,
                    bits: f64::from(*bits),
                    below,
                    connectivity: Connectivity::Local { halo: 0.0 },
                }
            }
        };
        out.push(shape);
    }
    out
}

/// The resources of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Resources {
    /// `N_ps`: parameter servers.
    pub parameter_servers: u32,
    /// `N_mr`: model replicas.
    pub replicas: u32,
    /// `N_wr`: workers per model replica.
    pub workers: u32,
}

impl Resources {
    /// Machines used: `N_ps + N_mr × N_wr` (C1 bounds it by N).
    pub fn machines(&self) -> u32 {
        self.parameter_servers + self.replicas * self.workers
    }

    /// Parses the paper's `W/R/PS` (Table 1: workers per replica, replicas, parameter
    /// servers), e.g. `2/9/2`, each at least 1; the error says what is wrong with `text`.
    pub fn parse_wrps(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.trim().split('/').collect();
        let [w, r, ps] = parts.as_slice() else {
            return Err(format!(
                "`{text}` is not W/R/PS (workers per replica/replicas/parameter servers, e.g. 2/9/2)"
            ));
        };
        let count = |what: &str, s: &str| match s.trim().parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!(
                "`{text}`: {what} `{s}` is not a whole number of at least 1"
            )),
        };
        Ok(Self {
            workers: count("W (workers per replica)", w)?,
            replicas: count("R (replicas)", r)?,
            parameter_servers: count("PS (parameter servers)", ps)?,
        })
    }

    /// The paper's `W/R/PS` notation of these resources.
    pub fn wrps(&self) -> String {
        format!(
            "{}/{}/{}",
            self.workers, self.replicas, self.parameter_servers
        )
    }
}

/// One layer's choices inside a model replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayerConfig {
    /// `P(l)`: segments (stripes) the layer is partitioned into.
    pub partitions: u32,
    /// `R(l)`: copies of the layer, each training a share of the samples.
    pub replications: u32,
    /// `H(l)`: threads per segment, each training its own sample (C2: at most K).
    pub threads: u32,
}

impl LayerConfig {
    /// Workers the layer occupies: `P(l) × R(l)` (C3: each segment copy on its own worker).
    pub fn workers(&self) -> u32 {
        self.partitions * self.replications
    }
}

/// Remote values per sample between layer `l − 1` and layer `l`, at the slowest segments.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Traffic {
    /// `A(l, p)`: remote activations the slowest segment of layer `l` receives.
    pub activations: f64,
    /// `E(l − 1, p)`: remote error terms the slowest segment of layer `l − 1` receives.
    pub errors: f64,
}

/// Seconds per epoch by component.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Components {
    /// Feed-forward compute, `U_f`.
    pub uf: f64,
    /// Feed-forward communication (remote activations), `M_f`.
    pub mf: f64,
    /// Back-propagation compute, `U_b`.
    pub ub: f64,
    /// Back-propagation communication (remote error terms), `M_b`.
    pub mb: f64,
    /// Weight-update compute, `U_w`.
    pub uw: f64,
    /// Parameter-server reads, `M_w × N_sample / N_read`.
    pub mw: f64,
}

impl Components {
    /// The sum of the components.
    pub fn total(&self) -> f64 {
        self.uf + self.mf + self.ub + self.mb + self.uw + self.mw
    }

    /// Adds `other` component by component.
    pub fn add(&mut self, other: &Components) {
        self.uf += other.uf;
        self.mf += other.mf;
        self.ub += other.ub;
        self.mb += other.mb;
        self.uw += other.uw;
        self.mw += other.mw;
    }
}

/// One layer's share of the epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerEstimate {
    /// Layer name.
    pub name: String,
    /// Its seconds per epoch by component.
    pub seconds: Components,
}

/// The estimated epoch time of a configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// `T_epoch` in seconds.
    pub epoch_s: f64,
    /// The epoch by component, summed over layers.
    pub components: Components,
    /// The epoch by layer.
    pub layers: Vec<LayerEstimate>,
}

/// Per-sample compute of one segment (eqs. 5, 7, 8 before interference).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Compute {
    /// `U_f(l, p)`, eq. 5.
    pub uf: f64,
    /// `U_b(l, p)`, section 4.1.2.
    pub ub: f64,
    /// `U_w(l, p)`, eq. 8.
    pub uw: f64,
}

/// Time to receive `count` remote values of `bits` bits with `threads` threads sharing the
/// NIC (eqs. 6, 7 with eq. 9): `C_ncost(H) + count × bits / C_nbw(H)`, and 0 when nothing
/// is remote.
pub fn comm_time(profile: &Profile, count: f64, bits: f64, threads: u32) -> f64 {
    if count <= 0.0 {
        0.0
    } else {
        profile.latency(threads) + count * bits / profile.bandwidth(threads)
    }
}

/// The model of one network on one profile with one set of training settings.
#[derive(Debug, Clone)]
pub struct Model {
    shapes: Vec<Shape>,
    profile: Profile,
    training: Training,
}

impl Model {
    /// A model of `network` (validated) on `profile` with `training`.
    pub fn new(network: &Network, profile: &Profile, training: &Training) -> Self {
        Self::from_shapes(shapes(network), profile.clone(), training.clone())
    }

    /// A model from layer shapes directly (tests build small random networks this way).
    pub fn from_shapes(shapes: Vec<Shape>, profile: Profile, training: Training) -> Self {
        Self {
            shapes,
            profile,
            training,
        }
    }

    /// The layer shapes, bottom first.
    pub fn shapes(&self) -> &[Shape] {
        &self.shapes
    }

    /// The hardware profile.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The training settings.
    pub fn training(&self) -> &Training {
        &self.training
    }

    /// The fraction of layer `l`'s rows its slowest segment holds with `partitions` stripes.
    pub fn segment_fraction(&self, l: usize, partitions: u32) -> f64 {
        let rows = self.shapes[l].rows;
        rows.div_ceil(u64::from(partitions)) as f64 / rows as f64
    }

    /// The working set in bytes of the slowest segment of layer `l` with `partitions`
    /// stripes and `threads` threads, multiplying `weights` of its parameters (its own, or
    /// for back-propagation layer `l + 1`'s into it): those weights once (the threads share
    /// the machine's copy) and, per thread, one sample's input values read and output values
    /// written, at the layer's bits per value. It picks the cost per multiply-add on the
    /// profile's cache curve ([`Profile::working_set_factor`]).
    pub fn working_set(&self, l: usize, partitions: u32, threads: u32, weights: f64) -> f64 {
        let s = &self.shapes[l];
        let f = self.segment_fraction(l, partitions);
        let inputs = match s.connectivity {
            Connectivity::Full => s.below,
            Connectivity::Local { halo } => s.below * (f + halo).min(1.0),
        };
        let per_thread = inputs + s.neurons * f;
        (weights * f + f64::from(threads.max(1)) * per_thread) * s.bits / 8.0
    }

    /// Per-sample compute of the slowest segment of layer `l` with `partitions` stripes and
    /// `threads` threads, before interference: eq. 5 (`U_f = C_muladd × W(l,p) + C_act ×
    /// N_neuron(l,p)`), section 4.1.2 (`U_b = C_muladd × W'(l,p) + C_err × N_neuron(l,p)`),
    /// eq. 8 (`U_w = C_muladd × W(l,p)`). `C_muladd` is that of the layer's kind
    /// ([`Profile::muladd`]; `W'` at layer `l + 1`'s) times the cache factor of the weights
    /// multiplied ([`Model::working_set`]); a pooling layer has no `C_act` or `C_err` term,
    /// a layer without weights no `U_w`.
    pub fn compute(&self, l: usize, partitions: u32, threads: u32) -> Compute {
        let s = &self.shapes[l];
        let f = self.segment_fraction(l, partitions);
        let p = &self.profile;
        let own = p.working_set_factor(self.working_set(l, partitions, threads, s.params));
        let muladd = p.muladd(s.kind) * own;
        let w = s.connections * f;
        // Error terms come back through layer l + 1's connections, at its kind's cost and
        // the cache factor of its weights into this segment.
        let back = self.shapes.get(l + 1).map_or(0.0, |up| {
            let ws = self.working_set(l, partitions, threads, up.params);
            p.muladd(up.kind) * p.working_set_factor(ws) * up.connections * f
        });
        // A pooling layer has no activation function (and so no error function), and a
        // layer without weights has nothing to update.
        let n = if s.kind == LayerKind::Pooling {
            0.0
        } else {
            s.neurons * f
        };
        Compute {
            uf: muladd * w + p.c_act_s * n,
            ub: back + p.c_err_s * n,
            uw: if s.params > 0.0 { muladd * w } else { 0.0 },
        }
    }

    /// `W(l)` in bits as the parameter servers send it to a replica: `R(l)` copies of the
    /// layer's parameters, each of the layer's bits per value.
    fn weight_bits(&self, l: usize, cfg: &LayerConfig) -> f64 {
        let s = &self.shapes[l];
        s.params * s.bits * f64::from(cfg.replications)
    }

    /// How many replicas read their weights at once: `1 + alpha × (N_mr − 1)`, from eq.
    /// 11's best case (`alpha = 0`: "no overlapped time among multiple replicas") to eq.
    /// 10's worst (`alpha = 1`: all replicas at once).
    pub fn reads_at_once(&self, res: &Resources) -> f64 {
        1.0 + self.profile.ps_read_alpha * f64::from(res.replicas.max(1) - 1)
    }

    /// One replica's read of layer `l`'s weights while [`Model::reads_at_once`] replicas
    /// read: `C_ncost + W(l) / (C_nbw × min(N_wr, N_ps / k))`. The replica's `N_wr` NICs
    /// bound it (eq. 11's "the available bandwidth is bounded by the smaller of the
    /// parameter server bandwidth and model replica bandwidth", §6.2.2), and so do the
    /// servers' `N_ps` NICs, shared by the `k` replicas reading. A worker's threads share one
    /// copy of its weights, so the read is one stream at the NIC's `C_nbw(1)`, not a
    /// thread's `C_nbw(H)`. With `k = 1` it is eq. 11; with `k = N_mr` and one server, eq.
    /// 10. 0 for a layer without weights.
    pub fn ps_read(&self, l: usize, cfg: &LayerConfig, res: &Resources) -> f64 {
        let bits = self.weight_bits(l, cfg);
        if bits == 0.0 {
            return 0.0;
        }
        let p = &self.profile;
        let servers = f64::from(res.parameter_servers.max(1)) / self.reads_at_once(res);
        let links = f64::from(res.workers.max(1)).min(servers);
        p.latency(1) + bits / (p.bandwidth(1) * links)
    }

    /// `N_sample / Q(l)` with `Q(l) = H(l) × R(l) × N_mr`.
    fn per_epoch(&self, cfg: &LayerConfig, res: &Resources) -> f64 {
        let q = f64::from(cfg.threads) * f64::from(cfg.replications) * f64::from(res.replicas);
        self.training.n_sample as f64 / q
    }

    /// Weight transfers per epoch on the critical path: the epoch's `N_sample / N_read`
    /// reads (plus, with [`Training::synchronous_writes`], its `N_sample / N_write` writes),
    /// served [`Model::reads_at_once`] at a time. With reads one at a time this is the
    /// paper's `M_w × N_sample / N_read`; with all `N_mr` at once, each replica's
    /// `N_sample / (N_mr × N_read)` reads.
    pub fn transfers_per_epoch(&self, res: &Resources) -> f64 {
        let t = &self.training;
        let n = t.n_sample as f64;
        let writes = if t.synchronous_writes.unwrap_or(false) {
            n / t.n_write as f64
        } else {
            0.0
        };
        (n / t.n_read as f64 + writes) / self.reads_at_once(res)
    }

    /// Layer `l`'s epoch seconds that depend on it alone: compute (eqs. 5, 7, 8 times eq.
    /// 9's interference, over `Q(l)`) and its share of the parameter-server transfers.
    pub fn node(&self, l: usize, cfg: &LayerConfig, res: &Resources) -> Components {
        let c = self.compute(l, cfg.partitions, cfg.threads);
        let scale = self.profile.interference(cfg.threads) * self.per_epoch(cfg, res);
        let reads = self.transfers_per_epoch(res);
        Components {
            uf: c.uf * scale,
            ub: c.ub * scale,
            uw: c.uw * scale,
            mw: self.ps_read(l, cfg, res) * reads,
            ..Components::default()
        }
    }

    /// The epoch seconds of the traffic between layer `l − 1` (`lower`) and layer `l`
    /// (`upper`): `(M_f` of layer `l`, `M_b` of layer `l − 1)`, each over its layer's `Q`.
    pub fn edge(
        &self,
        l: usize,
        lower: &LayerConfig,
        upper: &LayerConfig,
        res: &Resources,
        t: &Traffic,
    ) -> (f64, f64) {
        (
            self.edge_forward(l, upper, res, t.activations),
            self.edge_backward(l, lower, res, t.errors),
        )
    }

    /// Per sample: [`comm_time`] with the latency shared by the samples of one message
    /// ([`Training::batch`]).
    fn per_sample_comm(&self, count: f64, bits: f64, threads: u32) -> f64 {
        if count <= 0.0 {
            return 0.0;
        }
        let batch = self.training.batch.unwrap_or(1).max(1) as f64;
        self.profile.latency(threads) / batch + count * bits / self.profile.bandwidth(threads)
    }

    /// `M_f(l)` over an epoch for `activations` remote activations per sample.
    pub fn edge_forward(
        &self,
        l: usize,
        upper: &LayerConfig,
        res: &Resources,
        activations: f64,
    ) -> f64 {
        let bits = self.shapes[l - 1].bits;
        self.per_sample_comm(activations, bits, upper.threads) * self.per_epoch(upper, res)
    }

    /// `M_b(l − 1)` over an epoch for `errors` remote error terms per sample.
    pub fn edge_backward(
        &self,
        l: usize,
        lower: &LayerConfig,
        res: &Resources,
        errors: f64,
    ) -> f64 {
        let bits = self.shapes[l].bits;
        self.per_sample_comm(errors, bits, lower.threads) * self.per_epoch(lower, res)
    }

    /// `T_epoch` of a configuration, with `traffic[l − 1]` the traffic between layers
    /// `l − 1` and `l` (so `traffic.len() == layers.len() − 1`).
    pub fn estimate(
        &self,
        res: &Resources,
        layers: &[LayerConfig],
        traffic: &[Traffic],
    ) -> Estimate {
        let mut per_layer: Vec<Components> = (0..layers.len())
            .map(|l| self.node(l, &layers[l], res))
            .collect();
        for l in 1..layers.len() {
            let (mf, mb) = self.edge(l, &layers[l - 1], &layers[l], res, &traffic[l - 1]);
            per_layer[l].mf += mf;
            per_layer[l - 1].mb += mb;
        }
        let mut components = Components::default();
        for c in &per_layer {
            components.add(c);
        }
        Estimate {
            epoch_s: components.total(),
            components,
            layers: per_layer
                .into_iter()
                .zip(&self.shapes)
                .map(|(seconds, s)| LayerEstimate {
                    name: s.name.clone(),
                    seconds,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
