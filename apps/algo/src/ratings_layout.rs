//! How MF's training ratings are split over the workers and, within a worker, over the
//! mini-batches of an iteration (one CLOCK each).
//!
//! - [`RatingsPartition::Ratings`] (the default): worker `w` takes the contiguous range
//!   [`partition`]`(n, W, w)` of the ratings in their given order, cut into `C` equal
//!   mini-batches ([`super::mf::mini_batch`]). Every worker touches most user and item
//!   rows in every mini-batch.
//! - [`RatingsPartition::Strata`]: the stratified layout of distributed SGD (DSGD, Gemulla
//!   et al., KDD'11). Items are cut into `W` ranges of about equal rating counts and users
//!   into `C` strata of about equal rating counts; worker `w` holds the ratings of its
//!   item range, and its mini-batch `c` those of them whose user is in stratum
//!   `(c + w) mod C`, in their given order. A worker's item rows are its own (no other
//!   worker touches them), and in any one clock the workers touch different users when
//!   `W ≤ C`, so a user row travels once per clock it is used instead of every worker
//!   using every row every clock.
//!
//! Both depend only on the ratings, `W` and `C`, so `P` processes of `W/P` workers lay
//! the data out as one process of `W` workers does.

use std::borrow::Cow;

use super::partition;
use iterstore_data::Rating;

/// How the ratings are split (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RatingsPartition {
    /// Contiguous ranges of the ratings in their given order.
    #[default]
    Ratings,
    /// Items split over the workers, users into strata rotated over the clocks.
    Strata,
}

impl RatingsPartition {
    /// The name the CLI and the run report use.
    pub fn name(self) -> &'static str {
        match self {
            RatingsPartition::Ratings => "ratings",
            RatingsPartition::Strata => "strata",
        }
    }
}

/// The ratings of every worker, cut into its mini-batches.
#[derive(Debug, Clone)]
pub struct RatingsLayout<'a> {
    ratings: Cow<'a, [Rating]>,
    /// Per worker: `clocks + 1` increasing offsets into `ratings`.
    bounds: Vec<Vec<usize>>,
}

impl<'a> RatingsLayout<'a> {
    /// Lays out `ratings` (user and item ids below `users` and `items`) for `workers`
    /// workers making `clocks` mini-batches each.
    ///
    /// # Panics
    /// If `workers` or `clocks` is 0 or a rating's id is out of range.
    pub fn new(
        ratings: &'a [Rating],
        how: RatingsPartition,
        (users, items): (u32, u32),
        workers: usize,
        clocks: usize,
    ) -> Self {
        assert!(
            workers > 0 && clocks > 0,
            "ratings layout: no workers or clocks"
        );
        match how {
            RatingsPartition::Ratings => {
                let bounds = (0..workers)
                    .map(|w| {
                        let mine = partition(ratings.len(), workers, w);
                        let len = mine.len();
                        (0..=clocks)
                            .map(|c| {
                                mine.start
                                    + if c == clocks {
                                        len
                                    } else {
                                        partition(len, clocks, c).start
                                    }
                            })
                            .collect()
                    })
                    .collect();
                Self {
                    ratings: Cow::Borrowed(ratings),
                    bounds,
                }
            }
            RatingsPartition::Strata => {
                let item_range = cut_by_count(ratings.iter().map(|r| r.item), items, workers);
                let user_stratum = cut_by_count(ratings.iter().map(|r| r.user), users, clocks);
                let batch_of = |r: &Rating| {
                    let w = item_range[r.item as usize] as usize;
                    let c = (user_stratum[r.user as usize] as usize + clocks - w % clocks) % clocks;
                    w * clocks + c
                };
                // A stable counting sort by (worker, mini-batch).
                let mut start = vec![0usize; workers * clocks + 1];
                for r in ratings {
                    start[batch_of(r) + 1] += 1;
                }
                for i in 0..workers * clocks {
                    start[i + 1] += start[i];
                }
                let mut fill = start.clone();
                let mut sorted = ratings.to_vec();
                for r in ratings {
                    let b = batch_of(r);
                    sorted[fill[b]] = *r;
                    fill[b] += 1;
                }
                let bounds = (0..workers)
                    .map(|w| start[w * clocks..=(w + 1) * clocks].to_vec())
                    .collect();
                Self {
                    ratings: Cow::Owned(sorted),
                    bounds,
                }
            }
        }
    }

