//! What the binary tells a person on stderr while it works: a `tracing` subscriber with
//! the level set by `-q`/`-v`, and progress that fits where stderr goes.
//!
//! - On a terminal: an indicatif bar per run and a spinner while data is read or
//!   generated, plus the info lines (without timestamps).
//! - Anywhere else (a file, a pipe, a job scheduler's log): no bars; timestamped lines
//!   instead, one when data loading starts and one when it ends, and one per iteration
//!   with its time, objective, the elapsed time and an ETA.
//! - `-q` keeps only warnings and errors (no bars either); `-v` adds debug lines, `-vv`
//!   trace lines.
//!
//! Errors that end the program are printed by `main`, not here, so `-q` never hides them.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use iterstore_apps::IterRecord;
use tracing::{info, Level};

/// Whether bars and spinners are drawn (stderr is a terminal and `-q` was not given).
static BARS: OnceLock<bool> = OnceLock::new();

/// Installs the stderr subscriber: warnings and errors only with `quiet`, else info, debug
/// with one `verbose`, trace with more.
pub fn init(quiet: bool, verbose: u8) {
    let level = match (quiet, verbose) {
        (true, _) => Level::WARN,
        (false, 0) => Level::INFO,
        (false, 1) => Level::DEBUG,
        (false, _) => Level::TRACE,
    };
    let terminal = std::io::stderr().is_terminal();
    let _ = BARS.set(terminal && !quiet);
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_target(false)
        .with_ansi(terminal);
    // A terminal shows the lines as they come; a log file needs to say when.
    let _ = if terminal {
        builder.without_time().try_init()
    } else {
        builder.try_init()
    };
}

/// Whether progress is drawn as bars (otherwise it is logged as lines).
pub fn bars() -> bool {
    BARS.get().copied().unwrap_or(false)
}

/// A step that may take a while (reading or generating input): a spinner on a terminal, a
/// log line at its start otherwise; [`Step::done`] logs what it produced and how long it
/// took.
pub struct Step {
    spinner: ProgressBar,
    started: Instant,
}

impl Step {
    /// Starts the step described by `what` (e.g. `reading ratings.csv (2.1 MB)`).
    pub fn start(what: &str) -> Step {
        let spinner = if bars() {
            let s = ProgressBar::new_spinner();
            s.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .expect("the template is valid"),
            );
            s.set_message(what.to_string());
            s.enable_steady_tick(Duration::from_millis(100));
            s
        } else {
            info!("{what}");
            ProgressBar::hidden()
        };
        Step {
            spinner,
            started: Instant::now(),
        }
    }

    /// Ends the step: `what` says what it produced (e.g. `read ratings.csv: 100000
    /// ratings`), followed by the seconds it took.
    pub fn done(self, what: &str) {
        self.spinner.finish_and_clear();
        info!("{what} in {:.2} s", self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Step {
    /// Clears the spinner of a step that failed (ended without [`Step::done`]).
    fn drop(&mut self) {
        if !self.spinner.is_finished() {
            self.spinner.finish_and_clear();
        }
    }
}

/// `reading PATH (SIZE)`, the size left out if the file cannot be looked at.
pub fn reading(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => format!("reading {} ({})", path.display(), bytes(m.len())),
        Err(_) => format!("reading {}", path.display()),
    }
}

/// A byte count as `512 B`, `2.1 kB`, `3.4 MB` or `1.2 GB`.
pub fn bytes(n: u64) -> String {
    let n = n as f64;
    if n < 1e3 {
        format!("{n} B")
    } else if n < 1e6 {
        format!("{:.1} kB", n / 1e3)
    } else if n < 1e9 {
        format!("{:.1} MB", n / 1e6)
    } else {
        format!("{:.1} GB", n / 1e9)
    }
}

/// Seconds as `0.012 s`, `12.3 s`, `4 min 05 s` or `2 h 03 min`.
pub fn duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        "?".into()
    } else if s < 1.0 {
        format!("{s:.3} s")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        let s = s.round() as u64;
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        let m = (s / 60.0).round() as u64;
        format!("{} h {:02} min", m / 60, m % 60)
    }
}

/// A number with six significant digits, in scientific notation when very small or large.
pub fn number(x: f64) -> String {
    let a = x.abs();
    if a != 0.0 && a.is_finite() && !(1e-3..1e6).contains(&a) {
        format!("{x:.5e}")
    } else {
        format!("{x:.6}")
    }
}

/// Progress through the iterations of one run: a bar on a terminal, else one log line per
/// iteration (`mf: iteration 3/10 took 0.012 s, objective 0.812, elapsed 0.5 s, ETA 0.1 s`).
pub struct Iterations {
    app: &'static str,
    total: usize,
    bar: ProgressBar,
    /// When the first iteration was reported, and the seconds that iteration took.
    first: Option<(Instant, f64)>,
}

impl Iterations {
    /// Progress of `total` iterations of `app`, starting now with the run's setup.
    pub fn start(app: &'static str, total: usize) -> Iterations {
        let bar = if bars() {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .expect("the template is valid")
                .progress_chars("=> ");
            bar.set_style(style);
            bar.set_prefix(app);
            bar.set_message("setting up (virtual iteration, initialisation)");
            bar
        } else {
            info!("{app}: setting up (partitioning, virtual iteration, initialisation)");
            ProgressBar::hidden()
        };
        Iterations {
            app,
            total,
            bar,
            first: None,
        }
    }

    /// Reports iteration `r`.
    pub fn observe(&mut self, r: &IterRecord) {
        let done = r.iter + 1;
        let now = Instant::now();
        let (first_at, first_s) = *self.first.get_or_insert((now, r.seconds));
        // Wall time of the iterations so far, their evaluation included; the first one
        // counts as long as its run took (setup before it is not an iteration).
        let elapsed = first_s + now.duration_since(first_at).as_secs_f64();
        let eta = elapsed / done as f64 * self.total.saturating_sub(done) as f64;
        let objective = match (r.test_rmse, r.test_accuracy) {
            (Some(t), _) => format!("objective {} (test {})", number(r.objective), number(t)),
            (None, Some(a)) => format!(
                "objective {} (test accuracy {:.2} %)",
                number(r.objective),
                100.0 * a
            ),
            (None, None) => format!("objective {}", number(r.objective)),
        };
        if self.bar.is_hidden() {
            info!(
                "{}: iteration {done}/{} took {}, {objective}, elapsed {}, ETA {}",
                self.app,
                self.total,
                duration(r.seconds),
                duration(elapsed),
                duration(eta)
            );
        } else {
            self.bar.set_position(done as u64);
            self.bar.set_message(format!(
                "iteration {done} took {}, {objective}, ETA {}",
                duration(r.seconds),
                duration(eta)
            ));
        }
    }

    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Iterations {
    /// Clears the bar of a run that failed (ended without [`Iterations::finish`]).
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(2_100), "2.1 kB");
        assert_eq!(bytes(3_400_000), "3.4 MB");
        assert_eq!(bytes(1_200_000_000), "1.2 GB");
        assert_eq!(duration(0.0123), "0.012 s");
        assert_eq!(duration(12.34), "12.3 s");
        assert_eq!(duration(245.0), "4 min 05 s");
        assert_eq!(duration(7380.0), "2 h 03 min");
        assert_eq!(duration(f64::NAN), "?");
        assert_eq!(number(0.8123456), "0.812346");
        assert_eq!(number(2.99e-8), "2.99000e-8");
        assert_eq!(number(-23418.5), "-23418.500000");
        assert_eq!(number(0.0), "0.000000");
    }
}
