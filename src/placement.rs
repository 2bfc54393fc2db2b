//! [`Placement`]: which server shard holds a row. One value, consulted by every layer
//! (the planner, the fetcher, a worker's `CLOCK`, the NUMA model), so that every process
//! of a cluster agrees on it.
//!
//! The default is a **stable hash** ([`stable_hash`], version 1 of the protocol): part of
//! the wire contract, unlike a `std`/Fx hasher, which may change between releases.
//! Per-row overrides (rows placed on the process that uses them most) take precedence;
//! rows without one keep the hash. A table may be **restricted** to a range of shards
//! (`Cluster::create_table_on`): its rows hash over those shards only, and locality
//! placement leaves them there. An **aligned** table (`Cluster::create_table_aligned`)
//! hashes its row index alone over every shard, so row `r` of all aligned tables is on
//! one shard, where server functions combine them; locality placement leaves it too.

use crate::ids::RowKey;
use rustc_hash::FxHashMap;

/// Which shard holds each row: a stable hash, with per-row overrides and per-table shard
/// ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    shards: u32,
    overrides: FxHashMap<RowKey, u32>,
    /// Table id → `(first shard, shards, by row)` its rows hash over; `by row`: the hash
    /// of the row index alone ([`row_hash`]), so that row `r` of every such table is on
    /// one shard (aligned tables).
    restricted: FxHashMap<u32, (u32, u32, bool)>,
}

impl Placement {
    /// Rows spread over `shards` shards by the stable hash, no overrides.
    pub(crate) fn hashed(shards: usize) -> Self {
        Placement {
            shards: shards.max(1) as u32,
            overrides: FxHashMap::default(),
            restricted: FxHashMap::default(),
        }
    }

    /// This placement without its per-row overrides (table ranges kept).
    pub(crate) fn without_overrides(&self) -> Self {
        Placement {
            overrides: FxHashMap::default(),
            ..self.clone()
        }
    }

    /// Puts every row of `table` on the shards `first .. first + count` (by the stable
    /// hash over them).
    pub(crate) fn restrict(&mut self, table: u32, first: u32, count: u32) {
        debug_assert!(count >= 1 && first + count <= self.shards);
        self.restricted.insert(table, (first, count.max(1), false));
    }

    /// Puts row `r` of `table` on the shard of row `r` of every other aligned table: all
    /// shards, by the hash of the row index alone ([`row_hash`]).
    pub(crate) fn align(&mut self, table: u32) {
        self.restricted.insert(table, (0, self.shards, true));
    }

    /// Whether `table` is restricted to a range of shards.
    pub(crate) fn is_restricted(&self, table: u32) -> bool {
        self.restricted.contains_key(&table)
    }

    /// Whether any table is restricted.
    pub(crate) fn has_restrictions(&self) -> bool {
        !self.restricted.is_empty()
    }

    /// Number of shards rows are spread over.
    pub(crate) fn shards(&self) -> usize {
        self.shards as usize
    }

    /// This placement with `key` on shard `shard` instead of where the hash puts it.
    pub(crate) fn set(&mut self, key: RowKey, shard: u32) {
        self.overrides.insert(key, shard);
    }

    /// Rows placed by an override.
    pub(crate) fn overridden(&self) -> usize {
        self.overrides.len()
    }

    /// The overrides, sorted by row.
    pub(crate) fn overrides(&self) -> Vec<(RowKey, u32)> {
        let mut all: Vec<(RowKey, u32)> = self.overrides.iter().map(|(k, s)| (*k, *s)).collect();
        all.sort_unstable();
        all
    }

    /// The shard holding `key`.
    #[inline]
    pub(crate) fn shard_of(&self, key: RowKey) -> u32 {
        if !self.overrides.is_empty() {
            if let Some(&s) = self.overrides.get(&key) {
                return s;
            }
        }
        if !self.restricted.is_empty() {
            if let Some(&(first, count, by_row)) = self.restricted.get(&key.table) {
                let hash = if by_row {
                    row_hash(key.row)
                } else {
                    stable_hash(key)
                };
                return first + (hash % u64::from(count)) as u32;
            }
        }
        (stable_hash(key) % u64::from(self.shards)) as u32
    }
}

/// Locality placement (IterStore's rule): every row of `uses` on the process that
/// accesses it most. `uses` lists, per row, its bytes and each process's accesses, and
/// must be the same list in every process (sorted by key), so that every process computes
/// the same placement. Rows are placed in that order; a row goes to the process with the
/// most accesses, ties to the less loaded one (then the lower rank), and a process whose
/// placed bytes would pass `imbalance` times an even share is skipped for the next best.
/// Within a process a row keeps the stable hash over its `shards_per_process` shards.
pub(crate) fn by_locality(
    hashed: &Placement,
    uses: &[(RowKey, u64, Vec<u64>)],
    shards_per_process: usize,
    imbalance: f64,
) -> Placement {
    let processes = hashed.shards() / shards_per_process.max(1);
    let mut placement = hashed.clone();
    if processes < 2 {
        return placement;
    }
    let total: u64 = uses.iter().map(|(_, bytes, _)| bytes).sum();
    let cap = (total as f64 / processes as f64 * imbalance).ceil() as u64;
    let mut load = vec![0u64; processes];
    for (key, bytes, accesses) in uses {
        if hashed.is_restricted(key.table) {
            continue;
        }
        let mut order: Vec<usize> = (0..processes).collect();
        order.sort_by(|&a, &b| {
            let use_of = |p: usize| accesses.get(p).copied().unwrap_or(0);
            use_of(b)
                .cmp(&use_of(a))
                .then(load[a].cmp(&load[b]))
                .then(a.cmp(&b))
        });
        let home = order
            .iter()
            .copied()
            .find(|&p| load[p] + bytes <= cap)
            .unwrap_or_else(|| (0..processes).min_by_key(|&p| (load[p], p)).unwrap_or(0));
        load[home] += bytes;
        let within = (stable_hash(*key) % shards_per_process.max(1) as u64) as usize;
        let shard = (home * shards_per_process + within) as u32;
        if shard != hashed.shard_of(*key) {
            placement.set(*key, shard);
        }
    }
    placement
}

