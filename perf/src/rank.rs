//! Comparing rankings: Spearman's rank correlation ([`spearman`]) and the ranks it is
//! computed from ([`ranks`]), used to check the model's ordering of configurations against a
//! measured one (the paper's Table 1, `perf/tests/perf/paper.rs`; `iterstore plan --evaluate`).

/// The 1-based ranks of `values`, smallest first; tied values share their average rank.
pub fn ranks(values: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut r = vec![0.0; values.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && values[idx[j + 1]] == values[idx[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &idx[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of `a` and `b` (the Pearson correlation of their
/// [`ranks`]): 1 when they order the items alike, −1 when exactly opposite, 0 when either
/// is constant. Panics if the lengths differ.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "two rankings of the same items");
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let (mut cov, mut va, mut vb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - mean) * (y - mean);
        va += (x - mean) * (x - mean);
        vb += (y - mean) * (y - mean);
    }
    if va == 0.0 || vb == 0.0 {
        return 0.0;
    }
    cov / (va * vb).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_order_is_1_the_reverse_minus_1_and_ties_share_ranks() {
        assert_eq!(ranks(&[3.0, 1.0, 3.0]), [2.5, 1.0, 2.5]);
        assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&[1.0, 1.0], &[1.0, 2.0]), 0.0);
        // One adjacent swap among 8: 1 - 6 * 2 / (8 * 63).
        let swapped = [1.0, 2.0, 4.0, 3.0, 5.0, 6.0, 7.0, 8.0];
        let ordered: Vec<f64> = (1..=8).map(f64::from).collect();
        assert!((spearman(&swapped, &ordered) - (1.0 - 12.0 / 504.0)).abs() < 1e-12);
    }
}
