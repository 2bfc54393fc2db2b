//! Bit sets by row index (the touched and dirty bits of a worker's rows): one bit, the
//! bits set in a range, and their count.
//!
//! Plain bit arithmetic: this file knows nothing of blocks or rows.

use std::ops::Range;

/// Bit `r` of `bits`.
#[inline(always)]
pub(super) fn bit(bits: &[u64], r: usize) -> bool {
    bits[r / 64] & (1 << (r % 64)) != 0
}

/// How many bits of `bits` are set in `range`.
pub(super) fn count_bits(bits: &[u64], range: Range<usize>) -> usize {
    if range.is_empty() {
        return 0;
    }
    (range.start / 64..=(range.end - 1) / 64)
        .map(|w| (bits[w] & range_mask(&range, w)).count_ones() as usize)
        .sum()
}

/// The positions in `range` of the bits set in `bits`, in order.
pub(super) fn set_bits(bits: &[u64], range: Range<usize>) -> impl Iterator<Item = usize> + '_ {
    (range.start / 64..range.end.div_ceil(64)).flat_map(move |w| {
        // The range's ends masked off the word, then each set bit in turn.
        let mut word = bits[w] & range_mask(&range, w);
        std::iter::from_fn(move || {
            (word != 0).then(|| {
                let bit = word.trailing_zeros() as usize;
                word &= word - 1;
                w * 64 + bit
            })
        })
    })
}

/// The bits of word `w` of a bit set that fall in `range` (`w` overlapping it).
#[inline(always)]
fn range_mask(range: &Range<usize>, w: usize) -> u64 {
    let lo = if w == range.start / 64 {
        !0u64 << (range.start % 64)
    } else {
        !0
    };
    let hi = if w == (range.end - 1) / 64 {
        !0u64 >> (63 - (range.end - 1) % 64)
    } else {
        !0
    };
    lo & hi
}

#[cfg(test)]
mod tests {
    use super::{count_bits, set_bits};

    #[test]
    fn count_bits_counts_the_range_s_bits_only() {
        let bits = [u64::MAX, 0b1011, 1 << 63];
        for start in 0..192 {
            for end in start..=192 {
                let want = set_bits(&bits, start..end).count();
                assert_eq!(count_bits(&bits, start..end), want, "{start}..{end}");
            }
        }
    }

    #[test]
    fn set_bits_are_the_range_s_in_order() {
        let mut bits = vec![0u64; 3];
        for r in [0, 5, 63, 64, 70, 128, 191] {
            bits[r / 64] |= 1 << (r % 64);
        }
        let got = |range: std::ops::Range<usize>| set_bits(&bits, range).collect::<Vec<_>>();
        assert_eq!(got(0..192), [0, 5, 63, 64, 70, 128, 191]);
        assert_eq!(got(5..65), [5, 63, 64]);
        assert_eq!(got(64..64), Vec::<usize>::new());
        assert_eq!(got(71..128), Vec::<usize>::new());
        assert_eq!(got(128..192), [128, 191]);
    }
}
