//! [`Placement`]: which server shard holds a row. One value, consulted by every layer
//! (the planner, the fetcher, a worker's `CLOCK`, the NUMA model), so that every process
//! of a cluster agrees on it.
//!
//! The default is a **stable hash** ([`stable_hash`], version 1 of the protocol): part of
//! the wire contract, unlike a `std`/Fx hasher, which may change between releases.
//! Per-row overrides (rows placed on the process that uses them most) take precedence;
//! rows without one keep the hash.

use crate::RowKey;
use rustc_hash::FxHashMap;

/// Which shard holds each row: a stable hash, with per-row overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placement {
    shards: u32,
    overrides: FxHashMap<RowKey, u32>,
}

impl Placement {
    /// Rows spread over `shards` shards by the stable hash, no overrides.
    pub(crate) fn hashed(shards: usize) -> Self {
        Placement {
            shards: shards.max(1) as u32,
            overrides: FxHashMap::default(),
        }
    }

    /// Number of shards rows are spread over.
    pub(crate) fn shards(&self) -> usize {
        self.shards as usize
    }

    /// The shard holding `key`.
    #[inline]
    pub(crate) fn shard_of(&self, key: RowKey) -> u32 {
        if !self.overrides.is_empty() {
            if let Some(&s) = self.overrides.get(&key) {
                return s;
            }
        }
        (stable_hash(key) % u64::from(self.shards)) as u32
    }
}

/// The placement hash (protocol version 1; changing it changes the protocol version): SplitMix64's finalizer of the
/// table id, xor the row, finalized again. Stable across platforms and releases.
#[inline]
pub(crate) fn stable_hash(key: RowKey) -> u64 {
    mix(mix(u64::from(key.table)) ^ key.row)
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
}
