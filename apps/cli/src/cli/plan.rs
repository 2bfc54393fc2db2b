//! `iterstore plan`: the performance model's search for a network on a cluster.
//!
//! Resolves `--model` and `--profile` (a built-in name, else a JSON file), reads and
//! validates every input and checks `--output`'s directory before searching, then prints
//! the fastest configurations with their epoch time and breakdown, the best one layer by
//! layer, and writes it as a plan file. Thin glue over `iterstore_perf`.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use iterstore_perf::{
    builtin, search, spec, Candidate, Cluster, Model, Network, Plan, Profile, Training,
};

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

/// The training settings of `--training`, or Fashion-MNIST's.
fn training(arg: Option<&Path>) -> Result<Training> {
    match arg {
        None => Ok(builtin::fashion_mnist_training()),
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
    let training = training(args.training.as_deref())?;
    if let Some(out) = &args.output {
        let dir = out
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            bail!(
                "--output {}: directory {} does not exist",
                out.display(),
                dir.display()
            );
        }
    }

    let model = Model::new(&net, &profile, &training);
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
    println!(
        "rank  N_ps N_mr N_wr  epoch (s)      U_f      M_f      U_b      M_b      U_w      M_w"
    );
    for (rank, c) in found.candidates.iter().take(args.top).enumerate() {
        let (r, s) = (&c.resources, &c.estimate.components);
        println!(
            "{:>4}  {:>4} {:>4} {:>4}  {:>9.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}",
            rank + 1,
            r.parameter_servers,
            r.replicas,
            r.workers,
            c.estimate.epoch_s,
            s.uf,
            s.mf,
            s.ub,
            s.mb,
            s.uw,
            s.mw
        );
    }
    let best = found.best();
    println!();
    print_layers(best);
    if let Some(out) = &args.output {
        let plan = Plan::new(&net.name, &profile.name, cluster, training, best);
        std::fs::write(out, plan.to_json())
            .with_context(|| format!("writing the plan to {}", out.display()))?;
        println!();
        println!("plan written to {}", out.display());
    }
    Ok(())
}

/// The best candidate layer by layer: its split, threads and seconds per component.
fn print_layers(best: &Candidate) {
    let r = &best.resources;
    println!(
        "best: {} parameter servers, {} replicas of {} workers; per layer (seconds per epoch):",
        r.parameter_servers, r.replicas, r.workers
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
