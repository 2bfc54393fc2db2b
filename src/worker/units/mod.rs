//! Work units with backup tasks (DistBelief's Sandblaster): [`Worker::work_units`].
//!
//! A batch of work (a gradient over a dataset, say) is cut into many more units than
//! workers. Worker 0 coordinates: it hands units out on demand, so a fast worker takes
//! more of them and a slow one fewer; once every unit is handed out, a worker that asks
//! for more gets a unit still running elsewhere (a **backup task**, as in MapReduce: one
//! per unit, on another process than the original's when the cluster has several, since
//! a copy on the same machine competes with it for its cores; the unit expected to end
//! last, and only if the backup is expected to end first, from what each worker's units
//! took in earlier batches: [`speeds`]), the first result for a unit wins, and whoever
//! still runs it is told to stop, with the end of the batch when it was the last. A unit
//! given back unfinished without being told to stop is handed out again. Results are
//! summed in unit order, so the batch's result counts each unit once and is the same bit
//! for bit whatever the timing and whoever computed each unit.
//!
//! The exchange runs on worker messages ([`Worker::send_to`]) with three reserved tags
//! ([`UNIT_TAGS`]); every message sent is received within the run (a stopped unit still
//! answers, as abandoned), so a batch leaves nothing behind for the next run. Every
//! wait is bounded by [`Config::message_timeout`](crate::config::Config::message_timeout)
//! without news, and a worker that stops with an error stops the batch.

mod coordinator;
mod speeds;

use super::Worker;
use crate::error::Result;
use coordinator::Coordinator;
use speeds::Speeds;

/// The tags work units use for their messages (`u32::MAX − 2 ..= u32::MAX`); an
/// application's own messages must use others.
pub const UNIT_TAGS: std::ops::RangeInclusive<u32> = (u32::MAX - 2)..=u32::MAX;

/// Worker → coordinator: `[unit, status, values…]` (status: done, abandoned, or a first
/// request).
const RESULT: u32 = u32::MAX;
/// Coordinator → worker: `[unit or −1 (no more), stops sent to it so far]`.
const ASSIGN: u32 = u32::MAX - 1;
/// Coordinator → worker: `[unit]`, whose result came from elsewhere.
const STOP: u32 = u32::MAX - 2;

/// A unit's code as the computing side holds it: unit, result, whether to stop.
type UnitBody<'a> = dyn FnMut(usize, &mut [f64], &mut dyn FnMut() -> bool) -> Result<bool> + 'a;

const DONE: f64 = 1.0;
const ABANDONED: f64 = 0.0;
const HELLO: f64 = -1.0;

/// A batch of work units ([`Worker::work_units`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkUnits {
    /// How many units the batch has (`0..units`).
    pub units: usize,
    /// The length of each unit's result (and of the batch's sum).
    pub len: usize,
    /// Whether idle workers take backups of units still running elsewhere.
    pub backups: bool,
}

/// What the coordinator saw of a batch, per worker (global ids; worker 0 coordinates and
/// computes only when it is the cluster's only worker).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnitsReport {
    /// Units each worker computed first (its result was used).
    pub done: Vec<u64>,
    /// Units each worker completed after another had (its result was discarded).
    pub duplicated: Vec<u64>,
    /// Units each worker stopped because another completed them first.
    pub abandoned: Vec<u64>,
    /// Batches in which a worker got no fresh unit because, with backups on, it was
    /// expected to end one only after the others had ended them all (a straggler).
    pub passed_over: Vec<u64>,
    /// Backup tasks handed out (units given to a second or later worker).
    pub backups: u64,
}

/// A batch's outcome on the coordinator: the sum of the units' results in unit order,
/// and who did what.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitsOutcome {
    /// `Σ` over units, in unit order, of each unit's (first) result.
    pub sum: Vec<f64>,
    /// Who did what.
    pub report: UnitsReport,
}

