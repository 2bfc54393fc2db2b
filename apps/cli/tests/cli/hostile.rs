//! The attacks of issue 45 that reach the command line, rerun: each ends in a clear error
//! (exit 1, naming the file, flag or setting) and leaves nothing behind it changed.
//! RELIABILITY.md's "Hostile input" table lists them with the tests that hold them.

use std::path::Path;

use crate::util::{iterstore, scratch, stderr};

/// A run that fails (here: its data file does not exist) leaves an earlier `--output` and
/// `--json` as they were, and no temporary file beside them; a run that succeeds replaces
/// them.
#[test]
fn a_failed_run_leaves_earlier_outputs_untouched() {
    let dir = scratch("hostile-outputs");
    let model = dir.join("model.txt");
    let json = dir.join("run.json");
    std::fs::write(&model, "earlier model\n").unwrap();
    std::fs::write(&json, "{\"earlier\": true}\n").unwrap();
    let args = |data: &str| {
        vec![
            "run".to_string(),
            "mf".into(),
            "--iters".into(),
            "1".into(),
            "-q".into(),
            "--output".into(),
            model.to_str().unwrap().into(),
            "--json".into(),
            json.to_str().unwrap().into(),
        ]
        .into_iter()
        .chain(
            (!data.is_empty())
                .then(|| ["--data".to_string(), data.to_string()])
                .into_iter()
                .flatten(),
        )
        .collect::<Vec<_>>()
    };
    let missing = dir.join("missing.tsv");
    let a = args(missing.to_str().unwrap());
    let out = iterstore(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.tsv"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&model).unwrap(), "earlier model\n");
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        "{\"earlier\": true}\n"
    );
    let names = |d: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&dir),
        ["model.txt", "run.json"],
        "a temporary file was left"
    );

    let a = args("");
    let out = iterstore(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read_to_string(&model)
        .unwrap()
        .starts_with("# iterstore mf model"));
    assert!(std::fs::read_to_string(&json).unwrap().contains("\"app\""));
    assert_eq!(names(&dir), ["model.txt", "run.json"]);
}

