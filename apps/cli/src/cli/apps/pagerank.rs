//! `iterstore run pagerank`: PageRank's options, its benchmark workloads and its row of
//! the demo.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use iterstore_algo::pagerank::PageRankConfig;
use iterstore_apps::pagerank::{GraphPartition, PageRankParams};
use iterstore_apps::{App, AppConfig, Input, PageRank, RunReport};
use iterstore_bench::Workload;

use super::{check_bench_file, check_benched, CliApp};
use crate::cli::bench::no_repeats;
use crate::cli::{at_least_one, BenchArgs, RunOptions};

/// Options of `iterstore run pagerank`.
#[derive(Debug, Args)]
pub struct PageRankArgs {
    /// Damping factor [default: 0.85].
    #[arg(long, help_heading = "PageRank options")]
    pub damping: Option<f64>,
    /// Vertices per row of the rank table [default: 256].
    #[arg(long, value_name = "B", help_heading = "PageRank options", value_parser = at_least_one)]
    pub block: Option<usize>,
    /// How the graph is split over the workers: `edges` (ranges of the file's edges) or
    /// `communities` (a graph partition: each worker holds its vertices' in-edges).
    /// `communities` keeps most rows on one process, so locality placement can cut network
    /// traffic [default: edges].
    #[arg(long, value_name = "HOW", help_heading = "Data options")]
    pub partition: Option<String>,
}

impl CliApp for PageRank {
    type Args = PageRankArgs;
    const BENCHED_BY_DEFAULT: bool = true;

    fn params(
        args: &PageRankArgs,
        _: &RunOptions,
        _: &AppConfig,
        _: &Input,
    ) -> Result<PageRankParams> {
        let defaults = PageRankParams::default();
        let params = PageRankParams {
            config: PageRankConfig {
                damping: args.damping.unwrap_or(defaults.config.damping),
            },
            block: args.block.unwrap_or(defaults.block),
            partition: match args.partition.as_deref() {
                None => defaults.partition,
                Some(name) => {
                    GraphPartition::parse(name).map_err(|e| anyhow::anyhow!("--partition {e}"))?
                }
            },
        };
        PageRank::validate(&params)?;
        Ok(params)
    }

    fn bench_input(args: &BenchArgs) -> Option<&PathBuf> {
        args.pagerank_data.as_ref()
    }

    fn check_bench(args: &BenchArgs, benched: bool) -> Result<()> {
        let name = PageRank::NAME;
        check_benched(
            "--pagerank-block",
            args.pagerank_block.is_some(),
            name,
            benched,
        )?;
        check_benched(
            "--pagerank-partition",
            args.pagerank_partition.is_some(),
            name,
            benched,
        )?;
        check_bench_file(
            "--pagerank-data",
            args.pagerank_data.as_ref(),
            name,
            benched,
        )
    }

    /// At the default block, which the scaling sweep keeps and [`bench_workloads`]
    /// replaces by each of `--pagerank-block`'s.
    ///
    /// [`bench_workloads`]: CliApp::bench_workloads
    fn bench_workload(args: &BenchArgs, input: &Input) -> Result<Workload> {
        let params = PageRankParams {
            partition: args.pagerank_partition.unwrap_or_default(),
            ..PageRankParams::default()
        };
        let data = PageRank::load(input, &params)?;
        Ok(Workload::PageRank {
            graph: data.graph,
            params,
        })
    }

    /// One workload per `--pagerank-block` size ([`per_block`]).
    fn bench_workloads(
        args: &BenchArgs,
        name: String,
        workload: Workload,
    ) -> Result<Vec<(String, Workload)>> {
        let blocks = pagerank_blocks(args.pagerank_block.as_deref())?;
        Ok(per_block(name, workload, &blocks))
    }

    fn demo_columns(r: &RunReport) -> (String, String) {
        let n = |key: &str| r.dataset.get(key).copied().unwrap_or(0);
        let first = r.iterations.first().map_or(f64::NAN, |i| i.objective);
        let data = format!("{} vertices, {} edges", n("vertices"), n("edges"));
        let objective = format!(
            "L1 change {first:.2e} -> {:.2e}",
            r.final_objective().unwrap_or(f64::NAN)
        );
        (data, objective)
    }
}

