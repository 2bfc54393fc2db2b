//! The tuning loop (MLtuner, Cui et al. SoCC'18; the thesis proposal's §5) over a
//! [`Trainer`]'s branches of the training state.
//!
//! **Search** from a parent branch: measure the parent's loss (every trial starts
//! there), then fork a trial branch per proposed [`Setting`] and train each for the same
//! *time*, not the same clocks (settings differ in time per clock), so that their
//! summaries (`crate::progress`) compare. Until some trial converges the trial time
//! starts at [`Options::first_trial_clocks`] and doubles, bounded by
//! [`Options::max_trial_clocks`]; diverged trials are killed at once. Once one converges
//! its time becomes every later trial's, and each new trial is kept only if it beats the
//! best so far (the loser is killed). The search ends when the searcher stops (the best
//! five scores within 10 %, or its trial cap), at the previous search's trial count, or
//! when the time budget is spent.
//!
//! **Train** the chosen branch [`Options::epoch_clocks`] at a time, validating after
//! each ([`Trainer::evaluate`]): stop at the target or the budget; when the results
//! plateau ([`Options::plateau`] evaluations without a new best) search again from the
//! current branch (a re-tune), at most [`Options::max_retunes`] times.
//!
//! Time is what the trainer reports (its clocks' seconds, measuring and validation
//! included), so a tuning is deterministic given a deterministic trainer, and its budget
//! counts what the training cost.

use crate::progress::{self, Convergence, Summary, Thresholds};
use crate::search::{self, SearchOptions, SearcherKind};
use crate::space::{Setting, Space};
use crate::timeline::{BranchId, Curve, Event, Stop, Timeline};
use serde::{Deserialize, Serialize};

/// A measured value and the seconds it took: one clock's loss, a loss measured without
/// training, a validation result.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Seconds it took.
    pub seconds: f64,
    /// The value: a loss (lower is better) or a validation result (higher is better).
    pub value: f64,
}

/// What the tuner drives: branches of one training state. A branch has its own
/// parameters, per-worker state and [`Setting`]; forking copies them.
pub trait Trainer {
    /// The trainer's error; the tuning stops at the first.
    type Error;

    /// The branch tuning starts from (the initial parameters).
    fn root(&self) -> BranchId;

    /// Forks a branch from `parent` (its parameters as they are now) to train with
    /// `setting`.
    fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, Self::Error>;

    /// Trains `branch` with its setting for `clocks` clocks: one [`Measured`] loss per
    /// clock (lower is better) with the seconds the clock took.
    fn train(&mut self, branch: BranchId, clocks: u64) -> Result<Vec<Measured>, Self::Error>;

    /// The loss of `branch`'s parameters as they are, without training them.
    fn loss(&mut self, branch: BranchId) -> Result<Measured, Self::Error>;

    /// Validates `branch` (higher is better: a test accuracy, a negated RMSE).
    fn evaluate(&mut self, branch: BranchId) -> Result<Measured, Self::Error>;

    /// Frees `branch`; it is not used again.
    fn free(&mut self, branch: BranchId) -> Result<(), Self::Error>;
}

/// How the tuner searches and trains.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    /// The searcher.
    pub searcher: SearcherKind,
    /// Its options.
    pub search: SearchOptions,
    /// How a trial's progress is summarized.
    pub thresholds: Thresholds,
    /// Clocks of the first trial of a search (its time is the first trial time).
    pub first_trial_clocks: u64,
    /// Clocks one trial may run at most (an epoch, say).
    pub max_trial_clocks: u64,
    /// Clocks of training between validations.
    pub epoch_clocks: u64,
    /// Validations without a new best that make a plateau (0: never re-tune).
    pub plateau: usize,
    /// Re-tunes at most; a plateau after the last ends the tuning.
    pub max_retunes: usize,
    /// Stop once a validation result reaches this.
    pub target: Option<f64>,
    /// Stop once this many seconds are spent.
    pub time_budget: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            searcher: SearcherKind::Tpe,
            search: SearchOptions::default(),
            thresholds: Thresholds::default(),
            first_trial_clocks: 10,
            max_trial_clocks: 1000,
            epoch_clocks: 100,
            plateau: 3,
            max_retunes: 5,
            target: None,
            time_budget: None,
        }
    }
}

