//! PageRank by power iteration on the parameter server, in *delta-propagation* form.
//!
//! **Tables.** `pagerank.rank` (f64) holds vertices in blocks of `B` ([`PageRankParams::block`]):
//! row `b` covers vertices `bB..(b+1)B`, so a worker reads and updates a few hundred
//! contiguous values per store operation instead of one. `pagerank.dangling` (f64, width 1,
//! row 0) holds the global dangling sum `G`. The rank of `v` is `r(v) = S(v) + d·G/N`,
//! where `S(v)` is its entry in the rank table; the math is [`iterstore_algo::pagerank`].
//!
//! **Invariant.** After every completed clock,
//! `S(v) = (1−d)/N + d·Σ_{u→v} p(u)/outdeg(u)` and `G = Σ_{dangling u} p(u)` (plus a
//! one-off `1` before the first iteration), where `p(u)` is the rank the worker holding the
//! edge (or owning the dangling vertex) last *propagated* for `u`. No table is ever reset:
//! each iteration, each worker READs the blocks of its sources (and of the dangling vertices
//! it owns), computes their current ranks, and UPDATEs the target blocks by
//! `d·(r(u) − p(u))/outdeg(u)` summed over its edges (per target, over its in-edges grouped
//! by target, [`InEdges`](iterstore_algo::in_edges::InEdges); one dense UPDATE
//! per touched block), and the dangling row by `Σ (r(u) − p(u))` over its dangling vertices;
//! then it CLOCKs once.
//!
//! **Layout** ([`GraphPartition`]). By default worker `w` holds the edges
//! [`partition`](iterstore_algo::partition)`(E, W, w)` and owns the dangling vertices of the
//! blocks [`partition`](iterstore_algo::partition)`(⌈N/B⌉, W, w)`; every worker then updates
//! most blocks and reads most blocks. With [`GraphPartition::Communities`] the vertices are
//! split by a graph partitioner ([`iterstore_algo::graph_partition`]), each worker holds the
//! in-edges of its own vertices, and the rank table stores each worker's vertices
//! together, grouped by the set of workers that read them: a worker updates only its own
//! blocks and reads few others', which is what lets the store's locality placement keep
//! most rows on the process that uses them. The layout depends only on the graph and the
//! total number of workers, so `P` processes of `W` workers still compute what one process
//! of `P·W` workers does.
//!
//! Under BSP every worker propagates the ranks of the previous iteration, so after `t`
//! iterations `r` is exactly `t` textbook power-iteration steps from `1/N` (networkx's
//! dangling semantics), equal to [`iterstore_algo::pagerank::reference`] up to rounding. Under
//! SSP a stale READ only delays a propagation: the invariant holds whatever was read, so the
//! iteration still converges to the true PageRank.
//!
//! **Initialisation.** Each block is UPDATEd by `(1−d)/N` per vertex by one worker (the
//! first whose edges point into it, so initialisation writes rows the worker updates anyway;
//! else the block's owner), and worker 0 UPDATEs `G` by 1, so that
//! `r = (1−d)/N + d/N = 1/N`; worker 0 withdraws that 1 in its first iteration. **Evaluation** (not timed): the main thread snapshots both tables and reports
//! the L1 change of the ranks.
//!
//! **Output** ([`PageRankOutcome::write_ranks`], the CLI's `--output`): one
//! `label<TAB>rank` line per vertex, sorted by label (numeric labels numerically, before
//! non-numeric ones, which sort as strings).

use std::cmp::Ordering;
use std::io::{self, Write};

use iterstore::{Cluster, Table, Worker};

use super::checkpoint::{self, get_f64s, put_f64s, Cursor, Restart, RunId};
use super::fingerprint;
use super::{
    check_finite, dense, par_build, preprocess, timed, timed_init_run, timed_run, App, AppConfig,
    AppError, Input, IterRecord, Observer, RunReport,
};
use iterstore_algo::pagerank::{check_graph, l1_change, propagate, PageRankConfig};
use iterstore_data::{load_graph, Graph, GraphSpec};
use layout::Layout;
use plan::{init_writers, Plan, Shape};

