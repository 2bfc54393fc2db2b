//! `iterstore plan --validate`: the performance model against measured runs of the DNN
//! app's MLP. Calibrates this machine (`iterstore calibrate` as a child, in a CPU group of
//! one emulated machine's cores) unless `--profile` is given, runs every configuration of
//! [`iterstore_apps::validate::configs`] as local processes (`iterstore run dnn`, one
//! worker per process, each process in its own CPU group where cgroups allow), and prints
//! estimated against measured epoch times with each error and the rank correlation; writes
//! them as JSON (`--json`) and a chart (`--svg`). With `--emulate RATE` every
//! configuration runs through `tools/emulate-cluster` (a network namespace per process,
//! links of RATE, the same CPU quota) and the profile's network figures are the emulated
//! link's, measured by `iterstore calibrate --link` on two such machines. Every child is bounded in time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use iterstore_apps::validate::{chart_svg, configs, fit_alpha, scaled, spearman, Config};
use iterstore_perf::{Cluster, Profile};

use super::cgroup::CpuGroup;
use super::launch::TempDir;
use super::PlanArgs;

/// The longest one child (a calibration or a configuration's run) may take.
const CHILD_LIMIT: Duration = Duration::from_secs(30 * 60);
/// Mini-batch of the runs (`run dnn`'s default).
const BATCH: usize = 64;
/// The bar: every estimate within this fraction of its measurement.
const BAR_ERROR: f64 = 0.25;

/// One configuration's outcome.
#[derive(serde::Serialize)]
struct Measured {
    name: String,
    configuration: String,
    parameter_servers: usize,
    replicas: usize,
    replica_workers: usize,
    partitions: Vec<usize>,
    replications: Vec<usize>,
    n_read: usize,
    n_write: usize,
    estimated_s: f64,
    /// The estimate's breakdown.
    estimate: iterstore_perf::Estimate,
    measured_s: f64,
    /// `(estimated − measured) / measured`.
    error: f64,
}

#[derive(serde::Serialize)]
struct Report {
    profile: Profile,
    /// The emulated links' rate, if any (else loopback).
    emulated_links: Option<String>,
    cpu_quota_cores: Option<f64>,
    samples_per_epoch: u64,
    sizes: Vec<usize>,
    configs: Vec<Measured>,
    rank_correlation: f64,
    max_abs_error: f64,
    ranking_exact: bool,
    /// Each configuration's error with `alpha` fitted to the other configurations.
    leave_one_out_errors: Vec<f64>,
    /// The profile's `ps_read_alpha` before the fit, and what it gave.
    stated_alpha: f64,
    stated_rank_correlation: f64,
    stated_max_abs_error: f64,
}

/// Runs `cmd` to completion within [`CHILD_LIMIT`], in `group` if given; its stderr is
/// returned in the error if it fails.
fn run_child(mut cmd: Command, what: &str, group: Option<&CpuGroup>) -> Result<()> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    if let Some(g) = group {
        if let Err(e) = g.add(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.context(format!("placing {what} in its CPU group")));
        }
    }
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
        }
        text
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {} s", CHILD_LIMIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("{what} failed ({status}): {}", text.trim());
    }
    Ok(())
}

/// The profile: `--profile`'s, or this machine's measured in a CPU group of `quota` cores.
fn profile(args: &PlanArgs, exe: &Path, dir: &Path, quota: Option<f64>) -> Result<Profile> {
    let one = Cluster {
        machines: 4,
        cores: 1,
    };
    if let Some(p) = &args.profile {
        return super::plan::profile(p, &one);
    }
    let out = dir.join("profile.json");
    println!("calibrating one core ...");
    let mut cmd = Command::new(exe);
    cmd.args(["calibrate", "-q", "--threads", "1", "--output"])
        .arg(&out);
    // Unthrottled: a quota's throttling spares measurements shorter than its period, so
    // the profile is measured on one core and scaled to the machines' cores.
    run_child(cmd, "iterstore calibrate", None)?;
    let measured = super::plan::profile(&out.display().to_string(), &one)?;
    Ok(match quota {
        Some(cores) => scaled(&measured, cores),
        None => measured,
    })
}

fn cores_text(quota: Option<f64>) -> String {
    match quota {
        Some(q) => format!("{q} core(s)"),
        None => "this machine's cores, no quota".into(),
    }
}

