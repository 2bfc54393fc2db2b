//! Shared helpers: running the `iterstore` binary (in a scratch directory), reading what
//! it wrote, and the fixture paths.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A file under the `iterstore-apps` crate's `tests/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../apps/tests/fixtures")
        .join(name)
}

/// Runs the `iterstore` binary with `args`.
pub fn iterstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .args(args)
        .output()
        .expect("the iterstore binary runs")
}

/// The JSON file at `path`.
pub fn json_file(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A process's standard error as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `iterstore run dnn` on the tiny synthetic images (2 epochs, quiet) with hidden layers
/// `hidden` (e.g. `16,12`), plus `extra`.
pub fn dnn_tiny(hidden: &str, extra: &[&str]) -> Output {
    let mut args = vec!["-q"];
    args.extend(extra);
    dnn_tiny_logged(hidden, &args)
}

/// [`dnn_tiny`] with its progress lines logged (not quiet).
pub fn dnn_tiny_logged(hidden: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "dnn",
        "--synthetic",
        "tiny",
        "--iters",
        "2",
        "--hidden",
        hidden,
    ];
    args.extend(extra);
    iterstore(&args)
}

/// `iterstore plan` of `model` on the example profile for `machines` machines of `cores`
/// cores, written to `out`; its JSON. The plan must succeed.
pub fn example_plan(model: &str, machines: &str, cores: &str, out: &Path) -> serde_json::Value {
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
        "-q",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    json_file(out)
}

/// `iterstore run dnn --model cnn` on the tiny synthetic images (1 epoch, 3x3 kernels,
/// quiet) with `channels` per convolution (e.g. `4,4`), plus `extra`.
pub fn cnn_tiny(channels: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "dnn",
        "--model",
        "cnn",
        "--synthetic",
        "tiny",
        "--iters",
        "1",
        "--channels",
        channels,
        "--kernel",
        "3",
        "-q",
    ];
    args.extend(extra);
    iterstore(&args)
}

/// A fresh scratch directory `name` for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
