//! A primary shard and the shard keeping its backup (two processes, two copies of each
//! shard), driven through every interleaving of two processes' messages with the
//! replication messages between the shards delivered at once, one or two behind, or only
//! when nothing else is left: after each run the backup's rows, rule states and clock are
//! the primary's bit for bit; the run barrier waits for the backup's ack; a clock's float
//! sums reach the backup in worker order; and a lost, reordered or changed replication
//! message is caught.

use super::planned_rules::{script, table_w};
use super::*;
use std::collections::VecDeque;

/// A shard's state as its backup must hold it: rows (generic and arena alike, all-zero
/// rows left out: a read makes a zero row, which is no update), rule states and clock.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct State {
    pub(super) rows: BTreeMap<RowKey, Vec<u8>>,
    pub(super) rules: Vec<(RowKey, u64, Vec<u8>)>,
    clock: Clock,
}

pub(super) fn state(s: &Shard, clock: Clock) -> State {
    let mut rows: BTreeMap<RowKey, Vec<u8>> = (s.rows.iter())
        .map(|e| (*e.key(), e.value().as_bytes().to_vec()))
        .collect();
    rows.extend(s.arena.rows().map(|(k, b)| (k, b.to_vec())));
    rows.retain(|_, b| b.iter().any(|&x| x != 0));
    let rules = (s.rules.keys().into_iter())
        .filter_map(|k| s.rules.get(k).map(|(n, b)| (k, n, b.to_vec())))
        .collect();
    State { rows, rules, clock }
}

fn primary_state(s: &Shard) -> State {
    state(s, s.clocks.min_clock())
}

fn backup_state(host: &Shard) -> State {
    let b = host.held_backup(0).expect("shard 1 keeps shard 0's backup");
    state(b, b.applied_clock())
}

/// Shard 0 (the primary) and shard 1 (keeping its backup), the messages in flight
/// between them, what the primary held at each clock it replicated, and the highest
/// clock the backup has acked to it.
struct Pair {
    primary: Shard,
    host: Shard,
    to_host: VecDeque<ToShard>,
    to_primary: VecDeque<ToShard>,
    sent: BTreeMap<Clock, State>,
    acked: Clock,
    /// The primary's messages for processes.
    out: Vec<Envelope>,
    /// Changes each replication message in flight before the host takes it.
    tamper: fn(&mut ToShard),
    /// Every `Replicate` the primary sent, in order.
    replicates: Vec<ToShard>,
}

impl Pair {
    fn new() -> Self {
        let world = two_process_world();
        let [primary, host] = [0, 1].map(|id| {
            let mut s = Shard::new(id, world).with_replicas(2);
            s.step(ToShard::CreateTable { meta: table_t() }, &mut Vec::new());
            s
        });
        Pair {
            primary,
            host,
            to_host: VecDeque::new(),
            to_primary: VecDeque::new(),
            sent: BTreeMap::new(),
            acked: 0,
            replicates: Vec::new(),
            out: Vec::new(),
            tamper: |_| {},
        }
    }

    /// The primary takes `msg`; its replication messages go in flight, and what it tells
    /// processes is checked against what the backup has acked.
    fn send_primary(&mut self, msg: ToShard) {
        let mut out = Vec::new();
        self.primary.step(msg, &mut out);
        for e in out {
            match e {
                Envelope::Shard(1, m @ ToShard::Replicate { clock, .. }) => {
                    self.sent.insert(clock, primary_state(&self.primary));
                    self.replicates.push(m.clone());
                    self.to_host.push_back(m);
                }
                Envelope::Shard(to, m) => panic!("shard 0 sent shard {to} {m:?}"),
                Envelope::Client(p, m) => {
                    // A run ends only once the backup has acked what it changed.
                    if let ToClient::RunReady { start, .. } = &m {
                        assert!(
                            *start <= self.acked,
                            "{m:?} before the backup acked {start}"
                        );
                    }
                    self.out.push(Envelope::Client(p, m));
                }
            }
        }
    }

    /// Delivers the oldest replication message in flight each way.
    fn deliver_one(&mut self) {
        if let Some(mut m) = self.to_host.pop_front() {
            (self.tamper)(&mut m);
            let mut out = Vec::new();
            self.host.step(m, &mut out);
            assert!(rejected(&out).is_empty(), "{out:?}");
            for e in out {
                let Envelope::Shard(0, ack @ ToShard::ReplicaAck { clock, .. }) = e else {
                    panic!("shard 1 sent {e:?}");
                };
                assert_eq!(backup_state(&self.host), self.sent[&clock], "clock {clock}");
                self.to_primary.push_back(ack);
            }
        }
        if let Some(ack) = self.to_primary.pop_front() {
            if let ToShard::ReplicaAck { clock, .. } = ack {
                self.acked = clock;
            }
            self.send_primary(ack);
        }
    }

