//! `--shard-replicas R`: every shard kept on R processes changes no result, and what the
//! backups do not follow yet is refused before any work starts, naming the store's field
//! (`docs/replication.md`, "Refused until handled").

use crate::procs::tiny_output;
use crate::util::{iterstore, scratch, stderr};

/// MF and PageRank on 3 processes write the same bytes with 2 or 3 copies of every shard
/// as with the shards alone.
#[test]
fn shard_replicas_write_the_same_bytes_as_the_shards_alone() {
    let dir = scratch("replicas-same-bytes");
    for app in ["mf", "pagerank"] {
        let alone = ["--workers", "1", "--processes", "3"];
        let want = tiny_output(&dir, app, "virtual", &format!("{app}-r1"), &alone);
        for r in ["2", "3"] {
            let extra = ["--workers", "1", "--processes", "3", "--shard-replicas", r];
            let got = tiny_output(&dir, app, "virtual", &format!("{app}-r{r}"), &extra);
            assert!(
                got == want,
                "{app} with --shard-replicas {r} differs from 1"
            );
        }
    }
}

/// Each setting the backups do not follow yet fails before any process starts or any
/// input is generated, with the store's `InvalidConfig` naming `shard_replicas`.
#[test]
fn shard_replicas_refuse_what_backups_do_not_follow_before_any_work() {
    let dir = scratch("replicas-refused");
    let ck = dir.join("ck");
    std::fs::create_dir_all(&ck).unwrap();
    let ck = ck.to_str().unwrap();
    let mf = ["run", "mf", "--synthetic", "tiny", "--processes", "3"];
    let cases: [(&[&str], &str); 7] = [
        (&[&mf[..], &["--resume", ck]].concat(), "resume from"),
        (
            &[
                &mf[..],
                &[
                    "--restarts",
                    "1",
                    "--checkpoint-dir",
                    ck,
                    "--checkpoint-every",
                    "1",
                ],
            ]
            .concat(),
            "continue after a restart",
        ),
        (&[&mf[..], &["--staleness", "async"]].concat(), "Unbounded"),
        (&[&mf[..], &["--mode", "first-iter"]].concat(), "FirstIter"),
        (
            &["run", "logreg", "--synthetic", "tiny", "--processes", "3"],
            "lbfgs",
        ),
        (
            &[
                "run",
                "dnn",
                "--synthetic",
                "tiny",
                "--processes",
                "2",
                "--server-rule",
                "adam",
            ],
            "set_rows",
        ),
        (
            &["tune", "mf", "--synthetic", "tiny", "--processes", "2"],
            "branches",
        ),
    ];
    for (args, needle) in cases {
        let args = [args, &["--shard-replicas", "2"]].concat();
        let out = iterstore(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(
            err.contains("invalid configuration: shard_replicas") && err.contains(needle),
            "{args:?}: {err}"
        );
        // Not quiet: a started process would prefix its lines, work would log its input.
        assert!(
            !err.contains("[rank") && !err.contains("generating"),
            "{args:?} did work: {err}"
        );
    }
    // More copies than processes, and none at all.
    let out = iterstore(&[&mf[..], &["--shard-replicas", "4"]].concat());
    assert!(
        stderr(&out).contains("need 4 processes"),
        "{}",
        stderr(&out)
    );
    let out = iterstore(&["run", "mf", "--synthetic", "tiny", "--shard-replicas", "2"]);
    assert!(stderr(&out).contains("has 1"), "{}", stderr(&out));
    let out = iterstore(&[&mf[..], &["--shard-replicas", "0"]].concat());
    assert!(!out.status.success(), "--shard-replicas 0 accepted");
    // The same run without them is accepted (the refusals are the settings', not R's).
    let out = iterstore(&[&mf[..], &["-q", "--iters", "1", "--shard-replicas", "2"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
}
