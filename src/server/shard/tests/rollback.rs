//! The agreed rollback clock (`docs/replication.md`, "Promotion on a loss", step 2): the
//! least minimum clock of the copies that go on, refused when they differ by more than
//! one or a lost shard has no surviving copy; and, through the shards themselves, in
//! every order of two processes' messages where the lost process's last clock reached
//! its own shard only, the survivor and the backup it keeps roll back to it and hold what
//! shards that never applied past it hold.

use super::replicas::state;
use super::undo::{alone, exact, full, through};
use super::*;
use crate::server::shard::rollback::{agreed_clock, CopyClock, Holder};

/// Three processes of two shards each (shards 0..6, process `s / 2`).
fn world() -> World {
    World {
        processes: 3,
        workers: 1,
        shards: 2,
    }
}

fn primary(shard: ShardId, clock: Clock) -> CopyClock {
    CopyClock {
        shard,
        holder: Holder::Primary,
        clock,
    }
}

fn backup(shard: ShardId, on: ShardId, clock: Clock) -> CopyClock {
    CopyClock {
        shard,
        holder: Holder::BackupOn(on),
        clock,
    }
}

/// Process 1 (shards 2, 3) lost, two copies of each shard: its shards' backups are on
/// process 2 (shards 4, 5); process 2's are on process 0, which also reports them.
fn reports(clocks: [Clock; 6]) -> Vec<CopyClock> {
    vec![
        primary(0, clocks[0]),
        primary(1, clocks[1]),
        primary(4, clocks[4]),
        primary(5, clocks[5]),
        backup(2, 4, clocks[2]),
        backup(3, 5, clocks[3]),
        // Backups of surviving primaries lag as they may: they are not consulted.
        backup(4, 0, 1),
        backup(5, 1, 0),
    ]
}

#[test]
fn the_agreed_clock_is_the_least_of_the_copies_that_go_on() {
    let agree = |r: &[CopyClock]| agreed_clock(world(), 2, &[1], r);
    assert_eq!(agree(&reports([6; 6])), Ok(6));
    assert_eq!(agree(&reports([6, 5, 6, 6, 6, 6])), Ok(5));
    // The lost shard's backup is behind (the lost process's last clock reached only
    // the survivors' shards): it decides.
    assert_eq!(agree(&reports([6, 6, 6, 5, 6, 6])), Ok(5));
    // Three copies: either surviving backup of a lost shard counts.
    let r3 = vec![
        primary(0, 4),
        primary(1, 4),
        backup(2, 4, 4),
        backup(2, 0, 3),
        backup(3, 5, 4),
        backup(3, 1, 4),
        primary(4, 4),
        primary(5, 4),
    ];
    assert_eq!(agreed_clock(world(), 3, &[1], &r3), Ok(3));
}

#[test]
fn a_spread_past_one_clock_or_a_shard_with_no_copy_left_is_refused_naming_it() {
    let agree = |r: &[CopyClock]| agreed_clock(world(), 2, &[1], r).unwrap_err();
    let e = agree(&reports([6, 6, 4, 6, 6, 6]));
    assert!(
        e.contains("more than one clock") && e.contains("shard 2's backup on shard 4 at 4"),
        "{e}"
    );
    assert!(e.contains("shard 0 at 6"), "{e}");
    // Processes 1 and 2 lost: shard 2's only backup was on process 2.
    let e = agreed_clock(world(), 2, &[1, 2], &[primary(0, 3), primary(1, 3)]).unwrap_err();
    assert!(
        e.contains("shard 2 of lost process 1 has no surviving backup"),
        "{e}"
    );
    // One copy of each shard: nothing survives a loss.
    let alone: Vec<CopyClock> = [0, 1, 4, 5].map(|s| primary(s, 3)).to_vec();
    let e = agreed_clock(world(), 1, &[1], &alone).unwrap_err();
    assert!(e.contains("no surviving backup"), "{e}");
    // Inconsistent reports.
    let mut missing = reports([6; 6]);
    missing.remove(1);
    assert!(agree(&missing).contains("shard 1 (process 0) did not report"));
    let mut from_lost = reports([6; 6]);
    from_lost.push(primary(2, 6));
    assert!(agree(&from_lost).contains("its process 1 was lost"));
    let mut misplaced = reports([6; 6]);
    misplaced.push(backup(2, 0, 6));
    assert!(agree(&misplaced).contains("shard 0 keeps no backup of shard 2"));
    let mut twice = reports([6; 6]);
    twice.push(primary(0, 6));
    assert!(agree(&twice).contains("reported twice"));
    let e = agreed_clock(world(), 2, &[], &reports([6; 6])).unwrap_err();
    assert!(e.contains("no process was lost"), "{e}");
    let e = agreed_clock(world(), 2, &[3], &reports([6; 6])).unwrap_err();
    assert!(e.contains("process 3 is not in a cluster of 3"), "{e}");
}

