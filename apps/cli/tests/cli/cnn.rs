//! `iterstore run dnn --model cnn`: the model file, and options that do not fit named.
//! (The app itself: the `iterstore-apps` crate's `tests/apps/cnn.rs`.)

use crate::util::{iterstore, scratch};

#[test]
fn the_cli_trains_the_cnn_and_writes_its_model() {
    let dir = scratch("cnn-cli");
    let model = dir.join("model.tsv");
    let out = crate::util::cnn_tiny(
        "4,8",
        &["--hidden", "16", "--output", model.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = std::fs::read_to_string(&model).unwrap();
    assert!(
        text.starts_with(
            "# iterstore dnn model: cnn sizes=12x12-c3x4-p2-c3x8-p2-16-10 activation=relu\n"
        ),
        "{}",
        &text[..80.min(text.len())]
    );
    // One line per kernel and per neuron after the comment.
    assert_eq!(text.lines().count(), 1 + 4 + 8 + 16 + 10);
    for (args, want) in [
        (
            &["run", "dnn", "--model", "cnn", "--synthetic", "tiny"][..],
            "convolution 2 (5x5)",
        ),
        (
            &["run", "dnn", "--channels", "4"][..],
            "give them with --model cnn",
        ),
        (
            &["run", "mf", "--kernel", "3"][..],
            "unexpected argument '--kernel' found",
        ),
    ] {
        let out = iterstore(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}
