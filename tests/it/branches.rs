//! Branches of the training state (issue 40): a branch forked at clock `c` and trained `k`
//! clocks with settings `S` holds exactly — bit for bit — the rows of a run resumed from a
//! checkpoint at `c` and trained `k` clocks with `S` (BSP), in every mode, in one process
//! and in two over TCP, with two branches trained interleaved (switching back and forth,
//! one parked and brought back in between); misuse is refused on every process alike.

use crate::util::{over_tcp, over_tcp_results, within, TempDir};
use iterstore::checkpoints::{CheckpointError, ClusterRule};
use iterstore::{
    BranchId, BranchStates, Cluster, Config, Error, Mode, Rule, Staleness, Table, Worker,
};
use std::path::Path;

const ROWS: u64 = 5;
const WIDTH: usize = 3;
const APP: &str = "branches-test";

/// A worker's own state: its learning rate (a branch's client-side setting) and steps.
#[derive(Debug, Clone, PartialEq)]
struct State {
    lr: f64,
    step: u64,
}

/// A branch's settings: the workers' learning rate and the server-side rule of `m`.
#[derive(Debug, Clone, Copy)]
struct Settings {
    lr: f64,
    rule: Rule,
}

const S0: Settings = Settings {
    lr: 0.125,
    rule: Rule::Adam {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
    },
};
const S1: Settings = Settings {
    lr: 0.375,
    rule: Rule::Adam {
        lr: 0.05,
        beta1: 0.8,
        beta2: 0.99,
        eps: 1e-8,
    },
};

/// `w` (sums, planned in the specialized modes) and `m` (Adam on the servers).
struct Tables {
    w: Table<f64>,
    m: Table<f64>,
}

/// The rows of both tables, as bits.
type Rows = Vec<(u64, Vec<u64>)>;

/// Two clocks of an SGD-like step: each worker reads every row of both tables, pulls `w`
/// towards a target that depends on itself, its step and `m`, and pushes `m` a gradient.
fn body(w: &mut Worker<'_>, t: &Tables, s: &mut State) -> iterstore::Result<()> {
    for _ in 0..2 {
        for r in 0..ROWS {
            let (mut x, mut y) = ([0.0; WIDTH], [0.0; WIDTH]);
            w.read(&t.w, r, &mut x)?;
            w.read(&t.m, r, &mut y)?;
            let id = w.id() as f64;
            let target =
                |j: usize| (r as f64 + 1.0) * (j as f64 - 1.0) + id * 0.25 + s.step as f64 * 0.01;
            let dw: Vec<f64> = (0..WIDTH)
                .map(|j| -s.lr * (x[j] - 0.5 * y[j] - target(j)) / 8.0)
                .collect();
            let gm: Vec<f64> = (0..WIDTH).map(|j| (y[j] - x[j] + 0.1) * 0.5).collect();
            w.update(&t.w, r, &dw)?;
            w.update(&t.m, r, &gm)?;
        }
        s.step += 1;
        w.clock()?;
    }
    Ok(())
}

/// The tables, created alike by every cluster of a test (and gathered in virtual mode
/// by the caller).
fn tables(c: &mut Cluster) -> iterstore::Result<Tables> {
    Ok(Tables {
        w: c.create_table_sized::<f64>("w", WIDTH, ROWS)?,
        m: c.create_table_with_rule::<f64>("m", WIDTH, Some(ROWS), S0.rule)?,
    })
}

fn gather(c: &mut Cluster, t: &Tables) -> iterstore::Result<()> {
    if c.config().mode == Mode::Virtual {
        let one = State { lr: 0.0, step: 0 };
        c.virtual_iteration(|w| body(w, t, &mut one.clone()))?;
    }
    Ok(())
}

fn rows(c: &Cluster, t: &Tables) -> iterstore::Result<(Rows, Rows)> {
    let bits = |rows: Vec<(u64, Vec<f64>)>| {
        rows.into_iter()
            .map(|(r, v)| (r, v.iter().map(|x| x.to_bits()).collect()))
            .collect()
    };
    Ok((bits(c.snapshot(&t.w)?), bits(c.snapshot(&t.m)?)))
}

