//! The specialization pipeline: gather the iteration's access pattern (a virtual
//! iteration, [`Cluster::virtual_iteration`], or in first-iter mode the first real run),
//! place rows by locality across processes (migrating rows that hold values), then build
//! the plan, the workers' op tapes within the tape budget and the NUMA plan, and switch
//! the shards ([`ToShard::Specialize`]) and this process's arena to them.
//!
//! It decides *when* to specialize and *from what*; the plan's layout is `plan`'s, the
//! NUMA placement `numa`'s, the arena `client`'s, the specialized worker `worker`'s and
//! the placement's arithmetic `placement`'s. It reports nothing itself: `stats` reads
//! what it keeps.

use super::diagnostics::Diagnostic;
use super::Cluster;
use crate::client::ProcessArena;
use crate::config::Mode;
use crate::error::Result;
use crate::gather::{AccessLog, AccessPattern};
use crate::ids::RowKey;
use crate::msg::ToShard;
use crate::numa::{self, NumaConfig};
use crate::plan::{self, PlanConfig};
use crate::sync::lock;
use crate::worker::{KeptState, Role, Worker};
use std::sync::Arc;
use std::time::Instant;

impl Cluster {
    /// In `first-iter` mode, makes the next [`run`](Self::run) the one whose accesses are
    /// recorded and specialized for (by default it is the first `run`; [`init_run`]s are
    /// never recorded), for example to re-gather after the pattern changed. No effect in
    /// other modes.
    ///
    /// [`init_run`]: Self::init_run
    pub fn gather_next_run(&mut self) {
        self.spec.gather_next = self.config.mode == Mode::FirstIter;
    }

