//! Replicated shards (`Config::shard_replicas`, `docs/replication.md`): a primary's
//! backups on other processes, kept in step clock by clock, and the backups a shard keeps
//! of other processes' shards.
//!
//! **Primary.** When every process has ended a run, a shard with backups sends each of
//! them a [`ToShard::Replicate`] of what the run's clocks changed: the **post-image** of
//! every row and rule state they changed, once per row however many clocks and workers
//! updated it (MF's item rows are updated by every worker in every clock, so a run's
//! post-images are a fraction of its updates), with their keys, so a backup needs no
//! layouts; with the tables it took since its last one. It answers the run barrier only
//! once every backup has acked ([`ToShard::ReplicaAck`]): a run ends with every backup
//! equal to its primary, and a run's end is where a recovery goes back to. Within a run
//! reads wait for nothing of the backups' (a clock no backup has is never one a recovery
//! restores).
//!
//! **Backup.** A backup is a [`Shard`] in the backup role, held by the shard of the
//! primary's local index on the keeping process and fed only `Replicate`s: it answers no
//! read and sends no refresh (nothing else reaches it). It copies each clock's
//! post-images, so its rows and rule states are bit for bit its primary's, clock by clock
//! (and its undo log keeps what each copy replaced).
//!
//! **States.** A shard backing up a process's first shard also keeps that process's
//! application state of the last two iterations ([`ToShard::KeepState`], answered with
//! [`ToClient::StateKept`]), for a recovery to give back.
//!
//! It knows who backs up whom and what crosses between them; not how rows are added
//! (`rows`, `rules`) nor when a clock is complete (`clocks`).

use super::Shard;
use crate::buf::AlignedBuf;
use crate::ids::{Clock, ProcessId, RowKey, ShardId};
use crate::msg::{Envelope, ReplicatedClock, RuleState, ToClient, ToShard};
use crate::table::TableMeta;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// How many iterations' application states are kept, each process's (by itself and by
/// the shards backing up its first shard).
pub(super) const STATES_KEPT: usize = 2;

/// Adds `state` at `clock` to `kept` (oldest first; one at `clock` replaced), dropping
/// the oldest beyond [`STATES_KEPT`]: how a process and the shards backing it up keep its
/// states alike.
pub(crate) fn keep_newest(kept: &mut Vec<(Clock, Vec<u8>)>, clock: Clock, state: Vec<u8>) {
    kept.retain(|(c, _)| *c != clock);
    kept.push((clock, state));
    let extra = kept.len().saturating_sub(STATES_KEPT);
    kept.drain(..extra);
}

/// A shard's part in replication: its backups (as a primary) and the backups it keeps.
#[derive(Default)]
pub(super) struct Replicas {
    /// As a primary: each backup's keeping shard and the last clock it acked.
    backups: Vec<(ShardId, Clock)>,
    /// Tables taken (created or given a new rule) since the last `Replicate`, by id.
    tables_changed: Vec<u32>,
    /// The minimum clock of the last `Replicate` sent.
    sent: Clock,
    /// The last minimum clock announced (every backup had it).
    announced: Clock,
    /// The backups this shard keeps, by primary.
    held: BTreeMap<ShardId, Shard>,
    /// As a backup: the primary's minimum clock it has applied up to.
    applied: Clock,
    /// The application states of the processes whose first shard it backs up, by
    /// process: the last [`STATES_KEPT`], oldest first, each with its clock
    /// (`ToShard::KeepState`).
    states: BTreeMap<ProcessId, Vec<(Clock, Vec<u8>)>>,
}

impl Replicas {
    /// Whether this shard is a primary with backups.
    pub(super) fn has_backups(&self) -> bool {
        !self.backups.is_empty()
    }
}

impl Shard {
    /// This shard, one of `replicas` copies of itself: its backups and the backups it keeps
    /// are on the ring [`World::backups_of`](crate::world::World::backups_of) describes.
    pub(crate) fn with_replicas(mut self, replicas: usize) -> Self {
        let world = self.world;
        self.replicas.backups = (world.backups_of(self.id, replicas).into_iter())
            .map(|b| (b, 0))
            .collect();
        self.replicas.held = (world.backed_up_by(self.id, replicas).into_iter())
            .map(|p| (p, Shard::backup_of(p, world)))
            .collect();
        self
    }

