//! The arithmetic of a rank-k update ([`Worker::update_outer`](crate::Worker::update_outer)),
//! shared by the shard that multiplies factors out and the worker that does so itself
//! when the rows are smaller than their factors: row `i` of `n` gets
//! `Σ_s left[s · n + i] · right[s · width ..][..width]`, summed in `s` order with a
//! multiply then an add (no fused multiply-add), so both ends compute the same bits.

use crate::buf::AlignedBuf;
use crate::element::{ElemType, Element};
use crate::rule::Real;

/// Every row's delta of `n` rows of `width` elements of type `elem` from the factors
/// (`left` of `k × n` elements, `right` of `k × width`, whose lengths the caller checked);
/// `None` for a type that is not a float.
pub(crate) fn multiply_out(
    elem: ElemType,
    n: usize,
    width: usize,
    left: &AlignedBuf,
    right: &AlignedBuf,
) -> Option<Vec<AlignedBuf>> {
    match elem {
        ElemType::F32 => Some(rows::<f32>(n, width, left.cast(), right.cast())),
        ElemType::F64 => Some(rows::<f64>(n, width, left.cast(), right.cast())),
        _ => None,
    }
}

fn rows<T: Element + Real>(n: usize, width: usize, left: &[T], right: &[T]) -> Vec<AlignedBuf> {
    let k = left.len().checked_div(n).unwrap_or(0);
    let mut delta = vec![T::default(); width];
    (0..n)
        .map(|i| {
            delta.fill(T::default());
            for s in 0..k {
                let l = left[s * n + i];
                for (d, &r) in delta.iter_mut().zip(&right[s * width..(s + 1) * width]) {
                    *d = *d + l * r;
                }
            }
            AlignedBuf::from_slice(&delta)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sums_of_outer_products_in_order() {
        // k = 2, n = 2, width 3: row 0 = 1·[1,2,3] + 2·[0,1,0], row 1 = 3·[1,2,3] + 4·[0,1,0].
        let left = AlignedBuf::from_slice(&[1.0f32, 3.0, 2.0, 4.0]);
        let right = AlignedBuf::from_slice(&[1.0f32, 2.0, 3.0, 0.0, 1.0, 0.0]);
        let rows = multiply_out(ElemType::F32, 2, 3, &left, &right).unwrap();
        assert_eq!(rows[0].cast::<f32>(), [1.0, 4.0, 3.0]);
        assert_eq!(rows[1].cast::<f32>(), [3.0, 10.0, 9.0]);
        let ints = AlignedBuf::from_slice(&[1i64]);
        assert!(multiply_out(ElemType::I64, 1, 1, &ints, &ints).is_none());
    }
}