impl Options {
    /// Refuses options the loop cannot run, naming the option.
    pub fn check(&self) -> Result<(), String> {
        if self.first_trial_clocks == 0 || self.epoch_clocks == 0 {
            return Err("first_trial_clocks and epoch_clocks must be at least 1".into());
        }
        if self.max_trial_clocks < self.first_trial_clocks {
            return Err(format!(
                "max_trial_clocks ({}) is below first_trial_clocks ({})",
                self.max_trial_clocks, self.first_trial_clocks
            ));
        }
        if self.time_budget.is_some_and(|b| b.is_nan() || b <= 0.0) {
            return Err("time_budget must be a positive number of seconds".into());
        }
        if self.target.is_none() && self.time_budget.is_none() && self.plateau == 0 {
            return Err(
                "nothing ends the tuning: give a target, a time budget or a plateau".into(),
            );
        }
        if self.search.max_trials == 0 || self.thresholds.samples < 2 {
            return Err("max_trials must be at least 1 and samples at least 2".into());
        }
        Ok(())
    }
}

/// How a tuning ended, and where.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Why it stopped.
    pub stop: Stop,
    /// The branch trained last (alive: the caller frees it), if any was chosen.
    pub branch: Option<BranchId>,
    /// Its setting.
    pub setting: Option<Setting>,
    /// The best validation result seen.
    pub best: Option<f64>,
    /// Seconds spent.
    pub seconds: f64,
    /// Everything that happened.
    pub timeline: Timeline,
}

/// A branch the tuner trains, with its trace in its own time.
struct Branch {
    id: BranchId,
    setting: Setting,
    start: f64,
    times: Vec<f64>,
    losses: Vec<f64>,
    seconds: f64,
    summary: Option<Summary>,
}

impl Branch {
    fn clocks(&self) -> u64 {
        self.losses.len() as u64
    }

    fn slope(&self) -> Option<f64> {
        self.summary.and_then(|s| s.slope)
    }
}

/// What [`Tuner::observe`] calls with each event.
type Observer<'o> = Box<dyn FnMut(&Event) + 'o>;

/// The tuning loop: searches, trains, re-tunes (module docs).
pub struct Tuner<'o> {
    space: Space,
    options: Options,
    now: f64,
    timeline: Timeline,
    observer: Option<Observer<'o>>,
}

impl<'o> Tuner<'o> {
    /// A tuner over `space`; `options` are checked here.
    pub fn new(space: Space, options: Options) -> Result<Self, String> {
        options.check()?;
        Ok(Self {
            space,
            options,
            now: 0.0,
            timeline: Timeline::default(),
            observer: None,
        })
    }

    /// Calls `f` with every event as it happens (progress lines).
    pub fn observe(mut self, f: impl FnMut(&Event) + 'o) -> Self {
        self.observer = Some(Box::new(f));
        self
    }

    fn emit(&mut self, event: Event) {
        if let Some(f) = &mut self.observer {
            f(&event);
        }
        self.timeline.events.push(event);
    }

    fn spent(&self) -> bool {
        self.options.time_budget.is_some_and(|b| self.now >= b)
    }

    /// Tunes `trainer` until the target, the budget, or convergence.
    pub fn run<T: Trainer>(mut self, trainer: &mut T) -> Result<Outcome, T::Error> {
        let mut parent = trainer.root();
        let mut parent_setting: Option<Setting> = None;
        let mut bound = None;
        let mut retunes = 0;
        let mut best = None::<f64>;
        let mut round = 0u64;
        loop {
            let (chosen, trials) = self.search(trainer, parent, bound, round)?;
            round += 1;
            let Some(b) = chosen else {
                // Nothing beat standing still: keep the parent (trained, on a re-tune).
                let stop = if self.spent() {
                    Stop::Budget
                } else {
                    Stop::NoProgress
                };
                let kept = (parent != trainer.root()).then_some(parent);
                return Ok(self.finish(stop, kept, parent_setting, best));
            };
            trainer.free(parent)?;
            self.emit(Event::Kill {
                t: self.now,
                branch: parent,
                reason: "searched from; a trial replaces it".into(),
            });
            self.emit(Event::Choose {
                t: self.now,
                branch: b.id,
                setting: b.setting.clone(),
                trials,
            });
            if let Some(c) = self.timeline.curve(b.id) {
                c.chosen = true;
            }
            bound = Some(trials);
            let mut results = Vec::new();
            let mut branch = b;
            loop {
                if self.spent() {
                    return Ok(self.finish(
                        Stop::Budget,
                        Some(branch.id),
                        Some(branch.setting),
                        best,
                    ));
                }
                self.train(trainer, &mut branch, self.options.epoch_clocks)?;
                let m = trainer.evaluate(branch.id)?;
                self.now += m.seconds;
                self.emit(Event::Evaluate {
                    t: self.now,
                    branch: branch.id,
                    metric: m.value,
                });
                best = Some(best.map_or(m.value, |b: f64| b.max(m.value)));
                results.push(m.value);
                if self.options.target.is_some_and(|t| m.value >= t) {
                    return Ok(self.finish(
                        Stop::Target,
                        Some(branch.id),
                        Some(branch.setting),
                        best,
                    ));
                }
                if progress::plateaued(&results, self.options.plateau) {
                    if retunes >= self.options.max_retunes {
                        return Ok(self.finish(
                            Stop::Converged,
                            Some(branch.id),
                            Some(branch.setting),
                            best,
                        ));
                    }
                    retunes += 1;
                    self.emit(Event::Retune {
                        t: self.now,
                        branch: branch.id,
                    });
                    parent = branch.id;
                    parent_setting = Some(branch.setting);
                    break;
                }
            }
        }
    }