fn encode(states: &[State]) -> Vec<u8> {
    let words = states.iter().flat_map(|s| [s.lr.to_bits(), s.step]);
    words.flat_map(u64::to_le_bytes).collect()
}

fn decode(bytes: &[u8]) -> Vec<State> {
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap());
    bytes
        .chunks_exact(16)
        .map(|c| State {
            lr: f64::from_bits(word(&c[..8])),
            step: word(&c[8..]),
        })
        .collect()
}

/// What a branch holds at the end: its rows, and its workers' states.
type Held = ((Rows, Rows), Vec<State>);

/// Trains one run, checkpoints at its end (clock 2) into `dir`, forks branch 1 with `S1`
/// and trains branch 0 two runs and branch 1 three, interleaved; branch 0 is parked while
/// branch 1 trains its last. Returns what each branch holds.
fn branched(c: &mut Cluster, dir: &Path) -> iterstore::Result<(Held, Held)> {
    let t = tables(c)?;
    gather(c, &t)?;
    let local = c.config().workers;
    let mut states = BranchStates::new(vec![State { lr: S0.lr, step: 0 }; local]);
    let main = c.live_branch();
    let run = |c: &mut Cluster, states: &mut BranchStates<State>, b: BranchId| {
        assert_eq!(c.live_branch(), b);
        c.run_with(states.of_mut(b)?, |w, s| body(w, &t, s))
    };
    run(c, &mut states, main)?;
    c.checkpoint_with(dir, APP, &encode(states.of_mut(main)?))?;
    let b = c.fork(main)?;
    states.fork(main, b)?;
    c.switch(b)?;
    c.set_rule(&t.m, S1.rule)?;
    states.of_mut(b)?.iter_mut().for_each(|s| s.lr = S1.lr);
    run(c, &mut states, b)?;
    c.switch(main)?;
    run(c, &mut states, main)?;
    c.switch(b)?;
    run(c, &mut states, b)?;
    c.park(main, &dir.join("parked"))?;
    run(c, &mut states, b)?;
    c.unpark(main)?;
    if c.rank() == 0 {
        assert!(
            !dir.join("parked/branch-0").exists(),
            "the parked files stay"
        );
    }
    c.switch(main)?;
    run(c, &mut states, main)?;
    let held_main = (rows(c, &t)?, states.of_mut(main)?.clone());
    c.switch(b)?;
    let held_b = (rows(c, &t)?, states.of_mut(b)?.clone());
    let counts = c.branch_counts();
    assert_eq!(
        (counts.forks, counts.switches, counts.parks, counts.unparks),
        (1, 5, 1, 1)
    );
    let info = c.branches();
    assert_eq!(info.len(), 2);
    // Clock 2 at the fork; then two runs of two clocks on branch 0, three on branch 1.
    assert_eq!((info[0].trained, info[1].trained), (6, 8), "{info:?}");
    assert_eq!(info[1].parent, Some(main));
    assert!(info[1].live && info[0].parked.is_none());
    Ok((held_main, held_b))
}

/// Resumes from the checkpoint in `dir` and trains `runs` runs with `settings`.
fn twin(c: &mut Cluster, dir: &Path, settings: Settings, runs: usize) -> iterstore::Result<Held> {
    let t = tables(c)?;
    let resumed = c.resume(dir, APP, ClusterRule::Same)?;
    assert_eq!(resumed.clock(), 2);
    let mut states = decode(&resumed.app_state(c.rank())?.unwrap_or_default());
    gather(c, &t)?;
    c.set_rule(&t.m, settings.rule)?;
    states.iter_mut().for_each(|s| s.lr = settings.lr);
    for _ in 0..runs {
        c.run_with(&mut states, |w, s| body(w, &t, s))?;
    }
    Ok((rows(c, &t)?, states))
}

const MODES: [Mode; 3] = [Mode::Generic, Mode::FirstIter, Mode::Virtual];

