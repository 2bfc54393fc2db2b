//! [`App`]: the one interface through which a program drives any bundled app (the
//! `iterstore` command's `run`, `demo` and `bench` do): its name, its parameters, its input
//! read from a file or generated ([`Input`]), a run on a fresh cluster, and its output file.
//! Each app's module implements it for the app's marker type: [`Mf`](crate::Mf),
//! [`Lda`](crate::Lda), [`PageRank`](crate::PageRank) and [`Dnn`](crate::Dnn).
//!
//! **Adding an app** is one new module here (its tables and phases, its run functions and
//! `impl App`) and its registration in the command line (`apps/cli/src/cli/apps/`: the
//! app's options and one entry in the registry), which `run`, `demo` and `bench` then
//! reach by name.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::{AppConfig, AppError, Observer, RunReport};

/// Where an app's input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file in one of the app's formats (for the DNN, a directory of IDX files).
    File(PathBuf),
    /// Seeded synthetic data of a preset size (`tiny`, `small`, `medium`, `large`,
    /// `xlarge`).
    Synthetic(String),
}

impl Input {
    /// The input as a report names it: the path, or `synthetic <size>`.
    pub fn describe(&self) -> String {
        match self {
            Input::File(path) => path.display().to_string(),
            Input::Synthetic(size) => format!("synthetic {size}"),
        }
    }
}

/// A bundled app as a program drives it: parameters chosen and checked, input loaded (or
/// generated), one run on a fresh cluster of [`AppConfig`], the output written. A marker
/// type per app implements it; its associated types are the app's own.
pub trait App {
    /// The app's name: its `run` subcommand and its reports' `app`.
    const NAME: &'static str;
    /// What it computes, and from what input, in a line (for help texts).
    const ABOUT: &'static str;
    /// What its input is called in progress lines (`ratings`, `corpus`, ...).
    const INPUT: &'static str;

    /// Its parameters (the algorithm's and the layout's).
    type Params;
    /// Its input, loaded.
    type Data;
    /// What a run returns: its report and the model.
    type Outcome;

    /// Checks every parameter before any input is read, naming the first that is unusable.
    fn validate(params: &Self::Params) -> Result<(), AppError>;

    /// Reads `input` (or generates it), ready to run with `params`; a file that cannot be
    /// read is [`AppError::Data`] naming it.
    fn load(input: &Input, params: &Self::Params) -> Result<Self::Data, AppError>;

    /// The size of `data` as the line after loading tells it (`943 users, ...`).
    fn counts(data: &Self::Data) -> String;

    /// Runs the app on `data` on a cluster of its own started for `cfg`, calling
    /// `observer` after each iteration is evaluated.
    fn run(
        cfg: &AppConfig,
        params: &Self::Params,
        data: &Self::Data,
        observer: Observer<'_>,
    ) -> Result<Self::Outcome, AppError>;

    /// Writes the run's output file (the model, or PageRank's ranks) in the app's text
    /// format.
    fn write_output(
        outcome: &Self::Outcome,
        data: &Self::Data,
        out: &mut dyn Write,
    ) -> io::Result<()>;

    /// The run's report.
    fn into_report(outcome: Self::Outcome) -> RunReport;
}