    /// The backup of primary shard `primary`: a shard without a coordinator, fed only
    /// [`ToShard::Replicate`]s.
    fn backup_of(primary: ShardId, world: crate::world::World) -> Shard {
        let mut b = Shard::new(primary, world);
        b.coordinator = None;
        b.undo = super::undo::UndoLog::of_backup();
        b
    }

    /// The minimum clock reads may see: the minimum clock. Reads are not held for the
    /// backups: they get a run's rows at its end, which is where a recovery goes back to.
    pub(super) fn visible_clock(&self) -> Clock {
        self.clocks.min_clock()
    }

    /// Whether every backup has every clock applied (always, without backups).
    pub(super) fn backups_caught_up(&self) -> bool {
        let min = self.clocks.min_clock();
        self.replicas.backups.iter().all(|(_, acked)| *acked >= min)
    }

    /// Notes that table `id` was taken, for the next `Replicate` (a primary with backups).
    pub(super) fn table_changed(&mut self, id: u32) {
        if self.replicas.has_backups() && !self.replicas.tables_changed.contains(&id) {
            self.replicas.tables_changed.push(id);
        }
    }

    /// Clock `clock`'s post-images: the value and rule state, now, of each row of
    /// `touched` (the keys its updates changed, repeated or not), in key order.
    pub(super) fn post_images(&self, clock: Clock, mut touched: Vec<RowKey>) -> ReplicatedClock {
        touched.sort_unstable();
        touched.dedup();
        let mut rows = Vec::with_capacity(touched.len());
        let mut states = Vec::new();
        for key in touched {
            let value = match self.arena.row(key) {
                Some(bytes) => Some(AlignedBuf::from_bytes(bytes)),
                None => self.rows.get(&key).map(|r| r.value().clone()),
            };
            // A row of an unknown table was refused, failing the cluster, and added nowhere.
            let Some(value) = value else { continue };
            rows.push((key, value));
            if let Some((steps, state)) = self.rules.get(key) {
                let state = AlignedBuf::from_bytes(state);
                states.push((key, RuleState { steps, state }));
            }
        }
        ReplicatedClock {
            clock,
            rows,
            states,
        }
    }

    /// Sends every backup what the run's clocks changed, the minimum clock being `min`
    /// (every process has ended the run): the post-image of each row once, however many
    /// clocks changed it, as one replicated clock, `min - 1`. The rows are those the run's
    /// undo log holds pre-images of (a primary with backups records one). Nothing without
    /// backups, or when nothing new was applied.
    pub(super) fn replicate(&mut self, min: Clock, out: &mut Vec<Envelope>) {
        let keys = self.undo_keys();
        self.replicate_rows(min, keys, out);
    }

    /// [`replicate`](Self::replicate) of the rows `keys` (repeated or not).
    fn replicate_rows(&mut self, min: Clock, keys: Vec<RowKey>, out: &mut Vec<Envelope>) {
        // Nothing new for the backups (the minimum clock only ever advances past `sent`).
        if !self.replicas.has_backups() || min <= self.replicas.sent {
            return;
        }
        let changed = std::mem::take(&mut self.replicas.tables_changed);
        let mut tables: Vec<TableMeta> = changed
            .iter()
            .filter_map(|&t| self.table(t))
            .cloned()
            .collect();
        let mut clocks = vec![self.post_images(min - 1, keys)];
        let n = self.replicas.backups.len();
        for (k, &(backup, _)) in self.replicas.backups.iter().enumerate() {
            // The last backup takes them; the others get copies.
            let (tables, clocks) = match k + 1 == n {
                true => (std::mem::take(&mut tables), std::mem::take(&mut clocks)),
                false => (tables.clone(), clocks.clone()),
            };
            let msg = ToShard::Replicate {
                primary: self.id,
                run_start: self.undo_run_start(),
                since: self.replicas.sent,
                clock: min,
                tables,
                clocks,
            };
            out.push(Envelope::Shard(backup, msg));
        }
        self.replicas.sent = min;
    }

    /// After a restore at `clock`: sends every backup every row and rule state as the
    /// post-images of clock `clock - 1` (the clocks below `clock` applied), so that they
    /// hold what the primary restored before the run that follows. Nothing without
    /// backups.
    pub(super) fn replicate_restored(&mut self, clock: Clock, out: &mut Vec<Envelope>) {
        if clock == 0 || !self.replicas.has_backups() {
            return;
        }
        let mut keys: Vec<RowKey> = self.rows.iter().map(|e| *e.key()).collect();
        keys.extend(self.arena.rows().map(|(k, _)| k));
        keys.extend(self.rules.keys());
        self.replicate_rows(clock, keys, out);
    }