/// A send queue too small to carry a healthy run is refused before anything starts,
/// naming the flag, instead of failing the run later with a lost peer.
#[test]
fn a_send_queue_below_the_least_that_works_is_refused_at_once() {
    let out = iterstore(&["run", "mf", "--processes", "2", "--send-queue", "1K"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--send-queue") && err.contains("1M"), "{err}");
}

/// `args` as `&str`s.
fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs `iterstore` with `args`, expecting exit status `code` within 60 s and an error
/// containing every one of `needles`; returns stderr.
fn refused(args: &[&str], code: i32, needles: &[&str]) -> String {
    let started = std::time::Instant::now();
    let out = iterstore(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "{args:?} took {:?}",
        started.elapsed()
    );
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
    }
    assert!(err.len() < 4096, "{args:?}: {} bytes of stderr", err.len());
    err
}

/// Sizes read from input or flags are bounded before anything is allocated: each of the
/// inputs that aborted (allocating 40 GB, reading /dev/zero without end) ends with exit 1
/// naming the file or flag.
#[test]
fn sizes_from_input_and_flags_are_bounded_before_allocation() {
    let dir = scratch("hostile-sizes");
    let bomb = dir.join("bomb.ldac");
    std::fs::write(&bomb, "1 100000000:1\n").unwrap();
    refused(
        &["run", "lda", "--data", bomb.to_str().unwrap(), "-q"],
        1,
        &["bomb.ldac:1", "word id 100000000 is over the limit"],
    );
    let header = dir.join("docword.bomb.txt");
    std::fs::write(&header, "1\n100000000\n1\n1 1 1\n").unwrap();
    refused(
        &["run", "lda", "--data", header.to_str().unwrap(), "-q"],
        1,
        &["docword.bomb.txt:2", "W = 100000000"],
    );
    for app in ["lda", "mf", "pagerank"] {
        refused(
            &["run", app, "--data", "/dev/zero", "-q"],
            1,
            &["/dev/zero:1", "longer than 16 MiB"],
        );
    }
    refused(
        &["run", "lda", "--topics", "10000000", "-q"],
        1,
        &["--topics 10000000", "GiB"],
    );
    refused(
        &["run", "mf", "--factors", "1000000", "-q"],
        1,
        &["--factors 1000000", "GiB"],
    );
    refused(
        &["run", "mf", "--processes", "1000"],
        2,
        &["--processes", "more than 64"],
    );
}

/// A secret file that is a FIFO nobody writes, or `/dev/zero`, and a hosts file that is
/// `/dev/zero` or too large, are refused at once naming the file, never waited on or
/// read without end.
#[test]
fn secret_and_hosts_files_are_read_with_bounds() {
    let dir = scratch("hostile-files");
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "0 127.0.0.1:1\n1 127.0.0.1:2\n").unwrap();
    let fifo = dir.join("secret.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let member = |hosts: &Path, secret: &Path| {
        let (hosts, secret) = (hosts.to_str().unwrap(), secret.to_str().unwrap());
        [
            "run",
            "mf",
            "-q",
            "--hosts",
            hosts,
            "--rank",
            "0",
            "--secret-file",
            secret,
        ]
        .map(String::from)
    };
    let zero = Path::new("/dev/zero");
    refused(
        &strs(&member(&hosts, &fifo)),
        1,
        &["secret.fifo", "too short"],
    );
    refused(
        &strs(&member(&hosts, zero)),
        1,
        &["/dev/zero", "not a regular file or a pipe"],
    );
    let secret = dir.join("secret");
    std::fs::write(&secret, "0123456789abcdefghijklmnopqrstuv\n").unwrap();
    refused(
        &strs(&member(zero, &secret)),
        1,
        &["/dev/zero", "not a regular file or a pipe"],
    );
    // A weak secret, readable by others, works but is warned about (here the run then
    // fails because rank 1 never comes).
    let weak = dir.join("weak");
    std::fs::write(&weak, "aaaaaaaaaaaaaaaa").unwrap();
    std::fs::set_permissions(&weak, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let mut a = member(&hosts, &weak).to_vec();
    a.extend(["--connect-timeout".into(), "1".into()]);
    refused(
        &strs(&a),
        1,
        &[
            "can be read by other users (mode 644)",
            "only 1 distinct byte values",
        ],
    );
    let big = dir.join("big-hosts");
    std::fs::write(&big, "# padding\n".repeat(200_000)).unwrap();
    refused(
        &strs(&member(&big, &secret)),
        1,
        &["big-hosts", "larger than 1048576 bytes"],
    );
}

/// Two processes started with different data or parameters both exit 1 naming the field
/// that differs and each rank's value, before any table exists; differing `--iters` too.
#[test]
fn processes_given_different_runs_both_fail_naming_the_difference() {
    use crate::procs::Cluster;
    use std::time::Duration;
    let dir = scratch("hostile-mismatch");
    let base = ["run", "mf", "-q"];
    let cases: [(&[&'static str], &[&'static str], &[&str]); 4] = [
        (
            &["--lr", "0.1"],
            &["--lr", "0.2"],
            &["parameter learning_rate", "rank 0: 0.1", "rank 1: 0.2"],
        ),
        (
            &["--synthetic", "small"],
            &["--synthetic", "tiny"],
            &["the input's"],
        ),
        (&["--seed", "1"], &["--seed", "2"], &["parameter seed"]),
        (
            &["--iters", "2"],
            &["--iters", "3"],
            &["--iters differs", "rank 0: 2; rank 1: 3"],
        ),
    ];
    for (i, (a, b, needles)) in cases.iter().enumerate() {
        let cluster = Cluster::new(&dir, 2);
        let args = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut v: Vec<&'static str> = base.to_vec();
            v.extend(extra);
            v
        };
        let mut procs = [
            cluster.start(&dir, 0, &args(a)),
            cluster.start(&dir, 1, &args(b)),
        ];
        for (rank, p) in procs.iter_mut().enumerate() {
            let err = p.wait_fails(Duration::from_secs(60));
            assert!(
                err.contains("the processes were given different runs"),
                "case {i} rank {rank}: {err}"
            );
            for n in *needles {
                assert!(err.contains(n), "case {i} rank {rank}: '{n}' not in {err}");
            }
        }
    }
}