#[test]
fn a_branch_equals_its_checkpoint_resumed_twin_in_one_process() {
    within(240, || {
        let mut reference = None;
        for mode in MODES {
            let dir = TempDir::new("branches-one");
            let config = Config::new(4).with_mode(mode);
            let mut c = Cluster::start(config.clone()).unwrap();
            let (main, b) = branched(&mut c, dir.path()).unwrap();
            c.shutdown().unwrap();
            for (settings, runs, held) in [(S0, 2, &main), (S1, 3, &b)] {
                let mut c = Cluster::start(config.clone()).unwrap();
                let twin = twin(&mut c, dir.path(), settings, runs).unwrap();
                c.shutdown().unwrap();
                assert_eq!(&twin, held, "{mode:?}: {settings:?}");
            }
            assert_ne!(main.0, b.0, "the settings made no difference");
            assert!(main.0 .1.len() == ROWS as usize && main.0 .0.len() == ROWS as usize);
            match &reference {
                None => reference = Some((main, b)),
                Some(r) => assert_eq!(r, &(main, b), "{mode:?} differs from generic"),
            }
        }
    });
}

#[test]
fn a_branch_equals_its_twin_across_two_processes_over_tcp() {
    within(300, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let dir = TempDir::new("branches-tcp");
            let config = Config::new(2).with_mode(mode);
            let held = over_tcp(config.clone(), 2, |c| branched(c, dir.path()));
            for (settings, runs, pick) in [(S0, 2, 0), (S1, 3, 1)] {
                let twins = over_tcp(config.clone(), 2, |c| twin(c, dir.path(), settings, runs));
                for (rank, (twin, (main, b))) in twins.iter().zip(&held).enumerate() {
                    let want = if pick == 0 { main } else { b };
                    assert_eq!(twin, want, "{mode:?}: process {rank}, {settings:?}");
                }
            }
            // Two processes of two workers compute what one of four does.
            let mut one = Cluster::start(Config::new(4).with_mode(mode)).unwrap();
            let one_dir = TempDir::new("branches-tcp-one");
            let (main, b) = branched(&mut one, one_dir.path()).unwrap();
            one.shutdown().unwrap();
            assert_eq!((&held[0].0 .0, &held[0].1 .0), (&main.0, &b.0), "{mode:?}");
        }
    });
}

#[test]
fn misuse_is_refused_alike_and_the_cluster_goes_on() {
    within(60, || {
        let mut c = Cluster::start(Config::new(2)).unwrap();
        let t = c.create_table::<i64>("t", 1).unwrap();
        let add = |n: i64| {
            move |w: &mut Worker<'_>| {
                w.update(&t, 0, &[n])?;
                w.clock()
            }
        };
        c.run(add(1)).unwrap();
        let main = c.live_branch();
        let unknown = BranchId(7);
        let refused = |e: Error, id: BranchId, what: &str| match e {
            Error::Branch { branch, reason } => {
                assert_eq!(branch, id);
                assert!(reason.contains(what), "{reason}");
            }
            other => panic!("{other}"),
        };
        refused(c.fork(unknown).unwrap_err(), unknown, "not a branch");
        // A resume after a fork would leave the forked branch without the rows resumed.
        let fresh = TempDir::new("branches-resume");
        let mut d = Cluster::start(Config::new(1)).unwrap();
        d.create_table::<i64>("t", 1).unwrap();
        d.checkpoint(fresh.path(), APP).unwrap();
        let mut e = Cluster::start(Config::new(1)).unwrap();
        e.create_table::<i64>("t", 1).unwrap();
        e.fork(e.live_branch()).unwrap();
        let late = e.resume(fresh.path(), APP, ClusterRule::Same).unwrap_err();
        assert!(
            matches!(late, Error::Checkpoint(CheckpointError::TooLate { .. })),
            "{late}"
        );
        d.shutdown().unwrap();
        e.shutdown().unwrap();
        refused(c.switch(unknown).unwrap_err(), unknown, "not a branch");
        refused(c.free(main).unwrap_err(), main, "live branch");
        let dir = TempDir::new("branches-misuse");
        refused(c.park(main, dir.path()).unwrap_err(), main, "live branch");
        refused(c.unpark(main).unwrap_err(), main, "not parked");
        let b = c.fork(main).unwrap();
        c.park(b, dir.path()).unwrap();
        refused(c.switch(b).unwrap_err(), b, "parked");
        refused(c.fork(b).unwrap_err(), b, "parked");
        // A corrupt part is refused naming it, and the branch stays parked.
        let part = dir.path().join("branch-1/ckpt-00000001/shard-0.rows");
        let mut bytes = std::fs::read(&part).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&part, &bytes).unwrap();
        let e = c.unpark(b).unwrap_err().to_string();
        assert!(e.contains("shard-0.rows"), "{e}");
        assert!(c.branches()[1].parked.is_some());
        c.free(b).unwrap();
        refused(c.switch(b).unwrap_err(), b, "not a branch");
        // Parked again at the same clock once back.
        let b2 = c.fork(main).unwrap();
        for _ in 0..2 {
            c.park(b2, dir.path()).unwrap();
            c.unpark(b2).unwrap();
        }
        // Nothing changed the live rows.
        c.run(add(1)).unwrap();
        assert_eq!(c.snapshot(&t).unwrap(), vec![(0, vec![4])]);
        let counts = c.branch_counts();
        assert_eq!(
            (counts.forks, counts.parks, counts.frees, counts.unparks),
            (2, 3, 1, 2)
        );
        c.shutdown().unwrap();
    });
}