    /// Announces the visible clock if it advanced, and answers what waited for it.
    pub(super) fn release_visible(&mut self, out: &mut Vec<Envelope>) {
        let visible = self.visible_clock();
        if visible <= self.replicas.announced {
            return;
        }
        self.replicas.announced = visible;
        for p in self.staying() {
            out.push(Envelope::Client(
                p,
                ToClient::MinClock {
                    shard: self.id,
                    clock: visible,
                },
            ));
        }
        for (from, epoch, want) in self.slab_deferred.release(visible) {
            self.reply_slab(from, epoch, want, out);
        }
        let mut by_process: FxHashMap<ProcessId, Vec<_>> = FxHashMap::default();
        for (from, key) in self.deferred.release(visible) {
            by_process.entry(from).or_default().push(key);
        }
        for (from, keys) in by_process {
            self.reply(from, keys, out);
        }
    }

    /// Backup `backup` has applied this shard's updates up to minimum clock `clock`.
    pub(super) fn replica_ack(
        &mut self,
        (backup, primary): (ShardId, ShardId),
        clock: Clock,
        out: &mut Vec<Envelope>,
    ) {
        let min = self.clocks.min_clock();
        let id = self.id;
        let entry = (self.replicas.backups.iter_mut()).find(|(b, _)| *b == backup);
        let reason = match entry {
            _ if primary != id => format!("shard {id} got shard {backup}'s ack of shard {primary}"),
            None => {
                format!("shard {id} got an ack from shard {backup}, which keeps no backup of it")
            }
            Some((_, acked)) if clock <= *acked || clock > min => format!(
                "shard {backup} acked clock {clock} of shard {id}, which is at {min} and had \
                 its ack of {acked}"
            ),
            Some((_, acked)) => {
                *acked = clock;
                self.release_visible(out);
                return self.check_barrier(out);
            }
        };
        self.reject_all(reason, out);
    }

    /// A `Replicate` from `primary`: its backup here applies it, and the primary is
    /// acked. One from a shard this shard keeps no backup of, or out of order, fails the
    /// cluster.
    pub(super) fn replicate_in(
        &mut self,
        (primary, run_start, since, clock): (ShardId, Clock, Clock, Clock),
        tables: Vec<TableMeta>,
        clocks: Vec<ReplicatedClock>,
        out: &mut Vec<Envelope>,
    ) {
        let id = self.id;
        let Some(backup) = self.replicas.held.get_mut(&primary) else {
            return self.reject_all(
                format!("shard {id} got a replica of shard {primary}, which it does not back up"),
                out,
            );
        };
        match backup.apply_replica((run_start, since, clock), tables, clocks) {
            Ok(()) => out.push(Envelope::Shard(
                primary,
                ToShard::ReplicaAck {
                    backup: id,
                    primary,
                    clock,
                },
            )),
            Err(reason) => {
                let reason = format!("backup of shard {primary} on shard {id}: {reason}");
                self.reject_all(reason, out);
            }
        }
    }

