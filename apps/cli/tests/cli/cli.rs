//! The `iterstore` binary as scripts use it: files written by `run`, error reporting and
//! exit statuses, and the demo.

use iterstore_algo::pagerank::{reference, PageRankConfig};
use iterstore_data::load_edges;

use crate::util::{fixture, iterstore, json_file, scratch, stderr};

#[test]
fn pagerank_writes_labelled_ranks_and_a_json_report() {
    let dir = scratch("cli-pagerank");
    let (ranks, report) = (dir.join("r.tsv"), dir.join("out.json"));
    let graph = fixture("graph30.tsv");
    let out = iterstore(&[
        "run",
        "pagerank",
        "--data",
        graph.to_str().unwrap(),
        "--iters",
        "50",
        "--block",
        "8",
        "--output",
        ranks.to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("L1 change"));

    let labeled = load_edges(&graph).unwrap();
    let want = reference(&labeled.graph, &PageRankConfig::default(), 50);
    let text = std::fs::read_to_string(&ranks).unwrap();
    let lines: Vec<(u64, f64)> = text
        .lines()
        .map(|l| {
            let (label, rank) = l.split_once('\t').expect("label<TAB>rank");
            (label.parse().unwrap(), rank.parse().unwrap())
        })
        .collect();
    assert_eq!(lines.len(), 30);
    assert!(lines.windows(2).all(|w| w[0].0 < w[1].0), "sorted by label");
    for (label, rank) in &lines {
        let v = labeled
            .labels
            .iter()
            .position(|l| l == &label.to_string())
            .unwrap();
        assert!((rank - want[v]).abs() < 1e-9, "vertex {label}");
    }

    let v = json_file(&report);
    assert_eq!(v["app"], "pagerank");
    assert_eq!(v["input"], graph.to_str().unwrap());
    assert_eq!(v["iterstore_version"], env!("CARGO_PKG_VERSION"));
    assert!(v["started_at"].as_str().unwrap().ends_with('Z'));
    let command = v["command_line"].as_str().unwrap();
    assert!(
        command.ends_with(&format!("--json {}", report.display())),
        "{command}"
    );
    assert_eq!(v["mode"], "virtual");
    assert_eq!(v["workers"], 2);
    assert_eq!(v["staleness"], 0);
    assert!(v["preprocess_s"].as_f64().unwrap() >= 0.0);
    assert!(v["init_s"].as_f64().unwrap() >= 0.0);
    assert_eq!(v["dataset"]["vertices"], 30);
    let iters = v["iterations"].as_array().unwrap();
    assert_eq!(iters.len(), 50);
    assert_eq!(iters[49]["iter"], 49);
    assert!(iters[49]["seconds"].as_f64().unwrap() >= 0.0);
    assert!(iters[49]["objective"].as_f64().unwrap() < iters[0]["objective"].as_f64().unwrap());
    // How the store served the accesses: the 50 iterations followed the op tapes.
    let store = &v["store"];
    assert!(store["tape_accesses"].as_u64().unwrap() > 0, "{store}");
    assert_eq!(store["unplanned_accesses"], 0, "{store}");
    assert_eq!(store["tape_truncated"], 0, "{store}");
    // Memory: resident bytes per iteration and at the peak, the specialized state by part.
    if cfg!(target_os = "linux") {
        assert!(iters[49]["rss_bytes"].as_u64().unwrap() > 0);
        let memory = &v["memory"];
        let peak = memory["peak_rss_bytes"].as_u64().unwrap();
        assert!(
            peak >= memory["steady_rss_bytes"].as_u64().unwrap(),
            "{memory}"
        );
        assert!(memory["special"]["tapes"].as_u64().unwrap() > 0, "{memory}");
        assert!(
            memory["special"]["process_arena"].as_u64().unwrap() > 0,
            "{memory}"
        );
    }
}

#[test]
fn stderr_that_is_not_a_terminal_gets_a_timestamped_line_per_iteration() {
    let graph = fixture("graph30.tsv");
    let args = [
        "run",
        "pagerank",
        "--data",
        graph.to_str().unwrap(),
        "--iters",
        "4",
    ];
    let out = iterstore(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    let lines: Vec<&str> = log.lines().collect();
    // Reading the data: a line when it starts and one with the counts when it ends.
    assert!(
        lines[0].contains("INFO reading") && lines[0].contains("graph30.tsv ("),
        "{log}"
    );
    assert!(lines[1].contains("30 vertices"), "{log}");
    for i in 1..=4 {
        let line = lines
            .iter()
            .find(|l| l.contains(&format!("pagerank: iteration {i}/4 took ")))
            .unwrap_or_else(|| panic!("no line for iteration {i}: {log}"));
        assert!(
            line.contains(", objective ") && line.contains(", ETA "),
            "{line}"
        );
        // RFC 3339 UTC timestamp first.
        assert!(
            line.starts_with("20") && line.split(' ').next().unwrap().ends_with('Z'),
            "{line}"
        );
    }

    let quiet = iterstore(&[&["-q"][..], &args].concat());
    assert!(quiet.status.success());
    assert!(quiet.stderr.is_empty(), "-q: {}", stderr(&quiet));
    assert!(
        String::from_utf8_lossy(&quiet.stdout).contains("L1 change"),
        "-q keeps the summary"
    );
    let verbose = iterstore(&[&args[..], &["-v"]].concat());
    assert!(
        stderr(&verbose).contains("DEBUG"),
        "-v: {}",
        stderr(&verbose)
    );
}

#[test]
fn malformed_data_reports_file_and_line() {
    let dir = scratch("cli-malformed");
    let bad = dir.join("bad.tsv");
    std::fs::write(&bad, "1 2\n2 3\n3\n").unwrap();
    let out = iterstore(&["run", "pagerank", "--data", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bad.tsv:3"), "{}", stderr(&out));
}

#[test]
fn pagerank_rejects_files_of_other_formats_with_file_and_line() {
    let dir = scratch("cli-not-a-graph");
    for (name, text) in [
        ("corpus.ldac", "3 0:1 5:2 7:1\n2 1:1 2:4\n"),
        (
            "ratings.inter",
            "user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\t3\t4\n",
        ),
        ("u.data", "196\t242\t3\t881250949\n"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = iterstore(&["run", "pagerank", "--data", path.to_str().unwrap()]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{name}: {err}");
        let first = text.lines().next().unwrap();
        let want = format!("{name}:1: expected two vertex ids, found \"{first}\"");
        assert!(err.contains(&want), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}");
    }
}

#[test]
fn invalid_options_are_rejected_with_a_clear_message() {
    for (args, needle) in [
        (&["run", "mf", "--workers", "0"][..], "--workers"),
        (&["run", "mf", "--iters", "0"][..], "--iters"),
        (
            &["run", "mf", "--mode", "fast"][..],
            "generic, first-iter, virtual",
        ),
        (&["run", "lda", "--staleness", "-2"][..], "staleness"),
        (&["run", "lda", "--synthetic", "huge"][..], "tiny, small"),
        (&["run", "mf", "--topics", "4"][..], "--topics"),
        (&["run", "mf", "--lr", "-1"][..], "learning_rate"),
        (&["run", "pagerank", "--damping", "2"][..], "damping"),
        (
            &["run", "mf", "--data", "x", "--synthetic", "tiny"][..],
            "--synthetic",
        ),
    ] {
        let out = iterstore(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn mf_and_lda_write_their_models() {
    let dir = scratch("cli-models");
    let (model, report) = (dir.join("mf.txt"), dir.join("mf.json"));
    let out = iterstore(&[
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "--iters",
        "3",
        "--mode",
        "generic",
        "--output",
        model.to_str().unwrap(),
        "--json",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&model).unwrap();
    assert!(text.starts_with("# iterstore mf model: rank=16 users=200 items=100\n"));
    assert_eq!(text.lines().filter(|l| l.starts_with("u\t")).count(), 200);
    assert_eq!(text.lines().filter(|l| l.starts_with("i\t")).count(), 100);
    assert!(text.lines().nth(1).unwrap().starts_with("# mean="));
    // Tag, id, 16 factors, bias.
    assert_eq!(text.lines().nth(2).unwrap().split('\t').count(), 2 + 16 + 1);
    let v = json_file(&report);
    assert_eq!(v["mode"], "generic");
    assert!(v["iterations"][2]["test_rmse"].as_f64().is_some());

    let model = dir.join("lda.txt");
    let out = iterstore(&[
        "run",
        "lda",
        "--synthetic",
        "tiny",
        "--iters",
        "2",
        "--staleness",
        "1",
        "--output",
        model.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&model).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("# iterstore lda model: topics=5 vocab=500")
    );
    let totals: i64 = lines
        .next()
        .unwrap()
        .split('\t')
        .skip(1)
        .map(|n| n.parse::<i64>().unwrap())
        .sum();
    let counts: i64 = lines
        .clone()
        .flat_map(|l| l.split('\t').skip(1))
        .map(|n| n.parse::<i64>().unwrap())
        .sum();
    assert_eq!(lines.count(), 500);
    assert_eq!(totals, counts);
}

#[test]
fn demo_runs_every_app_and_its_commands_reproduce_it() {
    let out = iterstore(&["demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("the same runs one at a time:"))
        .filter_map(|l| l.trim().strip_prefix("iterstore run "))
        .collect();
    assert_eq!(commands.len(), 3, "{text}");
    let dir = scratch("cli-demo");
    for command in commands {
        let app = command.split(' ').next().unwrap();
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("{app} ")))
            .unwrap_or_else(|| panic!("no {app} row in {text}"));
        // The row ends in the objective's first and last values (and MF's test RMSE), as
        // the demo formats them.
        let shown = row.split("  ").last().unwrap().trim();
        let json = dir.join(format!("{app}.json"));
        let mut args = vec!["run"];
        args.extend(command.split(' '));
        args.extend(["--json", json.to_str().unwrap()]);
        let out = iterstore(&args);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        let v = json_file(&json);
        let iters = v["iterations"].as_array().unwrap();
        let (first, last) = (&iters[0], &iters[iters.len() - 1]);
        let objective = |r: &serde_json::Value| r["objective"].as_f64().unwrap();
        let want = match app {
            "mf" => format!(
                "train RMSE {:.3} -> {:.3}, test {:.3}",
                objective(first),
                objective(last),
                last["test_rmse"].as_f64().unwrap()
            ),
            "lda" => format!(
                "log-likelihood {:.4e} -> {:.4e}",
                objective(first),
                objective(last)
            ),
            _ => format!(
                "L1 change {:.2e} -> {:.2e}",
                objective(first),
                objective(last)
            ),
        };
        assert_eq!(
            shown, want,
            "`iterstore run {command}` differs from the demo"
        );
        assert!(v["command_line"]
            .as_str()
            .unwrap()
            .ends_with(&format!("run {command} --json {}", json.display())));
    }
}

/// On this machine, `--pin zones` (the default) binds workers to their zone's CPUs, which
/// on a machine of one zone is nothing at all, and says so; `--pin cores` binds each
/// worker to its core; a pinning of another name is refused.
#[test]
fn pin_says_how_workers_are_bound_and_the_numa_line_tells() {
    let dir = scratch("cli-pin");
    let json = dir.join("run.json");
    let one_zone = iterstore::machine::Topology::detect().zones().len() == 1;
    for (pin, line, bound) in [
        (None, "one zone: threads not bound", !one_zone),
        (Some("cores"), "each worker bound to its core", true),
    ] {
        let mut args = vec!["run", "mf", "--synthetic", "tiny", "--iters", "1"];
        args.extend(["--json", json.to_str().unwrap()]);
        if let Some(pin) = pin {
            args.extend(["--pin", pin]);
        }
        let out = iterstore(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        if one_zone || pin.is_some() {
            assert!(stdout.contains(line), "{pin:?}: {stdout}");
        }
        let numa = &json_file(&json)["numa"];
        assert_eq!(numa["pinning"], pin.unwrap_or("zones"), "{numa}");
        assert_eq!(numa["bound"], bound, "{numa}");
    }
    let out = iterstore(&["run", "mf", "--synthetic", "tiny", "--pin", "core"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("'core'"), "{}", stderr(&out));
}

/// `--topology` plans the NUMA placement for a synthetic machine and reports it (nothing
/// bound); `--numa off` leaves it out; a bad description or a generic run is rejected
/// before any data is read.
#[test]
fn topology_plans_numa_placement_and_reports_it() {
    let dir = scratch("cli-topology");
    let json = dir.join("run.json");
    let out = iterstore(&[
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "--iters",
        "1",
        "--workers",
        "8",
        "--topology",
        "pack:2 numa:1 core:4 pu:1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("numa: pack:2 numa:1 core:4 pu:1, 2 zone(s), plan only"),
        "{stdout}"
    );
    let numa = &json_file(&json)["numa"];
    assert_eq!(numa["bound"], false, "{numa}");
    assert_eq!(
        numa["worker_zones"],
        serde_json::json!([0, 0, 0, 0, 1, 1, 1, 1])
    );
    let plan = numa["remote_fraction"].as_f64().unwrap();
    let baseline = numa["baseline_remote_fraction"].as_f64().unwrap();
    assert!(plan <= baseline / 4.0, "{numa}");

    let out = iterstore(&[
        "run",
        "mf",
        "--synthetic",
        "tiny",
        "--iters",
        "1",
        "--numa",
        "off",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(json_file(&json)["numa"].is_null());

    for (args, want) in [
        (&["--topology", "pack:2 bogus:3"][..], "pack:2 bogus:3"),
        (
            &[
                "--topology",
                "pack:2 numa:1 core:1 pu:1",
                "--mode",
                "generic",
            ][..],
            "--mode virtual",
        ),
        (
            &["--numa", "maybe"][..],
            "'maybe' is neither 'on' nor 'off'",
        ),
        (
            &["--placement", "tight"][..],
            "neither 'packed' nor 'spread'",
        ),
    ] {
        let out = iterstore(&[&["run", "mf", "--data", "/nonexistent.inter"][..], args].concat());
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(
            !err.contains("nonexistent"),
            "checked before the data: {err}"
        );
    }
}

#[test]
fn a_closed_output_pipe_stops_the_run_quietly() {
    use std::process::{Command, Stdio};
    // `iterstore run ... | head -0`: the reader is gone before the summary is printed.
    let mut child = Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .args(["run", "pagerank", "--synthetic", "tiny", "--iters", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the iterstore binary runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(!err.contains("panicked"), "{err}");
}

/// `--yield-waits off` reaches the store's configuration and the run's report, and gives
/// the same model as the default (the switch changes how threads wait, not what they
/// compute).
#[test]
fn yield_waits_can_be_turned_off_and_change_no_result() {
    let dir = scratch("cli-yield-waits");
    let run = |switch: &str| {
        let (model, report) = (
            dir.join(format!("model-{switch}.tsv")),
            dir.join(format!("out-{switch}.json")),
        );
        let out = iterstore(&[
            "run",
            "mf",
            "--synthetic",
            "tiny",
            "--iters",
            "3",
            "-q",
            "--yield-waits",
            switch,
            "--output",
            model.to_str().unwrap(),
            "--json",
            report.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        (std::fs::read(&model).unwrap(), json_file(&report))
    };
    let (on, on_report) = run("on");
    let (off, off_report) = run("off");
    assert_eq!(on_report["yield_waits"], true);
    assert_eq!(off_report["yield_waits"], false);
    assert!(on == off, "the models differ");
    let store = iterstore_apps::AppConfig {
        yield_waits: false,
        ..Default::default()
    }
    .store_config();
    assert!(!store.yield_waits);
}