mod layout;
mod plan;

/// How PageRank splits the graph over the workers (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GraphPartition {
    /// Contiguous ranges of the edges in the file's order; vertices keep their ids.
    #[default]
    Edges,
    /// Vertices split into communities with few edges between them, each worker holding
    /// its vertices' in-edges; what a run over several processes should use.
    Communities,
}

impl GraphPartition {
    /// The partition named `name` (`edges` or `communities`, as [`name`](Self::name)
    /// gives them).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "edges" => Ok(GraphPartition::Edges),
            "communities" => Ok(GraphPartition::Communities),
            other => Err(format!(
                "{other}: pagerank splits its graph by `edges` or `communities`"
            )),
        }
    }

    /// The name the CLI and the run report use.
    pub fn name(self) -> &'static str {
        match self {
            GraphPartition::Edges => "edges",
            GraphPartition::Communities => "communities",
        }
    }
}

/// PageRank's parameters: the algorithm's and the table layout's.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRankParams {
    /// The algorithm's parameters (the damping factor).
    pub config: PageRankConfig,
    /// Vertices per row of the rank table (`B`).
    pub block: usize,
    /// How the graph is split over the workers.
    pub partition: GraphPartition,
}

impl Default for PageRankParams {
    /// Damping 0.85, blocks of 256 vertices, edges split in file order.
    fn default() -> Self {
        Self {
            config: PageRankConfig::default(),
            block: 256,
            partition: GraphPartition::Edges,
        }
    }
}

impl PageRankParams {
    /// Checks the damping factor and the block size.
    pub fn validate(&self) -> Result<(), String> {
        self.config.validate()?;
        if self.block == 0 || self.block > 1 << 20 {
            return Err(format!(
                "pagerank: block {} must be in 1..=1048576",
                self.block
            ));
        }
        Ok(())
    }
}

/// The outcome of a store-backed PageRank run.
#[derive(Debug, Clone)]
pub struct PageRankOutcome {
    /// Timings and objectives.
    pub report: RunReport,
    /// The final rank of every vertex (dense ids).
    pub ranks: Vec<f64>,
}

impl PageRankOutcome {
    /// Writes `label<TAB>rank` lines sorted by label (see the module docs); `labels[v]` names
    /// vertex `v`, and dense ids are used when `labels` is `None`.
    pub fn write_ranks(&self, labels: Option<&[String]>, out: &mut dyn Write) -> io::Result<()> {
        let ids: Vec<String>;
        let labels = match labels {
            Some(l) if l.len() == self.ranks.len() => l,
            Some(l) => {
                return Err(io::Error::other(format!(
                    "{} labels for {} vertices",
                    l.len(),
                    self.ranks.len()
                )))
            }
            None => {
                ids = (0..self.ranks.len()).map(|v| v.to_string()).collect();
                &ids
            }
        };
        let mut order: Vec<usize> = (0..self.ranks.len()).collect();
        order.sort_by(|&a, &b| label_order(&labels[a], &labels[b]));
        for v in order {
            writeln!(out, "{}\t{}", labels[v], self.ranks[v])?;
        }
        Ok(())
    }
}

