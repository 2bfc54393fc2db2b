//! `iterstore bench` as a script runs it: the files it writes, the shape and consistency of
//! `report.json`, the Markdown on stdout, variant and limit selection, and the option errors
//! that must stop it before it writes anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The apps, in the order the bench runs them by default.
const APPS: [&str; 3] = ["mf", "lda", "pagerank"];

/// Every variant, in the order the bench runs them by default.
pub(crate) const VARIANTS: [&str; 8] = [
    "generic",
    "first-iter",
    "virtual",
    "virtual-no-static-cache",
    "virtual-no-thread-caches",
    "virtual-no-contiguous-index",
    "virtual-no-prefetch-batching",
    "virtual-no-numa",
];

/// The seconds fields of a breakdown.
const PHASES: [&str; 4] = ["preprocess_s", "init_s", "first_iter_s", "rest_mean_s"];

/// The header row of each app's Markdown table.
pub(crate) const TABLE_HEADER: &str = "| run | preprocess | init | first iteration | \
                            later iterations (mean) | / generic | / limit | objective |";

/// The start of the verdict table's header row.
pub(crate) const VERDICT_HEADER: &str =
    "| app | input | virtual / generic | target | virtual / limit |";

/// The name of each app's workload on `--synthetic tiny` at the default PageRank block.
fn tiny_dataset(app: &str) -> &'static str {
    if app == "pagerank" {
        "synthetic tiny, block 256"
    } else {
        "synthetic tiny"
    }
}

/// A fresh directory under the system temp dir, unique to this process, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> Self {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("iterstore-bench-cli-{name}-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(crate) fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `iterstore bench ARGS --out OUT`.
pub(crate) fn bench(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .arg("bench")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("the iterstore binary runs")
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// `v` as a number of seconds, which must be finite and non-negative.
fn seconds(v: &Value, what: &str) -> f64 {
    let s = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {v} is not a number"));
    assert!(s.is_finite() && s >= 0.0, "{what}: {s}");
    s
}

/// Checks every phase of the breakdown `b`, and that it averages `rest_iters` iterations.
pub(crate) fn check_breakdown(b: &Value, rest_iters: u64, what: &str) {
    for phase in PHASES {
        seconds(&b[phase], &format!("{what}: {phase}"));
    }
    assert_eq!(b["rest_iters"], rest_iters, "{what}: {b}");
}

/// The entries of the array `v[key]`.
pub(crate) fn array<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    v[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not an array: {v}"))
}

/// The `key` field of each entry of `entries`, as strings.
fn names<'a>(entries: &'a [Value], key: &str) -> Vec<&'a str> {
    entries
        .iter()
        .map(|e| e[key].as_str().unwrap_or_else(|| panic!("no {key}: {e}")))
        .collect()
}

/// The names of an app entry's runs, in order.
pub(crate) fn run_names(app: &Value) -> Vec<&str> {
    array(app, "runs")
        .iter()
        .map(|r| r["variant"]["name"].as_str().unwrap())
        .collect()
}

/// The run of variant `name` in an app entry.
pub(crate) fn run<'a>(app: &'a Value, name: &str) -> &'a Value {
    array(app, "runs")
        .iter()
        .find(|r| r["variant"]["name"] == name)
        .unwrap_or_else(|| panic!("no {name} run in {}", app["app"]))
}

pub(crate) fn rest_mean(breakdown: &Value) -> f64 {
    breakdown["rest_mean_s"].as_f64().unwrap()
}

pub(crate) fn assert_close(a: f64, b: f64, rel: f64, what: &str) {
    assert!(
        (a - b).abs() <= rel * a.abs().max(b.abs()),
        "{what}: {a} vs {b}"
    );
}

