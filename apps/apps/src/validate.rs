//! The performance model checked against measured runs (`iterstore plan --validate`): the
//! configurations of the partitioned MLP it runs ([`configs`]), each one's estimate by the
//! model ([`Config::estimate`]), the rank correlation of estimates and measurements
//! ([`spearman`]) and the chart ([`chart_svg`]). The running itself is the CLI's.
//!
//! **How a configuration maps onto the model.** Every process is one machine with one
//! worker and one shard (`K = 1`, one thread per segment copy): the first `N_mr × N_wr`
//! are the replicas' workers, the last `N_ps` the parameter servers (the weights are kept
//! on their shards, `Cluster::create_table_on`; their workers stay idle), as the model
//! has them. A replica reads every mini-batch by default, so `N_read` is its share of a
//! mini-batch (`batch / N_mr`, rounded up), or a multiple of it.

use std::fmt::Write as _;

use iterstore_perf::optimizer::evaluate;
use iterstore_perf::spec::FORMAT_VERSION;
use iterstore_perf::{Estimate, LayerConfig, Model, Profile, Resources, Training};

use iterstore_algo::dnn::stack::mlp_network;

/// One configuration `plan --validate` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// A short name for tables and the chart.
    pub name: String,
    /// `N_mr`.
    pub replicas: usize,
    /// `N_wr`.
    pub replica_workers: usize,
    /// `N_ps`: parameter-server processes.
    pub servers: usize,
    /// `P(l)` per weight layer.
    pub partitions: Vec<usize>,
    /// `R(l)` per weight layer.
    pub replications: Vec<usize>,
    /// A replica reads (and writes) every this many of its mini-batch shares.
    pub sync_every: usize,
}

impl Config {
    /// Processes (machines) it runs on: `N_ps + N_mr × N_wr`, one worker and one shard
    /// each.
    pub fn processes(&self) -> usize {
        self.servers + self.replicas * self.replica_workers
    }

    /// `N_ps`.
    pub fn parameter_servers(&self) -> usize {
        self.servers
    }

    /// `N_read` (= `N_write`) in samples, for mini-batches of `batch` over all replicas.
    pub fn n_read(&self, batch: usize) -> usize {
        batch.div_ceil(self.replicas) * self.sync_every
    }

    /// The model's estimate of one epoch of `n_sample` samples on `profile` for an MLP of
    /// `sizes` (inputs, hidden layers, classes) with mini-batches of `batch`.
    ///
    /// The training settings are the app's: a message between segments carries a copy's
    /// share of the mini-batch, and writes are synchronous (a CLOCK sends them and the
    /// next read needs them applied).
    pub fn estimate(
        &self,
        sizes: &[usize],
        profile: &Profile,
        n_sample: usize,
        batch: usize,
    ) -> Estimate {
        let n_read = self.n_read(batch) as u64;
        let training = Training {
            version: FORMAT_VERSION,
            n_sample: n_sample as u64,
            n_read,
            n_write: n_read,
            batch: Some(batch.div_ceil(self.replicas) as u64),
            synchronous_writes: Some(true),
            sources: Default::default(),
        };
        let model = Model::new(&mlp_network(sizes), profile, &training);
        let resources = Resources {
            parameter_servers: self.parameter_servers() as u32,
            replicas: self.replicas as u32,
            workers: self.replica_workers as u32,
        };
        let layers: Vec<LayerConfig> = self
            .partitions
            .iter()
            .zip(&self.replications)
            .map(|(&p, &r)| LayerConfig {
                partitions: p as u32,
                replications: r as u32,
                threads: 1,
            })
            .collect();
        evaluate(&model, &resources, &layers).estimate
    }

    /// `N_ps/N_mr/N_wr P.. R.. sync` in a line.
    pub fn describe(&self) -> String {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        format!(
            "N_ps {} N_mr {} N_wr {} P {} R {} read/write every {} share(s)",
            self.parameter_servers(),
            self.replicas,
            self.replica_workers,
            list(&self.partitions),
            list(&self.replications),
            self.sync_every
        )
    }
}

