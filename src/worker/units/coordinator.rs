//! The coordinator of a batch of work units (worker 0): hands units out on demand (none to
//! a worker much slower than the others while they suffice), gives backups of running
//! units to idle workers where they can win ([`super::speeds`]), keeps the first result
//! of each unit, stops the others, and ends the batch.
//!
//! When the last unit's result comes in, every worker still running a unit is sent its
//! STOP and, right behind it, the end of the batch: a worker slowed down (a throttled or
//! loaded machine) answers and leaves without waiting for another round trip through
//! the coordinator. The coordinator still takes every answer before it returns, so the
//! batch leaves no message behind for the next run.

use super::speeds::Speeds;
use super::{add, UnitsOutcome, UnitsReport, WorkUnits, ASSIGN, DONE, HELLO, RESULT, STOP};
use crate::error::{Error, Result};
use crate::worker::Worker;
use std::time::{Duration, Instant};

/// The coordinator's state of a batch.
pub(super) struct Coordinator {
    batch: WorkUnits,
    workers: usize,
    /// Workers per process, and processes (a backup goes to another process when there
    /// are several).
    per_process: usize,
    processes: usize,
    next: usize,
    /// Units given back without a result and run by no one: handed out again first.
    again: Vec<usize>,
    results: Vec<Option<Vec<f64>>>,
    missing: usize,
    /// Per unit: the workers running it.
    holders: Vec<Vec<usize>>,
    /// Per worker: the unit it runs, if any; `None` also before its first request.
    running: Vec<Option<usize>>,
    /// Per worker: when it was given the unit it runs.
    since: Vec<Instant>,
    /// Per worker: waiting for a unit (asked, none to give yet).
    waiting: Vec<bool>,
    /// Per worker: told there is no more.
    finished: Vec<bool>,
    /// Per worker: kept from a fresh unit as too slow ([`Speeds::pass_over`]).
    passed: Vec<bool>,
    stops_sent: Vec<u64>,
    /// What each worker's units take (learnt across batches).
    speeds: Speeds,
    report: UnitsReport,
}

impl Coordinator {
    pub(super) fn new(
        batch: &WorkUnits,
        workers: usize,
        per_process: usize,
        speeds: Speeds,
    ) -> Self {
        let now = Instant::now();
        Coordinator {
            batch: *batch,
            workers,
            per_process: per_process.max(1),
            processes: workers.div_ceil(per_process.max(1)),
            next: 0,
            again: Vec::new(),
            results: vec![None; batch.units],
            missing: batch.units,
            holders: vec![Vec::new(); batch.units],
            running: vec![None; workers],
            since: vec![now; workers],
            waiting: vec![false; workers],
            finished: vec![false; workers],
            passed: vec![false; workers],
            stops_sent: vec![0; workers],
            speeds,
            report: UnitsReport {
                done: vec![0; workers],
                duplicated: vec![0; workers],
                abandoned: vec![0; workers],
                passed_over: vec![0; workers],
                backups: 0,
            },
        }
    }