    fn in_flight(&self) -> usize {
        self.to_host.len().max(self.to_primary.len())
    }

    /// Delivers replication messages until at most `lag` are in flight each way.
    fn catch_up(&mut self, lag: usize) {
        while self.in_flight() > lag {
            self.deliver_one();
        }
    }
}

/// How far the replication messages may lag behind: at once, one or two behind, or
/// only once every process message is in.
const LAGS: [usize; 4] = [0, 1, 2, usize::MAX];

/// Runs `scripts` to the primary in `order` with replication lagging by `lag`, then
/// drains everything in flight; returns the pair.
fn run(scripts: [Vec<ToShard>; 2], order: &[u32], lag: usize) -> Pair {
    let mut pair = Pair::new();
    let mut scripts = scripts.map(Vec::into_iter);
    for &p in order {
        let msg = scripts[p as usize].next().expect("a message left");
        pair.send_primary(msg);
        pair.catch_up(lag);
    }
    pair.catch_up(0);
    assert!(rejected(&pair.out).is_empty(), "{:?}", pair.out);
    pair
}

/// Each process creates table "w" (Adam) and sends two clocks of gradients, whole and
/// sparse slabs and rows sent the generic way, and a sum table's rows beside them, then
/// ends the run.
pub(super) fn rule_script(p: u32) -> Vec<ToShard> {
    let mut msgs = vec![ToShard::CreateTable { meta: table_w() }];
    for mut m in script(p, true) {
        if let ToShard::Clock { rows, clock, .. } = &mut m {
            let v = [i64::from(p) + 1, *clock as i64];
            rows.push((RowKey::new(0, 20 + *clock), AlignedBuf::from_slice(&v)));
        }
        msgs.push(m);
    }
    msgs.push(ToShard::RunEnd { from: p, run: 1 });
    msgs
}

fn orders(scripts: &dyn Fn(u32) -> Vec<ToShard>) -> Vec<Vec<u32>> {
    let of = |p: u32| vec![p; scripts(p).len()];
    interleavings(&of(0), &of(1))
}

#[test]
fn the_backup_equals_its_primary_after_every_run_in_every_order() {
    let mut checked = 0;
    for order in orders(&rule_script) {
        for lag in LAGS {
            let pair = run([rule_script(0), rule_script(1)], &order, lag);
            let (want, got) = (primary_state(&pair.primary), backup_state(&pair.host));
            assert_eq!(got, want, "{order:?}, lag {lag}");
            assert_eq!(want.clock, 2, "both clocks applied");
            assert!(want.rules.iter().any(|(_, steps, _)| *steps == 2));
            assert!(want.rows.keys().any(|k| k.table == 0), "the sum rows");
            assert_eq!(pair.acked, 2);
            checked += pair.sent.len();
        }
    }
    assert!(checked > 0);
}

#[test]
fn a_uniform_slab_and_the_run_barrier_wait_for_the_backup() {
    let (script0, script1) = (process_script(0).0, process_script(1).0);
    let of = |n: usize, p: u32| vec![p; n];
    for order in interleavings(&of(script0.len(), 0), &of(script1.len(), 1)) {
        for lag in LAGS {
            let mut pair = Pair::new();
            let mut scripts = [script0.clone(), script1.clone()].map(Vec::into_iter);
            for &p in &order {
                pair.send_primary(scripts[p as usize].next().unwrap());
                pair.catch_up(lag);
            }
            let ready = |pair: &Pair| {
                to_clients(&pair.out).any(|(_, m)| matches!(m, ToClient::RunReady { .. }))
            };
            // Every process ended the run: the barrier waits only for the backup.
            assert_eq!(ready(&pair), pair.in_flight() == 0, "{order:?}, lag {lag}");
            pair.catch_up(0);
            assert!(ready(&pair), "{order:?}, lag {lag}");
            assert_eq!(backup_state(&pair.host), primary_state(&pair.primary));
            assert!(rejected(&pair.out).is_empty(), "{:?}", pair.out);
        }
    }
}

/// [`rule_script`] as two runs: the barrier after its first clock, and the second clock
/// with another run end.
fn two_run_script(p: u32) -> Vec<ToShard> {
    let mut msgs = rule_script(p);
    let first_clock = msgs.iter().position(|m| matches!(m, ToShard::Clock { .. }));
    let at = first_clock.expect("a clock") + 1;
    msgs.insert(at, ToShard::RunEnd { from: p, run: 1 });
    if let Some(ToShard::RunEnd { run, .. }) = msgs.last_mut() {
        *run = 2;
    }
    msgs
}