/// Shards 0 and 1 of two processes, each backing up the other.
fn both() -> [Shard; 2] {
    let world = two_process_world();
    [0, 1].map(|id| {
        let mut s = Shard::new(id, world).with_replicas(2);
        s.step(ToShard::CreateTable { meta: table_t() }, &mut Vec::new());
        s
    })
}

/// Shard `to` takes `msg`; what the shards send each other is delivered at once.
fn deliver(shards: &mut [Shard; 2], to: ShardId, msg: ToShard) {
    let (mut in_flight, mut out) = (vec![(to, msg)], Vec::new());
    while let Some((to, m)) = in_flight.pop() {
        let mut sent = Vec::new();
        shards[to as usize].step(m, &mut sent);
        for e in sent {
            match e {
                Envelope::Shard(to, m) => in_flight.push((to, m)),
                client => out.push(client),
            }
        }
    }
    assert!(rejected(&out).is_empty(), "{out:?}");
}

#[test]
fn after_a_loss_the_survivor_and_its_backup_of_the_lost_shard_roll_back_to_the_agreed_clock() {
    let mut checked = 0;
    for c in 1..=3 {
        // Process 0's messages through clock c + 1; process 1's too, but its last
        // reaches only its own shard before it is lost.
        let n = through(c + 1);
        for order in interleavings(&vec![0u32; n], &vec![1u32; n]) {
            let mut shards = both();
            let mut refs = [alone(), shard_in(1, two_process_world())];
            let mut scripts = [full(0), full(1)].map(Vec::into_iter);
            let mut taken = [0, 0];
            for &p in &order {
                let msg = scripts[p as usize].next().expect("a message left");
                let k = taken[p as usize];
                taken[p as usize] += 1;
                for (s, reference) in (0..).zip(&mut refs) {
                    if k < through(c) {
                        reference.step(msg.clone(), &mut Vec::new());
                    }
                    if !(p == 1 && s == 0 && k + 1 == n) {
                        deliver(&mut shards, s, msg.clone());
                    }
                }
            }
            let reports = [
                primary(0, shards[0].clocks.min_clock()),
                backup(1, 0, shards[0].held_backup(1).unwrap().applied_clock()),
            ];
            assert_eq!(reports.map(|r| r.clock), [c, c + 1], "{order:?}");
            let to = agreed_clock(two_process_world(), 2, &[1], &reports);
            assert_eq!(to, Ok(c), "{order:?}");
            let [survivor, _lost] = &mut shards;
            survivor.roll_back(c).expect("where it is");
            survivor.roll_back_backup(1, c).expect("one clock back");
            assert_eq!(exact(survivor), exact(&refs[0]), "c {c}, {order:?}");
            let b = survivor.held_backup(1).unwrap();
            assert_eq!(
                state(b, b.applied_clock()),
                state(&refs[1], c),
                "c {c}, {order:?}"
            );
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked}");
}