/// Numeric labels by value, before other labels by string order.
fn label_order(a: &str, b: &str) -> Ordering {
    match (a.parse::<i128>(), b.parse::<i128>()) {
        (Ok(x), Ok(y)) => x.cmp(&y).then_with(|| a.cmp(b)),
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}

/// The rank and dangling tables.
#[derive(Clone, Copy)]
struct Tables {
    ranks: Table<f64>,
    dangling: Table<f64>,
}

/// One worker's state across runs.
#[derive(Clone)]
struct State {
    /// Per slot: what was last propagated — `d·r(u)/outdeg(u)` for a source, `r(u)` for an
    /// owned dangling vertex.
    last: Vec<f64>,
    /// Per slot: this iteration's change of what it propagates.
    change: Vec<f64>,
    /// Per slot: the rank read this iteration (scratch).
    ranks: Vec<f64>,
    /// Per target block, `B` accumulated incoming changes.
    acc: Vec<f64>,
    /// Still to be withdrawn from `G` (worker 0's initial 1).
    offset: f64,
}

impl State {
    fn new(plan: &Plan, block: usize) -> Self {
        Self {
            last: vec![0.0; plan.reads.len()],
            change: vec![0.0; plan.reads.len()],
            ranks: vec![0.0; plan.reads.len()],
            acc: vec![0.0; plan.target_blocks.len() * block],
            offset: 0.0,
        }
    }

    /// The state as a checkpoint keeps it: `last`, `change`, `acc` and `offset`, in
    /// that order, as little-endian `f64`s (each vector with its length).
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * (4 + self.last.len() * 2 + self.acc.len()));
        put_f64s(&mut out, &self.last);
        put_f64s(&mut out, &self.change);
        put_f64s(&mut out, &self.acc);
        out.extend_from_slice(&self.offset.to_le_bytes());
        out
    }

    /// Restores a state [`encode`](Self::encode) wrote, refusing one whose sizes do not
    /// fit this worker's plan.
    fn decode(bytes: &[u8], plan: &Plan, block: usize) -> Result<Self, String> {
        let mut c = Cursor::new(bytes);
        let last = get_f64s(&mut c, plan.reads.len(), "last propagated")?;
        let change = get_f64s(&mut c, plan.reads.len(), "changes")?;
        let acc = get_f64s(&mut c, plan.target_blocks.len() * block, "accumulators")?;
        let offset = f64::from_le_bytes(c.take(8, "offset")?.try_into().expect("8 bytes"));
        c.finish()?;
        Ok(Self {
            ranks: vec![0.0; last.len()],
            last,
            change,
            acc,
            offset,
        })
    }
}

/// One iteration of one worker: the function both the virtual iteration and the real
/// iterations run.
fn iteration(
    w: &mut Worker<'_>,
    t: Tables,
    shape: &Shape,
    plan: &Plan,
    st: &mut State,
) -> iterstore::Result<()> {
    let (d, b) = (shape.damping, shape.block);
    let mut g = [0.0];
    w.read(&t.dangling, 0, &mut g)?;
    let spread = d * g[0] / shape.vertices as f64;
    for (i, &block) in plan.read_blocks.iter().enumerate() {
        let slots = plan.block_starts[i]..plan.block_starts[i + 1];
        let (columns, ranks) = (&plan.columns[slots.clone()], &mut st.ranks[slots]);
        w.read_with(&t.ranks, block, |row| {
            for (r, &c) in ranks.iter_mut().zip(columns) {
                *r = row[c as usize] + spread;
            }
        })?;
    }
    propagate(d, &st.ranks, &plan.divisors, &mut st.last, &mut st.change);
    // A dangling slot's change is its rank's, summed in slot order.
    let mut dangling_change = 0.0;
    for &s in &plan.dangling {
        dangling_change += st.change[s as usize];
    }
    plan.edges.sum_into(&st.change, &mut st.acc);
    for (i, &block) in plan.target_blocks.iter().enumerate() {
        w.update(&t.ranks, block, &st.acc[i * b..(i + 1) * b])?;
    }
    dangling_change -= std::mem::take(&mut st.offset);
    w.update(&t.dangling, 0, &[dangling_change])?;
    w.clock()
}

/// The initialisation run (see the module docs); returns its time.
fn init(
    cluster: &mut Cluster,
    states: &mut [State],
    t: Tables,
    shape: &Shape,
    plans: &[Plan],
    first: usize,
) -> Result<f64, AppError> {
    timed_init_run(cluster, states, |w, st| {
        let (n, b) = (shape.vertices, shape.block);
        let teleport = (1.0 - shape.damping) / n as f64;
        let mut row = vec![0.0; b];
        for &block in &plans[w.id() - first].init_blocks {
            let valid = (n - block as usize * b).min(b);
            row[..valid].fill(teleport);
            row[valid..].fill(0.0);
            w.update(&t.ranks, block, &row)?;
        }
        if w.id() == 0 {
            st.offset = 1.0;
            w.update(&t.dangling, 0, &[1.0])?;
        }
        w.clock()
    })
}

