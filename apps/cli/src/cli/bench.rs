//! `iterstore bench`: loads (or generates) each app's input once, runs every store variant,
//! the limit and the peer on it, optionally the scaling sweep on synthetic inputs, then
//! prints the tables and writes `report.json`, `report.md` and the SVG charts.
//!
//! PageRank's input is one workload per `--pagerank-block` size (the same graph, named
//! `<input>, block <B>`); the scaling sweep uses the default block. The DNN (only when
//! `--apps` names it) trains the default MLP ([`DnnConfig::default`]) on `--dnn-data` or
//! synthetic images, and its peer is PyTorch on the same IDX files.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use iterstore_algo::dnn::DnnConfig;
use iterstore_algo::lda::{LdaConfig, SamplerKind};
use iterstore_algo::mf::MfConfig;
use iterstore_apps::pagerank::{GraphPartition, PageRankParams};
use iterstore_bench::report::{BenchMeta, BenchReport};
use iterstore_bench::scaling::scaling;
use iterstore_bench::{bench_app, BenchOptions, Variant, Workload};
use iterstore_data::{
    load_corpus, load_fashion_mnist, load_graph, load_ratings, split_ratings, CorpusSpec,
    GraphSpec, ImageSpec, RatingsSpec,
};

use tracing::info;

use super::log::{self, Step};
use super::run::{MF_INIT_SCALE, MF_LR, MF_RANK, MF_REG, MF_TEST_FRACTION};
use super::{App, BenchArgs};

/// Seed of every input split, initial model and sampler in the benchmark.
const SEED: u64 = 42;

