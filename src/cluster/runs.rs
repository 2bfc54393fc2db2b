//! Runs: [`Cluster::run`] and its variants run a closure once on every worker thread of
//! the pool, every worker starting at the clock the last run barrier agreed; a run then
//! ends at every shard ([`ToShard::RunEnd`]) and waits until every process has ended it.
//! Also the collective [`Cluster::all_gather`] and the all-gather round under it.
//!
//! It owns a run's bookkeeping (rounds, the run barrier, the first failure by worker,
//! messages nobody received) and lends each worker its kept specialized state; what a
//! worker does with it is `worker`'s. A first-iter run may be the one gathered: it then
//! hands the logs to `specialize`, which decides what to make of them.

use super::diagnostics::Diagnostic;
use super::Cluster;
use crate::buf::AlignedBuf;
use crate::config::Mode;
use crate::element::Element;
use crate::error::{panic_message, Error, Result};
use crate::gather::AccessLog;
use crate::ids::Clock;
use crate::msg::ToShard;
use crate::sync::lock;
use crate::worker::{KeptState, Role, Worker};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

impl Cluster {
    /// Runs `f` once on each of the `config.workers` worker threads and returns their
    /// results in worker order.
    ///
    /// Every worker starts at the same clock (the largest any worker reached before).
    /// When `f` returns, the worker's remaining updates are sent and it stops holding the
    /// others back. If any worker fails — `f` returns an error or panics — the others
    /// still run to completion and the first failure (by worker index) is returned.
    pub fn run<R, F>(&mut self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.run_as(self.units(), |w, ()| f(w), true)
    }