    fn finish(
        mut self,
        stop: Stop,
        branch: Option<BranchId>,
        setting: Option<Setting>,
        best: Option<f64>,
    ) -> Outcome {
        self.emit(Event::Stop { t: self.now, stop });
        Outcome {
            stop,
            branch,
            setting: branch.and(setting),
            best,
            seconds: self.now,
            timeline: self.timeline,
        }
    }

    /// Trains `b` for `clocks` more clocks, recording its trace and curve.
    fn train<T: Trainer>(
        &mut self,
        trainer: &mut T,
        b: &mut Branch,
        clocks: u64,
    ) -> Result<(), T::Error> {
        if clocks == 0 {
            return Ok(());
        }
        let measured = trainer.train(b.id, clocks)?;
        let mut seconds = 0.0;
        for m in &measured {
            seconds += m.seconds;
            b.seconds += m.seconds;
            self.now += m.seconds;
            b.times.push(b.seconds);
            b.losses.push(m.value);
            let now = self.now;
            if let Some(c) = self.timeline.curve(b.id) {
                c.points.push((now, m.value));
            }
        }
        self.emit(Event::Train {
            t: self.now,
            branch: b.id,
            clocks: measured.len() as u64,
            seconds,
            loss: measured.last().map_or(f64::NAN, |m| m.value),
        });
        Ok(())
    }

    /// Trains `b` until it has run `seconds` of its own time (or the trial bound),
    /// learning its time per clock from its first clocks.
    fn train_for<T: Trainer>(
        &mut self,
        trainer: &mut T,
        b: &mut Branch,
        seconds: f64,
    ) -> Result<(), T::Error> {
        let max = self.options.max_trial_clocks;
        while b.seconds < seconds && b.clocks() < max && !self.spent() {
            let clocks = if b.clocks() == 0 {
                self.options.first_trial_clocks.min(max)
            } else {
                let per_clock = b.seconds / b.clocks() as f64;
                let more = ((seconds - b.seconds) / per_clock.max(f64::MIN_POSITIVE)).ceil();
                (more.max(1.0) as u64).min(max - b.clocks())
            };
            self.train(trainer, b, clocks)?;
        }
        Ok(())
    }

    fn fork<T: Trainer>(
        &mut self,
        trainer: &mut T,
        parent: BranchId,
        setting: Setting,
        start: f64,
    ) -> Result<Branch, T::Error> {
        let id = trainer.fork(parent, &setting)?;
        self.emit(Event::Fork {
            t: self.now,
            branch: id,
            parent,
            setting: setting.clone(),
        });
        self.timeline.curves.push(Curve {
            branch: id,
            setting: setting.clone(),
            chosen: false,
            points: Vec::new(),
        });
        Ok(Branch {
            id,
            setting,
            start,
            times: Vec::new(),
            losses: Vec::new(),
            seconds: 0.0,
            summary: None,
        })
    }

    fn score(&mut self, b: &mut Branch) {
        let s = progress::summarize(
            (0.0, b.start),
            &b.times,
            &b.losses,
            &self.options.thresholds,
        );
        b.summary = Some(s);
        self.emit(Event::Score {
            t: self.now,
            branch: b.id,
            state: s.state,
            slope: s.slope,
        });
    }

    fn kill<T: Trainer>(
        &mut self,
        trainer: &mut T,
        b: Branch,
        reason: &str,
    ) -> Result<(), T::Error> {
        trainer.free(b.id)?;
        self.emit(Event::Kill {
            t: self.now,
            branch: b.id,
            reason: reason.into(),
        });
        Ok(())
    }

