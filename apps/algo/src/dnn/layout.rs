//! How a partitioned run (an MLP or a CNN) is laid out over the cluster's workers: the
//! configuration the optimizer's plan (or the command line) asks for ([`Partitioning`]),
//! resolved against the network's stages ([`Stack`]) and the number of workers into a
//! [`Layout`].
//!
//! - **Replicas.** The `W` workers form `N_mr` model replicas of `N_wr = W / N_mr`
//!   consecutive global workers each; replica `m` trains on its share of the data
//!   ([`crate::dnn::mlp::epoch_order`] keyed by the replica, as a data-parallel worker is).
//! - **Segments and copies.** Layer `l` (a stage: its units are neurons, kernels or
//!   channels, [`crate::dnn::stack`]) is cut into `P(l)` segments of whole canonical chunks ([`kernels::chunks`]: segment `p` holds
//!   chunks [`partition`]`(G, P, p)` of the `G`), and each segment has `R(l)` copies. Copy
//!   `r` handles the samples of a mini-batch at positions `s ≡ r (mod R(l))` (the
//!   optimizer's model routes samples to copies the same way, [`iterstore_perf::mapping`]).
//!   Copy `(p, r)` runs on replica worker `workers[r × P + p]`, the optimizer's greedy
//!   mapping composed over the layers ([`iterstore_perf::mapping::assign`]); a worker holds
//!   at most one copy of each layer.
//! - **Synchronisation.** A replica READs its weights every `read_every` mini-batches and
//!   UPDATEs its accumulated steps every `write_every` (`N_read` and `N_write` in samples
//!   over the replica's share of a mini-batch, rounded up); 1 and 1 is BSP mini-batch SGD.

use std::fmt;
use std::ops::Range;

use iterstore_perf::mapping::{self, Split};
use iterstore_perf::model::shapes;

#[cfg(doc)]
use super::kernels;
use super::stack::Stack;
use crate::partition;

/// A partitioning as asked for: by a plan file or on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitioning {
    /// `N_mr`: model replicas.
    pub replicas: usize,
    /// `P(l)` per weight layer, input side first.
    pub partitions: Vec<usize>,
    /// `R(l)` per weight layer.
    pub replications: Vec<usize>,
    /// `N_read`: samples between weight reads (0: every mini-batch).
    pub n_read: usize,
    /// `N_write`: samples between weight updates (0: every mini-batch).
    pub n_write: usize,
    /// `N_wr`, when asked for (a plan's): the replicas take the first `N_mr × N_wr` of the
    /// cluster's workers and the others stay idle. Absent: the workers divide evenly into
    /// the replicas.
    pub replica_workers: Option<usize>,
    /// `N_ps`, when asked for: the weights live on the cluster's last `N_ps` server
    /// shards (dedicated parameter-server processes, whose workers stay idle). Absent:
    /// on every shard.
    pub parameter_servers: Option<usize>,
}

impl Partitioning {
    /// `replicas` data-parallel replicas, every layer whole, synchronised every mini-batch.
    pub fn data_parallel(replicas: usize, layers: usize) -> Self {
        Self {
            replicas,
            partitions: vec![1; layers],
            replications: vec![1; layers],
            n_read: 0,
            n_write: 0,
            replica_workers: None,
            parameter_servers: None,
        }
    }

    /// The partitioning a plan chose: its `N_mr`, each layer's `P` and `R`, and its
    /// training settings' `N_read` and `N_write`.
    pub fn from_plan(plan: &iterstore_perf::Plan) -> Self {
        Self {
            replicas: plan.resources.replicas as usize,
            partitions: plan.layers.iter().map(|l| l.partitions as usize).collect(),
            replications: plan
                .layers
                .iter()
                .map(|l| l.replications as usize)
                .collect(),
            n_read: plan.training.n_read as usize,
            n_write: plan.training.n_write as usize,
            replica_workers: Some(plan.resources.workers as usize),
            parameter_servers: Some(plan.resources.parameter_servers as usize),
        }
    }
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        write!(
            f,
            "replicas {} partitions {} replications {} n_read {} n_write {}",
            self.replicas,
            list(&self.partitions),
            list(&self.replications),
            self.n_read,
            self.n_write
        )?;
        if let Some(n) = self.replica_workers {
            write!(f, " replica_workers {n}")?;
        }
        if let Some(n) = self.parameter_servers {
            write!(f, " parameter_servers {n}")?;
        }
        Ok(())
    }
}

