//! `iterstore plan`: the performance model's search for a network on a cluster.
//!
//! Resolves `--model` and `--profile` (a built-in name, else a JSON file), reads and
//! validates every input and checks `--output`'s and `--json`'s directories before
//! searching, then prints the fastest configurations with their epoch time and breakdown
//! (in the paper's W/R/PS order), the best one layer by layer, and writes it as a plan
//! file; `--json` writes every candidate. With `--evaluate W/R/PS,..` it estimates the
//! given configurations instead (`--compose`, `--layers`). Thin glue over
//! `iterstore_perf`.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use iterstore_perf::optimizer::{best_for, evaluate, uniform};
use iterstore_perf::rank::ranks;
use iterstore_perf::{
    builtin, search, spec, Candidate, Cluster, LayerConfig, Model, Network, Plan, Profile,
    Resources, Training,
};
use serde_json::json;

use super::PlanArgs;

/// The network named by `--model`: a built-in, else a file.
fn network(arg: &str) -> Result<(Network, String)> {
    let (net, origin) = match builtin::network(arg) {
        Some(net) => (net, format!("built-in network `{arg}`")),
        None => (spec::load::<Network>(Path::new(arg))?, arg.to_string()),
    };
    net.validate(&origin)?;
    Ok((net, origin))
}

/// The profile named by `--profile`: a built-in, else a file.
pub(crate) fn profile(arg: &str, cluster: &Cluster) -> Result<Profile> {
    let (profile, origin) = match builtin::profile(arg) {
        Some(p) => (p, format!("built-in profile `{arg}`")),
        None => (spec::load::<Profile>(Path::new(arg))?, arg.to_string()),
    };
    profile.validate(&origin)?;
    profile.validate_for(&origin, cluster)?;
    Ok(profile)
}

/// The training settings of `--training`, else the paper's for its networks, else
/// Fashion-MNIST's.
fn training(arg: Option<&Path>, model: &str) -> Result<Training> {
    match arg {
        None => Ok(builtin::paper_training(model).unwrap_or_else(builtin::fashion_mnist_training)),
        Some(path) => {
            let t: Training = spec::load(path)?;
            t.validate(&path.display().to_string())?;
            Ok(t)
        }
    }
}

/// Runs `iterstore plan`.
pub fn plan(args: &PlanArgs) -> Result<()> {
    let (Some(machines), Some(cores), Some(model), Some(profile_arg)) =
        (args.machines, args.cores, &args.model, &args.profile)
    else {
        bail!("iterstore plan needs --model, --profile, --machines and --cores (or --validate)");
    };
    let cluster = Cluster { machines, cores };
    cluster.validate()?;
    let (net, _) = network(model)?;
    let profile = profile(profile_arg, &cluster)?;
    let training = training(args.training.as_deref(), model)?;
    for (out, flag) in [(&args.output, "--output"), (&args.json, "--json")] {
        if let Some(out) = out {
            let dir = out
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if !dir.is_dir() {
                bail!(
                    "{flag} {}: directory {} does not exist",
                    out.display(),
                    dir.display()
                );
            }
        }
    }

    let model = Model::new(&net, &profile, &training);
    if !args.evaluate.is_empty() {
        return evaluate_given(args, &model, &cluster, &net, &profile, &training);
    }
    let start = Instant::now();
    let found = search(&model, &cluster)?;
    let took = start.elapsed();
    println!(
        "{} on {} machines x {} cores, profile {}: {} resource triples ({} DP runs) searched in {:.1} ms",
        net.name,
        cluster.machines,
        cluster.cores,
        profile.name,
        found.candidates.len(),
        found.dp_runs,
        took.as_secs_f64() * 1e3
    );
    println!();
    print_header("rank");
    for (rank, c) in found.candidates.iter().take(args.top).enumerate() {
        print_row(&(rank + 1).to_string(), c);
    }
    if let Some(path) = &args.json {
        write_json(path, &net, &profile, &cluster, &training, &found.candidates)?;
    }
    let best = found.best();
    println!();
    print!("best: ");
    print_layers(best);
    if let Some(out) = &args.output {
        let plan = Plan::new(&net.name, &profile.name, cluster, training, best);
        super::output::write_file(out, plan.to_json().as_bytes())
            .with_context(|| format!("writing the plan to {}", out.display()))?;
        println!();
        println!("plan written to {}", out.display());
    }
    Ok(())
}

/// The table header of [`print_row`], its first column named `first`.
fn print_header(first: &str) {
    println!(
        "{first:>4}  W/R/PS    epoch (s)      U_f      M_f      U_b      M_b      U_w      M_w"
    );
}

/// One candidate: its W/R/PS, epoch time and components.
fn print_row(first: &str, c: &Candidate) {
    let s = &c.estimate.components;
    println!(
        "{first:>4}  {:<8} {:>9.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
        c.resources.wrps(),
        c.estimate.epoch_s,
        s.uf,
        s.mf,
        s.ub,
        s.mb,
        s.uw,
        s.mw
    );
}

/// `--json`: every candidate with its estimate, fastest first, and the inputs.
fn write_json(
    path: &Path,
    net: &Network,
    profile: &Profile,
    cluster: &Cluster,
    training: &Training,
    candidates: &[Candidate],
) -> Result<()> {
    let times: Vec<f64> = candidates.iter().map(|c| c.estimate.epoch_s).collect();
    let rank = ranks(&times);
    let list: Vec<_> = candidates
        .iter()
        .zip(rank)
        .map(|(c, rank)| {
            json!({
                "config": c.resources.wrps(),
                "rank": rank,
                "epoch_s": c.estimate.epoch_s,
                "resources": c.resources,
                "layers": c.layers,
                "traffic": c.traffic,
                "estimate": c.estimate,
            })
        })
        .collect();
    let doc = json!({
        "version": spec::FORMAT_VERSION,
        "network": net.name,
        "profile": profile.name,
        "cluster": cluster,
        "training": training,
        "candidates": list,
    });
    let text = serde_json::to_string_pretty(&doc).expect("candidates serialize");
    super::output::write_file(path, text.as_bytes())
        .with_context(|| format!("writing --json {}", path.display()))?;
    println!(
        "{} candidates written to {}",
        candidates.len(),
        path.display()
    );
    Ok(())
}