/// Runs `iterstore bench` with parsed arguments; `command_line` goes into the report.
pub fn bench(args: &BenchArgs, command_line: String) -> Result<()> {
    let apps = if args.apps.is_empty() {
        vec![App::Mf, App::Lda, App::Pagerank]
    } else {
        args.apps.clone()
    };
    no_repeats("--apps", apps.iter().map(|a| a.name()))?;
    if let Some(names) = &args.variants {
        no_repeats("--variants", names.iter().map(String::as_str))?;
    }
    no_repeats(
        "--scaling-sizes",
        args.scaling_sizes.iter().map(String::as_str),
    )?;
    if args.pagerank_block.is_some() && !apps.contains(&App::Pagerank) {
        bail!("--pagerank-block given but pagerank is not benchmarked (--apps)");
    }
    if args.pagerank_partition.is_some() && !apps.contains(&App::Pagerank) {
        bail!("--pagerank-partition given but pagerank is not benchmarked (--apps)");
    }
    let blocks = pagerank_blocks(args.pagerank_block.as_deref())?;
    for (flag, given, app) in [
        ("--mf-data", &args.mf_data, App::Mf),
        ("--lda-data", &args.lda_data, App::Lda),
        ("--pagerank-data", &args.pagerank_data, App::Pagerank),
    ] {
        if let Some(path) = given {
            if !apps.contains(&app) {
                bail!(
                    "{flag} given but {} is not benchmarked (--apps)",
                    app.name()
                );
            }
            if !path.is_file() {
                bail!("{flag} {}: no such file", path.display());
            }
        }
    }
    if args.dnn_model.is_some() && !apps.contains(&App::Dnn) {
        bail!("--dnn-model given but dnn is not benchmarked (--apps)");
    }
    if let Some(dir) = &args.dnn_data {
        if !apps.contains(&App::Dnn) {
            bail!("--dnn-data given but dnn is not benchmarked (--apps)");
        }
        if !dir.is_dir() {
            bail!(
                "--dnn-data {}: not a directory (it names the directory of Fashion-MNIST's \
                 IDX files: tools/fetch-data fashion-mnist)",
                dir.display()
            );
        }
    }
    let variants = match &args.variants {
        None => Variant::all(),
        Some(names) => names
            .iter()
            .map(|n| Variant::by_name(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?,
    };
    let workdir = args.out.join("peers");
    let opts = BenchOptions {
        workers: args.workers,
        shards: super::shards_or_default(args.shards, args.workers, false),
        iterations: args.iters,
        variants,
        limit: !args.no_limit,
        peers: !args.no_peers,
        rounds: args.rounds,
        workdir: workdir.clone(),
    };
    opts.validate().map_err(anyhow::Error::msg)?;
    // The sweep is a trend over sizes, one round each.
    let scaling_opts = BenchOptions {
        iterations: args.scaling_iters,
        rounds: 1,
        ..opts.clone()
    };
    if args.scaling {
        scaling_opts
            .validate()
            .map_err(|e| anyhow::anyhow!("--scaling-iters: {e}"))?;
    }
    // The output directory is checked before any input is read, and every input is read
    // before any output is written or any run starts.
    check_writable_dir("--out", &args.out)?;
    let meta = BenchMeta::now(super::VERSION, command_line, inputs(&apps, args));
    let mut workloads = Vec::new();
    for &app in &apps {
        let (mut name, workload) = load(app, args)?;
        // The default sampler keeps the plain name, and so does the default network.
        match &workload {
            Workload::Lda { params, .. } if params.sampler != SamplerKind::default() => {
                name = format!("{name}, {} sampler", params.sampler.name());
            }
            Workload::Dnn { cnn: true, .. } => name = format!("{name}, cnn"),
            _ => {}
        }
        workloads.extend(per_block(name, workload, &blocks));
    }
    if opts.peers {
        std::fs::create_dir_all(&workdir)
            .with_context(|| format!("cannot create {}", workdir.display()))?;
    }

    let mut progress = |line: &str| info!("  {line}");
    let mut results = Vec::new();
    for (name, workload) in &workloads {
        info!(
            "{}: {name} ({} {})",
            workload.app(),
            workload.work(),
            workload.work_unit()
        );
        results.push(bench_app(workload, name, &opts, &mut progress)?);
    }
    drop(workloads);
    let mut curves = Vec::new();
    if args.scaling {
        for &app in &apps {
            info!(
                "{}: scaling over {}",
                app.name(),
                args.scaling_sizes.join(", ")
            );
            let workloads = args
                .scaling_sizes
                .iter()
                .map(|size| Ok((size.clone(), synthetic(app, size, args)?)))
                .collect::<Result<Vec<_>>>()?;
            curves.extend(scaling(&workloads, &scaling_opts, &mut progress)?);
        }
    }
    let report = BenchReport::new(meta, results, curves);
    println!("{}", report.markdown());
    let written = report
        .write_to(&args.out)
        .with_context(|| format!("writing the report into {}", args.out.display()))?;
    for path in written {
        info!("wrote {}", path.display());
    }
    Ok(())
}

/// The input file (for dnn, directory) given for `app`, if any.
fn data_path(app: App, args: &BenchArgs) -> &Option<PathBuf> {
    match app {
        App::Mf => &args.mf_data,
        App::Lda => &args.lda_data,
        App::Pagerank => &args.pagerank_data,
        App::Dnn => &args.dnn_data,
    }
}

/// Each app's input as the report records it: the file as given, or `synthetic <size>`.
fn inputs(apps: &[App], args: &BenchArgs) -> BTreeMap<String, String> {
    apps.iter()
        .map(|&app| {
            let input = data_path(app, args).as_ref().map_or_else(
                || format!("synthetic {}", args.synthetic),
                |p| p.display().to_string(),
            );
            (app.name().to_string(), input)
        })
        .collect()
}

/// Fails unless `dir` (the value of `flag`) is a directory this process can create files
/// in, or can be created as one. Nothing is left behind: a probe file is created and
/// removed in `dir`, or in its nearest existing ancestor when `dir` does not exist yet.
fn check_writable_dir(flag: &str, dir: &Path) -> Result<()> {
    let shown = dir.display();
    let absolute = std::path::absolute(dir).with_context(|| format!("{flag} {shown}"))?;
    let existing = absolute
        .ancestors()
        .find(|a| a.exists())
        .expect("the root directory exists");
    if !existing.is_dir() {
        if existing == absolute {
            bail!("{flag} {shown}: not a directory");
        }
        bail!(
            "{flag} {shown}: cannot create it, {} is not a directory",
            existing.display()
        );
    }
    let probe = existing.join(format!(".iterstore-write-check-{}", std::process::id()));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe);
    match created {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if existing == absolute => {
            Err(e).with_context(|| format!("{flag} {shown}: cannot write into it"))
        }
        Err(e) => Err(e)
            .with_context(|| format!("{flag} {shown}: cannot create it in {}", existing.display())),
    }
}

/// Fails if `names` (the values of `flag`) repeat one.
fn no_repeats<T: Ord + Display + Copy>(
    flag: &str,
    names: impl IntoIterator<Item = T>,
) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        if !seen.insert(name) {
            bail!("{flag} lists '{name}' more than once");
        }
    }
    Ok(())
}

