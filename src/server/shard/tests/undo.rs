//! The run's undo log (`docs/replication.md`, "Recovery from the replicas"): a primary
//! with a backup, and the backup its keeper holds, rolled back to the start of their run
//! hold bit for bit what a shard that applied none of the run's clocks holds — generic
//! rows, arena rows, rule states, workers' clocks, pending updates — in every
//! interleaving of two processes' clocks (Adam rows planned and not, whole and sparse
//! slabs, sums), and go on from there as if nothing had happened; a run barrier starts the
//! log again; a minimum clock that jumps keeps every clock's; any other clock is refused,
//! and a shard without backups records nothing.

use super::replicas::{rule_script, state, State};
use super::*;

/// Process `p`'s clock `c` past [`rule_script`]'s two: gradients of Adam rows 0..5 (0..3
/// planned by one process or both, 4 not), and a sum row new in that clock.
fn later_clock(p: u32, c: Clock) -> ToShard {
    let x = f64::from(p) * 0.3 + c as f64 * 0.11;
    let mut rows: RowBatch = (0..5)
        .map(|r| {
            let g = [x - r as f64 * 0.07, 0.5 - x];
            (RowKey::new(1, r), AlignedBuf::from_slice(&g))
        })
        .collect();
    let sum = [i64::from(p) + 3, c as i64];
    rows.push((RowKey::new(0, 20 + c), AlignedBuf::from_slice(&sum)));
    ToShard::Clock {
        worker: p,
        clock: c,
        epoch: 1,
        rows,
        outer: Vec::new(),
        slab: AlignedBuf::default(),
        slab_rows: None,
    }
}

/// Process `p`'s messages: table "w", its plan, then its clocks 1 to 4 (`full[k + 1]` is
/// clock `k`).
pub(super) fn full(p: u32) -> Vec<ToShard> {
    let mut msgs: Vec<ToShard> = (rule_script(p).into_iter())
        .filter(|m| {
            matches!(
                m,
                ToShard::CreateTable { .. } | ToShard::Specialize { .. } | ToShard::Clock { .. }
            )
        })
        .collect();
    msgs.extend((3..=4).map(|c| later_clock(p, c)));
    msgs
}

/// Messages of `full(p)` up to its clock `c`.
pub(super) fn through(c: Clock) -> usize {
    c as usize + 2
}

/// Shard 0 with a backup on shard 1 (two processes, two copies of each shard), shard-to-
/// shard messages delivered at once.
struct Copies {
    primary: Shard,
    keeper: Shard,
    out: Vec<Envelope>,
}

impl Copies {
    fn new() -> Self {
        let world = two_process_world();
        let [primary, keeper] = [0, 1].map(|id| {
            let mut s = Shard::new(id, world).with_replicas(2);
            s.step(ToShard::CreateTable { meta: table_t() }, &mut Vec::new());
            s
        });
        Copies {
            primary,
            keeper,
            out: Vec::new(),
        }
    }

    /// The primary takes `msg`; what it sends shard 1 and what comes back are delivered.
    fn send(&mut self, msg: ToShard) {
        let mut in_flight = vec![(0, msg)];
        while let Some((to, m)) = in_flight.pop() {
            let mut sent = Vec::new();
            match to {
                0 => self.primary.step(m, &mut sent),
                _ => self.keeper.step(m, &mut sent),
            }
            for e in sent {
                match e {
                    Envelope::Shard(to, m) => in_flight.push((to, m)),
                    client => self.out.push(client),
                }
            }
        }
        assert!(rejected(&self.out).is_empty(), "{:?}", self.out);
    }

    fn backup(&self) -> &Shard {
        self.keeper
            .held_backup(0)
            .expect("shard 1 keeps shard 0's backup")
    }
}

/// A shard without backups, with table "t", as [`Copies`]'s primary starts.
pub(super) fn alone() -> Shard {
    shard_in(0, two_process_world())
}