/// The current ranks `S(v) + d·G/N`, read back from the servers.
fn snapshot(cluster: &Cluster, t: Tables, shape: &Shape) -> Result<Vec<f64>, AppError> {
    let (n, b) = (shape.vertices, shape.block);
    let mut ranks = dense(cluster.snapshot(&t.ranks)?, n.div_ceil(b), b);
    ranks.truncate(n);
    let g = dense(cluster.snapshot(&t.dangling)?, 1, 1)[0];
    let spread = shape.damping * g / n as f64;
    for r in &mut ranks {
        *r += spread;
    }
    Ok(ranks)
}

/// Runs PageRank on `graph` with `cfg`. See the module docs for the layout and phases.
pub fn run(
    cfg: &AppConfig,
    params: &PageRankParams,
    graph: &Graph,
) -> Result<PageRankOutcome, AppError> {
    run_observed(cfg, params, graph, &mut |_| {})
}

/// [`run`], calling `observer` after each iteration is evaluated.
pub fn run_observed(
    cfg: &AppConfig,
    params: &PageRankParams,
    graph: &Graph,
    observer: Observer<'_>,
) -> Result<PageRankOutcome, AppError> {
    let (mut outcome, start_s) =
        super::with_cluster(cfg, |c| run_in(c, cfg, params, graph, observer))?;
    outcome.report.setup_s += start_s;
    Ok(outcome)
}

/// [`run_observed`] on a cluster already started (for example one process of
/// [`Cluster::run_local_processes`]): this process's workers take their partitions by
/// global worker id, so every process of the cluster must call it alike. The cluster
/// stays up.
pub fn run_in(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    params: &PageRankParams,
    graph: &Graph,
    observer: Observer<'_>,
) -> Result<PageRankOutcome, AppError> {
    cfg.validate()?;
    super::check_cluster(cfg, cluster)?;
    params.validate()?;
    check_graph(graph)?;
    let mut report = RunReport::new("pagerank", "l1_change", cfg);
    report.processes = cluster.processes();
    report.dataset.insert("vertices", graph.num_vertices.into());
    report.dataset.insert("edges", graph.edges.len() as u64);
    report.param("damping", params.config.damping);
    report.param("block", params.block);
    report.param("partition", params.partition.name());
    fingerprint::input_digest(&mut report, fingerprint::graph(graph));
    fingerprint::agree(cluster, cfg, &report)?;

    // Partitions are by global worker id (`first + local` for this process's workers).
    let (total, first) = (cluster.total_workers(), cluster.rank() * cfg.workers);
    let shape = Shape {
        damping: params.config.damping,
        vertices: graph.num_vertices as usize,
        block: params.block,
    };
    let (setup, setup_s) = timed(|| -> Result<_, AppError> {
        let layout = Layout::new(graph, params.partition, total, shape.block);
        let writers = init_writers(&layout, &shape);
        let plans = par_build(cfg.workers, |l| {
            Plan::new(&layout, &writers, &shape, first + l)
        });
        let states: Vec<State> = plans.iter().map(|p| State::new(p, shape.block)).collect();
        let t = Tables {
            ranks: cluster.create_table::<f64>("pagerank.rank", shape.block)?,
            dangling: cluster.create_table::<f64>("pagerank.dangling", 1)?,
        };
        Ok((layout, plans, states, t))
    });
    let (layout, plans, mut states, t) = setup?;
    report.setup_s = setup_s;
    let run_json = checkpoint::run_json(&report);
    let id = RunId {
        app: "pagerank",
        run: &run_json,
        clocks_per_iteration: 1,
        init_clocks: checkpoint::INIT_CLOCKS,
    };
    let restart = checkpoint::resume(cluster, cfg, &id)?;
    if let Some(r) = &restart {
        // Each worker's propagated ranks follow its share of the edges, which depends on
        // the total number of workers: the same total is required.
        let blobs = r.same_workers("pagerank", total, first, cfg.workers)?;
        for (l, blob) in blobs.iter().enumerate() {
            states[l] = State::decode(blob, &plans[l], shape.block)
                .map_err(|e| r.bad_state(first + l, e))?;
        }
    }
    report.resumed = restart.as_ref().map(Restart::report);
    let start = restart.as_ref().map_or(0, |r| r.done);
    if let Some(cut) = layout.cut_edges {
        report.dataset.insert("cut_edges", cut as u64);
    }

    let (pre_s, pattern) = preprocess(cluster, cfg, &states, |w, st| {
        iteration(w, t, &shape, &plans[w.id() - first], st)
    })?;
    report.preprocess_s = pre_s;
    report.pattern = pattern;

    if restart.is_none() {
        report.init_s = init(cluster, &mut states, t, &shape, &plans, first)?;
    }

    let mut ranks = snapshot(cluster, t, &shape)?;
    // First-iter mode records the first real iteration (not the initialisation run).
    for iter in start..cfg.iterations {
        let cost = timed_run(cluster, &mut states, |w, st| {
            iteration(w, t, &shape, &plans[w.id() - first], st)
        })?;
        let next = snapshot(cluster, t, &shape)?;
        let objective = l1_change(&next, &ranks);
        check_finite("pagerank", iter, cfg.iterations, "L1 change", objective)?;
        let record = IterRecord {
            iter,
            seconds: cost.seconds,
            bytes_sent: cost.bytes_sent,
            messages_sent: cost.messages_sent,
            objective,
            test_rmse: None,
            test_accuracy: None,
            rss_bytes: None,
        };
        ranks = next;
        report.push_iteration(record, observer);
        let saved = checkpoint::after_iteration(cluster, cfg, &id, iter + 1, || {
            states.iter().map(State::encode).collect()
        })?;
        report.record_checkpoint(saved);
    }
    report.record_store(cluster);
    let ranks = layout.to_graph_order(&ranks);
    Ok(PageRankOutcome { report, ranks })
}

