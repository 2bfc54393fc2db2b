//! What a tuning did, in order: every fork, schedule, score, kill, evaluation and
//! re-tune as an [`Event`] at the tuner's time, and every branch's loss against time
//! (a [`Curve`]) — written as JSON ([`Timeline::to_json`]) and drawn as an SVG
//! (`crate::svg`).

use crate::progress::Convergence;
use crate::space::Setting;
use serde::{Deserialize, Serialize};

/// A branch of the training state, as the trainer names it.
pub type BranchId = u32;

/// Why a tuning ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The validation result reached the target.
    Target,
    /// The time budget ran out.
    Budget,
    /// Validation results plateaued and every re-tune allowed was spent.
    Converged,
    /// No setting the searcher proposed made the loss fall.
    NoProgress,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Target => "target reached",
            Stop::Budget => "time budget spent",
            Stop::Converged => "converged (plateau after the last re-tune)",
            Stop::NoProgress => "no setting made the loss fall",
        })
    }
}

/// One step of a tuning; `t` is the tuner's time in seconds (the trainer's reported
/// seconds, summed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A branch was forked from `parent` with `setting`.
    Fork {
        /// Time.
        t: f64,
        /// The new branch.
        branch: BranchId,
        /// Where it was forked from.
        parent: BranchId,
        /// Its setting.
        setting: Setting,
    },
    /// A branch was scheduled for `clocks` clocks, which took `seconds`.
    Train {
        /// Time at the end.
        t: f64,
        /// The branch.
        branch: BranchId,
        /// Clocks run.
        clocks: u64,
        /// Seconds they took.
        seconds: f64,
        /// The loss after the last.
        loss: f64,
    },
    /// A trial's progress was summarized.
    Score {
        /// Time.
        t: f64,
        /// The branch.
        branch: BranchId,
        /// The verdict.
        state: Convergence,
        /// Slope with penalty (loss per second; lower is better).
        slope: Option<f64>,
    },
    /// A branch was freed.
    Kill {
        /// Time.
        t: f64,
        /// The branch.
        branch: BranchId,
        /// Why.
        reason: String,
    },
    /// A search chose the branch to train on.
    Choose {
        /// Time.
        t: f64,
        /// The branch.
        branch: BranchId,
        /// Its setting.
        setting: Setting,
        /// Trials the search ran.
        trials: usize,
    },
    /// A branch was validated.
    Evaluate {
        /// Time.
        t: f64,
        /// The branch.
        branch: BranchId,
        /// The validation result (higher is better).
        metric: f64,
    },
    /// Validation plateaued: a new search forks from this branch.
    Retune {
        /// Time.
        t: f64,
        /// The branch searched from.
        branch: BranchId,
    },
    /// The tuning ended.
    Stop {
        /// Time.
        t: f64,
        /// Why.
        stop: Stop,
    },
}

/// One branch's loss against the tuner's time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The branch.
    pub branch: BranchId,
    /// Its setting.
    pub setting: Setting,
    /// Whether a search chose it to train on.
    pub chosen: bool,
    /// `(t, loss)` after each clock it ran.
    pub points: Vec<(f64, f64)>,
}

/// A tuning's events and curves.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// The events, in order.
    pub events: Vec<Event>,
    /// Every branch's curve, in fork order.
    pub curves: Vec<Curve>,
}

impl Timeline {
    /// The timeline as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a timeline is plain data")
    }

    /// Every branch's progress against time as an SVG picture.
    pub fn to_svg(&self) -> String {
        crate::svg::draw(self)
    }

    /// How many events of the kind `name` (`"fork"`, `"kill"`, …) the timeline holds.
    pub fn count(&self, name: &str) -> usize {
        self.events.iter().filter(|e| e.name() == name).count()
    }

    pub(crate) fn curve(&mut self, branch: BranchId) -> Option<&mut Curve> {
        self.curves.iter_mut().find(|c| c.branch == branch)
    }
}

impl Event {
    /// The event's kind, as the JSON's `event` field names it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Fork { .. } => "fork",
            Event::Train { .. } => "train",
            Event::Score { .. } => "score",
            Event::Kill { .. } => "kill",
            Event::Choose { .. } => "choose",
            Event::Evaluate { .. } => "evaluate",
            Event::Retune { .. } => "retune",
            Event::Stop { .. } => "stop",
        }
    }
}
