//! Synthetic ratings from planted low-rank factors (MF input).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::sampling::{zipf_weights, AliasTable};
use super::size_index;
use crate::{Rating, Ratings};

/// Zipf exponent of item popularity.
const ITEM_ZIPF_EXPONENT: f64 = 0.9;
/// Log-normal sigma of per-user activity (how many items a user rates).
const USER_ACTIVITY_SIGMA: f64 = 0.7;
/// Mean of every planted rating before noise.
const MEAN_RATING: f32 = 3.0;
/// Standard deviation of the per-entry spread of planted factors.
const FACTOR_SPREAD: f32 = 0.35;

/// Parameters of [`planted_ratings`].
#[derive(Debug, Clone, PartialEq)]
pub struct RatingsSpec {
    /// Number of users.
    pub num_users: u32,
    /// Number of items.
    pub num_items: u32,
    /// Rank of the planted factors.
    pub rank: usize,
    /// Mean number of ratings per user (each user's count is log-normally spread).
    pub ratings_per_user: u32,
    /// Standard deviation of the Gaussian noise added to each planted rating.
    pub noise_std: f32,
    /// Random seed.
    pub seed: u64,
}

impl RatingsSpec {
    /// The preset for `size` (one of [`super::SIZES`]), with seed 0:
    ///
    /// | size   | users   | items  | rank | per user | ≈ ratings |
    /// |--------|---------|--------|------|----------|-----------|
    /// | tiny   | 200     | 100    | 4    | 20       | 4 K       |
    /// | small  | 2 000   | 1 000  | 8    | 50       | 100 K     |
    /// | medium | 10 000  | 5 000  | 10   | 100      | 1 M       |
    /// | large  | 50 000  | 20 000 | 10   | 100      | 5 M       |
    /// | xlarge | 200 000 | 50 000 | 16   | 100      | 20 M      |
    pub fn preset(size: &str) -> Result<RatingsSpec, String> {
        let (num_users, num_items, rank, ratings_per_user) = match size_index(size)? {
            0 => (200, 100, 4, 20),
            1 => (2_000, 1_000, 8, 50),
            2 => (10_000, 5_000, 10, 100),
            3 => (50_000, 20_000, 10, 100),
            _ => (200_000, 50_000, 16, 100),
        };
        Ok(RatingsSpec {
            num_users,
            num_items,
            rank,
            ratings_per_user,
            noise_std: 0.3,
            seed: 0,
        })
    }

    /// Checks that the spec describes a non-empty, well-defined data set.
    pub fn validate(&self) -> Result<(), String> {
        if self.num_users == 0 || self.num_items == 0 {
            return Err("num_users and num_items must be positive".into());
        }
        if self.rank == 0 {
            return Err("rank must be positive".into());
        }
        if self.ratings_per_user == 0 || self.ratings_per_user > self.num_items {
            return Err(format!(
                "ratings_per_user must be in 1..={} (num_items)",
                self.num_items
            ));
        }
        if !(self.noise_std.is_finite() && self.noise_std >= 0.0) {
            return Err(format!(
                "noise_std {} must be finite and >= 0",
                self.noise_std
            ));
        }
        Ok(())
    }

    /// Generates the ratings; see [`planted_ratings`].
    pub fn generate(&self) -> Ratings {
        planted_ratings(
            self.num_users,
            self.num_items,
            self.rank,
            self.ratings_per_user,
            self.noise_std,
            self.seed,
        )
    }
}