    /// As a backup: applies what the primary applied as its minimum clock advanced from
    /// `since` (where this backup must be) to `clock`, in its run that began at clock
    /// `run_start` — its new tables first, then each clock's post-images in order, copied
    /// over its rows and rule states (the values they replaced kept in the run's undo
    /// log).
    fn apply_replica(
        &mut self,
        (run_start, since, clock): (Clock, Clock, Clock),
        tables: Vec<TableMeta>,
        clocks: Vec<ReplicatedClock>,
    ) -> Result<(), String> {
        let last = self.replicas.applied;
        if since != last {
            return Err(format!(
                "the step from clock {since} to {clock} came after clock {last}"
            ));
        }
        for meta in tables {
            let id = meta.id as usize;
            if self.tables.len() <= id {
                self.tables.resize(id + 1, None);
            }
            self.tables[id] = Some(meta);
        }
        let mut after = last;
        for c in &clocks {
            if c.clock < after || c.clock >= clock {
                return Err(format!(
                    "clock {} in the step from clock {last} to {clock}, after clock {after}",
                    c.clock
                ));
            }
            after = c.clock + 1;
            self.validate_as("replica", &c.rows)?;
            self.validate_states(&c.states)?;
        }
        self.undo_run_starts(run_start);
        self.start_undo();
        for c in clocks {
            // A restore's rows come as the clock before the run (not the run's to undo).
            if c.clock >= run_start {
                let keys: Vec<RowKey> = (c.rows.iter().map(|(k, _)| *k))
                    .chain(c.states.iter().map(|(k, _)| *k))
                    .collect();
                self.record_pre_images(&keys);
            }
            for (key, value) in c.rows {
                match self.arena.row_mut(key, clock) {
                    Some((row, _)) => row.copy_from_slice(value.as_bytes()),
                    None => {
                        self.rows.insert(key, value);
                    }
                }
            }
            for (key, state) in c.states {
                let bytes = self.table(key.table).map_or(0, |m| m.row_bytes());
                self.rules.take(key);
                self.rules.insert(key, bytes, state);
            }
        }
        self.replicas.applied = clock;
        Ok(())
    }

    /// Whether this shard has backups or keeps some.
    pub(super) fn replicated(&self) -> bool {
        self.replicas.has_backups() || !self.replicas.held.is_empty()
    }

    /// Whether `what`, asked by `from`, is refused because this shard has backups or keeps
    /// some: it would change rows outside a clock, which no backup would see (refused by
    /// the cluster first; this is the shard's own guard).
    pub(super) fn refuse_replicated(
        &self,
        from: ProcessId,
        what: &str,
        out: &mut Vec<Envelope>,
    ) -> bool {
        if !self.replicated() {
            return false;
        }
        let reason = format!(
            "{what} on shard {}, which is replicated (shard_replicas)",
            self.id
        );
        self.reject(from, reason, out);
        true
    }

    /// Every backup this shard keeps, by primary.
    pub(super) fn held_backups(&self) -> impl Iterator<Item = &Shard> {
        self.replicas.held.values()
    }

    /// The backup this shard keeps of shard `primary`, if it keeps one.
    pub(super) fn held_backup(&self, primary: ShardId) -> Option<&Shard> {
        self.replicas.held.get(&primary)
    }

    /// The backup this shard keeps of shard `primary`, to change, if it keeps one.
    pub(super) fn held_backup_mut(&mut self, primary: ShardId) -> Option<&mut Shard> {
        self.replicas.held.get_mut(&primary)
    }

    /// After a rollback to minimum clock `to`: as a backup, applied up to `to`; as a
    /// primary, nothing past `to` captured, replicated, acked or announced (its backups
    /// rolled back to `to` too).
    pub(super) fn replicas_rolled_back(&mut self, to: Clock) {
        let r = &mut self.replicas;
        r.applied = r.applied.min(to);
        r.sent = r.sent.min(to);
        r.announced = r.announced.min(to);
        for (_, acked) in &mut r.backups {
            *acked = (*acked).min(to);
        }
    }

    /// As a backup: the primary's minimum clock it has applied up to.
    pub(super) fn applied_clock(&self) -> Clock {
        self.replicas.applied
    }

    /// Process `from`'s application state at `clock`: kept (the last [`STATES_KEPT`] per
    /// process) if this shard backs up `from`'s first shard, and acknowledged; refused
    /// otherwise.
    pub(super) fn keep_state(
        &mut self,
        (from, clock): (ProcessId, Clock),
        state: Vec<u8>,
        out: &mut Vec<Envelope>,
    ) {
        let first = self.world.shards_of(from).start;
        if !self.replicas.held.contains_key(&first) {
            let reason = format!(
                "process {from} asked shard {} to keep its state, which it does not back up",
                self.id
            );
            return self.reject(from, reason, out);
        }
        keep_newest(self.replicas.states.entry(from).or_default(), clock, state);
        out.push(Envelope::Client(
            from,
            ToClient::StateKept {
                shard: self.id,
                clock,
            },
        ));
    }

    /// The application states this shard keeps: each process's, with its clock.
    pub(crate) fn kept_states(&self) -> impl Iterator<Item = (ProcessId, Clock, &[u8])> {
        (self.replicas.states.iter())
            .flat_map(|(&p, kept)| kept.iter().map(move |(c, s)| (p, *c, s.as_slice())))
    }
}
