//! Sampling building blocks shared by the generators: Zipf-shaped weights and an alias
//! table for O(1) draws from a fixed discrete distribution.

use rand::Rng;

/// Weights `1 / (rank + 1)^exponent` for ranks `0..n` (unnormalised, largest first).
pub(crate) fn zipf_weights(n: usize, exponent: f64) -> Vec<f64> {
    (0..n).map(|r| ((r + 1) as f64).powf(-exponent)).collect()
}

/// Walker/Vose alias table over indices `0..len` with probabilities proportional to the
/// weights it was built from.
#[derive(Debug, Clone)]
pub(crate) struct AliasTable {
    /// Probability of keeping column `i` rather than jumping to `alias[i]`.
    keep: Vec<f64>,
    alias: Vec<u32>,
}

impl AliasTable {
    /// Builds the table. Weights must be finite and non-negative with a positive sum, and
    /// there must be at most `u32::MAX` of them; otherwise every index is equally likely.
    pub(crate) fn new(weights: &[f64]) -> AliasTable {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let usable = n > 0
            && n <= u32::MAX as usize
            && total.is_finite()
            && total > 0.0
            && weights.iter().all(|w| w.is_finite() && *w >= 0.0);
        let mut keep: Vec<f64> = if usable {
            weights.iter().map(|w| w * n as f64 / total).collect()
        } else {
            vec![1.0; n]
        };
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| keep[i as usize] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s as usize] = l;
            keep[l as usize] -= 1.0 - keep[s as usize];
            if keep[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers are 1 up to rounding.
        for i in small.into_iter().chain(large) {
            keep[i as usize] = 1.0;
        }
        AliasTable { keep, alias }
    }

    /// Draws an index. The table must not be empty.
    pub(crate) fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let i = rng.gen_range(0..self.keep.len());
        if rng.gen::<f64>() < self.keep[i] {
            i
        } else {
            self.alias[i] as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn alias_matches_weights() {
        let weights = [1.0, 2.0, 0.0, 5.0];
        let table = AliasTable::new(&weights);
        let mut rng = StdRng::seed_from_u64(3);
        let mut counts = [0usize; 4];
        let draws = 200_000;
        for _ in 0..draws {
            counts[table.sample(&mut rng)] += 1;
        }
        assert_eq!(counts[2], 0);
        for (c, w) in counts.iter().zip(weights) {
            let expected = w / 8.0;
            assert!(
                (*c as f64 / draws as f64 - expected).abs() < 0.01,
                "{counts:?}"
            );
        }
    }

    #[test]
    fn degenerate_weights_fall_back_to_uniform() {
        let table = AliasTable::new(&[0.0, 0.0]);
        let mut rng = StdRng::seed_from_u64(1);
        let hits = (0..1000).filter(|_| table.sample(&mut rng) == 0).count();
        assert!((300..700).contains(&hits));
    }

    #[test]
    fn zipf_weights_decrease() {
        let w = zipf_weights(5, 1.0);
        assert_eq!(w[0], 1.0);
        assert!(w.windows(2).all(|p| p[0] > p[1]));
    }
}