/// `--layers P:R:H,..` for a network of `layers` layers: one per layer, or one for all.
fn parse_layers(text: &str, layers: usize) -> Result<Vec<LayerConfig>> {
    let one = |item: &str| -> Result<LayerConfig> {
        let parts: Vec<&str> = item.trim().split(':').collect();
        let [p, r, h] = parts.as_slice() else {
            bail!("--layers: `{item}` is not P:R:H (partitions:copies:threads, e.g. 2:1:16)");
        };
        let n = |what: &str, s: &str| -> Result<u32> {
            match s.trim().parse::<u32>() {
                Ok(v) if v >= 1 => Ok(v),
                _ => Err(anyhow!(
                    "--layers: `{item}`: {what} `{s}` is not a whole number of at least 1"
                )),
            }
        };
        Ok(LayerConfig {
            partitions: n("P", p)?,
            replications: n("R", r)?,
            threads: n("H", h)?,
        })
    };
    let given: Vec<LayerConfig> = text.split(',').map(one).collect::<Result<_>>()?;
    match given.len() {
        1 => Ok(vec![given[0]; layers]),
        n if n == layers => Ok(given),
        n => bail!("--layers: {n} P:R:H given; the network has {layers} layers (give one per layer, or one for all)"),
    }
}

/// Checks explicit layer choices against a configuration: C2, C3 and each layer's rows.
fn check_layers(
    model: &Model,
    cluster: &Cluster,
    res: &Resources,
    layers: &[LayerConfig],
) -> Result<()> {
    for (l, (c, s)) in layers.iter().zip(model.shapes()).enumerate() {
        if c.workers() > res.workers {
            bail!(
                "--layers: layer {l} ({}) needs P x R = {} workers; {} has {} per replica",
                s.name,
                c.workers(),
                res.wrps(),
                res.workers
            );
        }
        if u64::from(c.partitions) > s.rows {
            bail!(
                "--layers: layer {l} ({}) has {} rows, fewer than P = {}",
                s.name,
                s.rows,
                c.partitions
            );
        }
        if c.threads > cluster.cores {
            bail!(
                "--layers: layer {l} ({}) has H = {} threads; a machine has {} cores",
                s.name,
                c.threads,
                cluster.cores
            );
        }
    }
    Ok(())
}

/// `--evaluate`: the estimate of each given configuration, with its breakdown and layers.
fn evaluate_given(
    args: &PlanArgs,
    model: &Model,
    cluster: &Cluster,
    net: &Network,
    profile: &Profile,
    training: &Training,
) -> Result<()> {
    let triples: Vec<Resources> = args
        .evaluate
        .iter()
        .map(|t| Resources::parse_wrps(t).map_err(|e| anyhow!("--evaluate: {e}")))
        .collect::<Result<_>>()?;
    let explicit = match &args.layers {
        Some(text) => Some(parse_layers(text, model.shapes().len())?),
        None => None,
    };
    let mut candidates = Vec::new();
    for res in &triples {
        if res.machines() > cluster.machines {
            bail!(
                "--evaluate: {} uses {} machines (W x R + PS); --machines is {}",
                res.wrps(),
                res.machines(),
                cluster.machines
            );
        }
        let c = match &explicit {
            Some(layers) => {
                check_layers(model, cluster, res, layers)?;
                evaluate(model, res, layers)
            }
            None if args.compose == "uniform" => uniform(model, res, cluster.cores),
            None => best_for(model, cluster, res)?,
        };
        candidates.push(c);
    }
    let how = match (&explicit, args.compose.as_str()) {
        (Some(_), _) => "the given layers",
        (None, "uniform") => "every layer striped over W workers",
        _ => "the optimizer's best layers for each",
    };
    println!(
        "{} on {} machines x {} cores, profile {}: {} configurations, {how}",
        net.name,
        cluster.machines,
        cluster.cores,
        profile.name,
        candidates.len()
    );
    println!();
    let times: Vec<f64> = candidates.iter().map(|c| c.estimate.epoch_s).collect();
    let order = ranks(&times);
    print_header("rank");
    for (c, rank) in candidates.iter().zip(&order) {
        print_row(&format!("{rank}"), c);
    }
    for c in &candidates {
        println!();
        print_layers(c);
    }
    if let Some(path) = &args.json {
        write_json(path, net, profile, cluster, training, &candidates)?;
    }
    Ok(())
}

/// A candidate layer by layer: its split, threads and seconds per component.
fn print_layers(best: &Candidate) {
    let r = &best.resources;
    println!(
        "{} (W/R/PS): {} replicas of {} workers, {} parameter servers; per layer (seconds per epoch):",
        r.wrps(),
        r.replicas,
        r.workers,
        r.parameter_servers
    );
    println!("layer          P    R    H       U_f      M_f      U_b      M_b      U_w      M_w");
    for (c, l) in best.layers.iter().zip(&best.estimate.layers) {
        let s = &l.seconds;
        println!(
            "{:<12} {:>3}  {:>3}  {:>3}  {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            l.name, c.partitions, c.replications, c.threads, s.uf, s.mf, s.ub, s.mb, s.uw, s.mw
        );
    }
}