/// One weight layer's part of a [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerLayout {
    /// `P`.
    pub partitions: usize,
    /// `R`.
    pub replications: usize,
    /// The canonical chunks of its rows.
    pub chunks: Vec<Range<usize>>,
    /// `workers[r × P + p]`: the replica worker of copy `(p, r)`.
    pub workers: Vec<usize>,
}

impl LayerLayout {
    /// The chunks of segment `p`.
    pub fn segment_chunks(&self, p: usize) -> Range<usize> {
        partition(self.chunks.len(), self.partitions, p)
    }

    /// The rows of segment `p`.
    pub fn segment(&self, p: usize) -> Range<usize> {
        let c = self.segment_chunks(p);
        self.chunks[c.start].start..self.chunks[c.end - 1].end
    }

    /// The replica worker of copy `(p, r)`.
    pub fn worker(&self, p: usize, r: usize) -> usize {
        self.workers[r * self.partitions + p]
    }

    /// The copy `(p, r)` replica worker `k` holds, if any.
    pub fn copy_of(&self, k: usize) -> Option<(usize, usize)> {
        let i = self.workers.iter().position(|&w| w == k)?;
        Some((i % self.partitions, i / self.partitions))
    }
}

/// The positions of a mini-batch of `len` samples that copy `r` of `replications` handles.
pub fn samples(len: usize, replications: usize, r: usize) -> impl Iterator<Item = usize> {
    (r..len).step_by(replications)
}

/// Mini-batches of a replica's share of `batch` (over `replicas`) between two
/// synchronisations every `samples` samples (0: every mini-batch).
fn every(samples: usize, batch: usize, replicas: usize) -> usize {
    let share = batch.div_ceil(replicas).max(1);
    samples.div_ceil(share).max(1)
}

/// A data-parallel run: each replica one worker training the whole network on its share
/// of the data (what a layout that splits no layer runs, [`Layout::data_parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataParallel {
    /// `N_mr`: global workers `0..replicas` train; the others only CLOCK.
    pub replicas: usize,
    /// Mini-batches between weight reads.
    pub read_every: usize,
    /// Mini-batches between weight updates.
    pub write_every: usize,
    /// `N_ps` dedicated shards (the cluster's last ones), if asked for.
    pub parameter_servers: Option<usize>,
}

impl DataParallel {
    /// Every one of `workers` workers a replica, synchronised every mini-batch, the
    /// weights on every shard.
    pub fn every_worker(workers: usize) -> Self {
        Self {
            replicas: workers,
            read_every: 1,
            write_every: 1,
            parameter_servers: None,
        }
    }

    /// The global shards out of `total` that `parameter_servers` dedicated servers hold
    /// the weights on: the last ones, or all; an error if the cluster has fewer.
    pub fn weight_shards(
        parameter_servers: Option<usize>,
        total: usize,
    ) -> Result<std::ops::Range<usize>, String> {
        match parameter_servers {
            None => Ok(0..total),
            Some(n) if n > total => Err(format!(
                "{n} parameter servers, the cluster has {total} shards (--processes x --shards)"
            )),
            Some(n) => Ok(total - n..total),
        }
    }
}

/// A [`Partitioning`] resolved against a network and a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `N_mr`.
    pub replicas: usize,
    /// `N_wr`: workers per replica.
    pub replica_workers: usize,
    /// `N_ps` dedicated shards (the cluster's last ones), if asked for.
    pub parameter_servers: Option<usize>,
    /// Per weight layer.
    pub layers: Vec<LayerLayout>,
    /// Mini-batches between weight reads.
    pub read_every: usize,
    /// Mini-batches between weight updates.
    pub write_every: usize,
}

