//! Seeded train/test splitting of ratings. Knows nothing of where the ratings came from.

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::Ratings;

/// Splits `r` into `(train, test)`, putting `round(test_fraction × len)` ratings chosen
/// uniformly at random (deterministically for `seed`) into `test` and the rest into
/// `train`. Both halves keep `r`'s order, `num_users` and `num_items`.
///
/// `test_fraction` is clamped to `0.0..=1.0`; NaN counts as `0.0`.
pub fn split_ratings(r: &Ratings, test_fraction: f64, seed: u64) -> (Ratings, Ratings) {
    let n = r.ratings.len();
    let fraction = if test_fraction.is_nan() {
        0.0
    } else {
        test_fraction.clamp(0.0, 1.0)
    };
    let num_test = ((n as f64) * fraction).round() as usize;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut in_test = vec![false; n];
    for i in rand::seq::index::sample(&mut rng, n, num_test.min(n)) {
        in_test[i] = true;
    }
    let empty = || Ratings {
        ratings: Vec::new(),
        num_users: r.num_users,
        num_items: r.num_items,
    };
    let (mut train, mut test) = (empty(), empty());
    train.ratings.reserve(n - num_test);
    test.ratings.reserve(num_test);
    for (rating, &is_test) in r.ratings.iter().zip(&in_test) {
        if is_test {
            test.ratings.push(*rating);
        } else {
            train.ratings.push(*rating);
        }
    }
    (train, test)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rating;

    fn ratings(n: u32) -> Ratings {
        Ratings {
            ratings: (0..n)
                .map(|i| Rating {
                    user: i % 7,
                    item: i % 5,
                    value: i as f32,
                })
                .collect(),
            num_users: 7,
            num_items: 5,
        }
    }

    #[test]
    fn sizes_order_and_partition() {
        let r = ratings(1000);
        let (train, test) = split_ratings(&r, 0.2, 42);
        assert_eq!((train.ratings.len(), test.ratings.len()), (800, 200));
        assert_eq!((test.num_users, test.num_items), (7, 5));
        assert_eq!((train.num_users, train.num_items), (7, 5));
        let mut all: Vec<f32> = train
            .ratings
            .iter()
            .chain(&test.ratings)
            .map(|x| x.value)
            .collect();
        assert!(train.ratings.windows(2).all(|w| w[0].value < w[1].value));
        all.sort_by(f32::total_cmp);
        assert_eq!(all, r.ratings.iter().map(|x| x.value).collect::<Vec<_>>());
    }

    #[test]
    fn deterministic_for_a_seed_and_different_across_seeds() {
        let r = ratings(500);
        assert_eq!(split_ratings(&r, 0.3, 7), split_ratings(&r, 0.3, 7));
        assert_ne!(split_ratings(&r, 0.3, 7).1, split_ratings(&r, 0.3, 8).1);
    }

    #[test]
    fn out_of_range_fractions_are_clamped() {
        let r = ratings(10);
        assert_eq!(split_ratings(&r, -1.0, 1).1.ratings.len(), 0);
        assert_eq!(split_ratings(&r, 2.0, 1).1.ratings.len(), 10);
        assert_eq!(split_ratings(&r, f64::NAN, 1).1.ratings.len(), 0);
    }
}