    /// Runs one **virtual iteration**: `f` (the application's own iteration code, with
    /// its CLOCKs) runs on every worker while the store only logs — reads return zeros,
    /// updates are dropped, nothing is sent and no clock advances. The merged log is the
    /// cluster's [`AccessPattern`], returned and kept ([`access_pattern`](Self::access_pattern)).
    ///
    /// Call it before initialising any parameter. `f` must not depend on values it reads
    /// to decide *which* rows it touches, or the pattern will differ from the real one
    /// (a deviating real iteration still works; it is just not specialized for).
    ///
    /// **The virtual iteration really runs `f`**, so every effect `f` has outside the
    /// store happens too, computed from zeros: a worker's local state changed here would
    /// carry those values into the real iterations (NaNs from dividing by a zero count are
    /// the usual symptom). Keep such state in per-worker states and use
    /// [`virtual_iteration_with`](Self::virtual_iteration_with), which hands `f` a
    /// throw-away copy, or skip the effect when [`Worker::is_virtual`] is `true`.
    pub fn virtual_iteration<R, F>(&mut self, f: F) -> Result<&AccessPattern>
    where
        R: Send,
        F: Fn(&mut Worker<'_>) -> Result<R> + Sync,
    {
        self.virtual_as(self.units(), |w, ()| f(w))
    }

    /// A [`virtual_iteration`](Self::virtual_iteration) of the iteration code that
    /// [`run_with`](Self::run_with) runs: worker `w` gets a *copy* of `states[w]`, dropped
    /// when it returns, so nothing the virtual iteration does to a worker's state (from
    /// the zeros it reads) reaches the real iterations.
    pub fn virtual_iteration_with<S, R, F>(&mut self, states: &[S], f: F) -> Result<&AccessPattern>
    where
        S: Clone + Send,
        R: Send,
        F: Fn(&mut Worker<'_>, &mut S) -> Result<R> + Sync,
    {
        let copies = self.per_worker(states.iter().cloned())?;
        self.virtual_as(copies, |w, mut copy| f(w, &mut copy))
    }

    /// [`virtual_iteration`](Self::virtual_iteration) with `inputs[w]` for worker `w`.
    fn virtual_as<I, R, F>(&mut self, inputs: Vec<I>, f: F) -> Result<&AccessPattern>
    where
        I: Send,
        R: Send,
        F: Fn(&mut Worker<'_>, I) -> Result<R> + Sync,
    {
        self.check()?;
        let start = self.runs.start_clock;
        let (_, logs) = self.on_workers(Role::Virtual, start, false, inputs, &f)?;
        self.gather(logs);
        if self.config.mode == Mode::Virtual {
            self.place_rows()?;
            self.specialize()?;
        } else {
            let mode = self.config.mode.name();
            self.diagnose(Diagnostic::VirtualNotSpecialized, || {
                format!(
                    "virtual_iteration in {mode} mode returns the access pattern but specializes \
                     nothing: only Mode::Virtual specializes from a virtual iteration"
                )
            });
        }
        Ok(self.spec.pattern.as_ref().expect("set above"))
    }

    /// Locality placement ([`Specializations::placement`](crate::Specializations)): in a
    /// cluster of several processes, every process shares its rows' access counts with
    /// every other (an all-gather, which every process does alike) and installs the same
    /// placement. Before any run or resume no row holds a value, so nothing moves. After
    /// runs (the first-iter mode, which gathers in the first real iteration) or a resume
    /// (rows restored from a checkpoint) the rows that hold
    /// values move to their new home shards first, with their update-rule states
    /// ([`ToShard::Migrate`]): every shard hands
    /// them over between runs, when every update of the last run is applied, and every
    /// process waits until every shard has finished before it goes on. Once a plan
    /// exists its rows live in the shards' arenas and stay where they are (a warning
    /// says so).
    pub(super) fn place_rows(&mut self) -> Result<()> {
        if !self.config.specializations.placement || self.shared.world.processes < 2 {
            return Ok(());
        }
        if self.spec.plans > 0 {
            tracing::warn!(
                "locality placement skipped: the rows are already planned; they keep their \
                 placement"
            );
            return Ok(());
        }
        let Some(pattern) = &self.spec.pattern else {
            return Ok(());
        };
        let mine: Vec<i64> = pattern
            .rows()
            .iter()
            .flat_map(|r| {
                [
                    i64::from(r.key.table),
                    r.key.row as i64,
                    r.accesses() as i64,
                ]
            })
            .collect();
        let parts = self.all_gather(&mine)?;
        let tables = self.registry.tables();
        let mut uses: std::collections::BTreeMap<RowKey, (u64, Vec<u64>)> =
            std::collections::BTreeMap::new();
        for (p, part) in parts.iter().enumerate() {
            for r in part.chunks_exact(3) {
                let key = RowKey::new(r[0] as u32, r[1] as u64);
                let Some(meta) = tables.get(key.table as usize) else {
                    continue;
                };
                let entry = uses
                    .entry(key)
                    .or_insert_with(|| (meta.row_bytes() as u64, vec![0; parts.len()]));
                entry.1[p] += r[2] as u64;
            }
        }
        let uses: Vec<(RowKey, u64, Vec<u64>)> =
            uses.into_iter().map(|(k, (b, a))| (k, b, a)).collect();
        let hashed = self.shared.placement().without_overrides();
        if (self.runs.ended > 0 || self.runs.resumed) && hashed.has_restrictions() {
            // Shards migrate rows by the hash and the overrides alone: a table kept on a
            // range of shards would be moved off it.
            tracing::warn!(
                "locality placement skipped: rows holding values would have to migrate, \
                 and a table is kept on a range of shards (create_table_on)"
            );
            return Ok(());
        }
        let placed = crate::placement::by_locality(
            &hashed,
            &uses,
            self.shared.world.shards,
            self.config.placement_imbalance,
        );
        tracing::debug!(
            "locality placement: {} of {} rows moved off their hash shard",
            placed.overridden(),
            uses.len()
        );
        if self.runs.ended > 0 || self.runs.resumed {
            // With replicated shards each shard refuses to move a row (its backups would
            // not follow); after a recovery the rows are already where this puts them.
            let overrides = placed.overrides();
            let rank = self.shared.process;
            for shard in self.shared.world.shards_of(rank) {
                let overrides = overrides.clone();
                self.send(
                    shard as usize,
                    ToShard::Migrate {
                        from: rank,
                        overrides,
                    },
                )?;
            }
            self.shared.await_migrated()?;
            self.spec.migrations += 1;
        }
        self.shared.set_placement(placed);
        Ok(())
    }

    /// Merges the workers' logs into the cluster's pattern, noting what they took.
    pub(super) fn gather(&mut self, logs: Vec<AccessLog>) {
        let log_bytes = logs.iter().map(AccessLog::bytes).sum();
        let pattern = AccessPattern::from_logs(logs);
        self.spec.gathered = (log_bytes, pattern.bytes());
        let (clocks, accesses) = (pattern.clocks(), pattern.accesses());
        self.spec.pattern = Some(pattern);
        if clocks == 0 && accesses > 0 {
            self.diagnose(Diagnostic::NoClock, || {
                format!(
                    "the recorded iteration made {accesses} accesses and no CLOCK: a worker's \
                     updates then reach the servers only when the run ends, and nothing is \
                     prefetched per clock (call Worker::clock after each unit of work, e.g. \
                     each mini-batch)"
                )
            });
        }
    }

    /// Builds the plan from the gathered pattern and switches the servers and this
    /// process to it. The pattern's sequences become the workers' op tapes.
    pub(super) fn specialize(&mut self) -> Result<()> {
        let Some(sequences) = self
            .spec
            .pattern
            .as_mut()
            .map(AccessPattern::take_sequences)
        else {
            return Ok(());
        };
        let Some(pattern) = &self.spec.pattern else {
            return Ok(());
        };
        let started = Instant::now();
        let specs = self.config.specializations;
        let workers = self.config.workers;
        let cfg = PlanConfig {
            workers,
            chunks: self.config.prefetch_chunks,
            thread_caches: specs.thread_caches && specs.static_cache,
            contention_threshold: self.config.contention_threshold,
        };
        let plan = plan::build(
            pattern,
            self.registry.tables(),
            &self.shared.placement(),
            &cfg,
        );
        let slabs = specs.static_cache && specs.contiguous_index;
        self.spec.plans += 1;
        let (rank, world) = (self.shared.process, self.shared.world);
        for span in &plan.shards {
            let first = span.slots.start as u32;
            let in_shard = |s: &&u32| plan.slots[**s as usize].shard == span.shard;
            let updaters = if slabs {
                (0..workers)
                    .map(|w| {
                        let slots = plan.updates[w].iter().filter(in_shard).map(|s| s - first);
                        (world.worker_id(rank, w), slots.collect())
                    })
                    .collect()
            } else {
                Vec::new()
            };
            let msg = ToShard::Specialize {
                from: rank,
                epoch: self.spec.plans,
                keys: plan.slots[span.slots.clone()]
                    .iter()
                    .map(|s| s.key)
                    .collect(),
                chunk_ends: plan
                    .chunks
                    .iter()
                    .filter(|c| c.shard == span.shard)
                    .map(|c| c.slots.end as u32 - first)
                    .collect(),
                chunk_phases: plan
                    .chunks
                    .iter()
                    .zip(&plan.chunk_phases)
                    .filter(|(c, _)| c.shard == span.shard)
                    .map(|(_, &phases)| phases)
                    .collect(),
                updaters,
            };
            self.send(span.shard as usize, msg)?;
        }
        self.machine.numa = self.machine.numa_on.then(|| {
            let cfg = NumaConfig {
                workers,
                shards: self.config.shards,
                placement: self.config.worker_placement,
                blocks: specs.static_cache && specs.contiguous_index && specs.thread_caches,
                replicate: true,
            };
            numa::plan(
                pattern,
                &plan,
                &self.machine.topology,
                &cfg,
                Some(&self.machine.thread_zones),
            )
        });
        // Each arena chunk is bound, before its first touch, to the zone holding most of
        // its rows' arena copies.
        let chunk_zones: Option<Vec<u32>> = match (&self.machine.numa, &self.machine.binder) {
            (Some(n), Some(_)) => Some(numa::chunk_zones(n, &plan, &self.machine.topology)),
            _ => None,
        };
        let budget = self.config.tape_budget.or_else(default_tape_budget);
        let tapes = plan::tapes(pattern, &plan, sequences, budget);
        self.spec.tape_truncated = tapes.truncated;
        let binding = self.machine.binder.as_ref().zip(chunk_zones.as_deref());
        // Zone copies of the chunks the NUMA plan replicates, read by the workers of
        // those zones.
        let copies = self
            .machine
            .numa
            .as_ref()
            .map(|n| numa::chunk_copies(n, &plan));
        let worker_zones: Vec<u8> = self.machine.places.iter().map(|p| p.zone as u8).collect();
        let zone_nodes: Vec<u32> = self
            .machine
            .topology
            .zones()
            .iter()
            .map(|z| z.os_index)
            .collect();
        let arena = specs.static_cache.then(|| {
            let arena = ProcessArena::new(plan, self.spec.plans, specs.prefetch_batching, binding);
            let arena = match copies {
                Some(copies) if copies.iter().any(|&m| m != 0) => {
                    let binding = self
                        .machine
                        .binder
                        .as_ref()
                        .map(|b| (b, zone_nodes.as_slice()));
                    arena.with_zone_copies(copies, worker_zones, binding)
                }
                _ => arena,
            };
            Arc::new(arena)
        });
        self.machine.arena_bound_bytes = arena.as_ref().map_or(0, |a| a.bound_bytes);
        for (kept, tape) in self.spec.kept.iter().zip(tapes.tapes) {
            *lock(kept) = match &arena {
                Some(arena) => KeptState::Tape(arena.clone(), tape),
                None => KeptState::Nothing,
            };
        }
        self.shared.set_arena(arena);
        self.spec.specialize_time += started.elapsed();
        Ok(())
    }
}

/// The default [`Config::tape_budget`]: a quarter of the memory available now, or none if
/// that cannot be read.
///
/// [`Config::tape_budget`]: crate::config::Config::tape_budget
fn default_tape_budget() -> Option<usize> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024) / 4)
}