    /// Serves the computing workers until every unit has a result and every worker has
    /// been told so and has answered for every unit it was given; returns the outcome and
    /// what was learnt of the workers' speeds.
    pub(super) fn run(mut self, w: &mut Worker<'_>) -> Result<(UnitsOutcome, Speeds)> {
        let timeout = w.shared.config.message_timeout;
        let mut message = vec![0.0; self.batch.len + 2];
        let mut heard = Instant::now();
        let mut idle_rounds = 0u32;
        while (1..self.workers).any(|k| !self.finished[k] || self.running[k].is_some()) {
            let mut news = false;
            for k in 1..self.workers {
                while w.try_recv_from(k, RESULT, &mut message)? {
                    news = true;
                    self.on_result(w, k, &message)?;
                }
            }
            if news {
                heard = Instant::now();
                idle_rounds = 0;
                continue;
            }
            if heard.elapsed() > timeout {
                let silent: Vec<usize> = (1..self.workers)
                    .filter(|&k| !self.finished[k] || self.running[k].is_some())
                    .collect();
                return Err(Error::failed(
                    "work units",
                    format!(
                        "no word from workers {silent:?} for {} s (Config::message_timeout); {} \
                         of {} units have no result",
                        timeout.as_secs_f64(),
                        self.missing,
                        self.batch.units
                    ),
                ));
            }
            // Back off from spinning while the workers compute.
            idle_rounds = idle_rounds.saturating_add(1);
            if idle_rounds < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
                // A unit becoming overdue is news too: a waiting worker may back it up.
                self.assign_waiting(w)?;
            }
        }
        for k in (1..self.workers).filter(|&k| self.passed[k]) {
            self.speeds.passed_over(k);
            self.report.passed_over[k] += 1;
        }
        let mut sum = vec![0.0; self.batch.len];
        for r in self.results.iter().flatten() {
            add(&mut sum, r);
        }
        let outcome = UnitsOutcome {
            sum,
            report: self.report,
        };
        Ok((outcome, self.speeds))
    }

    /// Worker `k`'s message: a first request, or a unit done or abandoned.
    fn on_result(&mut self, w: &mut Worker<'_>, k: usize, message: &[f64]) -> Result<()> {
        let (unit, status) = (message[0], message[1]);
        if status != HELLO {
            let unit = unit as usize;
            if self.running[k] != Some(unit) || unit >= self.batch.units {
                return Err(Error::failed(
                    "work units",
                    format!("worker {k} answered for unit {unit}, which it was not running"),
                ));
            }
            let took = self.since[k].elapsed().as_secs_f64();
            self.running[k] = None;
            self.holders[unit].retain(|&h| h != k);
            if status == DONE {
                self.speeds.completed(k, took);
                if self.results[unit].is_none() {
                    self.results[unit] = Some(message[2..].to_vec());
                    self.missing -= 1;
                    self.report.done[k] += 1;
                    for h in std::mem::take(&mut self.holders[unit]) {
                        w.send_to(h, STOP, &[unit as f64])?;
                        self.stops_sent[h] += 1;
                    }
                    if self.missing == 0 {
                        self.end_running(w)?;
                    }
                } else {
                    self.report.duplicated[k] += 1;
                }
            } else {
                self.speeds.stopped(k, took);
                self.report.abandoned[k] += 1;
                if self.results[unit].is_none() && self.holders[unit].is_empty() {
                    self.again.push(unit); // given up unasked: someone must run it
                }
            }
        }
        if self.finished[k] {
            return Ok(()); // its answer to a stop sent with the end
        }
        self.waiting[k] = true;
        // A result may have finished the batch for every waiting worker.
        self.assign_waiting(w)
    }

    /// Hands out what there is to every worker waiting.
    fn assign_waiting(&mut self, w: &mut Worker<'_>) -> Result<()> {
        for j in 1..self.workers {
            if self.waiting[j] {
                self.assign(w, j)?;
            }
        }
        Ok(())
    }

    /// The batch is complete: every worker still running a unit (each has been sent its
    /// stop) is told the end now, behind the stop, and answers once for its unit.
    fn end_running(&mut self, w: &mut Worker<'_>) -> Result<()> {
        for k in 1..self.workers {
            if self.running[k].is_some() && !self.finished[k] {
                self.finished[k] = true;
                w.send_to(k, ASSIGN, &[-1.0, self.stops_sent[k] as f64])?;
            }
        }
        Ok(())
    }

    /// The unit a backup by waiting worker `k` should take, if any (see
    /// [`super::speeds`]): among units running on one worker of another process (when
    /// there are several), the one expected to end last, if `k` is expected to end it
    /// first; without estimates, the oldest.
    fn backup_for(&self, k: usize) -> Option<usize> {
        let process = |worker: usize| worker / self.per_process;
        let now = Instant::now();
        (0..self.batch.units)
            .filter(|&u| {
                self.results[u].is_none()
                    && self.holders[u].len() == 1
                    && (self.processes == 1 || process(self.holders[u][0]) != process(k))
            })
            .map(|u| {
                let holder = self.holders[u][0];
                let elapsed = now.duration_since(self.since[holder]).as_secs_f64();
                (u, self.speeds.remaining(holder, elapsed), elapsed)
            })
            .filter(|&(_, remaining, _)| self.speeds.backup_wins(k, remaining))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)))
            .map(|(u, _, _)| u)
    }

    /// Gives waiting worker `k` a new unit, a backup, or the end, if there is one to give.
    fn assign(&mut self, w: &mut Worker<'_>, k: usize) -> Result<()> {
        let fresh = self.again.len() + (self.batch.units - self.next);
        if fresh > 0 && self.batch.backups && self.speeds.pass_over(k, fresh, 1..self.workers) {
            self.passed[k] = true;
            return Ok(()); // waits: the others take the fresh units
        }
        let unit = if let Some(u) = self.again.pop() {
            Some(u)
        } else if self.next < self.batch.units {
            self.next += 1;
            Some(self.next - 1)
        } else if self.batch.backups && self.missing > 0 {
            let backup = self.backup_for(k);
            if backup.is_some() {
                self.report.backups += 1;
            }
            backup
        } else {
            None
        };
        match unit {
            Some(u) => {
                self.holders[u].push(k);
                self.running[k] = Some(u);
                self.since[k] = Instant::now();
                self.waiting[k] = false;
                w.send_to(k, ASSIGN, &[u as f64, self.stops_sent[k] as f64])
            }
            None if self.missing == 0 => {
                self.waiting[k] = false;
                self.finished[k] = true;
                w.send_to(k, ASSIGN, &[-1.0, self.stops_sent[k] as f64])
            }
            None => Ok(()), // waits for a result to come in
        }
    }
}