/// Everything of a primary's state a rollback must restore, exactly: generic rows (zeros
/// too) and arena rows apart, rule states, workers' clocks, the clocks of pending
/// updates and the clock reads see.
#[derive(Debug, PartialEq)]
pub(super) struct Exact {
    generic: BTreeMap<RowKey, Vec<u8>>,
    arena: BTreeMap<RowKey, Vec<u8>>,
    rules: Vec<(RowKey, u64, Vec<u8>)>,
    clocks: ClockTable,
    pending: Vec<Clock>,
    visible: Clock,
}

pub(super) fn exact(s: &Shard) -> Exact {
    Exact {
        generic: (s.rows.iter())
            .map(|e| (*e.key(), e.value().as_bytes().to_vec()))
            .collect(),
        arena: s.arena.rows().map(|(k, b)| (k, b.to_vec())).collect(),
        rules: (s.rules.keys().into_iter())
            .filter_map(|k| s.rules.get(k).map(|(n, b)| (k, n, b.to_vec())))
            .collect(),
        clocks: s.clocks.clone(),
        pending: s.pending.keys().copied().collect(),
        visible: s.visible_clock(),
    }
}

/// The backup's state (rows merged, zeros left out: it holds no arena) at its clock.
fn backup_state(b: &Shard) -> State {
    state(b, b.applied_clock())
}

/// Every order of process 0's messages through clock `c + 2` (its next clock pending)
/// and process 1's through clock `c + 1`.
fn orders(c: Clock) -> Vec<Vec<u32>> {
    let n0 = through((c + 2).min(4));
    interleavings(&vec![0; n0], &vec![1; through(c + 1)])
}

/// Whether `msg` is a worker's clock (what a shard that applied none of the run skips).
fn is_clock(msg: &ToShard) -> bool {
    matches!(msg, ToShard::Clock { .. })
}