/// The cluster emulator of `--emulator`, or `tools/emulate-cluster` of the current
/// directory or of the repository this binary was built in.
fn emulator(args: &PlanArgs) -> Result<PathBuf> {
    if let Some(p) = &args.emulator {
        if !p.is_file() {
            bail!("--emulator {}: no such file", p.display());
        }
        return Ok(p.clone());
    }
    let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/emulate-cluster");
    [PathBuf::from("tools/emulate-cluster"), built_in]
        .into_iter()
        .find(|p| p.is_file())
        .context("--emulate: tools/emulate-cluster not found; give --emulator PATH")
}

/// The emulated link's latency (s) and bandwidth (bits/s) as the store's transport sees
/// them: `iterstore calibrate --link` on two emulated machines of `quota` cores.
fn calibrate_link(
    emulator: &Path,
    exe: &Path,
    dir: &Path,
    rate: &str,
    quota: Option<f64>,
) -> Result<(f64, f64)> {
    let out = dir.join("link.json");
    let mut cmd = Command::new("python3");
    cmd.arg(emulator).args(["--processes", "2", "--rate", rate]);
    if let Some(q) = quota {
        cmd.args(["--cpu-quota", &q.to_string()]);
    }
    cmd.arg("--binary")
        .arg(exe)
        .args(["--", "calibrate", "-q", "--link", "--output"])
        .arg(&out);
    run_child(cmd, "the link calibration", None)?;
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)?;
    let figure = |k: &str| {
        v[k].as_f64()
            .with_context(|| format!("{}: no {k}", out.display()))
    };
    Ok((figure("latency_s")?, figure("bandwidth_bits_per_s")?))
}