#[test]
fn processes_that_name_different_branches_all_fail_naming_it() {
    within(60, || {
        let results = over_tcp_results(Config::new(1), 2, |c| {
            let t = c.create_table::<i64>("t", 1)?;
            c.run(|w| {
                w.update(&t, 0, &[1])?;
                w.clock()
            })?;
            let b = c.fork(c.live_branch())?;
            let to = if c.rank() == 0 { b } else { c.live_branch() };
            c.switch(to)
        });
        for (rank, r) in results.iter().enumerate() {
            match r {
                Err(Error::Disagreement { field, detail }) => {
                    assert_eq!(field, "branch op's branches", "process {rank}");
                    assert!(detail.contains("rank 0: to branch 1"), "{detail}");
                }
                other => panic!("process {rank}: {other:?}"),
            }
        }
    });
}

/// Worker 1 adds late; worker 0 adds at once, then reads after its CLOCK: under BSP it
/// waits for worker 1's update, under staleness 1 it does not.
fn late_body(w: &mut Worker<'_>, t: &Table<i64>) -> iterstore::Result<i64> {
    if w.id() == 1 {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    w.update(t, 0, &[1])?;
    w.clock()?;
    let mut v = [0];
    w.read(t, 0, &mut v)?;
    w.clock()?;
    Ok(v[0])
}

#[test]
fn a_branch_keeps_its_staleness_and_runs_read_with_it() {
    within(60, || {
        for mode in [Mode::Generic, Mode::Virtual] {
            let mut c = Cluster::start(Config::new(2).with_mode(mode)).unwrap();
            let t = c.create_table_sized::<i64>("t", 1, 1).unwrap();
            if mode == Mode::Virtual {
                c.virtual_iteration(|w| late_body(w, &t)).unwrap();
            }
            // What worker 0 read, and the row after the run.
            let probe = |c: &mut Cluster| {
                let seen = c.run(|w| late_body(w, &t)).unwrap();
                (seen[0], c.snapshot(&t).unwrap()[0].1[0])
            };
            let main = c.live_branch();
            let b = c.fork(main).unwrap();
            c.switch(b).unwrap();
            c.set_staleness(Staleness::Bounded(1)).unwrap();
            assert_eq!(probe(&mut c), (1, 2), "{mode:?}: staleness 1, no wait");
            c.switch(main).unwrap();
            assert_eq!(c.config().staleness, Staleness::BSP);
            assert_eq!(probe(&mut c), (2, 2), "{mode:?}: BSP waited");
            c.switch(b).unwrap();
            assert_eq!(c.config().staleness, Staleness::Bounded(1));
            assert_eq!(probe(&mut c), (3, 4), "{mode:?}: staleness 1 again");
            if mode == Mode::Virtual {
                assert!(c.stats().tape_accesses > 0, "not specialized");
            }
            let e = c
                .set_staleness(Staleness::Unbounded)
                .unwrap_err()
                .to_string();
            assert!(e.contains("cannot become Unbounded"), "{e}");
            c.shutdown().unwrap();
        }
    });
}