/// Ratings `dot(u_i, v_j) + N(0, noise_std²)` from planted rank-`rank` factors.
///
/// Factor entries are `sqrt(3 / rank) + N(0, 0.35²)`, so planted values have mean 3 and a
/// spread of about ±1 (the matrix is still exactly rank `rank`; values are not clamped).
/// Item popularity is Zipf-skewed (exponent 0.9, over a random permutation of items) and
/// the number of distinct items each user rates is log-normal with mean
/// `ratings_per_user`, capped at half the items. Ratings are grouped by user. Degenerate
/// parameters give an empty or trivial result rather than a panic (a negative or
/// non-finite `noise_std` counts as 0); see [`RatingsSpec::validate`].
pub fn planted_ratings(
    num_users: u32,
    num_items: u32,
    rank: usize,
    ratings_per_user: u32,
    noise_std: f32,
    seed: u64,
) -> Ratings {
    let mut rng = StdRng::seed_from_u64(seed);
    let noise_std = if noise_std.is_finite() {
        noise_std.abs()
    } else {
        0.0
    };
    let base = if rank == 0 {
        0.0
    } else {
        (MEAN_RATING / rank as f32).sqrt()
    };
    let mut factor = |n: u32| -> Vec<f32> {
        (0..n as usize * rank)
            .map(|_| base + FACTOR_SPREAD * rng.sample::<f32, _>(StandardNormal))
            .collect()
    };
    let users = factor(num_users);
    let items = factor(num_items);

    let mut by_popularity: Vec<u32> = (0..num_items).collect();
    by_popularity.shuffle(&mut rng);
    let popularity = AliasTable::new(&zipf_weights(num_items as usize, ITEM_ZIPF_EXPONENT));

    let max_per_user = (num_items / 2).max(1).min(num_items) as f64;
    let mean = f64::from(ratings_per_user.max(1));
    let mu = mean.ln() - USER_ACTIVITY_SIGMA * USER_ACTIVITY_SIGMA / 2.0;

    let mut ratings = Vec::with_capacity(num_users as usize * ratings_per_user as usize);
    let mut seen_by = vec![u32::MAX; num_items as usize];
    for user in 0..num_users {
        if num_items == 0 || ratings_per_user == 0 {
            break;
        }
        let z: f64 = rng.sample(StandardNormal);
        let want = (mu + USER_ACTIVITY_SIGMA * z)
            .exp()
            .round()
            .clamp(1.0, max_per_user) as usize;
        let u = &users[user as usize * rank..(user as usize + 1) * rank];
        let mut got = 0;
        let mut attempts = 0;
        while got < want && attempts < 20 * want + 100 {
            attempts += 1;
            let item = by_popularity[popularity.sample(&mut rng)];
            if seen_by[item as usize] == user {
                continue;
            }
            seen_by[item as usize] = user;
            let v = &items[item as usize * rank..(item as usize + 1) * rank];
            let dot: f32 = u.iter().zip(v).map(|(a, b)| a * b).sum();
            let noise = noise_std * rng.sample::<f32, _>(StandardNormal);
            ratings.push(Rating {
                user,
                item,
                value: dot + noise,
            });
            got += 1;
        }
    }
    Ratings {
        ratings,
        num_users,
        num_items,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_for_a_seed() {
        let spec = RatingsSpec::preset("tiny").unwrap();
        assert_eq!(spec.generate(), spec.generate());
        let other = RatingsSpec {
            seed: 1,
            ..spec.clone()
        };
        assert_ne!(spec.generate(), other.generate());
    }

    #[test]
    fn shape_values_and_skew() {
        let spec = RatingsSpec::preset("small").unwrap();
        let r = spec.generate();
        assert_eq!((r.num_users, r.num_items), (2_000, 1_000));
        let n = r.ratings.len() as f64;
        let expected = f64::from(spec.num_users) * f64::from(spec.ratings_per_user);
        assert!(
            (n / expected - 1.0).abs() < 0.1,
            "{n} ratings, expected ≈ {expected}"
        );

        let mean = r.ratings.iter().map(|x| f64::from(x.value)).sum::<f64>() / n;
        assert!((mean - 3.0).abs() < 0.3, "mean rating {mean}");

        let mut per_item = vec![0u32; r.num_items as usize];
        let mut pairs = std::collections::HashSet::new();
        for x in &r.ratings {
            assert!(x.user < r.num_users && x.item < r.num_items);
            assert!(pairs.insert((x.user, x.item)), "duplicate rating");
            per_item[x.item as usize] += 1;
        }
        let max = *per_item.iter().max().unwrap() as f64;
        let mean_item = n / f64::from(r.num_items);
        assert!(
            max > 10.0 * mean_item,
            "item popularity not skewed: max {max}, mean {mean_item}"
        );
    }

    #[test]
    fn noise_has_the_advertised_std() {
        // The same seed makes the same draws, so the two differ by the noise term alone.
        let quiet = planted_ratings(300, 200, 4, 30, 0.0, 9);
        let noisy = planted_ratings(300, 200, 4, 30, 0.5, 9);
        assert_eq!(quiet.ratings.len(), noisy.ratings.len());
        let diff: f64 = quiet
            .ratings
            .iter()
            .zip(&noisy.ratings)
            .map(|(a, b)| f64::from(a.value - b.value).powi(2))
            .sum::<f64>()
            / quiet.ratings.len() as f64;
        assert!(
            (diff.sqrt() - 0.5).abs() < 0.05,
            "noise std {}",
            diff.sqrt()
        );
    }

    #[test]
    fn degenerate_inputs_do_not_panic() {
        assert!(planted_ratings(0, 0, 0, 0, f32::NAN, 0).ratings.is_empty());
        assert_eq!(planted_ratings(3, 1, 0, 5, -1.0, 0).ratings.len(), 3);
        assert!(RatingsSpec {
            rank: 0,
            ..RatingsSpec::preset("tiny").unwrap()
        }
        .validate()
        .is_err());
    }
}