/// PageRank as [`App`]: its input is the graph with the file's vertex labels, which its
/// output names the vertices by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRank;

/// PageRank's input as [`App`] loads it.
#[derive(Debug, Clone, PartialEq)]
pub struct PageRankData {
    /// The graph (dense vertex ids).
    pub graph: Graph,
    /// Each vertex's label in the input file; `None` for a generated graph.
    pub labels: Option<Vec<String>>,
}

impl App for PageRank {
    const NAME: &'static str = "pagerank";
    const ABOUT: &'static str = "PageRank by power iteration (input: a directed graph)";
    const INPUT: &'static str = "graph";
    type Params = PageRankParams;
    type Data = PageRankData;
    type Outcome = PageRankOutcome;

    fn validate(params: &PageRankParams) -> Result<(), AppError> {
        Ok(params.validate()?)
    }

    fn load(input: &Input, _: &PageRankParams) -> Result<PageRankData, AppError> {
        Ok(match input {
            Input::File(path) => {
                let labeled = load_graph(path)?;
                PageRankData {
                    graph: labeled.graph,
                    labels: Some(labeled.labels),
                }
            }
            Input::Synthetic(size) => PageRankData {
                graph: GraphSpec::preset(size)?.generate(),
                labels: None,
            },
        })
    }

    fn counts(data: &PageRankData) -> String {
        format!(
            "{} vertices, {} edges",
            data.graph.num_vertices,
            data.graph.edges.len()
        )
    }

    fn run(
        cfg: &AppConfig,
        params: &PageRankParams,
        data: &PageRankData,
        observer: Observer<'_>,
    ) -> Result<PageRankOutcome, AppError> {
        run_observed(cfg, params, &data.graph, observer)
    }

    fn write_output(
        outcome: &PageRankOutcome,
        data: &PageRankData,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        outcome.write_ranks(data.labels.as_deref(), out)
    }

    fn into_report(outcome: PageRankOutcome) -> RunReport {
        outcome.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_sort_numerically_then_as_strings() {
        let mut labels = vec!["b", "10", "9", "a", "-1", "010"];
        labels.sort_by(|a, b| label_order(a, b));
        assert_eq!(labels, ["-1", "9", "010", "10", "a", "b"]);
    }
}