impl Layout {
    /// Resolves `asked` for the network `stack` on `workers` workers training with
    /// mini-batches of `batch` samples; an error names what does not fit.
    pub fn new(
        asked: &Partitioning,
        stack: &Stack,
        workers: usize,
        batch: usize,
    ) -> Result<Self, String> {
        let layers = stack.len();
        if asked.partitions.len() != layers || asked.replications.len() != layers {
            return Err(format!(
                "{} partitions and {} replications for a network of {layers} layers ({})",
                asked.partitions.len(),
                asked.replications.len(),
                stack.names()
            ));
        }
        if asked.replicas == 0 {
            return Err("at least one replica".into());
        }
        let replica_workers = match asked.replica_workers {
            Some(0) => return Err("replicas of at least one worker".into()),
            Some(want) if asked.replicas * want > workers => {
                return Err(format!(
                    "{} replicas of {want} workers need {} workers, the cluster has {workers} \
                     (--processes x --workers)",
                    asked.replicas,
                    asked.replicas * want
                ));
            }
            Some(want) => want,
            None if !workers.is_multiple_of(asked.replicas) => {
                return Err(format!(
                    "{} replicas do not divide the cluster's {workers} workers",
                    asked.replicas
                ));
            }
            None => workers / asked.replicas,
        };
        if asked.parameter_servers == Some(0) {
            return Err("at least one parameter server".into());
        }
        let mut splits = Vec::with_capacity(layers);
        for (l, stage) in stack.stages.iter().enumerate() {
            let (p, r) = (asked.partitions[l], asked.replications[l]);
            let chunks = stage.chunks().len();
            let name = &stage.name;
            if p == 0 || r == 0 {
                return Err(format!(
                    "layer {l} ({name}): partitions and replications start at 1"
                ));
            }
            if p > chunks {
                return Err(format!(
                    "layer {l} ({name}): {p} partitions of {} units (at most {chunks}: \
                     segments are made of whole chunks, see dnn::kernels::chunks)",
                    stage.units
                ));
            }
            if p * r > replica_workers {
                return Err(format!(
                    "layer {l} ({name}): {p} partitions x {r} replications need {} \
                     workers, a replica has {replica_workers}",
                    p * r
                ));
            }
            splits.push(Split {
                partitions: p as u32,
                replications: r as u32,
            });
        }
        let placed = mapping::assign(&shapes(&stack.network), &splits);
        Ok(Self {
            replicas: asked.replicas,
            replica_workers,
            parameter_servers: asked.parameter_servers,
            layers: (0..layers)
                .map(|l| LayerLayout {
                    partitions: asked.partitions[l],
                    replications: asked.replications[l],
                    chunks: stack.stages[l].chunks(),
                    workers: placed[l].clone(),
                })
                .collect(),
            read_every: every(asked.n_read, batch, asked.replicas),
            write_every: every(asked.n_write, batch, asked.replicas),
        })
    }

    /// Whether global worker `w` is in no replica (it only CLOCKs).
    pub fn is_idle(&self, w: usize) -> bool {
        w >= self.replicas * self.replica_workers
    }

    /// The global shards the weights live on, out of `total`
    /// ([`DataParallel::weight_shards`]).
    pub fn shards(&self, total: usize) -> Result<std::ops::Range<usize>, String> {
        DataParallel::weight_shards(self.parameter_servers, total)
    }

    /// The data-parallel run this layout is, if every replica is one worker holding
    /// whole layers.
    pub fn data_parallel(&self) -> Option<DataParallel> {
        let whole = self
            .layers
            .iter()
            .all(|l| l.partitions == 1 && l.replications == 1);
        (self.replica_workers == 1 && whole).then_some(DataParallel {
            replicas: self.replicas,
            read_every: self.read_every,
            write_every: self.write_every,
            parameter_servers: self.parameter_servers,
        })
    }

    /// The replica of global worker `w`, and its index in the replica.
    pub fn place(&self, w: usize) -> (usize, usize) {
        (w / self.replica_workers, w % self.replica_workers)
    }

    /// The global worker of replica `m`'s worker `k`.
    pub fn global(&self, m: usize, k: usize) -> usize {
        m * self.replica_workers + k
    }