/// The configurations of an MLP of `layers` weight layers (at least 2) that `plan
/// --validate` runs, on at most 5 machines: different `N_ps`, `N_mr`, `N_wr`, partitions
/// and synchronisation rates (8, the paper's count).
pub fn configs(layers: usize) -> Vec<Config> {
    assert!(layers >= 2, "an MLP with a hidden layer");
    // `hidden` for the hidden layers, `out` for the softmax.
    let per = |hidden: usize, out: usize| {
        let mut v = vec![hidden; layers - 1];
        v.push(out);
        v
    };
    let c = |name: &str, servers, replicas, replica_workers, p: Vec<usize>, r: Vec<usize>, sync| {
        Config {
            name: name.into(),
            replicas,
            replica_workers,
            servers,
            partitions: p,
            replications: r,
            sync_every: sync,
        }
    };
    // Chosen so that the model's epoch times (on links, with the servers' links the
    // bottleneck) lie at least a factor 1.3 apart: a ranking of near-ties would be noise.
    vec![
        c("4 replicas, 1 server", 1, 4, 1, per(1, 1), per(1, 1), 1),
        c("3 replicas, 1 server", 1, 3, 1, per(1, 1), per(1, 1), 1),
        c("2 replicas, 1 server", 1, 2, 1, per(1, 1), per(1, 1), 1),
        c("3 replicas, 2 servers", 2, 3, 1, per(1, 1), per(1, 1), 1),
        c("1 replica, 1 server", 1, 1, 1, per(1, 1), per(1, 1), 1),
        c(
            "1 replica of 2, 2 servers",
            2,
            1,
            2,
            per(2, 1),
            per(1, 1),
            1,
        ),
        c("2 replicas, sync every 8", 1, 2, 1, per(1, 1), per(1, 1), 8),
        c(
            "1 replica of 2, 2 servers, sync every 4",
            2,
            1,
            2,
            per(2, 1),
            per(1, 1),
            4,
        ),
    ]
}

/// `profile` for a machine of `cores` cores when it was measured on one unthrottled core:
/// compute and latency `1 / cores` times as long, bandwidth `cores` times as high (the
/// emulated links are loopback, whose cost is CPU time).
pub fn scaled(profile: &Profile, cores: f64) -> Profile {
    let mut p = profile.clone();
    let slower = 1.0 / cores;
    p.c_muladd_s *= slower;
    for c in [
        &mut p.c_muladd_by_kind_s.convolution,
        &mut p.c_muladd_by_kind_s.pooling,
    ]
    .into_iter()
    .flatten()
    {
        *c *= slower;
    }
    p.c_act_s *= slower;
    p.c_err_s *= slower;
    for c in &mut p.c_ncost_s {
        *c *= slower;
    }
    p.c_nbw_bits_per_s *= cores;
    for b in p.c_nbw_per_thread_bits_per_s.iter_mut().flatten() {
        *b *= cores;
    }
    p
}

