//! `iterstore calibrate`: measures this machine's hardware profile for the performance
//! model and writes it as a profile file (`iterstore plan --profile FILE`). Thin glue over
//! [`iterstore_apps::calibrate`].

use anyhow::{bail, Context, Result};
use iterstore::deploy::{Membership, Secret, SECRET_ENV};
use iterstore::{Cluster, Config};
use iterstore_apps::calibrate::network::link_costs;
use iterstore_apps::calibrate::{calibrate, Settings};
use iterstore_perf::{builtin, LayerKind};

use super::CalibrateArgs;

/// `iterstore calibrate --link`: one of two processes measuring the link between them.
fn link(args: &CalibrateArgs) -> Result<()> {
    let (Some(hosts), Some(rank)) = (&args.hosts, args.rank) else {
        bail!("--link needs --hosts and --rank");
    };
    let secret = match &args.secret_file {
        Some(path) => Secret::from_file(path)?,
        None => Secret::from_env(SECRET_ENV)
            .context("--link needs --secret-file or ITERSTORE_SECRET")?,
    };
    let membership = Membership::from_hosts_file(hosts, rank, secret)?;
    let mut settings = if args.quick {
        Settings::quick(1)
    } else {
        Settings::full(1)
    };
    // Messages the size of the DNN's weight transfers (its largest layer is 1.6 MB).
    settings.bandwidth_bytes = settings.bandwidth_bytes.min(2 << 20);
    let mut cluster = Cluster::start(Config::new(1).with_membership(membership))?;
    let (latency_s, bits_per_s) = link_costs(&mut cluster, &settings)?;
    cluster.shutdown()?;
    if rank == 0 {
        println!(
            "link: {:.1} us one way, {:.0} Mbit/s (the store's transport)",
            latency_s * 1e6,
            bits_per_s / 1e6
        );
        if let Some(out) = &args.output {
            let text =
                serde_json::json!({ "latency_s": latency_s, "bandwidth_bits_per_s": bits_per_s });
            super::output::write_file(out, (text.to_string() + "\n").as_bytes())?;
        }
    }
    Ok(())
}

/// Runs `iterstore calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    if args.link {
        return link(args);
    }
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let settings = if args.quick {
        Settings::quick(threads)
    } else {
        Settings::full(threads)
    };
    let output = super::output::Output::create(args.output.as_deref())?;
    let network = builtin::cnn();
    tracing::info!(
        "calibrating: a {0}x{0} layer over batches of {1}, the {2} network's convolution and \
         pooling layers, up to {threads} threads, and up to {threads} pairs of processes on \
         127.0.0.1",
        settings.size,
        settings.batch,
        network.name
    );
    let measured = calibrate(&args.name, &settings, &network, args.ps_read_alpha)?;
    let profile = measured.profile;
    profile
        .validate("the measured profile")
        .context("the measurement gave an invalid profile")?;
    println!("profile {}:", profile.name);
    println!(
        "  C_muladd  {:.3e} s per multiply-add (fully connected layer GEMMs)",
        profile.c_muladd_s
    );
    for (kind, cost, unit) in [
        (
            LayerKind::Convolution,
            profile.c_muladd_by_kind_s.convolution,
            "multiply-add (im2col + GEMM)",
        ),
        (
            LayerKind::Pooling,
            profile.c_muladd_by_kind_s.pooling,
            "window entry (max pooling)",
        ),
    ] {
        let Some(cost) = cost else { continue };
        let layers: Vec<String> = measured
            .kinds
            .layers
            .iter()
            .filter(|l| l.kind == kind)
            .map(|l| format!("{} {:.2e}", l.name, l.seconds_per_op))
            .collect();
        let label = if kind == LayerKind::Convolution {
            "conv"
        } else {
            "pool"
        };
        println!(
            "    {label:<7} {cost:.3e} s per {unit}, {:.1}x fully connected ({}: {})",
            cost / profile.c_muladd_s,
            network.name,
            layers.join(", ")
        );
    }
    println!("  C_act     {:.3e} s per activation", profile.c_act_s);
    println!("  C_err     {:.3e} s per error term", profile.c_err_s);
    let list = |v: &[f64], scale: f64, digits: usize| -> String {
        let v: Vec<String> = v
            .iter()
            .map(|x| format!("{:.digits$}", x * scale))
            .collect();
        v.join(", ")
    };
    let caches: Vec<String> = measured
        .cache
        .levels
        .iter()
        .map(|c| format!("L{} {} KiB", c.level, c.bytes >> 10))
        .collect();
    println!(
        "  C_muladd by working set, x C_muladd (fully connected GEMMs; sizes around {}{}):",
        measured.cache.sizes_from,
        if caches.is_empty() {
            String::new()
        } else {
            format!(": {}", caches.join(", "))
        }
    );
    for p in profile
        .c_muladd_by_working_set
        .as_deref()
        .unwrap_or_default()
    {
        println!("    {:>10.0} KiB  {:.2}", p.bytes / 1024.0, p.factor);
    }
    let h = profile.c_interf.len();
    println!(
        "  C_interf  [{}] (H = 1..{h})",
        list(&profile.c_interf, 1.0, 2)
    );
    println!(
        "  C_ncost   [{}] us per message with H = 1..{} concurrent streams (TCP on 127.0.0.1, \
         half a round trip)",
        list(&profile.c_ncost_s, 1e6, 1),
        profile.c_ncost_s.len()
    );
    let per_thread = profile
        .c_nbw_per_thread_bits_per_s
        .as_deref()
        .unwrap_or_default();
    println!(
        "  C_nbw     [{}] Gbit/s per stream with H = 1..{} concurrent streams (TCP on \
         127.0.0.1)",
        list(per_thread, 1e-9, 2),
        per_thread.len()
    );
    println!(
        "  ps_read_alpha {} (given, not measured)",
        profile.ps_read_alpha
    );
    if let Some(out) = output {
        let text = serde_json::to_string_pretty(&profile)?;
        out.write(|w| writeln!(w, "{text}"))?;
    }
    Ok(())
}