    /// One search from `parent`: the chosen branch (alive) and the trials run.
    fn search<T: Trainer>(
        &mut self,
        trainer: &mut T,
        parent: BranchId,
        bound: Option<usize>,
        round: u64,
    ) -> Result<(Option<Branch>, usize), T::Error> {
        let start = trainer.loss(parent)?;
        self.now += start.seconds;
        let mut options = self.options.search.clone();
        options.seed = options.seed.wrapping_add(round);
        let mut searcher = search::searcher(self.options.searcher, &self.space, &options);
        let capped = |n: usize| bound.is_some_and(|b| n >= b);
        let mut trials = 0;
        // Until a trial converges: trial time doubling, a new trial each time.
        let mut active: Vec<Branch> = Vec::new();
        let mut time_to_try = None::<f64>;
        let best = loop {
            let proposal = if capped(trials) || self.spent() {
                None
            } else {
                searcher.propose()
            };
            let added = proposal.is_some();
            if let Some(s) = proposal {
                trials += 1;
                active.push(self.fork(trainer, parent, s, start.value)?);
            }
            let mut ran = false;
            for b in &mut active {
                let before = b.clocks();
                match time_to_try {
                    None => {
                        // The first trial's time is every later trial's until it doubles.
                        let first = self.options.first_trial_clocks;
                        self.train(trainer, b, first)?;
                        time_to_try = Some(b.seconds);
                    }
                    Some(t) => self.train_for(trainer, b, t)?,
                }
                ran |= b.clocks() > before;
            }
            for b in &mut active {
                self.score(b);
            }
            let converging = active
                .iter()
                .enumerate()
                .filter(|(_, b)| {
                    b.summary
                        .is_some_and(|s| s.state == Convergence::Converging)
                })
                .min_by(|a, b| {
                    a.1.slope()
                        .unwrap_or(0.0)
                        .total_cmp(&b.1.slope().unwrap_or(0.0))
                })
                .map(|(i, _)| i);
            if let Some(i) = converging {
                let chosen = active.swap_remove(i);
                for b in active.drain(..) {
                    searcher.observe(&b.setting, b.slope());
                    self.kill(trainer, b, "a faster trial converged")?;
                }
                searcher.observe(&chosen.setting, chosen.slope());
                break Some(chosen);
            }
            // Diverged trials go at once; trials at the bound go unless best so far.
            let unstable_best = active
                .iter()
                .filter(|b| b.slope().is_some())
                .min_by(|a, b| {
                    a.slope()
                        .unwrap_or(0.0)
                        .total_cmp(&b.slope().unwrap_or(0.0))
                })
                .map(|b| b.id);
            let max = self.options.max_trial_clocks;
            let mut kept = Vec::new();
            for b in active.drain(..) {
                let diverged = b.summary.is_some_and(|s| s.state == Convergence::Diverged);
                if diverged || (b.clocks() >= max && Some(b.id) != unstable_best) {
                    searcher.observe(&b.setting, None);
                    let why = if diverged {
                        "diverged"
                    } else {
                        "no progress within the trial bound"
                    };
                    self.kill(trainer, b, why)?;
                } else {
                    kept.push(b);
                }
            }
            active = kept;
            if !added && !ran {
                // Nothing more to try: the best unstable trial, if any.
                let chosen = active.iter().position(|b| Some(b.id) == unstable_best);
                let chosen = chosen.map(|i| active.swap_remove(i));
                for b in active.drain(..) {
                    searcher.observe(&b.setting, b.slope());
                    self.kill(trainer, b, "search over")?;
                }
                if let Some(c) = &chosen {
                    searcher.observe(&c.setting, c.slope());
                }
                return Ok((chosen, trials));
            }
            if active.iter().any(|b| b.clocks() < max) {
                time_to_try = time_to_try.map(|t| t * 2.0);
            }
        };
        // A trial converged: every later trial runs as long, and stays only if better.
        let Some(mut best) = best else {
            return Ok((None, trials));
        };
        let time_to_try = best.seconds;
        while !capped(trials) && !self.spent() {
            let Some(s) = searcher.propose() else { break };
            trials += 1;
            let mut b = self.fork(trainer, parent, s, start.value)?;
            self.train_for(trainer, &mut b, time_to_try)?;
            self.score(&mut b);
            searcher.observe(&b.setting, b.slope());
            let better = matches!((b.slope(), best.slope()), (Some(x), Some(y)) if x < y);
            if better {
                let old = std::mem::replace(&mut best, b);
                self.kill(trainer, old, "a later trial is faster")?;
            } else {
                let why = match b.summary.map(|s| s.state) {
                    Some(Convergence::Diverged) => "diverged",
                    Some(Convergence::NoProgress) => "no progress",
                    _ => "slower than the best trial",
                };
                self.kill(trainer, b, why)?;
            }
        }
        Ok((Some(best), trials))
    }
}