/// Runs configuration `c` and returns its report.
fn measure(
    args: &PlanArgs,
    exe: &Path,
    dir: &Path,
    c: &Config,
    quota: Option<f64>,
    emulated: Option<&Path>,
) -> Result<serde_json::Value> {
    let json = dir.join("run.json");
    let _ = std::fs::remove_file(&json);
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let n = c.n_read(BATCH).to_string();
    let mut cmd = match (emulated, &args.emulate) {
        (Some(emulator), Some(rate)) => {
            let mut cmd = Command::new("python3");
            cmd.arg(emulator)
                .args(["--processes", &c.processes().to_string(), "--rate", rate]);
            if let Some(q) = quota {
                cmd.args(["--cpu-quota", &q.to_string()]);
            }
            cmd.arg("--binary").arg(exe).arg("--");
            cmd
        }
        _ => Command::new(exe),
    };
    cmd.args(["run", "dnn", "-q", "--mode", "virtual", "--workers", "1"]);
    match (&args.data, &args.synthetic) {
        (Some(d), _) => {
            cmd.arg("--data").arg(d);
        }
        (None, s) => {
            cmd.args(["--synthetic", s.as_deref().unwrap_or("small")]);
        }
    }
    if let Some(h) = &args.hidden {
        cmd.args(["--hidden", &list(h)]);
    }
    cmd.args(["--iters", &args.iters.to_string()])
        .args(["--replicas", &c.replicas.to_string()])
        .args(["--replica-workers", &c.replica_workers.to_string()])
        .args(["--parameter-servers", &c.servers.to_string()])
        .args(["--partitions", &list(&c.partitions)])
        .args(["--replications", &list(&c.replications)])
        .args(["--n-read", &n, "--n-write", &n])
        .arg("--json")
        .arg(&json);
    let mut group = None;
    if emulated.is_some() {
        // The emulator starts the processes, each in its namespace and CPU group.
    } else if c.processes() > 1 {
        cmd.args(["--processes", &c.processes().to_string()]);
        if let Some(q) = quota {
            cmd.args(["--cpu-quota", &q.to_string()]);
        }
    } else if let Some(q) = quota {
        group = Some(CpuGroup::create("single", q)?);
    }
    run_child(cmd, &format!("configuration `{}`", c.name), group.as_ref())?;
    let text =
        std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// Runs `iterstore plan --validate`.
pub fn validate(args: &PlanArgs) -> Result<()> {
    if args.model.as_deref().is_some_and(|m| m != "mlp") {
        bail!("--validate runs the DNN app's MLP: give --model mlp or leave it out");
    }
    for (path, flag) in [(&args.json, "--json"), (&args.svg, "--svg")] {
        if let Some(p) = path {
            let parent = p.parent().filter(|d| !d.as_os_str().is_empty());
            if parent.is_some_and(|d| !d.is_dir()) {
                bail!("{flag} {}: its directory does not exist", p.display());
            }
        }
    }
    let exe = std::env::current_exe().context("finding this program's path")?;
    let dir = TempDir::new()?;
    let all = configs(args.hidden.as_ref().map_or(2, Vec::len) + 1);
    let most = all.iter().map(Config::processes).max().unwrap_or(1);
    let here = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let quota = if CpuGroup::available() {
        Some(args.cpu_quota.unwrap_or(here as f64 / most as f64))
    } else {
        if args.cpu_quota.is_some() {
            bail!("--cpu-quota needs root and cgroup v1's cpu controller");
        }
        tracing::warn!(
            "no CPU groups here (needs root and cgroup v1): the processes share this \
             machine's {here} CPUs, so configurations of more processes than CPUs run slower \
             than the model's separate machines"
        );
        None
    };
    let mut profile = profile(args, &exe, dir.path(), quota)?;
    let emulated = match &args.emulate {
        None => None,
        Some(rate) => {
            if !CpuGroup::available() {
                bail!("--emulate needs root (network namespaces, tc, cgroups)");
            }
            let emulator = emulator(args)?;
            let (latency_s, bits_per_s) = calibrate_link(&emulator, &exe, dir.path(), rate, quota)?;
            println!(
                "emulated links of {rate}: {:.0} Mbit/s and {:.3} ms one way through the \
                 store's transport",
                bits_per_s / 1e6,
                latency_s * 1e3
            );
            // The links, not loopback, carry the traffic now.
            profile.c_nbw_bits_per_s = bits_per_s;
            profile.c_nbw_per_thread_bits_per_s = Some(vec![bits_per_s]);
            profile.c_ncost_s = vec![latency_s];
            Some(emulator)
        }
    };
    let mut measured: Vec<f64> = Vec::with_capacity(all.len());
    let (mut sizes, mut samples) = (Vec::new(), 0u64);
    for (i, c) in all.iter().enumerate() {
        println!("[{}/{}] {}: {} ...", i + 1, all.len(), c.name, c.describe());
        let report = measure(args, &exe, dir.path(), c, quota, emulated.as_deref())?;
        measured.push(
            report["iterations"]
                .as_array()
                .and_then(|its| its.last())
                .and_then(|it| it["seconds"].as_f64())
                .context("the run's report has no iteration time")?,
        );
        samples = report["dataset"]["train_images"].as_u64().unwrap_or(0);
        let pixels = report["dataset"]["pixels"].as_u64().unwrap_or(0) as usize;
        let classes = report["dataset"]["classes"].as_u64().unwrap_or(0) as usize;
        sizes = std::iter::once(pixels)
            .chain(args.hidden.clone().unwrap_or_else(|| vec![512, 256]))
            .chain(std::iter::once(classes))
            .collect();
    }
    let estimates = |p: &Profile| -> Vec<iterstore_perf::Estimate> {
        all.iter()
            .map(|c| c.estimate(&sizes, p, samples as usize, BATCH))
            .collect()
    };
    let summary = |est: &[iterstore_perf::Estimate]| {
        let e: Vec<f64> = est.iter().map(|x| x.epoch_s).collect();
        let worst = e
            .iter()
            .zip(&measured)
            .map(|(e, m)| ((e - m) / m).abs())
            .fold(0.0, f64::max);
        (spearman(&e, &measured), worst)
    };
    let stated_alpha = profile.ps_read_alpha;
    let (stated_rho, stated_error) = summary(&estimates(&profile));
    let (fitted_alpha, _) = fit_alpha(&measured, |a| {
        let mut p = profile.clone();
        p.ps_read_alpha = a;
        estimates(&p).iter().map(|e| e.epoch_s).collect()
    });
    // Leave one out: each configuration's estimate with alpha fitted to the others.
    let alpha_estimates: Vec<Vec<f64>> = (0..=100)
        .map(|k| {
            let mut p = profile.clone();
            p.ps_read_alpha = f64::from(k) / 100.0;
            estimates(&p).iter().map(|e| e.epoch_s).collect()
        })
        .collect();
    let loo_errors: Vec<f64> = (0..all.len())
        .map(|i| {
            let others: Vec<f64> = (0..all.len())
                .filter(|&j| j != i)
                .map(|j| measured[j])
                .collect();
            let (alpha, _) = fit_alpha(&others, |a| {
                let row = &alpha_estimates[(a * 100.0).round() as usize];
                (0..all.len()).filter(|&j| j != i).map(|j| row[j]).collect()
            });
            let e = alpha_estimates[(alpha * 100.0).round() as usize][i];
            (e - measured[i]) / measured[i]
        })
        .collect();
    let loo_max = loo_errors.iter().map(|e| e.abs()).fold(0.0, f64::max);
    profile.ps_read_alpha = fitted_alpha;
    let out: Vec<Measured> = all
        .iter()
        .zip(estimates(&profile))
        .zip(&measured)
        .map(|((c, estimate), &measured_s)| {
            let n = c.n_read(BATCH);
            let estimated_s = estimate.epoch_s;
            Measured {
                name: c.name.clone(),
                configuration: c.describe(),
                parameter_servers: c.parameter_servers(),
                replicas: c.replicas,
                replica_workers: c.replica_workers,
                partitions: c.partitions.clone(),
                replications: c.replications.clone(),
                n_read: n,
                n_write: n,
                estimated_s,
                estimate,
                measured_s,
                error: (estimated_s - measured_s) / measured_s,
            }
        })
        .collect();
    let est: Vec<f64> = out.iter().map(|m| m.estimated_s).collect();
    let rho = spearman(&est, &measured);
    let max_abs_error = out.iter().map(|m| m.error.abs()).fold(0.0, f64::max);
    println!();
    println!(
        "MLP {} on {} samples per epoch; machines of {}; profile {}, alpha fitted to {fitted_alpha:.2} \
         (with the stated {stated_alpha}: rank correlation {stated_rho:.3}, largest error {:.1}%)",
        sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("-"),
        samples,
        cores_text(quota),
        profile.name,
        100.0 * stated_error
    );
    println!(
        "{:<3} {:<30} {:>4} {:>4} {:>4} {:>6} {:>8} {:>8} {:>8} {:>10} {:>10} {:>7}",
        "#",
        "configuration",
        "N_ps",
        "N_mr",
        "N_wr",
        "N_read",
        "compute",
        "M_f+M_b",
        "M_w",
        "estimated",
        "measured",
        "error"
    );
    for (i, m) in out.iter().enumerate() {
        let c = &m.estimate.components;
        println!(
            "{:<3} {:<30} {:>4} {:>4} {:>4} {:>6} {:>7.3}s {:>7.3}s {:>7.3}s {:>9.3}s {:>9.3}s {:>+6.1}%",
            i + 1,
            m.name,
            m.parameter_servers,
            m.replicas,
            m.replica_workers,
            m.n_read,
            c.uf + c.ub + c.uw,
            c.mf + c.mb,
            c.mw,
            m.estimated_s,
            m.measured_s,
            100.0 * m.error
        );
    }
    let exact = (rho - 1.0).abs() < 1e-9;
    println!();
    println!(
        "rank correlation (Spearman) {rho:.3}{}; largest error {:.1}% (bar: the exact ranking and every error within {:.0}%: {}); with alpha fitted to the other configurations (leave one out) the largest error is {:.1}%",
        if exact { " (the measured ranking exactly)" } else { "" },
        100.0 * max_abs_error,
        100.0 * BAR_ERROR,
        if exact && max_abs_error <= BAR_ERROR { "met" } else { "not met" },
        100.0 * loo_max
    );
    let points: Vec<(String, f64, f64)> = out
        .iter()
        .map(|m| (m.name.clone(), m.estimated_s, m.measured_s))
        .collect();
    if let Some(p) = &args.svg {
        let title = format!("estimated vs measured epoch, Spearman {rho:.2}");
        super::output::write_file(p, chart_svg(&title, &points).as_bytes())?;
        println!("chart written to {}", p.display());
    }
    if let Some(p) = &args.json {
        let report = Report {
            profile,
            emulated_links: args.emulate.clone(),
            cpu_quota_cores: quota,
            samples_per_epoch: samples,
            sizes,
            configs: out,
            rank_correlation: rho,
            max_abs_error,
            ranking_exact: exact,
            leave_one_out_errors: loo_errors,
            stated_alpha,
            stated_rank_correlation: stated_rho,
            stated_max_abs_error: stated_error,
        };
        write_json(p, &report)?;
        println!("report written to {}", p.display());
    }
    Ok(())
}

fn write_json(path: &Path, report: &Report) -> Result<()> {
    let text = serde_json::to_string_pretty(report)?;
    super::output::write_file(path, (text + "\n").as_bytes())
}