    /// A [`run`](Self::run) with per-worker state: worker `w` gets `&mut states[w]`, which
    /// it keeps across runs (topic assignments, local buffers, random generators). There
    /// must be exactly one state per worker. Each state is only ever touched by its own
    /// worker, so it needs no lock.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let t = cluster.create_table::<i64>("t", 1)?;
    /// let mut done = vec![0u32; 2]; // one counter per worker, kept across runs
    /// for _ in 0..3 {
    ///     cluster.run_with(&mut done, |w, done| {
    ///         w.update(&t, 0, &[1])?;
    ///         *done += 1;
    ///         w.clock()
    ///     })?;
    /// }
    /// assert_eq!(done, vec![3, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn run_with<S, R, F>(&mut self, states: &mut [S], f: F) -> Result<Vec<R>>
    where
        S: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let states = self.per_worker(states.iter_mut())?;
        self.run_as(states, f, true)
    }

    /// A [`run`](Self::run) that writes the initial parameters: the same in every way
    /// except that `first-iter` mode never records it, so the first *ordinary* run (the
    /// first real iteration) is the one gathered. In `virtual` mode it already runs on the
    /// specialized store.
    pub fn init_run<R, F>(&mut self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.run_as(self.units(), |w, ()| f(w), false)
    }

    /// [`init_run`](Self::init_run) with per-worker state, as [`run_with`](Self::run_with).
    pub fn init_run_with<S, R, F>(&mut self, states: &mut [S], f: F) -> Result<Vec<R>>
    where
        S: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let states = self.per_worker(states.iter_mut())?;
        self.run_as(states, f, false)
    }

    /// [`run`](Self::run) with `inputs[w]` handed to worker `w`; `may_gather`: this run
    /// may be the one `first-iter` records.
    fn run_as<I, R, F>(&mut self, inputs: Vec<I>, f: F, may_gather: bool) -> Result<Vec<R>>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        self.check()?;
        if may_gather && self.config.mode == Mode::Virtual && self.spec.pattern.is_none() {
            self.diagnose(Diagnostic::VirtualModeWithoutPattern, || {
                "Mode::Virtual, but this run comes before any virtual_iteration: it runs \
                 generic, unspecialized (call Cluster::virtual_iteration first, or use \
                 Mode::Generic)"
                    .to_string()
            });
        }
        let start = self.runs.start_clock;
        let gather_first =
            may_gather && self.config.mode == Mode::FirstIter && self.spec.gather_next;
        let role = if gather_first {
            Role::Recording
        } else {
            Role::Normal
        };
        // An init run writes each row once rather than following the iteration's pattern:
        // how its accesses found their rows says nothing about the specialization.
        let count = may_gather;
        let began = std::time::Instant::now();
        let outcome = self.on_workers(role, start, count, inputs, &f);
        // Every worker has finished (even a failed one), so the run can end everywhere;
        // the run's own error, if any, is the one to report.
        let at_barrier = std::time::Instant::now();
        let ended = self.end_run();
        if ended.is_ok() {
            (self.metrics).run_ended(began, at_barrier, &self.spec.counters);
        }
        let (results, logs) = outcome?;
        ended?;
        // Once every process has ended the run, every message another process's workers
        // sent in it has arrived (it travelled ahead of that process's RunEnd, FIFO per
        // pair of processes): one nobody received fails this run, not the next.
        if let Some(e) = self.leftover_error(self.runs.rounds) {
            return Err(e);
        }
        if gather_first {
            // First-iteration gathering: this run was generic and logged; every update is
            // on the servers now, so the conversion loses nothing.
            self.spec.gather_next = false;
            self.gather(logs);
            self.place_rows()?;
            self.specialize()?;
        }
        Ok(results)
    }

    /// One unit input per worker.
    pub(super) fn units(&self) -> Vec<()> {
        vec![(); self.config.workers]
    }

    /// `states` as one input per worker, or an error naming the mismatch.
    pub(super) fn per_worker<I: ExactSizeIterator>(&self, states: I) -> Result<Vec<I::Item>> {
        if states.len() != self.config.workers {
            return Err(Error::StateCount {
                given: states.len(),
                workers: self.config.workers,
            });
        }
        Ok(states.collect())
    }

    /// Runs `f` on every worker thread in `role`; returns results and access logs.
    pub(super) fn on_workers<I, R, F>(
        &mut self,
        role: Role,
        start: Clock,
        count: bool,
        inputs: Vec<I>,
        f: &F,
    ) -> Result<(Vec<R>, Vec<AccessLog>)>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        let (shared, tables, id) = (&*self.shared, self.registry.tables(), self.id);
        let specials = &self.spec.kept;
        let help_at_end = self.runs.help_at_end && role != Role::Virtual;
        self.runs.rounds += 1;
        let round = self.runs.rounds;
        // Workers of this run not yet done with their part (see the end of the closure;
        // counted only when the finished ones stay to help).
        let running = AtomicUsize::new(inputs.len());
        let outcomes = self.pool.on_each(inputs, |w, input| {
            // A virtual iteration leaves the kept state alone.
            let kept = match role {
                Role::Virtual => KeptState::Nothing,
                _ => std::mem::take(&mut *lock(&specials[w])),
            };
            let mut worker = Worker::new(shared, tables, id, w, start, role, kept).in_round(round);
            let result = catch_unwind(AssertUnwindSafe(|| f(&mut worker, input)));
            if !matches!(result, Ok(Ok(_))) {
                // Whoever waits for this worker's messages stops waiting.
                shared.worker_stopped(shared.world.worker_id(shared.process, w), round);
            }
            let finished = worker.finish();
            let (kept, counters) = worker.take_kept(finished.is_ok());
            if role != Role::Virtual {
                *lock(&specials[w]) = kept;
            }
            let log = worker.take_log().unwrap_or_default();
            // Done: stay to take what the last worker's CLOCK queues on this process's
            // shards, then leave with it.
            if help_at_end {
                if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                    shared.signal.notify(); // the helpers waiting below: the run is over
                } else {
                    shared.help_while(|| running.load(Ordering::Acquire) > 0);
                }
            }
            (result, finished, log, counters)
        });
        let mut results = Vec::with_capacity(outcomes.len());
        let mut logs = Vec::with_capacity(outcomes.len());
        let mut first_error: Option<Error> = None;
        for (w, outcome) in outcomes.into_iter().enumerate() {
            let result = match outcome {
                Err(payload) | Ok((Err(payload), _, _, _)) => Err(Error::WorkerPanicked {
                    worker: w,
                    message: panic_message(payload.as_ref()),
                }),
                Ok((Ok(result), finished, log, counters)) => {
                    logs.push(log);
                    if count {
                        self.spec.counters += counters;
                    }
                    result.and_then(|r| finished.map(|_| r))
                }
            };
            match result {
                Ok(r) => results.push(r),
                Err(e) => {
                    if first_error.as_ref().is_none_or(is_secondary) {
                        first_error = Some(e);
                    }
                }
            }
        }
        // Messages of this round nobody received: an error of the run (or, after another
        // error, dropped with it), never values for a later run's receives.
        let leftover = self.leftover_error(round);
        if first_error.is_none() {
            first_error = leftover;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok((results, logs)),
        }
    }

    /// The error for messages of round `round` still waiting in a mailbox (taken out and
    /// dropped), if any.
    fn leftover_error(&self, round: u64) -> Option<Error> {
        let leftovers = self.shared.mailboxes.leftovers(round);
        let l = leftovers.first()?;
        Some(Error::Receive {
            worker: self.shared.world.worker_id(self.shared.process, l.to) as usize,
            from: l.from as usize,
            tag: l.tag,
            reason: format!(
                "{} message(s) sent to it in this run were never received{}",
                l.count,
                match leftovers.len() {
                    1 => String::new(),
                    n => format!(" (and {} more sender/tag pairs)", n - 1),
                }
            ),
        })
    }

    /// Ends the current run at every shard and waits until every process has ended it:
    /// then all updates are applied, and the shards agree on the next run's start clock.
    fn end_run(&mut self) -> Result<()> {
        let run = self.runs.ended + 1;
        for shard in 0..self.shared.world.total_shards() {
            let from = self.shared.process;
            self.send(shard, ToShard::RunEnd { from, run })?;
        }
        self.runs.start_clock = self.shared.await_run_ready(run)?;
        self.runs.ended = run;
        Ok(())
    }

    /// Every process's `values`, in rank order: a collective, which every process of the
    /// cluster must call, the same number of times and in the same order as the others
    /// (it waits for all of them). For what an application computes outside the store
    /// and the whole cluster needs, such as the sum of each worker's part of an
    /// objective: concatenating the parts in rank order gives the same sequence, and so
    /// the same floating-point sum, as one process of as many workers.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let all = Cluster::run_local_processes(Config::new(1), 3, |cluster| {
    ///     let mine = [cluster.rank() as f64 + 0.5];
    ///     cluster.all_gather(&mine)
    /// })?;
    /// assert_eq!(all[2], vec![vec![0.5], vec![1.5], vec![2.5]]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn all_gather<T: Element>(&mut self, values: &[T]) -> Result<Vec<Vec<T>>> {
        let parts = self.gather_round(AlignedBuf::from_slice(values))?;
        Ok(parts.iter().map(|b| b.cast::<T>().to_vec()).collect())
    }

    /// One all-gather round through the coordinator: every process's `values`, in rank
    /// order (the collective under [`all_gather`](Self::all_gather) and its byte form).
    pub(crate) fn gather_round(&mut self, values: AlignedBuf) -> Result<Vec<AlignedBuf>> {
        self.check()?;
        self.runs.gathers += 1;
        let round = self.runs.gathers;
        let from = self.shared.process;
        self.send(
            0,
            ToShard::Gather {
                from,
                round,
                values,
            },
        )?;
        self.shared.await_gathered(round)
    }
}

/// Errors that are consequences of another failure rather than causes: a failed or shut
/// down cluster, and a receive that ended because its sender stopped with an error (the
/// sender's error is the one to report).
pub(super) fn is_secondary(e: &Error) -> bool {
    match e {
        Error::ShutDown | Error::Failed { .. } => true,
        Error::Receive { reason, .. } => reason == crate::worker::SENDER_STOPPED,
        _ => false,
    }
}
