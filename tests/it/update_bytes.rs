//! `Cluster::update_bytes` counts planned rows too: a specialized run's slabs are
//! attributed to the tables of the rows they hold, so a run in virtual mode reports the
//! bytes of its tables as the generic run of the same program does (slightly fewer: a
//! slab's row has no 12-byte key), never zero.

use crate::util::within;
use iterstore::{Cluster, Config, Mode};

const WORKERS: usize = 2;
const CLOCKS: u64 = 3;
/// Rows of "dense", every one updated by every worker at every clock (whole slabs).
const DENSE: u64 = 8;
/// Rows of "sparse", of which a worker updates a few each clock (sparse slabs).
const SPARSE: u64 = 64;

/// Two runs of [`CLOCKS`] clocks (after a virtual iteration in virtual mode); each
/// table's bytes.
fn bytes(mode: Mode) -> Vec<(String, u64)> {
    let mut c = Cluster::start(Config::new(WORKERS).with_shards(2).with_mode(mode)).unwrap();
    // Each table on a shard of its own, so each slab holds one table's rows.
    let dense = c.create_table_on::<f32>("dense", 16, 0..1).unwrap();
    let sparse = c.create_table_on::<f64>("sparse", 4, 1..2).unwrap();
    let body = |w: &mut iterstore::Worker<'_>| {
        for _ in 0..CLOCKS {
            let clock = w.current_clock() % CLOCKS;
            for r in 0..DENSE {
                w.update(&dense, r, &[1.0; 16])?;
            }
            // Worker w's rows w, w + 2, ...: all of them in the virtual iteration (so all
            // are planned), a third of them at each clock of a run.
            let (id, all) = (w.id() as u64, w.is_virtual());
            let rows = (0..SPARSE).filter(|r| r % WORKERS as u64 == id);
            for r in rows.filter(|r| all || (r / 2) % CLOCKS == clock) {
                w.update(&sparse, r, &[1.0; 4])?;
            }
            w.clock()?;
        }
        Ok(())
    };
    if mode == Mode::Virtual {
        c.virtual_iteration(body).unwrap();
    }
    c.run(body).unwrap();
    c.run(body).unwrap();
    let stats = c.stats();
    if mode == Mode::Virtual {
        assert!(
            stats.whole_slabs > 0 && stats.partial_slabs > 0,
            "{stats:?}"
        );
        assert_eq!(stats.unplanned_accesses, 0, "{stats:?}");
    }
    let out = c
        .update_bytes()
        .into_iter()
        .map(|u| (u.table, u.bytes))
        .collect();
    c.shutdown().unwrap();
    out
}

#[test]
fn a_virtual_mode_run_counts_its_slabs_bytes_by_table_as_a_generic_run_counts_rows() {
    within(60, || {
        let (generic, special) = (bytes(Mode::Generic), bytes(Mode::Virtual));
        let names = |b: &[(String, u64)]| b.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>();
        assert_eq!(names(&generic), ["dense", "sparse"]);
        assert_eq!(names(&special), ["dense", "sparse"], "{special:?}");
        let updates = |per_worker_clock: u64| 2 * WORKERS as u64 * CLOCKS * per_worker_clock;
        // Generic: a 12-byte key and the delta per row.
        assert_eq!(generic[0].1, updates(DENSE * (12 + 64)));
        // Virtual: "dense" fills its shard's whole slabs, 64 bytes a row.
        assert_eq!(special[0].1, updates(DENSE * 64), "{special:?}");
        // "sparse": rows of 32 bytes, in sparse slabs with a 4-byte position each, where
        // the generic way sends a 12-byte key.
        let (g, s) = (generic[1].1, special[1].1);
        assert!(s > 0 && s * (12 + 32) == g * (4 + 32), "{s} against {g}");
    });
}
