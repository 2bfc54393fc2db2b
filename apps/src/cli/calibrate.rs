//! `iterstore calibrate`: measures this machine's hardware profile for the performance
//! model and writes it as a profile file (`iterstore plan --profile FILE`). Thin glue over
//! [`iterstore_apps::calibrate`].

use anyhow::{Context, Result};
use iterstore_apps::calibrate::{calibrate, Settings};

use super::CalibrateArgs;

/// Runs `iterstore calibrate`.
pub fn run(args: &CalibrateArgs) -> Result<()> {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let settings = if args.quick {
        Settings::quick(threads)
    } else {
        Settings::full(threads)
    };
    let output = super::run::Output::create(args.output.as_deref())?;
    tracing::info!(
        "calibrating: a {0}x{0} layer over batches of {1}, up to {threads} threads, and two \
         processes on 127.0.0.1",
        settings.size,
        settings.batch
    );
    let profile = calibrate(&args.name, &settings, args.ps_read_alpha)?;
    profile
        .validate("the measured profile")
        .context("the measurement gave an invalid profile")?;
    println!("profile {}:", profile.name);
    println!(
        "  C_muladd  {:.3e} s per multiply-add (layer GEMMs)",
        profile.c_muladd_s
    );
    println!("  C_act     {:.3e} s per activation", profile.c_act_s);
    println!("  C_err     {:.3e} s per error term", profile.c_err_s);
    let interf: Vec<String> = profile.c_interf.iter().map(|v| format!("{v:.2}")).collect();
    println!(
        "  C_interf  [{}] (H = 1..{})",
        interf.join(", "),
        profile.c_interf.len()
    );
    println!(
        "  C_ncost   {:.1} us per message (TCP on 127.0.0.1, half a round trip)",
        profile.c_ncost_s[0] * 1e6
    );
    println!(
        "  C_nbw     {:.2} Gbit/s (TCP on 127.0.0.1)",
        profile.c_nbw_bits_per_s / 1e9
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