#[test]
fn quick_full_run_reports_every_app_variant_and_size() {
    let tmp = TempDir::new("full");
    let out_dir = tmp.join("out");
    let out = bench(
        &[
            "--synthetic",
            "tiny",
            "--iters",
            "2",
            "--no-peers",
            "--scaling",
            "--scaling-sizes",
            "tiny,small",
            "--scaling-iters",
            "2",
        ],
        &out_dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));

    // The files, the charts titled after their app and workload.
    for name in ["report.json", "report.md"] {
        assert!(out_dir.join(name).is_file(), "{name} missing");
    }
    for app in APPS {
        let dataset = tiny_dataset(app);
        for (chart, title) in [
            ("breakdown", format!("{app} on {dataset}, 2 workers")),
            ("scaling", format!("{app}: seconds per iteration")),
        ] {
            let path = out_dir.join(format!("{chart}-{app}.svg"));
            let svg = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert!(svg.contains(&title), "{} lacks {title:?}", path.display());
        }
    }

    let report = read_json(&out_dir.join("report.json"));
    let command = report["command_line"].as_str().unwrap();
    assert!(command.contains(" bench ") && command.contains("--scaling-sizes tiny,small"));
    assert_eq!(report["iterstore_version"], env!("CARGO_PKG_VERSION"));
    assert!(report["started_at"].as_str().unwrap().ends_with('Z'));
    for app in APPS {
        assert_eq!(report["inputs"][app], "synthetic tiny", "{app}");
    }
    let apps = array(&report, "apps");
    assert_eq!(names(apps, "app"), APPS);
    for app in apps {
        let name = app["app"].as_str().unwrap();
        assert_eq!(app["dataset"], tiny_dataset(name), "{name}");
        let block = if name == "pagerank" {
            Value::from(256)
        } else {
            Value::Null
        };
        assert_eq!(app["block"], block, "{name}");
        assert_eq!(app["workers"], 2, "{name}");
        assert_eq!(app["iterations"], 2, "{name}");
        assert!(app["work"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(
            app["peers"],
            Value::Array(Vec::new()),
            "{name}: --no-peers but peers ran"
        );

        assert_eq!(run_names(app), VARIANTS, "{name}");
        for r in array(app, "runs") {
            let variant = r["variant"]["name"].as_str().unwrap();
            let what = format!("{name} {variant}");
            check_breakdown(&r["breakdown"], 1, &what);
            assert_eq!(array(&r["report"], "iterations").len(), 2, "{what}");
            let ablated = variant.strip_prefix("virtual-no-");
            let mode = if ablated.is_some() {
                "virtual"
            } else {
                variant
            };
            assert_eq!(r["variant"]["mode"], mode, "{what}");
            assert_eq!(
                r["variant"]["without"],
                ablated.map_or(Value::Null, Value::from)
            );
        }
        let generic = run(app, "generic");
        assert_eq!(generic["breakdown"]["preprocess_s"], 0.0, "{name}");
        let virt = run(app, "virtual");
        assert!(
            virt["breakdown"]["preprocess_s"].as_f64().unwrap() > 0.0,
            "{name}: the virtual iteration takes time"
        );

        // BSP runs are bit-identical across modes: the same final objective (and held-out
        // RMSE for mf), exactly.
        let objective = &generic["objective"];
        assert!(objective.as_f64().unwrap().is_finite(), "{name}");
        assert_eq!(generic["test_rmse"].is_number(), name == "mf", "{name}");
        for r in array(app, "runs") {
            let variant = &r["variant"]["name"];
            assert_eq!(&r["objective"], objective, "{name} {variant}");
            assert_eq!(r["test_rmse"], generic["test_rmse"], "{name} {variant}");
        }

        let limit = &app["limit"];
        assert!(limit.is_object(), "{name}: no limit result");
        check_breakdown(&limit["breakdown"], 1, &format!("{name} limit"));
        assert_eq!(limit["breakdown"]["preprocess_s"], 0.0);
        assert_eq!(limit["breakdown"]["init_s"], 0.0);
        let limit_objective = limit["objective"].as_f64().unwrap();
        let objective = objective.as_f64().unwrap();
        assert_close(limit_objective, objective, 1e-6, &format!("{name} limit"));
    }

    let verdicts = array(&report, "verdicts");
    assert_eq!(names(verdicts, "app"), APPS);
    for (v, app) in verdicts.iter().zip(apps) {
        let name = app["app"].as_str().unwrap();
        assert_eq!(v["dataset"], app["dataset"], "{name}");
        let vg = v["virtual_vs_generic"]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: no virtual_vs_generic in {v}"));
        let vl = v["virtual_vs_limit"].as_f64().unwrap();
        let virt = rest_mean(&run(app, "virtual")["breakdown"]);
        let generic = rest_mean(&run(app, "generic")["breakdown"]);
        let limit = rest_mean(&app["limit"]["breakdown"]);
        assert!(vg.is_finite() && vg > 0.0, "{name}: {vg}");
        assert_close(
            vg,
            virt / generic,
            1e-12,
            &format!("{name} virtual / generic"),
        );
        assert_close(vl, virt / limit, 1e-12, &format!("{name} virtual / limit"));
        assert!(v["virtual_vs_peer"].is_null(), "{name}: {v}");
        let target = &v["target"];
        // No peers ran: a workload with a peer bar cannot meet it.
        let met = vg <= target["max_vs_generic"].as_f64().unwrap()
            && vl <= target["max_vs_limit"].as_f64().unwrap()
            && target["max_vs_peer"].is_null();
        assert_eq!(v["met"], met, "{name}: {v}");
    }

    let scaling = array(&report, "scaling");
    assert_eq!(names(scaling, "app"), APPS);
    for (curve, app) in scaling.iter().zip(apps) {
        let name = app["app"].as_str().unwrap();
        assert_eq!(curve["work_unit"], app["work_unit"], "{name}");
        assert_eq!(curve["block"], app["block"], "{name}: the default block");
        let points = array(curve, "points");
        assert_eq!(names(points, "size"), ["tiny", "small"], "{name}");
        let work: Vec<u64> = points.iter().map(|p| p["work"].as_u64().unwrap()).collect();
        assert!(work[0] < work[1], "{name}: work {work:?} does not grow");
        assert_eq!(
            work[0],
            app["work"].as_u64().unwrap(),
            "{name}: tiny is the main input"
        );
        for p in points {
            for key in ["generic_s", "virtual_s", "limit_s"] {
                let s = seconds(&p[key], &format!("{name} scaling {}: {key}", p["size"]));
                assert!(s > 0.0, "{name} scaling {}: {key}", p["size"]);
            }
        }
    }

    // stdout is the Markdown report: one table per app, a row per variant, the verdicts.
    let text = stdout(&out);
    assert_eq!(text.matches(TABLE_HEADER).count(), 3, "{text}");
    assert_eq!(text.matches(VERDICT_HEADER).count(), 1, "{text}");
    for variant in VARIANTS {
        let row = format!("\n| {variant} | ");
        assert_eq!(text.matches(&row).count(), 3, "{variant}: {text}");
    }
    for app in APPS {
        let dataset = tiny_dataset(app);
        assert!(
            text.contains(&format!("\n{app}: {dataset} (")),
            "{app}: {text}"
        );
        assert!(
            text.contains(&format!("\n| {app} | {dataset} | ")),
            "{app}: {text}"
        );
        assert!(
            text.contains(&format!("\nScaling, {app} (")),
            "{app}: {text}"
        );
    }
    assert!(
        text.contains("\nScaling, pagerank (block 256; edges per iteration"),
        "{text}"
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert_eq!(
        text.trim_end(),
        md.trim_end(),
        "report.md differs from stdout"
    );
}

#[test]
fn chosen_variants_without_the_limit_report_only_those() {
    let tmp = TempDir::new("variants");
    let out_dir = tmp.join("out");
    let out = bench(
        &[
            "--apps",
            "pagerank",
            "--variants",
            "generic,virtual",
            "--no-limit",
            "--no-peers",
            "--iters",
            "2",
        ],
        &out_dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let report = read_json(&out_dir.join("report.json"));
    let apps = array(&report, "apps");
    assert_eq!(names(apps, "app"), ["pagerank"]);
    let app = &apps[0];
    assert_eq!(run_names(app), ["generic", "virtual"]);
    for r in array(app, "runs") {
        check_breakdown(&r["breakdown"], 1, "pagerank");
    }
    assert_eq!(
        app.get("limit"),
        Some(&Value::Null),
        "--no-limit: {}",
        app["limit"]
    );
    let verdicts = array(&report, "verdicts");
    assert_eq!(names(verdicts, "app"), ["pagerank"]);
    assert!(verdicts[0]["virtual_vs_generic"].as_f64().unwrap() > 0.0);
    assert!(verdicts[0]["virtual_vs_limit"].is_null());
    assert_eq!(verdicts[0]["met"], false, "no limit, no verdict");
    assert!(array(&report, "scaling").is_empty());

    assert!(out_dir.join("breakdown-pagerank.svg").is_file());
    for absent in [
        "breakdown-mf.svg",
        "breakdown-lda.svg",
        "scaling-pagerank.svg",
    ] {
        assert!(!out_dir.join(absent).exists(), "{absent} written");
    }
    let text = stdout(&out);
    assert_eq!(text.matches(TABLE_HEADER).count(), 1, "{text}");
    assert!(text.contains("\n| generic | ") && text.contains("\n| virtual | "));
    assert!(!text.contains("| first-iter |"), "{text}");
    assert!(!text.contains("| limit"), "{text}");
}

#[test]
fn rounds_run_every_variant_and_the_limit_again_and_are_named() {
    let tmp = TempDir::new("rounds");
    let out_dir = tmp.join("out");
    let args = [
        "--apps",
        "pagerank",
        "--variants",
        "virtual",
        "--no-peers",
        "--iters",
        "2",
        "--rounds",
        "3",
    ];
    let out = bench(&args, &out_dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    for run in ["virtual", "limit"] {
        for round in 1..=3 {
            let line = log.lines().find(|l| {
                l.contains(&format!(" {run} "))
                    && l.ends_with(&format!("s per later iteration (round {round} of 3)"))
            });
            assert!(line.is_some(), "no {run} line of round {round}:\n{log}");
        }
    }
    let report = read_json(&out_dir.join("report.json"));
    let app = &array(&report, "apps")[0];
    assert_eq!(app["rounds"], 3, "{app}");
    assert_eq!(run_names(app), ["virtual"], "one result per variant");
    assert!(stdout(&out).contains("2 iterations, each run the median of 3 rounds"));
}

#[test]
fn the_pagerank_partition_is_applied_and_named() {
    let tmp = TempDir::new("partition");
    let out_dir = tmp.join("out");
    let args = [
        "--apps",
        "pagerank",
        "--synthetic",
        "tiny",
        "--pagerank-block",
        "16",
        "--pagerank-partition",
        "communities",
        "--variants",
        "virtual",
        "--no-peers",
        "--iters",
        "2",
    ];
    let out = bench(&args, &out_dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    let apps = array(&report, "apps");
    assert_eq!(
        names(apps, "dataset"),
        ["synthetic tiny, block 16, communities"]
    );
}

#[test]
fn each_pagerank_block_is_its_own_workload_with_its_own_rows_and_chart() {
    let tmp = TempDir::new("blocks");
    let out_dir = tmp.join("out");
    let out = bench(
        &[
            "--apps",
            "mf,pagerank",
            "--synthetic",
            "tiny",
            "--pagerank-block",
            "16,1",
            "--variants",
            "generic,virtual",
            "--no-peers",
            "--iters",
            "2",
        ],
        &out_dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let datasets = [
        "synthetic tiny",
        "synthetic tiny, block 16",
        "synthetic tiny, block 1",
    ];

    let report = read_json(&out_dir.join("report.json"));
    let apps = array(&report, "apps");
    assert_eq!(names(apps, "app"), ["mf", "pagerank", "pagerank"]);
    assert_eq!(names(apps, "dataset"), datasets);
    let (b16, b1) = (&apps[1], &apps[2]);
    // The block changes the table layout, not the work or the model.
    assert_eq!(b16["work"], b1["work"]);
    for (app, block) in [(b16, 16), (b1, 1)] {
        assert_eq!(app["block"], block);
        assert_eq!(run_names(app), ["generic", "virtual"], "block {block}");
        for r in array(app, "runs") {
            assert_eq!(r["report"]["params"]["block"], block, "block {block}");
        }
        assert!(app["limit"].is_object(), "block {block}: no limit");
    }
    let objective = |app: &Value| run(app, "generic")["objective"].as_f64().unwrap();
    assert_close(objective(b16), objective(b1), 1e-9, "blocks 16 and 1");
    let verdicts = array(&report, "verdicts");
    assert_eq!(names(verdicts, "dataset"), datasets);

    // One breakdown chart per workload: mf's alone keeps its plain name.
    for (chart, title) in [
        ("breakdown-mf.svg", "mf on synthetic tiny, 2 workers"),
        (
            "breakdown-pagerank-b16.svg",
            "pagerank on synthetic tiny, block 16, 2 workers",
        ),
        (
            "breakdown-pagerank-b1.svg",
            "pagerank on synthetic tiny, block 1, 2 workers",
        ),
    ] {
        let svg =
            std::fs::read_to_string(out_dir.join(chart)).unwrap_or_else(|e| panic!("{chart}: {e}"));
        assert!(svg.contains(title), "{chart} lacks {title:?}");
    }
    assert!(!out_dir.join("breakdown-pagerank.svg").exists());

    // A table per workload, headed by its name, and a verdict row naming it.
    let text = stdout(&out);
    assert_eq!(text.matches(TABLE_HEADER).count(), 3, "{text}");
    assert_eq!(text.matches("\n| generic | ").count(), 3, "{text}");
    for (app, dataset) in ["mf", "pagerank", "pagerank"].into_iter().zip(datasets) {
        for line in [
            format!("\n{app}: {dataset} ("),
            format!("\n| {app} | {dataset} | "),
        ] {
            assert_eq!(text.matches(&line).count(), 1, "{line:?}: {text}");
        }
    }
}

#[test]
fn the_sparse_lda_sampler_is_benchmarked_and_named() {
    let tmp = TempDir::new("sampler");
    let out_dir = tmp.join("out");
    let args = [
        "--apps",
        "lda",
        "--variants",
        "virtual",
        "--no-peers",
        "--iters",
        "2",
        "--synthetic",
        "tiny",
        "--sampler",
        "sparse",
    ];
    let objectives = |args: &[&str], name: &str| {
        let out = bench(args, &out_dir);
        assert!(out.status.success(), "{}", stderr(&out));
        let report = read_json(&out_dir.join("report.json"));
        let app = &array(&report, "apps")[0];
        assert_eq!(app["dataset"], name);
        let limit = app["limit"]["objective"].as_f64().unwrap();
        (run(app, "virtual")["objective"].as_f64().unwrap(), limit)
    };
    let (sparse, limit) = objectives(&args, "synthetic tiny, sparse sampler");
    // The app and the limit ran the same sampler: the same model under BSP (the
    // log-likelihood is summed in another order).
    assert_close(sparse, limit, 1e-12, "sparse app against its limit");
    // And it is not the dense sampler, whose chain differs.
    let (dense, _) = objectives(&args[..args.len() - 2], "synthetic tiny");
    assert!(sparse != dense, "--sampler sparse ran the dense sampler");
}

#[test]
fn one_pagerank_block_keeps_the_plain_chart_name() {
    let tmp = TempDir::new("one-block");
    let out_dir = tmp.join("out");
    let out = bench(
        &[
            "--apps",
            "pagerank",
            "--synthetic",
            "tiny",
            "--pagerank-block",
            "16",
            "--variants",
            "virtual",
            "--no-limit",
            "--no-peers",
            "--iters",
            "2",
        ],
        &out_dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let report = read_json(&out_dir.join("report.json"));
    let apps = array(&report, "apps");
    assert_eq!(names(apps, "dataset"), ["synthetic tiny, block 16"]);
    let svg = std::fs::read_to_string(out_dir.join("breakdown-pagerank.svg")).unwrap();
    assert!(svg.contains("pagerank on synthetic tiny, block 16, 2 workers"));
    assert!(!out_dir.join("breakdown-pagerank-b16.svg").exists());
}

#[test]
fn invalid_options_fail_with_a_clear_message_and_write_nothing() {
    let tmp = TempDir::new("errors");
    let ratings = tmp.join("ratings.inter");
    std::fs::write(
        &ratings,
        "user_id:token\titem_id:token\trating:float\n1\t2\t3\n",
    )
    .unwrap();
    let ratings = ratings.to_str().unwrap();
    let mut valid_names = VARIANTS.to_vec();
    valid_names.push("'fast'");
    let cases: [(&[&str], &[&str]); 18] = [
        (
            &["--apps", "dnn", "--dnn-data", "/nonexistent/dir"],
            &["--dnn-data /nonexistent/dir: not a directory"],
        ),
        (
            &["--dnn-data", "/tmp", "--apps", "mf"],
            &["--dnn-data", "dnn is not benchmarked"],
        ),
        (&["--iters", "1"], &["at least 2", "got 1"]),
        (&["--rounds", "0"], &["--rounds", "at least 1"]),
        (&["--variants", "fast"], &valid_names),
        (&["--mf-data", "/nonexistent/file"], &["/nonexistent/file"]),
        (
            &["--mf-data", ratings, "--apps", "lda"],
            &["--mf-data", "mf is not benchmarked"],
        ),
        (&["--scaling-sizes", "huge"], &["huge", "tiny, small"]),
        (
            &["--scaling", "--scaling-iters", "1"],
            &["--scaling-iters", "at least 2"],
        ),
        (&["--apps", "mf,lda,mf"], &["--apps", "'mf' more than once"]),
        (
            &["--variants", "generic,virtual,generic"],
            &["--variants", "'generic' more than once"],
        ),
        (
            &["--pagerank-block", "16", "--apps", "mf,lda"],
            &["--pagerank-block", "pagerank is not benchmarked"],
        ),
        (
            &["--pagerank-block", "16,0"],
            &["--pagerank-block", "must be at least 1"],
        ),
        (
            &["--pagerank-block", "16,x"],
            &["--pagerank-block", "'x'", "invalid digit"],
        ),
        (
            &["--pagerank-block", "16,4,16"],
            &["--pagerank-block", "'16' more than once"],
        ),
        (
            &["--pagerank-block", "4194304"],
            &["--pagerank-block", "4194304", "1..=1048576"],
        ),
        (
            &["--pagerank-partition", "communities", "--apps", "mf"],
            &["--pagerank-partition", "pagerank is not benchmarked"],
        ),
        (
            &["--pagerank-partition", "stripes"],
            &[
                "--pagerank-partition",
                "stripes",
                "`edges` or `communities`",
            ],
        ),
    ];
    for (i, (args, needles)) in cases.into_iter().enumerate() {
        let out_dir = tmp.join(format!("out-{i}").as_str());
        // Small and peer-free, so that an option wrongly accepted fails fast.
        let mut all = vec!["--synthetic", "tiny", "--no-peers"];
        all.extend_from_slice(args);
        let out = bench(&all, &out_dir);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded: {err}");
        for needle in needles {
            assert!(err.contains(needle), "{args:?}: {needle:?} not in {err}");
        }
        assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
        assert!(!out_dir.exists(), "{args:?} wrote {}", out_dir.display());
    }
    // An output directory that cannot be created fails before any input is generated or
    // read (the default synthetic size and every app: slow if they were).
    if Path::new("/proc/self").exists() {
        let started = std::time::Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_iterstore"))
            .args(["bench", "--out", "/proc/x"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("--out /proc/x: cannot create it in /proc"),
            "{err}"
        );
        assert!(!err.contains("generat") && !err.contains("load"), "{err}");
        assert!(out.stdout.is_empty(), "{}", stdout(&out));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    // A malformed input file is reported with its line before anything is written, peers
    // on or not.
    let bad = tmp.join("bad.inter");
    std::fs::write(
        &bad,
        "user_id:token\titem_id:token\trating:float\n1\t2\t3\n4\t5\tlots\n",
    )
    .unwrap();
    let out_dir = tmp.join("out-bad");
    let out = bench(
        &["--apps", "mf,pagerank", "--mf-data", bad.to_str().unwrap()],
        &out_dir,
    );
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("bad.inter:3:") && err.contains("lots"),
        "{err}"
    );
    assert!(!out_dir.exists(), "wrote {}", out_dir.display());
}
