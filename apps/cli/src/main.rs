//! The `iterstore` command: runs the bundled apps on the parameter server.
//!
//! - `iterstore run {mf,lda,pagerank,dnn} [--data PATH | --synthetic SIZE] [--mode M]
//!   [--workers N] [--iters N] [--staleness S] [--json FILE] [--output FILE] ...` runs one
//!   app and prints a summary; `iterstore run APP --help` lists the app's options,
//!   `iterstore run --help` the apps and the output formats.
//! - `iterstore demo` runs MF, LDA and PageRank on tiny synthetic data.
//! - `iterstore bench ...` benchmarks the store modes; `iterstore bench --help`.
//! - `-q` and `-v` (any subcommand) set how much goes to stderr.
//!
//! Thin glue over the libraries under `apps/`: `iterstore_apps` (the apps and their reports),
//! `iterstore_data` (their input), `iterstore_algo` (the kernels and limits),
//! `iterstore_bench` (the benchmark harness) and `iterstore_perf` (the DNN performance
//! model). This binary owns only argument parsing ([`cli::Cli`], the only use of clap in the
//! workspace), logging and progress display, and files. Errors print as
//! `iterstore: error: ...` on stderr with a non-zero exit status.

#![warn(missing_docs)]

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Like other command-line tools, stop quietly when the reader of our output goes away
    // (`iterstore run ... | head -1`) instead of panicking in `println!`. Sockets are not
    // affected: the standard library sends with MSG_NOSIGNAL.
    // SAFETY: restoring a signal's default disposition before any thread starts.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match cli::main(cli::Cli::parse_from(&args), &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iterstore: error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by `: `, leaving out a cause whose text the message
/// already contains (loader errors embed their IO cause).
fn message(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}