/// The PageRank block sizes to benchmark: `given` (`--pagerank-block`) once each and each
/// valid for [`PageRankParams`], else the default block alone.
fn pagerank_blocks(given: Option<&[usize]>) -> Result<Vec<usize>> {
    let default = PageRankParams::default();
    let Some(blocks) = given else {
        return Ok(vec![default.block]);
    };
    if blocks.is_empty() {
        bail!("--pagerank-block lists no block size");
    }
    no_repeats("--pagerank-block", blocks)?;
    for &block in blocks {
        PageRankParams {
            block,
            ..default.clone()
        }
        .validate()
        .map_err(|e| anyhow::anyhow!("--pagerank-block: {e}"))?;
    }
    Ok(blocks.to_vec())
}

/// `workload` once per block size in `blocks`, named `<name>, block <B>` (then the
/// graph partition unless it is `edges`), if it is
/// PageRank's (each with its own copy of the graph); any other workload as it is.
fn per_block(name: String, workload: Workload, blocks: &[usize]) -> Vec<(String, Workload)> {
    let Workload::PageRank { graph, params } = workload else {
        return vec![(name, workload)];
    };
    blocks
        .iter()
        .map(|&block| {
            let workload = Workload::PageRank {
                graph: graph.clone(),
                params: PageRankParams {
                    block,
                    ..params.clone()
                },
            };
            let split = match params.partition {
                GraphPartition::Edges => String::new(),
                other => format!(", {}", other.name()),
            };
            (format!("{name}, block {block}{split}"), workload)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use iterstore_algo::mf::MfConfig;
    use iterstore_data::{split_ratings, GraphSpec, RatingsSpec};

    fn graph_workload() -> Workload {
        Workload::PageRank {
            graph: GraphSpec::preset("tiny").unwrap().generate(),
            params: PageRankParams::default(),
        }
    }

    #[test]
    fn pagerank_blocks_default_to_the_documented_256() {
        // `--pagerank-block --help` promises 256.
        assert_eq!(pagerank_blocks(None).unwrap(), [256]);
        assert_eq!(pagerank_blocks(Some(&[1, 16, 256])).unwrap(), [1, 16, 256]);
    }

    #[test]
    fn pagerank_blocks_reject_repeats_empty_lists_and_oversized_blocks() {
        let err = |given: &[usize]| pagerank_blocks(Some(given)).unwrap_err().to_string();
        assert_eq!(
            err(&[16, 4, 16]),
            "--pagerank-block lists '16' more than once"
        );
        assert_eq!(err(&[]), "--pagerank-block lists no block size");
        let too_big = err(&[4, 1 << 21]);
        assert!(
            too_big.starts_with("--pagerank-block: ") && too_big.contains("2097152"),
            "{too_big}"
        );
    }

    #[test]
    fn per_block_makes_one_named_pagerank_workload_per_block() {
        let split = per_block("g.tsv".into(), graph_workload(), &[1, 16]);
        let names: Vec<&str> = split.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["g.tsv, block 1", "g.tsv, block 16"]);
        let Workload::PageRank { graph, params } = graph_workload() else {
            unreachable!()
        };
        for ((_, w), block) in split.iter().zip([1, 16]) {
            let Workload::PageRank {
                graph: g,
                params: p,
            } = w
            else {
                panic!("not pagerank: {w:?}")
            };
            assert_eq!(g.edges, graph.edges);
            assert_eq!(g.num_vertices, graph.num_vertices);
            assert_eq!(p.block, block);
            assert_eq!(p.config, params.config);
        }
    }

    #[test]
    fn per_block_leaves_other_apps_alone() {
        let ratings = RatingsSpec::preset("tiny").unwrap().generate();
        let (train, test) = split_ratings(&ratings, 0.1, crate::cli::bench::SEED);
        let mf = Workload::Mf {
            train,
            test,
            params: MfConfig::default(),
        };
        let split = per_block("r.inter".into(), mf, &[1, 16]);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].0, "r.inter");
        assert_eq!(split[0].1.app(), "mf");
    }
}