#[test]
fn a_lost_or_reordered_replication_message_fails_the_cluster() {
    // Both processes message by message: each run ends before the next begins.
    let n = two_run_script(0).len();
    let order: Vec<u32> = (0..2 * n as u32).map(|k| k % 2).collect();
    let mut pair = run([two_run_script(0), two_run_script(1)], &order, 0);
    assert_eq!(pair.replicates.len(), 2, "one a run: {:?}", pair.replicates);
    let (first, second) = (pair.replicates[0].clone(), pair.replicates[1].clone());
    for (msgs, what) in [
        (vec![second.clone()], "lost"),
        (vec![second, first], "reordered"),
    ] {
        let mut host = Pair::new().host;
        let mut out = Vec::new();
        for m in msgs {
            host.step(m, &mut out);
        }
        let reasons = rejected(&out);
        assert!(
            reasons.iter().any(|r| r.contains("came after clock")),
            "{what}: {reasons:?}"
        );
    }
    // An ack the backup never sent, or twice, fails it too.
    let mut out = Vec::new();
    let ack = |clock| ToShard::ReplicaAck {
        backup: 1,
        primary: 0,
        clock,
    };
    pair.primary.step(ack(1), &mut out);
    assert!(
        rejected(&out).iter().any(|r| r.contains("acked clock 1")),
        "{out:?}"
    );
}

#[test]
fn a_changed_batch_is_caught_by_the_comparison() {
    let order: Vec<u32> = orders(&rule_script).swap_remove(0);
    let mut pair = Pair::new();
    // One of the run's rows goes missing on the way.
    pair.tamper = |m| {
        if let ToShard::Replicate { clocks, .. } = m {
            if let Some(c) = clocks.first_mut() {
                c.rows.pop();
            }
        }
    };
    let mut scripts = [rule_script(0), rule_script(1)].map(Vec::into_iter);
    for &p in &order {
        pair.send_primary(scripts[p as usize].next().unwrap());
    }
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pair.catch_up(0)));
    assert!(caught.is_err(), "a backup missing a batch compared equal");
}

#[test]
fn a_replicated_shard_refuses_what_its_backups_would_not_see() {
    let mut pair = Pair::new();
    let mut out = Vec::new();
    let set = ToShard::SetRows {
        from: 0,
        rows: vec![(RowKey::new(0, 1), AlignedBuf::from_slice(&[1i64, 2]))],
        last: true,
    };
    pair.host.step(set, &mut out);
    assert!(
        rejected(&out).iter().any(|r| r.contains("replicated")),
        "{out:?}"
    );
    // A replica from a shard it does not back up (itself) fails the cluster.
    let mut out = Vec::new();
    let stray = ToShard::Replicate {
        primary: 1,
        run_start: 0,
        since: 0,
        clock: 1,
        tables: Vec::new(),
        clocks: Vec::new(),
    };
    pair.host.step(stray, &mut out);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("does not back up")),
        "{out:?}"
    );
    // Its backup answers a dump of the primary's rows, as the backup holds them.
    let mut pair = run(
        [rule_script(0), rule_script(1)],
        &orders(&rule_script)[0],
        0,
    );
    let mut out = Vec::new();
    let dump = |backup| ToShard::Dump {
        from: 1,
        table: 0,
        backup,
    };
    pair.host.step(dump(Some(0)), &mut out);
    pair.primary.step(dump(None), &mut out);
    let dumps: Vec<Vec<(RowKey, Vec<u8>)>> = to_clients(&out)
        .filter_map(|(_, m)| match m {
            ToClient::DumpRows { rows, .. } => {
                let mut rows: Vec<_> = rows
                    .iter()
                    .map(|(k, b)| (*k, b.as_bytes().to_vec()))
                    .collect();
                rows.sort();
                Some(rows)
            }
            _ => None,
        })
        .collect();
    assert_eq!(dumps.len(), 2);
    assert!(!dumps[0].is_empty());
    assert_eq!(dumps[0], dumps[1]);
}

/// All orders of `items`.
fn permutations(items: &[u32]) -> Vec<Vec<u32>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, &first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut p in permutations(&rest) {
            p.insert(0, first);
            out.push(p);
        }
    }
    out
}

