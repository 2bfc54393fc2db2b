//! The attacks of issue 45 that reach the command line, rerun: each ends in a clear error
//! (exit 1, naming the file, flag or setting) and leaves nothing behind it changed.
//! RELIABILITY.md's "Hostile input" table lists them with the tests that hold them.

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
