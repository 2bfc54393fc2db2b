//! Element types a table can hold, and the byte-level aggregation (`+`) the store applies.
//!
//! Rows travel and live as aligned byte buffers ([`AlignedBuf`]); the element type of a
//! table decides how two such buffers are added. This module knows nothing about tables,
//! clocks or the network.
//!
//! [`AlignedBuf`]: crate::buf::AlignedBuf

use serde::{Deserialize, Serialize};
use std::fmt;

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

/// The runtime tag of an element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ElemType {
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `i32` (wrapping addition)
    I32,
    /// `i64` (wrapping addition)
    I64,
}

impl ElemType {
    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F64 | ElemType::I64 => 8,
        }
    }

    /// Whether addition of this type is exact, hence associative (wrapping integers), so
    /// that adding updates one by one gives the same bits as adding their sum.
    pub const fn exact(self) -> bool {
        matches!(self, ElemType::I32 | ElemType::I64)
    }

    /// The Rust name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
        }
    }

    /// Adds `src` into `dst` element-wise, both whole 8-byte words of elements of this
    /// type (padding included, which must be zero in `src` or hold elements).
    #[inline]
    pub(crate) fn add_words(self, dst: &mut [u64], src: &[u64]) {
        match self {
            ElemType::F32 => add_words_as::<f32>(dst, src),
            ElemType::F64 => add_words_as::<f64>(dst, src),
            ElemType::I32 => add_words_as::<i32>(dst, src),
            ElemType::I64 => add_words_as::<i64>(dst, src),
        }
    }

    /// Adds `src` into `dst` element-wise. Both must hold the same whole number of
    /// elements of this type.
    #[inline]
    pub(crate) fn add(self, dst: &mut [u8], src: &[u8]) {
        match self {
            ElemType::F32 => add_as::<f32>(dst, src),
            ElemType::F64 => add_as::<f64>(dst, src),
            ElemType::I32 => add_as::<i32>(dst, src),
            ElemType::I64 => add_as::<i64>(dst, src),
        }
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn add_words_as<T: Element>(dst: &mut [u64], src: &[u64]) {
    // Words are aligned for every element type and hold a whole number of them.
    T::add_slice(bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src));
}

fn add_as<T: Element>(dst: &mut [u8], src: &[u8]) {
    let dst: &mut [T] = bytemuck::cast_slice_mut(dst);
    match bytemuck::try_cast_slice::<u8, T>(src) {
        Ok(src) => T::add_slice(dst, src),
        // Unaligned source (e.g. straight off the wire): read element by element.
        Err(_) => {
            for (d, chunk) in dst.iter_mut().zip(src.chunks_exact(T::TYPE.size())) {
                *d = d.add(bytemuck::pod_read_unaligned(chunk));
            }
        }
    }
}