#[test]
fn rolled_back_to_its_runs_start_a_shard_and_its_backup_equal_one_that_applied_none_of_it() {
    let mut checked = 0;
    for c in 1..=3 {
        for order in orders(c) {
            let mut copies = Copies::new();
            let mut reference = alone();
            let mut scripts = [full(0), full(1)].map(Vec::into_iter);
            for &p in &order {
                let msg = scripts[p as usize].next().expect("a message left");
                // The reference takes none of the run's clocks.
                if !is_clock(&msg) {
                    reference.step(msg.clone(), &mut Vec::new());
                }
                copies.send(msg);
            }
            assert_eq!(copies.primary.clocks.min_clock(), c + 1, "{order:?}");
            // The backup gets the run at its end.
            assert_eq!(copies.backup().applied_clock(), 0, "{order:?}");
            let before = exact(&copies.primary);

            copies
                .primary
                .roll_back(0)
                .expect("back to the run's start");
            copies
                .keeper
                .roll_back_backup(0, 0)
                .expect("back to the run's start");
            assert_eq!(
                exact(&copies.primary),
                exact(&reference),
                "c {c}, {order:?}"
            );
            let want = state(&reference, 0);
            assert_eq!(backup_state(copies.backup()), want, "c {c}, {order:?}");

            // The workers send the run's clocks again: the same bits.
            for p in 0..2u32 {
                let again = full(p)
                    .into_iter()
                    .take(order.iter().filter(|&&q| q == p).count());
                for msg in again.filter(is_clock) {
                    copies.send(msg);
                }
            }
            let again = exact(&copies.primary);
            assert_eq!(
                (&again.arena, &again.generic),
                (&before.arena, &before.generic)
            );
            assert_eq!((&again.rules, again.visible), (&before.rules, c + 1));
            // The run ends: the backup gets what it changed since the rollback.
            for from in 0..2 {
                copies.send(ToShard::RunEnd { from, run: 1 });
            }
            let primary = state(&copies.primary, c + 1);
            assert_eq!(backup_state(copies.backup()), primary, "c {c}, {order:?}");
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn a_run_barrier_starts_the_log_again_at_the_next_runs_start() {
    let (mut copies, mut reference) = (Copies::new(), alone());
    let [first, second] = [full(0), full(1)];
    let cut = through(2);
    for msg in first[..cut]
        .iter()
        .zip(&second[..cut])
        .flat_map(|(a, b)| [a, b])
    {
        reference.step(msg.clone(), &mut Vec::new());
        copies.send(msg.clone());
    }
    for from in 0..2 {
        let end = ToShard::RunEnd { from, run: 1 };
        reference.step(end.clone(), &mut Vec::new());
        copies.send(end);
    }
    let start = copies.primary.clocks.min_clock();
    assert_eq!(start, 2);
    for msg in first[cut..]
        .iter()
        .zip(&second[cut..])
        .flat_map(|(a, b)| [a, b])
    {
        copies.send(msg.clone());
    }
    assert_eq!(copies.primary.clocks.min_clock(), 4);
    for to in [0, 1, 3] {
        let e = copies.primary.roll_back(to).unwrap_err();
        assert!(e.contains("only to its run's start, clock 2"), "{to}: {e}");
    }
    copies
        .primary
        .roll_back(start)
        .expect("back to run 2's start");
    copies
        .keeper
        .roll_back_backup(0, start)
        .expect("back to run 2's start");
    let (got, want) = (exact(&copies.primary), exact(&reference));
    assert_eq!(
        (&got.generic, &got.arena, &got.rules, &got.clocks),
        (&want.generic, &want.arena, &want.rules, &want.clocks)
    );
    assert_eq!(backup_state(copies.backup()), state(&reference, start));
}

/// Both processes' scripts through clock 4, in one order, and the run's end (the backup
/// gets it).
fn at_clock_4() -> (Copies, Shard) {
    let (mut copies, mut reference) = (Copies::new(), alone());
    let ends = (0..2).map(|from| ToShard::RunEnd { from, run: 1 });
    for msg in full(0)
        .into_iter()
        .zip(full(1))
        .flat_map(|(a, b)| [a, b])
        .chain(ends)
    {
        reference.step(msg.clone(), &mut Vec::new());
        copies.send(msg);
    }
    assert_eq!(copies.primary.clocks.min_clock(), 4);
    assert_eq!(copies.backup().applied_clock(), 4);
    (copies, reference)
}

#[test]
fn a_second_rollback_or_one_to_another_clock_is_refused() {
    let (mut copies, _) = at_clock_4();
    let before = exact(&copies.primary);
    for to in [2, 3, 5] {
        let e = copies.primary.roll_back(to).unwrap_err();
        assert!(e.contains("only to its run's start, clock 0"), "{to}: {e}");
        let e = copies.keeper.roll_back_backup(0, to).unwrap_err();
        assert!(e.contains("backup of shard 0"), "{to}: {e}");
    }
    assert_eq!(
        exact(&copies.primary),
        before,
        "a refused rollback changed nothing"
    );
    copies.primary.roll_back(0).expect("to the run's start");
    copies
        .keeper
        .roll_back_backup(0, 0)
        .expect("to the run's start");
    // Back at 0, the log is used up: nowhere else to go.
    let e = copies.primary.roll_back(2).unwrap_err();
    assert!(e.contains("no undo log"), "{e}");
    let e = copies.keeper.roll_back_backup(0, 2).unwrap_err();
    assert!(e.contains("no undo log"), "{e}");
    // Where it is, a rollback only discards (nothing pending here).
    let at_0 = exact(&copies.primary);
    copies.primary.roll_back(0).expect("where it is");
    assert_eq!(exact(&copies.primary), at_0);
    let e = copies.keeper.roll_back_backup(1, 0).unwrap_err();
    assert!(e.contains("keeps no backup of shard 1"), "{e}");
}

#[test]
fn a_shard_without_backups_records_nothing() {
    let (copies, mut reference) = at_clock_4();
    assert!(reference.undo.is_empty(), "{:?}", reference.undo);
    let e = reference.roll_back(0).unwrap_err();
    assert!(e.contains("no undo log"), "{e}");
    // With backups, the primary and the backup each keep the run's.
    assert!(!copies.primary.undo.is_empty());
    assert!(!copies.backup().undo.is_empty());
    // The keeper has a backup of its own but applied no clock: nothing to keep.
    assert!(copies.keeper.undo.is_empty());
}

#[test]
fn a_minimum_clock_that_jumps_two_clocks_keeps_both_clocks_pre_images() {
    // Process 1 finishes after its clock 1 while process 0 is at 3: the minimum clock
    // jumps from 1 to 3, applying clocks 1 and 2 at once.
    let (mut copies, mut reference) = (Copies::new(), alone());
    let finish = ToShard::Finish { worker: 1 };
    let first: Vec<ToShard> = full(1).into_iter().take(through(1)).collect();
    for msg in full(0)
        .into_iter()
        .take(through(3))
        .chain(first)
        .chain([finish])
    {
        if !is_clock(&msg) {
            reference.step(msg.clone(), &mut Vec::new());
        }
        copies.send(msg);
    }
    assert_eq!(copies.primary.clocks.min_clock(), 3);
    copies.primary.roll_back(0).expect("to the run's start");
    copies
        .keeper
        .roll_back_backup(0, 0)
        .expect("to the run's start");
    let (got, want) = (exact(&copies.primary), exact(&reference));
    assert_eq!(
        (&got.generic, &got.arena, &got.rules),
        (&want.generic, &want.arena, &want.rules)
    );
    assert_eq!(backup_state(copies.backup()), state(&reference, 0));
}

#[test]
fn the_copies_give_their_rows_at_the_runs_start_as_a_rows_part() {
    let (mut copies, _) = at_clock_4();
    let mut reference = alone();
    for msg in full(0).into_iter().chain(full(1)).filter(|m| !is_clock(m)) {
        reference.step(msg, &mut Vec::new());
    }
    let kept = copies.keeper.copies();
    let backup = CopyAt {
        shard: 0,
        backup: true,
        at: 4,
        base: Some(0),
    };
    assert!(kept.contains(&backup), "{kept:?}");
    assert!(backup.gives(0) && backup.gives(4) && !backup.gives(2));
    // The primary: itself, and the backup it keeps of shard 1 (which applied nothing).
    let own = copies.primary.copies();
    assert_eq!(
        own[0],
        CopyAt {
            backup: false,
            ..backup
        }
    );
    assert_eq!((own[1].shard, own[1].backup, own[1].at), (1, true, 0));
    let bytes = copies.keeper.part_at(0, true, 0).expect("the backup at 0");
    let want = state(&reference, 0);
    assert_eq!(decoded(&bytes, &reference), (want.rows, want.rules));
    let e = copies.keeper.part_at(0, false, 0).unwrap_err();
    assert!(e.contains("is not shard 0"), "{e}");
    let e = copies.primary.part_at(0, false, 3).unwrap_err();
    assert!(e.contains("cannot roll back to 3"), "{e}");
}

#[test]
fn a_restored_primary_hands_its_backup_every_row_outside_the_undo_log() {
    let mut copies = Copies::new();
    let row = |r: u64, v: i64| (RowKey::new(0, r), AlignedBuf::from_slice(&[v, v + 1]));
    for (from, rows) in [(0, vec![row(1, 7), row(2, -3)]), (1, vec![row(3, 5)])] {
        copies.send(ToShard::Restore {
            from,
            clock: 5,
            rows,
            states: Vec::new(),
            last: true,
        });
    }
    let (primary, backup) = (state(&copies.primary, 5), backup_state(copies.backup()));
    assert_eq!(primary.rows.len(), 3);
    assert_eq!(backup, primary, "the backup holds every restored row");
    assert_eq!(copies.primary.visible_clock(), 5, "acked: visible");
    // The restore precedes the run: going back to its start (5) keeps every row.
    copies.keeper.roll_back_backup(0, 5).expect("where it is");
    assert_eq!(backup_state(copies.backup()), primary);
}

/// Process `p`'s messages through clock 3 with the run barrier after clock 1: table,
/// plan, clocks 0 and 1, `RunEnd` of run 1, clocks 2 and 3.
fn two_runs(p: u32) -> Vec<ToShard> {
    let mut msgs: Vec<ToShard> = full(p).into_iter().take(through(3)).collect();
    msgs.insert(through(1), ToShard::RunEnd { from: p, run: 1 });
    msgs
}

/// A copy's rows and rule states, as [`State`] holds them.
type Rows = (BTreeMap<RowKey, Vec<u8>>, Vec<(RowKey, u64, Vec<u8>)>);

/// The rows and rule states `bytes` (a rows part of shard 0, of `meta`'s tables) hold.
fn decoded(bytes: &[u8], meta: &Shard) -> Rows {
    let (mut rows, mut rules) = (BTreeMap::new(), Vec::new());
    let table = |t: u32| meta.table(t).map(|m| (m.row_bytes(), m.state_bytes()));
    rows_part::read(bytes, table, |item| match item {
        rows_part::Item::Row(k, v) => {
            rows.insert(k, v.as_bytes().to_vec());
        }
        rows_part::Item::State(k, s) => rules.push((k, s.steps, s.state.as_bytes().to_vec())),
    })
    .expect("a rows part");
    (rows, rules)
}

#[test]
fn a_loss_at_every_step_of_every_order_leaves_a_copy_that_gives_the_kept_clock() {
    let n = two_runs(0).len();
    let barrier = through(1);
    let mut checked = 0;
    for order in interleavings(&vec![0u32; n], &vec![1u32; n]) {
        // A process waits at the barrier: nothing of run 2 before both ended run 1.
        let ended = |k: usize, p: u32| order[..k].iter().filter(|&&q| q == p).count() > barrier;
        let first_after = (0..order.len()).find(|&k| {
            let p = order[k];
            order[..k].iter().filter(|&&q| q == p).count() > barrier
        });
        if first_after.is_some_and(|k| !(ended(k, 0) && ended(k, 1))) {
            continue;
        }
        for steps in 0..=order.len() {
            let mut copies = Copies::new();
            let mut scripts = [two_runs(0), two_runs(1)].map(Vec::into_iter);
            let mut delivered = Vec::new();
            for &p in &order[..steps] {
                let msg = scripts[p as usize].next().expect("a message left");
                delivered.push(msg.clone());
                copies.send(msg);
            }
            // The application keeps its state at run 2's start once the barrier is done.
            let kept = (copies.primary.run == 1).then(|| copies.primary.undo_run_start());
            for lost in 0..2 {
                let survivor = match lost {
                    0 => &copies.keeper,
                    _ => &copies.primary,
                };
                let copy = survivor
                    .copies()
                    .into_iter()
                    .find(|c| c.shard == 0)
                    .unwrap();
                let Some(clock) = kept else {
                    continue; // nothing kept: the run starts from the beginning
                };
                assert!(
                    copy.gives(clock),
                    "{copy:?} at {clock}, {order:?} after {steps}"
                );
                let mut survivor = match lost {
                    0 => std::mem::replace(&mut copies.keeper, alone()),
                    _ => std::mem::replace(&mut copies.primary, alone()),
                };
                let bytes = survivor
                    .part_at(0, lost == 0, clock)
                    .expect("the kept clock");
                // What a shard that applied exactly the clocks below it holds.
                let mut reference = alone();
                for msg in &delivered {
                    // (`Clock { clock: c }` ends clock c - 1: the minimum clock is then c.)
                    let later = matches!(msg, ToShard::Clock { clock: c, .. } if *c > clock);
                    if !later {
                        reference.step(msg.clone(), &mut Vec::new());
                    }
                }
                let got = decoded(&bytes, &reference);
                let want = state(&reference, clock);
                assert_eq!(reference.clocks.min_clock(), clock);
                let at = format!("{order:?} after {steps}, lost {lost}");
                assert_eq!(got, (want.rows, want.rules), "{at}");
                checked += 1;
                // Put the other copy back for the next loss (this one is used up).
                match lost {
                    0 => copies.keeper = survivor,
                    _ => copies.primary = survivor,
                }
            }
        }
    }
    assert!(checked > 100, "{checked}");
}
