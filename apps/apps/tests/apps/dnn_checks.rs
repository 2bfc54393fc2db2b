//! The checks the MLP's and the CNN's app tests share, written once over the network
//! type: the store against the sequential reference, and P processes against one.

use iterstore::{Cluster, Mode};
use iterstore_algo::dnn::DnnConfig;
use iterstore_apps::dnn::DnnOutcome;
use iterstore_apps::{AppConfig, AppError, Observer};
use iterstore_data::{ImageSet, Images};

use crate::util::bsp;

/// A network's `run` (training on a fresh cluster).
type Run<N> = fn(&AppConfig, &DnnConfig, &ImageSet) -> Result<DnnOutcome<N>, AppError>;

/// A network's `run_in` (training on a cluster started elsewhere).
type RunIn<N> = for<'a> fn(
    &mut Cluster,
    &AppConfig,
    &DnnConfig,
    &ImageSet,
    Observer<'a>,
) -> Result<DnnOutcome<N>, AppError>;

/// A network's sequential trainer: `(train, classes, params, workers, epochs)`.
type Reference<N> = fn(&Images, usize, &DnnConfig, usize, usize) -> (N, Vec<f64>);

/// A network's app entry points and sequential reference.
pub(crate) struct NetApp<N> {
    /// Train on a fresh cluster.
    pub(crate) run: Run<N>,
    /// Train on a cluster started elsewhere.
    pub(crate) run_in: RunIn<N>,
    /// The sequential trainer.
    pub(crate) reference: Reference<N>,
}

/// Each epoch's training cross-entropy.
pub(crate) fn losses<N>(out: &DnnOutcome<N>) -> Vec<f64> {
    out.report.iterations.iter().map(|r| r.objective).collect()
}

/// Under BSP, 2 epochs on `workers` workers give the reference's weights bit for bit and
/// its losses to rounding.
pub(crate) fn equals_reference<N: PartialEq>(
    net: &NetApp<N>,
    data: &ImageSet,
    params: &DnnConfig,
    workers: &[usize],
) {
    for &workers in workers {
        let out = (net.run)(&bsp(Mode::Virtual, workers, 2), params, data).unwrap();
        let (want, want_loss) = (net.reference)(&data.train, data.classes, params, workers, 2);
        assert!(
            out.model == want,
            "{workers} workers differ from the reference"
        );
        // The loss is summed in another order (per worker, then over workers).
        for (a, b) in losses(&out).iter().zip(&want_loss) {
            assert!((a - b).abs() <= 1e-9 * b.abs(), "{a} vs {b}");
        }
    }
}

/// In each of `modes`, 2 processes of 1 worker compute the weights and losses of one
/// process of 2 workers.
pub(crate) fn processes_agree<N: PartialEq + Send>(
    net: &NetApp<N>,
    data: &ImageSet,
    params: &DnnConfig,
    modes: &[Mode],
) {
    for &mode in modes {
        let one = (net.run)(&bsp(mode, 2, 2), params, data).unwrap();
        let cfg = bsp(mode, 1, 2);
        let got = on_processes(&cfg, 2, |c| {
            (net.run_in)(c, &cfg, params, data, &mut |_| {})
        });
        for (rank, out) in got.iter().enumerate() {
            assert!(out.model == one.model, "{mode:?}: rank {rank} differs");
            assert_eq!(losses(out), losses(&one), "{mode:?}: rank {rank}");
        }
    }
}

/// `f`'s outcome on each of `processes` processes of one cluster in this OS process
/// (`cfg`'s store configuration); an error of any fails the test.
pub(crate) fn on_processes<N: Send>(
    cfg: &AppConfig,
    processes: usize,
    f: impl Fn(&mut Cluster) -> Result<DnnOutcome<N>, AppError> + Sync,
) -> Vec<DnnOutcome<N>> {
    Cluster::run_local_processes(cfg.store_config(), processes, |c| {
        f(c).map_err(|e| iterstore::Error::app(0, e))
    })
    .unwrap()
}

/// One replica count with each layer's partitions and replications, synchronised every
/// mini-batch, on every worker and shard.
pub(crate) fn split(
    replicas: usize,
    partitions: &[usize],
    replications: &[usize],
) -> iterstore_algo::dnn::Partitioning {
    iterstore_algo::dnn::Partitioning {
        replicas,
        partitions: partitions.to_vec(),
        replications: replications.to_vec(),
        n_read: 0,
        n_write: 0,
        replica_workers: None,
        parameter_servers: None,
    }
}

/// Asserts bit-identical weights and each epoch's loss within 1e-9 (relative; the loss is
/// summed over workers in another order).
pub(crate) fn same<N: PartialEq>(a: &DnnOutcome<N>, b: &DnnOutcome<N>, what: &str) {
    assert!(a.model == b.model, "{what}: the weights differ");
    for (x, y) in losses(a).iter().zip(&losses(b)) {
        assert!((x - y).abs() <= 1e-9 * y.abs(), "{what}: loss {x} vs {y}");
    }
}