/// PageRank's parameters at the default block, split as `--pagerank-partition` says.
fn pagerank_params(args: &BenchArgs) -> PageRankParams {
    PageRankParams {
        partition: args.pagerank_partition.unwrap_or_default(),
        ..PageRankParams::default()
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

/// The input of `app`: its file if one was given, else the `--synthetic` preset; PageRank's
/// at the default block.
fn load(app: App, args: &BenchArgs) -> Result<(String, Workload)> {
    let Some(path) = data_path(app, args) else {
        let name = format!("synthetic {}", args.synthetic);
        return Ok((name, synthetic(app, &args.synthetic, args)?));
    };
    let name = file_name(path);
    let step = Step::start(&log::reading(path));
    let workload = match app {
        App::Mf => mf_workload(load_ratings(path)?),
        App::Lda => Workload::Lda {
            corpus: load_corpus(path)?,
            params: lda_params(args, args.topics.unwrap_or(LdaConfig::default().topics)),
        },
        App::Pagerank => Workload::PageRank {
            graph: load_graph(path)?.graph,
            params: pagerank_params(args),
        },
        App::Dnn => Workload::Dnn {
            data: load_fashion_mnist(path)?,
            params: dnn_params(args),
            idx_dir: Some(path.clone()),
            cnn: is_cnn(args),
        },
    };
    step.done(&format!(
        "read {}: {} {}",
        path.display(),
        workload.work(),
        workload.work_unit()
    ));
    Ok((name, workload))
}

/// The seeded synthetic input of `app` at preset `size`; PageRank's at the default block
/// (which the scaling sweep keeps, and [`per_block`] replaces for the main workloads).
fn synthetic(app: App, size: &str, args: &BenchArgs) -> Result<Workload> {
    let step = Step::start(&format!("{}: generating synthetic {size}", app.name()));
    let workload = match app {
        App::Mf => mf_workload(
            RatingsSpec::preset(size)
                .map_err(anyhow::Error::msg)?
                .generate(),
        ),
        App::Lda => {
            let spec = CorpusSpec::preset(size).map_err(anyhow::Error::msg)?;
            let topics = args.topics.unwrap_or(spec.num_topics as usize);
            Workload::Lda {
                corpus: spec.generate().0,
                params: lda_params(args, topics),
            }
        }
        App::Pagerank => Workload::PageRank {
            graph: GraphSpec::preset(size)
                .map_err(anyhow::Error::msg)?
                .generate(),
            params: pagerank_params(args),
        },
        App::Dnn => Workload::Dnn {
            data: ImageSpec::preset(size)
                .map_err(anyhow::Error::msg)?
                .generate(),
            params: dnn_params(args),
            idx_dir: None,
            cnn: is_cnn(args),
        },
    };
    step.done(&format!(
        "{}: generated synthetic {size}: {} {}",
        app.name(),
        workload.work(),
        workload.work_unit()
    ));
    Ok(workload)
}

fn mf_workload(ratings: iterstore_data::Ratings) -> Workload {
    let (train, test) = split_ratings(&ratings, MF_TEST_FRACTION, SEED);
    Workload::Mf {
        train,
        test,
        params: MfConfig {
            rank: MF_RANK,
            learning_rate: MF_LR,
            regularization: MF_REG,
            init_scale: MF_INIT_SCALE,
            seed: SEED,
            ..MfConfig::default()
        },
    }
}

/// Whether `--dnn-model cnn` asks for the CNN.
fn is_cnn(args: &BenchArgs) -> bool {
    args.dnn_model.as_deref() == Some("cnn")
}

/// The DNN's settings in the benchmark: `iterstore run dnn`'s defaults (for the network
/// `--dnn-model` names), seeded like the rest of the benchmark.
fn dnn_params(args: &BenchArgs) -> DnnConfig {
    let defaults = if is_cnn(args) {
        DnnConfig::cnn()
    } else {
        DnnConfig::default()
    };
    DnnConfig {
        seed: SEED,
        ..defaults
    }
}

fn lda_params(args: &BenchArgs, topics: usize) -> LdaConfig {
    LdaConfig {
        topics,
        seed: SEED,
        sampler: args.sampler.unwrap_or_default(),
        ..LdaConfig::default()
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    )
}

/// The default output directory.
pub(crate) fn default_out() -> PathBuf {
    PathBuf::from("bench-out")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_workload() -> Workload {
        Workload::PageRank {
            graph: GraphSpec::preset("tiny").unwrap().generate(),
            params: PageRankParams::default(),
        }
    }

    #[test]
    fn out_dirs_are_checked_without_creating_them() {
        let tmp = std::env::temp_dir().join(format!("iterstore-out-check-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let listing = || std::fs::read_dir(&tmp).unwrap().count();
        check_writable_dir("--out", &tmp).unwrap();
        check_writable_dir("--out", &tmp.join("new/deeper")).unwrap();
        assert_eq!(listing(), 0, "the check leaves nothing behind");
        let file = tmp.join("file");
        std::fs::write(&file, "x").unwrap();
        let err = check_writable_dir("--out", &file).unwrap_err().to_string();
        assert!(err.ends_with("file: not a directory"), "{err}");
        let err = check_writable_dir("--out", &file.join("sub"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a directory"), "{err}");
        if Path::new("/proc/self").exists() {
            let err = format!(
                "{:#}",
                check_writable_dir("--out", Path::new("/proc/x")).unwrap_err()
            );
            assert!(
                err.starts_with("--out /proc/x: cannot create it in /proc"),
                "{err}"
            );
        }
        std::fs::remove_dir_all(&tmp).unwrap();
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
        let split = per_block("r.inter".into(), mf_workload(ratings), &[1, 16]);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].0, "r.inter");
        assert_eq!(split[0].1.app(), "mf");
    }
}
