//! `iterstore bench`: loads (or generates) each app's input once, runs every store variant,
//! the limit and the peer on it, optionally the scaling sweep on synthetic inputs, then
//! prints the tables and writes `report.json`, `report.md` and the SVG charts.
//!
//! PageRank's input is one workload per `--pagerank-block` size (the same graph, named
//! `<input>, block <B>`); the scaling sweep uses the default block. The DNN (only when
//! `--apps` names it) trains the default MLP ([`DnnConfig::default`]) on `--dnn-data` or
//! synthetic images, and its peer is PyTorch on the same IDX files. Logistic regression
//! (also only when named) trains by L-BFGS on `--logreg-data` or synthetic images, against
//! scikit-learn on the same files.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use iterstore_apps::Input;
use iterstore_bench::report::{BenchMeta, BenchReport};
use iterstore_bench::scaling::scaling;
use iterstore_bench::{bench_app, BenchOptions, Variant, Workload};

use tracing::info;

use super::apps::{self, Entry, APPS};
use super::log::{self, Step};
use super::BenchArgs;

/// Seed of every input split, initial model and sampler in the benchmark.
pub(crate) const SEED: u64 = 42;

/// Runs `iterstore bench` with parsed arguments; `command_line` goes into the report.
pub fn bench(args: &BenchArgs, command_line: String) -> Result<()> {
    let apps: Vec<&dyn Entry> = if args.apps.is_empty() {
        APPS.iter()
            .copied()
            .filter(|app| app.benched_by_default())
            .collect()
    } else {
        args.apps
            .iter()
            .map(|name| apps::find(name).expect("--apps names registered apps"))
            .collect()
    };
    no_repeats("--apps", apps.iter().map(|a| a.name()))?;
    if let Some(names) = &args.variants {
        no_repeats("--variants", names.iter().map(String::as_str))?;
    }
    no_repeats(
        "--scaling-sizes",
        args.scaling_sizes.iter().map(String::as_str),
    )?;
    // Each app's own options: given only when it is benchmarked, naming inputs that exist.
    for app in APPS {
        let benched = apps.iter().any(|a| a.name() == app.name());
        app.check_bench(args, benched)?;
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
        if let Some(note) = workload.name_note() {
            name = format!("{name}, {note}");
        }
        workloads.extend(app.bench_workloads(args, name, workload)?);
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

/// Each app's input as the report records it: the file as given, or `synthetic <size>`.
fn inputs(apps: &[&dyn Entry], args: &BenchArgs) -> BTreeMap<String, String> {
    apps.iter()
        .map(|app| {
            let input = app.bench_input(args).map_or_else(
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
pub(crate) fn no_repeats<T: Ord + Display + Copy>(
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

/// The input of `app`: its file if one was given, else the `--synthetic` preset; PageRank's
/// at the default block.
fn load(app: &dyn Entry, args: &BenchArgs) -> Result<(String, Workload)> {
    let Some(path) = app.bench_input(args) else {
        let name = format!("synthetic {}", args.synthetic);
        return Ok((name, synthetic(app, &args.synthetic, args)?));
    };
    let name = file_name(path);
    let step = Step::start(&log::reading(path));
    let workload = app.bench_workload(args, &Input::File(path.clone()))?;
    step.done(&format!(
        "read {}: {} {}",
        path.display(),
        workload.work(),
        workload.work_unit()
    ));
    Ok((name, workload))
}

/// The seeded synthetic input of `app` at preset `size`; PageRank's at the default block
/// (which the scaling sweep keeps, and its registry entry's `bench_workloads` replaces for
/// the main workloads).
fn synthetic(app: &dyn Entry, size: &str, args: &BenchArgs) -> Result<Workload> {
    let step = Step::start(&format!("{}: generating synthetic {size}", app.name()));
    let workload = app.bench_workload(args, &Input::Synthetic(size.to_string()))?;
    step.done(&format!(
        "{}: generated synthetic {size}: {} {}",
        app.name(),
        workload.work(),
        workload.work_unit()
    ));
    Ok(workload)
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
}