impl Worker<'_> {
    /// Runs a batch of work units on every worker of the run (call it on every worker
    /// alike): `body(unit, out, stop)` computes unit `unit`'s result into `out` (zeroed,
    /// `batch.len` long) and returns whether it completed; it should call `stop()` now and
    /// then (say, every few hundred samples) and return `Ok(false)` at once when it says
    /// `true` — the unit's result came from another worker. An error it returns stops the
    /// batch on every worker. A unit must take less than
    /// [`Config::message_timeout`](crate::config::Config::message_timeout): the coordinator
    /// gives up on workers it has not heard from for that long. Worker 0 coordinates (see the
    /// module docs) and gets the outcome; the others get `None`. With one worker in the
    /// cluster, it computes every unit itself.
    ///
    /// In a virtual iteration each worker runs one unit (its id modulo the units) without
    /// messages, so that the access pattern records what a unit reads.
    ///
    /// ```
    /// use iterstore::units::WorkUnits;
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(3))?;
    /// let batch = WorkUnits { units: 10, len: 2, backups: true };
    /// let outcome = cluster.run(|w| {
    ///     w.work_units(&batch, |unit, out, _stop| {
    ///         out[0] = unit as f64; // Σ unit = 45
    ///         out[1] = 1.0; // Σ 1 = 10
    ///         Ok(true)
    ///     })
    /// })?;
    /// let first = outcome[0].as_ref().expect("worker 0 coordinates");
    /// assert_eq!(first.sum, vec![45.0, 10.0]);
    /// assert_eq!(first.report.done.iter().sum::<u64>(), 10);
    /// # Ok(())
    /// # }
    /// ```
    pub fn work_units(
        &mut self,
        batch: &WorkUnits,
        mut body: impl FnMut(usize, &mut [f64], &mut dyn FnMut() -> bool) -> Result<bool>,
    ) -> Result<Option<UnitsOutcome>> {
        let workers = self.workers();
        let mut out = vec![0.0; batch.len];
        if self.is_virtual() {
            if batch.units > 0 {
                body(self.id() % batch.units, &mut out, &mut || false)?;
            }
            return Ok(None);
        }
        if workers == 1 {
            let mut sum = vec![0.0; batch.len];
            for unit in 0..batch.units {
                out.fill(0.0);
                body(unit, &mut out, &mut || false)?;
                add(&mut sum, &out);
            }
            let report = UnitsReport {
                done: vec![batch.units as u64],
                duplicated: vec![0],
                abandoned: vec![0],
                passed_over: vec![0],
                backups: 0,
            };
            return Ok(Some(UnitsOutcome { sum, report }));
        }
        if self.id() == 0 {
            let per_process = self.shared.world.workers;
            let speeds = Speeds::load(&self.shared.unit_times, workers);
            let (outcome, speeds) =
                Coordinator::new(batch, workers, per_process, speeds).run(self)?;
            speeds.store(&self.shared.unit_times);
            return Ok(Some(outcome));
        }
        self.compute_units(batch, &mut body)?;
        Ok(None)
    }

    /// A computing worker's side: ask, compute, answer, until told there is no more.
    fn compute_units(&mut self, batch: &WorkUnits, body: &mut UnitBody<'_>) -> Result<()> {
        let mut message = vec![0.0; batch.len + 2];
        message[1] = HELLO;
        self.send_to(0, RESULT, &message)?;
        let mut stops_seen = 0u64;
        loop {
            let mut assign = [0.0; 2];
            self.recv_from(0, ASSIGN, &mut assign)?;
            if assign[0] < 0.0 {
                // Take every stop sent, so that nothing is left for the next run.
                let mut stop = [0.0];
                while stops_seen < assign[1] as u64 {
                    self.recv_from(0, STOP, &mut stop)?;
                    stops_seen += 1;
                }
                return Ok(());
            }
            let unit = assign[0] as usize;
            let (head, values) = message.split_at_mut(2);
            values.fill(0.0);
            let mut error = None;
            let completed = {
                let mut stop = || {
                    let mut got = [0.0];
                    loop {
                        match self.try_recv_from(0, STOP, &mut got) {
                            Ok(true) => {
                                stops_seen += 1;
                                if got[0] as usize == unit {
                                    return true;
                                }
                            }
                            Ok(false) => return false,
                            Err(e) => {
                                error = Some(e);
                                return true;
                            }
                        }
                    }
                };
                body(unit, values, &mut stop)
            };
            if let Some(e) = error {
                return Err(e);
            }
            let completed = completed?;
            head[0] = unit as f64;
            head[1] = if completed { DONE } else { ABANDONED };
            self.send_to(0, RESULT, &message)?;
        }
    }
}

/// `sum += v`, element by element.
pub(super) fn add(sum: &mut [f64], v: &[f64]) {
    for (s, x) in sum.iter_mut().zip(v) {
        *s += x;
    }
}