/// A plain-old-data element type whose update aggregation is `+`.
///
/// Implemented for `f32`, `f64`, `i32` and `i64` (integers add with wrapping). Sealed.
pub trait Element:
    bytemuck::Pod + Default + PartialEq + fmt::Debug + Send + Sync + 'static + sealed::Sealed
{
    /// The runtime tag of this type.
    const TYPE: ElemType;

    /// `self + other` with the store's aggregation semantics.
    fn add(self, other: Self) -> Self;

    /// Adds `src` into `dst` element-wise (lengths must match).
    #[doc(hidden)] // the store's own row arithmetic, not part of the API
    #[inline]
    fn add_slice(dst: &mut [Self], src: &[Self]) {
        debug_assert_eq!(dst.len(), src.len());
        // Fixed-size lanes, so the compiler emits vector adds.
        let mut d = dst.chunks_exact_mut(LANES);
        let mut s = src.chunks_exact(LANES);
        for (d, s) in (&mut d).zip(&mut s) {
            for k in 0..LANES {
                d[k] = d[k].add(s[k]);
            }
        }
        for (d, s) in d.into_remainder().iter_mut().zip(s.remainder()) {
            *d = d.add(*s);
        }
    }

    /// Copies `src` into `dst` (lengths must match) in the pieces [`sum_into`] writes:
    /// whole quads, then single elements. A row read out of the store is read again at
    /// once by the application, in 16-byte or element loads; memcpy's overlapping wide
    /// moves would leave loads that span two stores, which the CPU cannot forward from
    /// its store buffer (a stall of a dozen cycles each), while these never do.
    ///
    /// [`sum_into`]: Self::sum_into
    #[doc(hidden)] // the store's own row arithmetic, not part of the API
    #[inline]
    fn copy_row(dst: &mut [Self], src: &[Self]) {
        debug_assert_eq!(dst.len(), src.len());
        let n = dst.len().min(src.len());
        let (dq, dr) = dst[..n].as_chunks_mut::<QUAD>();
        let (sq, sr) = src[..n].as_chunks::<QUAD>();
        for (d, s) in dq.iter_mut().zip(sq) {
            *d = *s;
        }
        for (d, s) in dr.iter_mut().zip(sr) {
            *d = *s;
        }
    }

    /// Writes `a + b` into `dst` element-wise (lengths must match): the same additions
    /// as copying `a` into `dst` and then [`add_slice`](Self::add_slice) of `b`. Written
    /// in the pieces of [`copy_row`](Self::copy_row) (whole quads, then single elements,
    /// never overlapping), for the same reason: the application reads the row at once.
    #[doc(hidden)] // the store's own row arithmetic, not part of the API
    #[inline]
    fn sum_into(dst: &mut [Self], a: &[Self], b: &[Self]) {
        debug_assert!(dst.len() == a.len() && a.len() == b.len());
        let n = dst.len().min(a.len()).min(b.len());
        let (dst, a, b) = (&mut dst[..n], &a[..n], &b[..n]);
        let (dq, dr) = dst.as_chunks_mut::<QUAD>();
        let ((aq, ar), (bq, br)) = (a.as_chunks::<QUAD>(), b.as_chunks::<QUAD>());
        for ((d, x), y) in dq.iter_mut().zip(aq).zip(bq) {
            for k in 0..QUAD {
                d[k] = x[k].add(y[k]);
            }
        }
        for ((d, x), y) in dr.iter_mut().zip(ar).zip(br) {
            *d = x.add(*y);
        }
    }
}

/// Elements [`Element::copy_row`] and [`Element::sum_into`] move together: one 16-byte
/// vector of `f32`s (the widest load an application's loop over `f32`s typically makes
/// without AVX).
const QUAD: usize = 4;

/// Elements handled together by the slice additions.
const LANES: usize = 8;

impl Element for f32 {
    const TYPE: ElemType = ElemType::F32;
    #[inline]
    fn add(self, other: Self) -> Self {
        self + other
    }
}

impl Element for f64 {
    const TYPE: ElemType = ElemType::F64;
    #[inline]
    fn add(self, other: Self) -> Self {
        self + other
    }
}

impl Element for i32 {
    const TYPE: ElemType = ElemType::I32;
    #[inline]
    fn add(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

impl Element for i64 {
    const TYPE: ElemType = ElemType::I64;
    #[inline]
    fn add(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sum_into` and `copy_row` of every length around the quads' (whole quads, a tail,
    /// and rows shorter than a quad) write each element's own value and nothing else.
    #[test]
    fn sum_into_and_copy_row_write_every_element_at_every_length() {
        for n in 0..=3 * LANES + 1 {
            let src: Vec<f64> = (0..n).map(|i| -(i as f64) - 0.25).collect();
            let mut copy = vec![f64::NAN; n];
            f64::copy_row(&mut copy, &src);
            assert_eq!(copy, src, "copy_row, length {n}");
            let signs: Vec<f32> = (0..n)
                .map(|i| if i % 2 == 0 { -0.0 } else { 0.0 })
                .collect();
            let mut zeros = vec![1.0f32; n];
            f32::copy_row(&mut zeros, &signs);
            assert!(zeros
                .iter()
                .zip(&signs)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
            let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
            let b: Vec<f32> = (0..n).map(|i| 100.0 - i as f32).collect();
            let mut dst = vec![f32::NAN; n];
            f32::sum_into(&mut dst, &a, &b);
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            assert_eq!(dst, want, "length {n}");
            let (x, y): (Vec<i64>, Vec<i64>) = (0..n as i64).map(|i| (i, i64::MAX - i)).unzip();
            let mut d = vec![0i64; n];
            i64::sum_into(&mut d, &x, &y);
            assert!(d.iter().all(|&v| v == i64::MAX), "length {n}");
        }
    }

    #[test]
    fn integer_addition_wraps() {
        assert_eq!(i32::MAX.add(1), i32::MIN);
        assert_eq!(ElemType::I64.size(), 8);
    }
}
