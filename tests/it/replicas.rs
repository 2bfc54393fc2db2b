//! Replicated shards (`Config::shard_replicas`) across processes over TCP: under BSP, a
//! training loop on three processes with two copies of every shard computes exactly what
//! it computes with one, in the generic and the specialized store, and at the end every
//! backup holds its primary's rows bit for bit. What backups do not see yet is refused
//! naming the field.

use crate::util::{over_tcp, over_tcp_results, within};
use iterstore::{Cluster, Config, Error, Mode, Rule, Staleness};

/// Rows of each table.
const ROWS: u64 = 12;

const ADAM: Rule = Rule::Adam {
    lr: 0.05,
    beta1: 0.9,
    beta2: 0.99,
    eps: 1e-8,
};

/// Per clock, worker `w` reads rows of both tables and pushes updates that depend on what
/// it read: a stale or missing update anywhere changes every later value.
fn iteration(
    w: &mut iterstore::Worker<'_>,
    x: &iterstore::Table<f64>,
    g: &iterstore::Table<f64>,
) -> iterstore::Result<()> {
    let id = w.id() as u64;
    let mut a = [0.0; 3];
    let mut b = [0.0; 2];
    for c in 0..3u64 {
        let (r, s) = ((id * 5 + c) % ROWS, (id + 3 * c) % ROWS);
        w.read(x, r, &mut a)?;
        w.read(g, s, &mut b)?;
        let t = a.iter().sum::<f64>() * 0.5 + b[0] - 0.25 * b[1];
        w.update(x, (r + 1) % ROWS, &[t + 1.0, 0.5 * t, id as f64 + 0.125])?;
        w.update(g, s, &[0.3 - 0.1 * t, t * t - 0.7])?;
        w.clock()?;
    }
    Ok(())
}

/// Snapshots of both tables as bits: every copy's (the shards themselves first).
type Copies = Vec<(Vec<(u64, Vec<u64>)>, Vec<(u64, Vec<u64>)>)>;

fn bits(rows: Vec<(u64, Vec<f64>)>) -> Vec<(u64, Vec<u64>)> {
    rows.into_iter()
        .map(|(r, v)| (r, v.into_iter().map(f64::to_bits).collect()))
        .collect()
}

/// Two runs of [`iteration`], the rule's step size changed between them; then each
/// copy's snapshot of both tables.
fn train(cluster: &mut Cluster) -> iterstore::Result<Copies> {
    let x = cluster.create_table_sized::<f64>("x", 3, ROWS)?;
    let g = cluster.create_table_with_rule::<f64>("g", 2, Some(ROWS), ADAM)?;
    if cluster.config().mode == Mode::Virtual {
        cluster.virtual_iteration(|w| iteration(w, &x, &g))?;
    }
    cluster.run(|w| iteration(w, &x, &g))?;
    // A rule changed between runs reaches the backups before the clocks that use it.
    let slower = Rule::Adam {
        lr: 0.02,
        beta1: 0.9,
        beta2: 0.99,
        eps: 1e-8,
    };
    cluster.set_rule(&g, slower)?;
    cluster.run(|w| iteration(w, &x, &g))?;
    (0..cluster.config().shard_replicas)
        .map(|copy| {
            let xs = bits(cluster.snapshot_of_copy(&x, copy)?);
            let gs = bits(cluster.snapshot_of_copy(&g, copy)?);
            Ok((xs, gs))
        })
        .collect()
}

#[test]
fn three_processes_with_two_copies_compute_what_one_copy_does_and_backups_match() {
    within(240, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let config = Config::new(2).with_shards(2).with_mode(mode);
            let alone = over_tcp(config.clone(), 3, train);
            let copied = over_tcp(config.with_shard_replicas(2), 3, train);
            let want = &alone[0][0];
            assert!(!want.0.is_empty() && !want.1.is_empty());
            for (rank, copies) in copied.iter().enumerate() {
                assert_eq!(copies.len(), 2);
                assert_eq!(&copies[0], want, "{mode:?}: process {rank}'s primaries");
                assert_eq!(&copies[1], want, "{mode:?}: process {rank}'s backups");
            }
        }
    });
}

#[test]
fn processes_in_one_os_process_keep_backups_alike() {
    within(120, || {
        let config = Config::new(2).with_mode(Mode::Virtual);
        let alone = Cluster::run_local_processes(config.clone(), 3, train).unwrap();
        let copied = Cluster::run_local_processes(config.with_shard_replicas(3), 3, train).unwrap();
        for copies in &copied {
            assert_eq!(copies.len(), 3);
            assert!(copies.iter().all(|c| c == &alone[0][0]));
        }
    });
}

#[test]
fn what_backups_do_not_see_yet_is_refused_naming_the_field() {
    within(60, || {
        let field = |e: &Error| match e {
            Error::InvalidConfig { field, .. } => *field,
            _ => "",
        };
        let asynchronous = Config::new(1)
            .with_shard_replicas(2)
            .with_staleness(Staleness::Unbounded);
        let e = Cluster::run_local_processes(asynchronous, 2, |_| Ok(())).unwrap_err();
        assert_eq!(field(&e), "shard_replicas", "{e}");
        let results = over_tcp_results(Config::new(1).with_shard_replicas(2), 2, |c| {
            let t = c.create_table_sized::<f64>("t", 1, 4)?;
            let set = c.set_rows(&t, &[(0, vec![1.0])]).unwrap_err();
            let fork = c.fork(c.live_branch()).unwrap_err();
            Ok([set, fork].map(|e| field(&e)))
        });
        for r in results {
            assert_eq!(r.unwrap(), ["shard_replicas"; 2]);
        }
    });
}