    /// Worker `w`'s mini-batch `c`.
    pub fn batch(&self, w: usize, c: usize) -> &[Rating] {
        &self.ratings[self.bounds[w][c]..self.bounds[w][c + 1]]
    }

    /// All of worker `w`'s ratings, mini-batch after mini-batch.
    pub fn of(&self, w: usize) -> &[Rating] {
        let b = &self.bounds[w];
        &self.ratings[b[0]..b[b.len() - 1]]
    }
}

/// Cuts ids `0..ids` into `parts` contiguous ranges of about equal numbers of occurrences
/// in `occurrences`; returns each id's range.
fn cut_by_count(occurrences: impl Iterator<Item = u32>, ids: u32, parts: usize) -> Vec<u32> {
    let mut count = vec![0usize; ids as usize];
    let mut total = 0usize;
    for id in occurrences {
        count[id as usize] += 1;
        total += 1;
    }
    let mut seen = 0usize;
    count
        .iter()
        .map(|&c| {
            // The range holding this id's middle occurrence.
            let mid = seen + c / 2;
            seen += c;
            ((mid * parts) / total.max(1)).min(parts - 1) as u32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ratings(pairs: &[(u32, u32)]) -> Vec<Rating> {
        pairs
            .iter()
            .map(|&(user, item)| Rating {
                user,
                item,
                value: 1.0,
            })
            .collect()
    }

    #[test]
    fn ranges_match_the_mini_batches_of_a_contiguous_partition() {
        let all = ratings(&(0..10).map(|i| (i, i)).collect::<Vec<_>>());
        let l = RatingsLayout::new(&all, RatingsPartition::Ratings, (10, 10), 2, 3);
        for w in 0..2 {
            let mine = &all[partition(10, 2, w)];
            assert_eq!(l.of(w), mine);
            for c in 0..3 {
                assert_eq!(l.batch(w, c), super::super::mf::mini_batch(mine, 3, c));
            }
        }
    }

    #[test]
    fn strata_give_each_worker_its_items_and_rotate_users() {
        // 4 users x 4 items, every pair rated once, in a scrambled order.
        let mut pairs: Vec<(u32, u32)> = (0..16).map(|i| (i % 4, i / 4)).collect();
        pairs.reverse();
        let all = ratings(&pairs);
        let l = RatingsLayout::new(&all, RatingsPartition::Strata, (4, 4), 2, 2);
        let mut seen = 0;
        for w in 0..2 {
            for r in l.of(w) {
                assert_eq!(
                    r.item as usize / 2,
                    w,
                    "worker {w} holds items of its range"
                );
            }
            for c in 0..2 {
                let batch = l.batch(w, c);
                seen += batch.len();
                // Users in stratum (c + w) mod 2: users {0,1} or {2,3}.
                for r in batch {
                    assert_eq!(r.user as usize / 2, (c + w) % 2, "worker {w} batch {c}");
                }
                // Given order kept within a batch.
                let pos: Vec<usize> = batch
                    .iter()
                    .map(|r| pairs.iter().position(|&p| p == (r.user, r.item)).unwrap())
                    .collect();
                assert!(pos.windows(2).all(|p| p[0] < p[1]), "{pos:?}");
            }
        }
        assert_eq!(seen, 16);
        // In each clock the two workers use different users.
        for c in 0..2 {
            let users = |w| l.batch(w, c).iter().map(|r| r.user / 2).next();
            assert_ne!(users(0), users(1));
        }
    }

    #[test]
    fn cuts_balance_occurrences() {
        // Id 0 is half of all occurrences.
        let occ = [0, 0, 0, 0, 1, 2, 3, 3];
        assert_eq!(cut_by_count(occ.into_iter(), 4, 2), [0, 1, 1, 1]);
        assert_eq!(cut_by_count(std::iter::empty(), 3, 2), [0, 0, 0]);
    }
}