/// A shuffled copy of the same ratings (same shape, other data) has another input digest:
/// two processes given the file and its shuffled copy are refused.
#[test]
fn the_same_shape_of_other_data_is_told_apart() {
    use crate::procs::Cluster;
    use std::time::Duration;
    let dir = scratch("hostile-shuffled");
    let (a, b) = (dir.join("a.tsv"), dir.join("b.tsv"));
    let lines: Vec<String> = (0..200)
        .map(|i| format!("{} {} {}", i % 17, i % 13, 1 + i % 5))
        .collect();
    std::fs::write(&a, lines.join("\n") + "\n").unwrap();
    let mut shuffled = lines.clone();
    shuffled.reverse();
    std::fs::write(&b, shuffled.join("\n") + "\n").unwrap();
    let cluster = Cluster::new(&dir, 2);
    let run = |data: &Path| {
        [
            "run",
            "mf",
            "--iters",
            "1",
            "-q",
            "--data",
            data.to_str().unwrap(),
        ]
        .map(String::from)
    };
    let (ra, rb) = (run(&a), run(&b));
    let mut procs = [
        cluster.start(&dir, 0, &strs(&ra)),
        cluster.start(&dir, 1, &strs(&rb)),
    ];
    for p in &mut procs {
        let err = p.wait_fails(Duration::from_secs(60));
        assert!(err.contains("the input (its digest) differs"), "{err}");
    }
}

/// A checkpoint written from one ratings file does not resume a run on a shuffled copy
/// (same shape, other data): the input digest is recorded in the checkpoint.
#[test]
fn a_resume_with_other_data_of_the_same_shape_is_refused() {
    let dir = scratch("hostile-resume-other-data");
    let (a, b) = (dir.join("a.tsv"), dir.join("b.tsv"));
    let lines: Vec<String> = (0..300)
        .map(|i| format!("{} {} {}", i % 17, i % 13, 1 + i % 5))
        .collect();
    std::fs::write(&a, lines.join("\n") + "\n").unwrap();
    let shuffled: Vec<String> = lines.iter().rev().cloned().collect();
    std::fs::write(&b, shuffled.join("\n") + "\n").unwrap();
    let ck = dir.join("ck");
    let run = |data: &Path, iters: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "mf",
            "-q",
            "--data",
            data.to_str().unwrap(),
            "--iters",
            iters,
        ];
        args.extend(extra);
        iterstore(&args)
    };
    let ck_s = ck.to_str().unwrap();
    let out = run(
        &a,
        "2",
        &["--checkpoint-dir", ck_s, "--checkpoint-every", "2"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&b, "4", &["--resume", ck_s]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("other input data of the same shape"),
        "{}",
        stderr(&out)
    );
    let out = run(&a, "4", &["--resume", ck_s]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `run logreg` on svmlight files: trains and writes one model line per class; a test
/// file with a label the training file lacks, or a feature beyond its features, and
/// `--test` with a Fashion-MNIST directory or generated data, are refused naming the file
/// or the flag.
#[test]
fn logreg_takes_svmlight_files_and_refuses_a_test_file_that_does_not_match() {
    let dir = scratch("hostile-logreg");
    let path = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let train = path("train.svm");
    let mut text = String::new();
    for i in 0..60 {
        let v = i % 3;
        if i % 2 == 0 {
            text.push_str(&format!("-1 1:{v}.5 2:0.25\n"));
        } else {
            text.push_str(&format!("1 2:0.25 3:{v}.5\n"));
        }
    }
    std::fs::write(&train, &text).unwrap();
    let test = path("test.svm");
    std::fs::write(&test, "1 3:1.5\n-1 1:2\n").unwrap();
    let model = path("model.txt");
    let out = iterstore(&[
        "run", "logreg", "--data", &train, "--test", &test, "--iters", "5", "--output", &model,
        "-q",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = std::fs::read_to_string(&model).unwrap();
    let labels: Vec<&str> = lines
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(labels, ["-1", "1"], "{lines}");
    assert!(
        lines.lines().all(|l| l.split(' ').count() == 1 + 4),
        "{lines}"
    );

    let foreign = path("foreign.svm");
    std::fs::write(&foreign, "1 3:1.5\n7 1:2\n").unwrap();
    refused(
        &["run", "logreg", "--data", &train, "--test", &foreign, "-q"],
        1,
        &["foreign.svm", "label 7"],
    );
    let wide = path("wide.svm");
    std::fs::write(&wide, "1 3:1.5\n-1 9:2\n").unwrap();
    refused(
        &["run", "logreg", "--data", &train, "--test", &wide, "-q"],
        1,
        &["wide.svm:2"],
    );
    refused(
        &[
            "run",
            "logreg",
            "--synthetic",
            "tiny",
            "--test",
            &test,
            "-q",
        ],
        1,
        &["--test"],
    );
}