/// The placement hash (protocol version 1; changing it changes the protocol version): SplitMix64's finalizer of the
/// table id, xor the row, finalized again. Stable across platforms and releases.
#[inline]
pub(crate) fn stable_hash(key: RowKey) -> u64 {
    mix(mix(u64::from(key.table)) ^ key.row)
}

/// The placement hash of an aligned table's row (protocol version 8): `stable_hash` of
/// the row in table `u32::MAX`, which no table has, so it depends on the row alone.
pub(crate) fn row_hash(row: u64) -> u64 {
    stable_hash(RowKey::new(u32::MAX, row))
}

/// SplitMix64's output function (Steele, Lea and Flood, 2014).
#[inline]
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_a_fixed_function() {
        // A wire contract: these values must never change under the same version.
        assert_eq!(stable_hash(RowKey::new(0, 0)), 0xa706_dd2f_4d19_7e6f);
        assert_eq!(
            stable_hash(RowKey::new(3, 12345)),
            stable_hash(RowKey::new(3, 12345))
        );
        assert_ne!(
            stable_hash(RowKey::new(0, 1)),
            stable_hash(RowKey::new(1, 0))
        );
    }

    #[test]
    fn a_restricted_table_stays_on_its_shards_and_locality_leaves_it_there() {
        let mut p = Placement::hashed(6);
        p.restrict(1, 4, 2);
        let mut counts = [0usize; 6];
        for r in 0..600 {
            counts[p.shard_of(RowKey::new(1, r)) as usize] += 1;
        }
        assert_eq!(counts[..4], [0; 4], "{counts:?}");
        assert!(counts[4] > 200 && counts[5] > 200, "{counts:?}");
        // Other tables still spread over every shard.
        assert!((0..600).any(|r| p.shard_of(RowKey::new(0, r)) < 4));
        // Locality placement moves unrestricted rows only.
        let uses = vec![
            (RowKey::new(1, 7), 8, vec![9, 0, 0]),
            (RowKey::new(0, 7), 8, vec![9, 0, 0]),
        ];
        let placed = by_locality(&p, &uses, 2, 2.0);
        assert_eq!(
            placed.shard_of(RowKey::new(1, 7)),
            p.shard_of(RowKey::new(1, 7))
        );
        assert!(placed.shard_of(RowKey::new(0, 7)) < 2, "moved to process 0");
        assert_eq!(placed.without_overrides(), p);
    }

    #[test]
    fn rows_spread_evenly_and_overrides_win() {
        let p = Placement::hashed(4);
        let mut counts = [0usize; 4];
        for r in 0..4000 {
            counts[p.shard_of(RowKey::new(0, r)) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 900), "{counts:?}");
        let mut q = Placement::hashed(4);
        let key = RowKey::new(0, 7);
        let other = (p.shard_of(key) + 1) % 4;
        q.overrides.insert(key, other);
        assert_eq!(q.shard_of(key), other);
        assert_eq!(q.shard_of(RowKey::new(0, 8)), p.shard_of(RowKey::new(0, 8)));
    }

    #[test]
    fn rows_go_where_they_are_used_within_the_allowed_imbalance() {
        let hashed = Placement::hashed(4); // 2 processes x 2 shards
        let key = |r| RowKey::new(0, r);
        // Rows 0-3 used by process 0, rows 4-5 by process 1, row 6 by both equally.
        let mut uses: Vec<(RowKey, u64, Vec<u64>)> =
            (0..4).map(|r| (key(r), 8, vec![5, 1])).collect();
        uses.extend((4..6).map(|r| (key(r), 8, vec![0, 3])));
        uses.push((key(6), 8, vec![2, 2]));
        let p = by_locality(&hashed, &uses, 2, 2.0);
        let home = |r| p.shard_of(key(r)) / 2;
        assert_eq!((0..4).map(home).collect::<Vec<_>>(), vec![0; 4]);
        assert_eq!((4..6).map(home).collect::<Vec<_>>(), vec![1; 2]);
        assert_eq!(home(6), 1, "a tie goes to the less loaded process");
        // With no imbalance allowed, process 0 takes its even share (28 bytes of 56) and
        // its fourth row overflows to process 1.
        let even = by_locality(&hashed, &uses, 2, 1.0);
        let homes: Vec<u32> = (0..7).map(|r| even.shard_of(key(r)) / 2).collect();
        assert_eq!(&homes[..4], &[0, 0, 0, 1], "{homes:?}");
        // One process: nothing moves.
        assert_eq!(
            by_locality(&Placement::hashed(2), &uses, 2, 1.0).overridden(),
            0
        );
    }
}