#[test]
fn the_backup_adds_a_clock_in_worker_order_whatever_order_it_arrived_in() {
    // Two workers per process; float sums whose result depends on their order.
    let world = World {
        processes: 2,
        workers: 2,
        shards: 1,
    };
    let meta = TableMeta {
        id: 0,
        name: "f".into(),
        width: 1,
        elem: ElemType::F64,
        rows: None,
        rule: crate::rule::Rule::Sum,
    };
    let deltas = [1e16, 1.0, -1e16, 1.0];
    for arrival in permutations(&[0, 1, 2, 3]) {
        let [mut primary, mut host] = [0, 1].map(|id| {
            let mut s = Shard::new(id, world).with_replicas(2);
            s.step(ToShard::CreateTable { meta: meta.clone() }, &mut Vec::new());
            s
        });
        let mut out = Vec::new();
        for &w in &arrival {
            let rows = vec![(
                RowKey::new(0, 0),
                AlignedBuf::from_slice(&[deltas[w as usize]]),
            )];
            let clock = ToShard::Clock {
                worker: w,
                clock: 1,
                epoch: 0,
                rows,
                outer: Vec::new(),
                slab: AlignedBuf::default(),
                slab_rows: None,
            };
            primary.step(clock, &mut out);
        }
        for from in 0..2 {
            primary.step(ToShard::RunEnd { from, run: 1 }, &mut out);
        }
        let mut acks = Vec::new();
        for e in out.drain(..) {
            if let Envelope::Shard(1, m) = e {
                host.step(m, &mut acks);
            }
        }
        assert!(rejected(&acks).is_empty(), "{acks:?}");
        let (want, got) = (primary_state(&primary), backup_state(&host));
        assert_eq!(got, want, "arrival {arrival:?}");
        // ((1e16 + 1) - 1e16) + 1 in worker order: 1e16 + 1 rounds to 1e16.
        let one = 1.0f64.to_le_bytes().to_vec();
        assert_eq!(want.rows.get(&RowKey::new(0, 0)), Some(&one), "{arrival:?}");
    }
}

#[test]
fn a_shard_keeps_the_state_of_the_process_it_backs_up_and_no_other() {
    let mut pair = Pair::new();
    let keep = |from, clock, state: &[u8]| ToShard::KeepState {
        from,
        clock,
        state: state.to_vec(),
    };
    // Shard 1 backs up process 0's first shard: it keeps process 0's states, the last two.
    for (clock, state) in [(1, &b"one"[..]), (2, b"two"), (3, b"three"), (3, b"three!")] {
        let mut out = Vec::new();
        pair.host.step(keep(0, clock, state), &mut out);
        let answered = to_clients(&out).any(|(p, m)| {
            p == 0 && matches!(m, ToClient::StateKept { shard: 1, clock: c } if *c == clock)
        });
        assert!(answered, "{out:?}");
    }
    let kept: Vec<(ProcessId, Clock, Vec<u8>)> = (pair.host.kept_states())
        .map(|(p, c, s)| (p, c, s.to_vec()))
        .collect();
    assert_eq!(
        kept,
        vec![(0, 2, b"two".to_vec()), (0, 3, b"three!".to_vec())]
    );
    // Its own process's state, or any other it does not back up, is refused.
    let mut out = Vec::new();
    pair.host.step(keep(1, 1, b"mine"), &mut out);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("does not back up")),
        "{out:?}"
    );
    assert_eq!(pair.host.kept_states().count(), 2);
}

#[test]
fn a_replicated_shard_takes_a_migration_that_moves_no_row_and_refuses_one_that_does() {
    let key = RowKey::new(0, 7);
    let row = AlignedBuf::from_slice(&[1i64, 2]);
    // A pair whose primary holds `key` and was asked to place it on shard `to`.
    let migrated_to = |to| {
        let mut pair = Pair::new();
        pair.primary.rows.insert(key, row.clone());
        let mut out = Vec::new();
        let migrate = ToShard::Migrate {
            from: 0,
            overrides: vec![(key, to)],
        };
        pair.primary.step(migrate, &mut out);
        (pair, out)
    };
    // Nothing moves: taken, and the migration completes once the other shard's (empty)
    // rows are in.
    let (mut pair, mut out) = migrated_to(0);
    let empty = ToShard::Adopt {
        shard: 1,
        rows: Vec::new(),
        states: Vec::new(),
    };
    pair.primary.step(empty, &mut out);
    assert!(rejected(&out).is_empty(), "{out:?}");
    assert!(to_clients(&out).any(|(_, m)| matches!(m, ToClient::Migrated { shard: 0 })));
    // A row placed on the other shard would leave the backups behind: refused.
    let (mut pair, out) = migrated_to(1);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("moves rows off shard 0")),
        "{out:?}"
    );
    // And so are rows handed to a replicated shard.
    let mut out = Vec::new();
    let adopt = ToShard::Adopt {
        shard: 0,
        rows: vec![(key, row)],
        states: Vec::new(),
    };
    pair.host.step(adopt, &mut out);
    assert!(
        rejected(&out)
            .iter()
            .any(|r| r.contains("moved onto shard 1")),
        "{out:?}"
    );
}