    /// One line per layer of `stack`: `layer l (name): P segment(s) x R copy(ies) on
    /// replica workers [..]`.
    pub fn describe(&self, stack: &Stack) -> Vec<String> {
        self.layers
            .iter()
            .zip(&stack.stages)
            .enumerate()
            .map(|(l, (x, stage))| {
                format!(
                    "layer {l} ({}): {} segment(s) x {} copy(ies) on replica workers {:?}",
                    stage.name, x.partitions, x.replications, x.workers
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnn::Activation;

    fn spec() -> Stack {
        Stack::mlp(&crate::dnn::MlpSpec {
            sizes: vec![20, 40, 12, 5],
            activation: Activation::Relu,
        })
    }

    fn asked(replicas: usize, p: [usize; 3], r: [usize; 3]) -> Partitioning {
        Partitioning {
            replicas,
            partitions: p.to_vec(),
            replications: r.to_vec(),
            n_read: 0,
            n_write: 0,
            replica_workers: None,
            parameter_servers: None,
        }
    }

    #[test]
    fn segments_are_whole_chunks_covering_every_row_once() {
        let l = Layout::new(&asked(1, [4, 3, 1], [1, 1, 2]), &spec(), 4, 8).unwrap();
        for (x, rows) in l.layers.iter().zip([40, 12, 5]) {
            let mut next = 0;
            for p in 0..x.partitions {
                let s = x.segment(p);
                assert_eq!(s.start, next);
                next = s.end;
            }
            assert_eq!(next, rows);
            for (i, &w) in x.workers.iter().enumerate() {
                assert_eq!(x.copy_of(w), Some((i % x.partitions, i / x.partitions)));
            }
        }
        assert_eq!(
            l.layers[0].segment(1),
            10..20,
            "16 chunks of 40 rows, 4 per segment"
        );
    }

    #[test]
    fn copies_split_a_mini_batch_by_position() {
        let all: Vec<Vec<usize>> = (0..3).map(|r| samples(8, 3, r).collect()).collect();
        assert_eq!(all, vec![vec![0, 3, 6], vec![1, 4, 7], vec![2, 5]]);
    }

    #[test]
    fn what_does_not_fit_is_refused_naming_it() {
        let e = |a: Partitioning, workers| Layout::new(&a, &spec(), workers, 8).unwrap_err();
        assert!(e(asked(3, [1, 1, 1], [1, 1, 1]), 4).contains("do not divide"));
        assert!(e(asked(1, [1, 1, 6], [1, 1, 1]), 8).contains("at most 5"));
        assert!(e(asked(2, [2, 2, 1], [1, 2, 1]), 4).contains("need 4 workers"));
        let planned = Partitioning {
            replica_workers: Some(3),
            ..asked(2, [1; 3], [1; 3])
        };
        assert!(e(planned, 4).contains("2 replicas of 3 workers need 6 workers, the cluster has 4"));
        // Planned replicas may leave workers idle; parameter servers take the last shards.
        let planned = Partitioning {
            replica_workers: Some(1),
            parameter_servers: Some(2),
            ..asked(2, [1; 3], [1; 3])
        };
        let l = Layout::new(&planned, &spec(), 3, 8).unwrap();
        assert!(l.is_idle(2) && !l.is_idle(1));
        assert_eq!(l.shards(3), Ok(1..3));
        assert!(l
            .shards(1)
            .unwrap_err()
            .contains("2 parameter servers, the cluster has 1"));
        let mut short = asked(1, [1, 1, 1], [1, 1, 1]);
        short.partitions.pop();
        assert!(e(short, 1).contains("3 layers (l0,l1,l2)"));
    }

    #[test]
    fn read_and_write_every_count_mini_batches_of_the_replica() {
        let mut a = asked(2, [1, 1, 1], [1, 1, 1]);
        (a.n_read, a.n_write) = (70, 40);
        let l = Layout::new(&a, &spec(), 2, 64).unwrap();
        // 32 samples per replica and mini-batch.
        assert_eq!((l.read_every, l.write_every), (3, 2));
        let dp = l.data_parallel().unwrap();
        assert_eq!((dp.replicas, dp.read_every), (2, 3));
        let split = Layout::new(&asked(1, [2, 1, 1], [1; 3]), &spec(), 2, 64).unwrap();
        assert_eq!(split.data_parallel(), None);
        assert_eq!(l.place(1), (1, 0));
    }
}