/// The `alpha` in `[0, 1]` (to 0.01) whose estimates `estimate(alpha)` miss `measured` by
/// the least largest relative error, with that error.
pub fn fit_alpha(measured: &[f64], estimate: impl Fn(f64) -> Vec<f64>) -> (f64, f64) {
    (0..=100)
        .map(|k| {
            let alpha = f64::from(k) / 100.0;
            let worst = estimate(alpha)
                .iter()
                .zip(measured)
                .map(|(e, m)| ((e - m) / m).abs())
                .fold(0.0, f64::max);
            (alpha, worst)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .expect("101 candidates")
}

/// Spearman's rank correlation of `a` and `b` (average ranks for ties); 1 when they
/// order the items alike: the performance model crate's ([`iterstore_perf::rank`]).
pub use iterstore_perf::rank::spearman;

/// A scatter chart of `(name, estimated, measured)` seconds: each configuration a point,
/// the diagonal where the estimate equals the measurement and the ±25 % band around it.
pub fn chart_svg(title: &str, points: &[(String, f64, f64)]) -> String {
    let (w, h, m) = (640.0, 520.0, 60.0);
    let top = points
        .iter()
        .flat_map(|p| [p.1, p.2])
        .fold(0.0f64, f64::max)
        * 1.1;
    let top = if top > 0.0 { top } else { 1.0 };
    let x = |v: f64| m + v / top * (w - 2.0 * m);
    let y = |v: f64| h - m - v / top * (h - 2.0 * m);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<clipPath id="plot"><rect x="{m}" y="{m}" width="{}" height="{}"/></clipPath>"#,
        w - 2.0 * m,
        h - 2.0 * m
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    // The ±25 % band and the diagonal.
    let _ = writeln!(
        s,
        r##"<polygon points="{},{} {},{} {},{} {},{}" fill="#e8f0fe" clip-path="url(#plot)"/>"##,
        x(0.0),
        y(0.0),
        x(top),
        y(top * 1.25),
        x(top),
        y(top * 0.75),
        x(0.0),
        y(0.0)
    );
    let _ = writeln!(
        s,
        r##"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#888" stroke-dasharray="4" clip-path="url(#plot)"/>"##,
        x(0.0),
        y(0.0),
        x(top),
        y(top)
    );
    let _ = writeln!(
        s,
        r##"<line x1="{m}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{m}" y1="{}" x2="{m}" y2="{m}" stroke="black"/>"##,
        h - m,
        w - m,
        h - m,
        h - m
    );
    for k in 0..=4 {
        let v = top * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{v:.2}</text><text x="{}" y="{}" text-anchor="end">{v:.2}</text>"#,
            x(v),
            h - m + 16.0,
            m - 6.0,
            y(v) + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">estimated epoch (s)</text>"#,
        w / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">measured epoch (s)</text>"#,
        h / 2.0,
        h / 2.0
    );
    for (i, (name, est, meas)) in points.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="#1a73e8"><title>{}: estimated {est:.3} s, measured {meas:.3} s</title></circle><text x="{:.1}" y="{:.1}">{}</text>"##,
            x(*est),
            y(*meas),
            escape(name),
            x(*est) + 6.0,
            y(*meas) - 4.0,
            i + 1
        );
    }
    for (i, (name, _, _)) in points.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}: {}</text>"#,
            m + 10.0,
            m + 14.0 * i as f64,
            i + 1,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_slows_compute_and_links_and_alpha_fits_the_measurements() {
        let p = iterstore_perf::builtin::example_profile();
        let half = scaled(&p, 0.5);
        assert!((half.c_muladd_s - 2.0 * p.c_muladd_s).abs() < 1e-20);
        assert!((half.c_nbw_bits_per_s - 0.5 * p.c_nbw_bits_per_s).abs() < 1e-3);
        assert!((half.c_ncost_s[0] - 2.0 * p.c_ncost_s[0]).abs() < 1e-15);
        // Estimates 10 + 10 alpha against measurements of 13: alpha 0.3 fits exactly.
        let (alpha, worst) = fit_alpha(&[13.0, 13.0], |a| vec![10.0 + 10.0 * a; 2]);
        assert!(
            (alpha - 0.3).abs() < 1e-9 && worst < 1e-9,
            "{alpha} {worst}"
        );
    }

    #[test]
    fn spearman_is_one_for_the_same_order_and_minus_one_for_the_reverse() {
        let a = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&a, &[10.0, 20.0, 30.0, 40.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        let swapped = spearman(&a, &[1.0, 3.0, 2.0, 4.0]);
        assert!((swapped - 0.8).abs() < 1e-12, "{swapped}");
    }

    #[test]
    fn the_configurations_differ_in_every_dimension_and_fit_four_machines() {
        let all = configs(3);
        assert!(all.len() >= 8);
        let distinct = |f: &dyn Fn(&Config) -> String| {
            let mut v: Vec<String> = all.iter().map(f).collect();
            v.sort();
            v.dedup();
            v.len()
        };
        assert!(distinct(&|c| c.parameter_servers().to_string()) >= 2);
        assert!(distinct(&|c| c.replicas.to_string()) >= 3);
        assert!(distinct(&|c| c.replica_workers.to_string()) >= 2);
        assert!(distinct(&|c| format!("{:?}", c.partitions)) >= 2);
        assert!(distinct(&|c| c.sync_every.to_string()) >= 2);
        for c in &all {
            assert!(c.processes() <= 5, "{}", c.name);
            for (p, r) in c.partitions.iter().zip(&c.replications) {
                assert!(p * r <= c.replica_workers, "{}", c.name);
            }
        }
    }

    #[test]
    fn estimates_are_positive_and_more_machines_cut_compute() {
        let profile = iterstore_perf::builtin::example_profile();
        let sizes = [784, 512, 256, 10];
        let all = configs(3);
        let est: Vec<f64> = all
            .iter()
            .map(|c| c.estimate(&sizes, &profile, 6000, 64).epoch_s)
            .collect();
        assert!(est.iter().all(|&e| e > 0.0 && e.is_finite()), "{est:?}");
        assert!(
            est[4] > est[6],
            "syncing every 8 mini-batches beats every one: {est:?}"
        );
        let svg = chart_svg(
            "t",
            &all.iter()
                .zip(&est)
                .map(|(c, &e)| (c.name.clone(), e, e * 1.1))
                .collect::<Vec<_>>(),
        );
        assert!(svg.starts_with("<svg") && svg.contains("4 replicas"));
    }
}
