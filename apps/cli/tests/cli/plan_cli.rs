//! `iterstore plan` as a script runs it: plan files for the built-in Fashion-MNIST networks
//! on a stated cluster, a network from a file, and bad inputs rejected by file and field
//! before any search.

use std::path::Path;

use serde_json::Value;

use crate::util::{iterstore, scratch};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `iterstore plan` expecting success; returns stdout and the plan file's JSON.
fn plan(model: &str, machines: &str, cores: &str, out: &Path) -> (String, Value) {
    let o = iterstore(&[
        "plan",
        "--model",
        model,
        "--profile",
        "example",
        "--machines",
        machines,
        "--cores",
        cores,
        "--top",
        "3",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let plan = crate::util::json_file(out);
    (text(&o.stdout), plan)
}

#[test]
fn plans_the_fashion_mnist_mlp_and_cnn_on_a_stated_cluster() {
    let dir = scratch("plan-cli-builtins");
    for (model, layers) in [("mlp", 3), ("cnn", 6)] {
        let out = dir.join(format!("{model}.json"));
        let (stdout, plan) = plan(model, "20", "16", &out);
        assert_eq!(plan["version"], 1);
        assert_eq!(plan["cluster"]["machines"], 20);
        assert_eq!(plan["layers"].as_array().unwrap().len(), layers);
        let r = &plan["resources"];
        let used = r["parameter_servers"].as_u64().unwrap()
            + r["replicas"].as_u64().unwrap() * r["workers"].as_u64().unwrap();
        assert!(used <= 20, "{r}");
        for layer in plan["layers"].as_array().unwrap() {
            let copies =
                layer["partitions"].as_u64().unwrap() * layer["replications"].as_u64().unwrap();
            assert!(copies <= r["workers"].as_u64().unwrap(), "C3: {layer}");
            assert!(
                (1..=16).contains(&layer["threads"].as_u64().unwrap()),
                "C2: {layer}"
            );
        }
        let epoch = plan["estimate"]["epoch_s"].as_f64().unwrap();
        assert!(epoch > 0.0);
        let rows: Vec<&str> = stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .collect();
        assert!(rows.len() >= 3, "{stdout}");
        assert!(
            stdout.contains(&format!("plan written to {}", out.display())),
            "{stdout}"
        );
    }
}

#[test]
fn reads_a_network_file_and_names_the_file_and_field_it_rejects() {
    let dir = scratch("plan-cli-files");
    let good = dir.join("net.json");
    std::fs::write(
        &good,
        r#"{"version": 1, "name": "tiny", "input": {"channels": 1, "size": 8},
            "layers": [{"kind": "convolution", "name": "c", "out_channels": 2, "kernel": 3, "stride": 1, "bits": 32},
                       {"kind": "softmax", "name": "out", "neurons": 4, "bits": 32}]}"#,
    )
    .unwrap();
    let (_, plan) = plan(good.to_str().unwrap(), "4", "2", &dir.join("plan.json"));
    assert_eq!(plan["network"], "tiny");

    let cases = [
        ("unknown.json", r#"{"version": 1, "name": "x", "input": {"channels": 1, "size": 8}, "layers": [], "colour": 3}"#, "colour"),
        ("type.json", "{\"version\": 1, \"name\": \"x\",\n \"input\": {\"channels\": \"one\", \"size\": 8}, \"layers\": []}", "channels"),
        ("kernel.json", r#"{"version": 1, "name": "x", "input": {"channels": 1, "size": 8}, "layers": [{"kind": "convolution", "name": "c", "out_channels": 2, "kernel": 9, "stride": 1, "bits": 32}]}"#, "layers[0].kernel"),
    ];
    for (name, body, field) in cases {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        let out = dir.join(format!("{name}.plan"));
        let o = iterstore(&[
            "plan",
            "--model",
            path.to_str().unwrap(),
            "--profile",
            "example",
            "--machines",
            "4",
            "--cores",
            "2",
            "--output",
            out.to_str().unwrap(),
        ]);
        let err = text(&o.stderr);
        assert!(!o.status.success());
        assert!(err.contains(name) && err.contains(field), "{name}: {err}");
        assert!(
            !out.exists() && o.stdout.is_empty(),
            "{name}: nothing searched or written"
        );
    }
}

#[test]
fn options_are_checked_before_any_search() {
    let dir = scratch("plan-cli-options");
    let o = iterstore(&[
        "plan",
        "--model",
        "mlp",
        "--profile",
        "example",
        "--machines",
        "1",
        "--cores",
        "2",
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--machines"),
        "{}",
        text(&o.stderr)
    );
    // A search space that would take hours is refused at once.
    for (flag, value) in [("--machines", "49"), ("--cores", "257")] {
        let mut args = vec!["plan", "--model", "mlp", "--profile", "example"];
        args.extend(["--machines", if flag == "--machines" { value } else { "4" }]);
        args.extend(["--cores", if flag == "--cores" { value } else { "2" }]);
        let o = iterstore(&args);
        assert!(!o.status.success(), "{flag} {value}");
        assert!(text(&o.stderr).contains(flag), "{}", text(&o.stderr));
    }

    let missing = dir.join("no/such/dir/plan.json");
    let o = iterstore(&[
        "plan",
        "--model",
        "mlp",
        "--profile",
        "example",
        "--machines",
        "4",
        "--cores",
        "2",
        "--output",
        missing.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && o.stdout.is_empty());
    assert!(
        text(&o.stderr).contains("does not exist"),
        "{}",
        text(&o.stderr)
    );

    let o = iterstore(&[
        "plan",
        "--model",
        "mlp",
        "--profile",
        dir.join("absent.json").to_str().unwrap(),
        "--machines",
        "4",
        "--cores",
        "2",
    ]);
    assert!(!o.status.success() && o.stdout.is_empty());
    assert!(
        text(&o.stderr).contains("absent.json"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn calibrate_measures_a_profile_that_plan_accepts() {
    let dir = scratch("calibrate-cli");
    let profile = dir.join("profile.json");
    let o = iterstore(&[
        "calibrate",
        "--quick",
        "--threads",
        "2",
        "--name",
        "ci",
        "--output",
        profile.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    for line in ["C_muladd", "conv ", "pool ", "C_interf", "C_ncost", "C_nbw"] {
        assert!(stdout.contains(line), "{stdout}");
    }
    let p: Value = crate::util::json_file(&profile);
    assert_eq!(p["name"], "ci");
    assert_eq!(
        p["version"], 3,
        "calibrate writes the newest profile version"
    );
    assert_eq!(p["c_interf"].as_array().unwrap().len(), 2);
    assert_eq!(p["c_interf"][0], 1.0);
    for field in ["c_muladd_s", "c_act_s", "c_err_s", "c_nbw_bits_per_s"] {
        assert!(p[field].as_f64().unwrap() > 0.0, "{field}: {p}");
    }
    for kind in ["convolution", "pooling"] {
        assert!(p["c_muladd_by_kind_s"][kind].as_f64().unwrap() > 0.0, "{p}");
    }
    // C_ncost(H) and C_nbw(H) for H = 1, 2 concurrent streams.
    for field in ["c_ncost_s", "c_nbw_per_thread_bits_per_s"] {
        let v = p[field].as_array().unwrap();
        assert_eq!(v.len(), 2, "{field}: {p}");
        assert!(v.iter().all(|x| x.as_f64().unwrap() > 0.0), "{field}: {p}");
    }
    assert_eq!(p["c_nbw_bits_per_s"], p["c_nbw_per_thread_bits_per_s"][0]);
    // The measured profile drives the optimizer.
    let plan = dir.join("plan.json");
    let o = iterstore(&[
        "plan",
        "--model",
        "mlp",
        "--profile",
        profile.to_str().unwrap(),
        "--machines",
        "4",
        "--cores",
        "2",
        "--output",
        plan.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("profile ci"),
        "{}",
        text(&o.stdout)
    );
    let o = iterstore(&["calibrate", "--ps-read-alpha", "2"]);
    assert!(!o.status.success());
}

#[test]
fn plan_reads_a_version_1_profile_as_calibrate_wrote_it_before_version_2() {
    let dir = scratch("profile-v1");
    let profile = dir.join("old.json");
    std::fs::write(
        &profile,
        r#"{"version": 1, "name": "old", "c_muladd_s": 2.9e-11, "c_act_s": 4.3e-9,
            "c_err_s": 2.3e-10, "c_interf": [1.0, 1.06], "c_ncost_s": [9.6e-5],
            "c_nbw_bits_per_s": 7.1e9, "ps_read_alpha": 0.5}"#,
    )
    .unwrap();
    let path = profile.to_str().unwrap();
    let args = [
        "plan",
        "--model",
        "cnn",
        "--profile",
        path,
        "--machines",
        "3",
        "--cores",
        "2",
    ];
    let o = iterstore(&args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("profile old"),
        "{}",
        text(&o.stdout)
    );
    // A version-2 field in a version-1 file is refused, naming the file and the field.
    let old = std::fs::read_to_string(&profile).unwrap();
    std::fs::write(
        &profile,
        old.replace(
            "\"ps_read_alpha\"",
            "\"c_muladd_by_kind_s\": {\"pooling\": 1e-9}, \"ps_read_alpha\"",
        ),
    )
    .unwrap();
    let o = iterstore(&args);
    let err = text(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("old.json") && err.contains("c_muladd_by_kind_s"),
        "{err}"
    );
}

#[test]
fn validate_runs_eight_configurations_and_compares_them_with_the_model() {
    let dir = scratch("plan-validate");
    let (json, svg) = (dir.join("v.json"), dir.join("v.svg"));
    let o = iterstore(&[
        "plan",
        "--validate",
        "--profile",
        "example",
        "--synthetic",
        "tiny",
        "--hidden",
        "16,12",
        "--iters",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("rank correlation (Spearman)"), "{out}");
    let report: Value = crate::util::json_file(&json);
    let configs = report["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 8);
    let distinct = |key: &str| {
        let mut v: Vec<String> = configs.iter().map(|c| c[key].to_string()).collect();
        v.sort();
        v.dedup();
        v.len()
    };
    for key in [
        "parameter_servers",
        "replicas",
        "replica_workers",
        "partitions",
        "n_read",
    ] {
        assert!(distinct(key) >= 2, "{key} does not vary");
    }
    for c in configs {
        assert!(c["estimated_s"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["measured_s"].as_f64().unwrap() > 0.0, "{c}");
    }
    let rho = report["rank_correlation"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&rho));
    assert_eq!(report["sizes"], serde_json::json!([144, 16, 12, 10]));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    for (args, want) in [
        (
            &["plan", "--validate", "--model", "cnn"][..],
            "runs the DNN app's MLP",
        ),
        (
            &["plan", "--validate", "--machines", "4"][..],
            "cannot be used with",
        ),
        (&["plan", "--model", "mlp"][..], "--profile"),
    ] {
        let o = iterstore(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            text(&o.stderr).contains(want),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn validate_runs_on_emulated_links_and_calibrates_them() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: --emulate needs root (network namespaces, tc, cgroups)");
        return;
    }
    let dir = scratch("plan-validate-emulated");
    let json = dir.join("v.json");
    let namespaces = || {
        let out = std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap();
        text(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("isemu-"))
            .map(str::to_string)
            .collect::<std::collections::BTreeSet<_>>()
    };
    let before = namespaces();
    let o = iterstore(&[
        "plan",
        "--validate",
        "--emulate",
        "1gbit",
        "--synthetic",
        "tiny",
        "--hidden",
        "16",
        "--iters",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("emulated links of 1gbit"), "{out}");
    let report: Value = crate::util::json_file(&json);
    assert_eq!(report["emulated_links"], "1gbit");
    // The link was measured, not the loopback: well under loopback's several Gbit/s.
    let bw = report["profile"]["c_nbw_bits_per_s"].as_f64().unwrap();
    assert!(bw > 1e8 && bw < 1.5e9, "{bw}");
    assert_eq!(report["configs"].as_array().unwrap().len(), 8);
    assert_eq!(report["leave_one_out_errors"].as_array().unwrap().len(), 8);
    // Nothing of the emulator is left behind.
    let left: Vec<_> = namespaces().difference(&before).cloned().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn plan_evaluates_given_configurations_in_the_papers_order() {
    let dir = scratch("plan-evaluate");
    let json = dir.join("all.json");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "plan",
            "--model",
            "adam-mnist",
            "--profile",
            "adam-cluster",
            "--machines",
            "20",
            "--cores",
            "16",
        ];
        a.extend_from_slice(extra);
        iterstore(&a)
    };
    let o = args(&[
        "--evaluate",
        "2/9/2,1/19/1",
        "--compose",
        "uniform",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("W/R/PS") && stdout.contains("2/9/2") && stdout.contains("1/19/1"),
        "{stdout}"
    );
    let doc: Value = crate::util::json_file(&json);
    let list = doc["candidates"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["config"], "2/9/2");
    assert!(list[0]["epoch_s"].as_f64().unwrap() < list[1]["epoch_s"].as_f64().unwrap());
    // Bad triples and layer lists name the flag.
    for (extra, expected) in [
        (vec!["--evaluate", "2/9"], "--evaluate"),
        (vec!["--evaluate", "0/9/2"], "--evaluate"),
        (vec!["--evaluate", "5/5/5"], "machines"),
        (vec!["--evaluate", "2/9/2", "--layers", "2:1"], "--layers"),
        (
            vec!["--evaluate", "2/9/2", "--layers", "4:1:16"],
            "--layers",
        ),
    ] {
        let o = args(&extra);
        assert!(!o.status.success());
        assert!(text(&o.stderr).contains(expected), "{}", text(&o.stderr));
    }
}
