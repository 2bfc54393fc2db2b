//! [`AlignedBuf`]: an 8-byte-aligned byte buffer, the unit in which rows are stored and sent.
//!
//! Rows of every element type are kept as bytes so that storage, caches and messages are
//! type-erased, and so that whole buffers can go on the wire with no per-element
//! marshalling. The 8-byte alignment makes a zero-copy `&[T]` view valid for every
//! [`Element`] type.

use crate::element::Element;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// An owned, 8-byte-aligned, fixed-length byte buffer.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AlignedBuf {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        AlignedBuf {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        // Copied into fresh capacity rather than over zeros: no pass writes it twice.
        let whole = bytes.len() / 8 * 8;
        let (head, tail) = bytes.split_at(whole);
        let mut words = Vec::with_capacity(bytes.len().div_ceil(8));
        match bytemuck::try_cast_slice::<u8, u64>(head) {
            Ok(aligned) => words.extend_from_slice(aligned),
            Err(_) => words.extend(
                head.chunks_exact(8)
                    .map(bytemuck::pod_read_unaligned::<u64>),
            ),
        }
        if !tail.is_empty() {
            let mut last = [0u8; 8];
            last[..tail.len()].copy_from_slice(tail);
            words.push(u64::from_ne_bytes(last));
        }
        AlignedBuf {
            words,
            len: bytes.len(),
        }
    }

    /// A buffer of `words`, its length their bytes.
    pub(crate) fn from_word_vec(words: Vec<u64>) -> Self {
        AlignedBuf {
            len: words.len() * 8,
            words,
        }
    }

    /// A buffer holding `parts` one after another (`words` of them in all), its length
    /// their bytes; built in fresh capacity, without zeroing it first.
    pub(crate) fn from_words<'a>(words: usize, parts: impl IntoIterator<Item = &'a [u64]>) -> Self {
        let mut out = Vec::with_capacity(words);
        for part in parts {
            out.extend_from_slice(part);
        }
        Self::from_word_vec(out)
    }

    /// A buffer holding a copy of `values`.
    pub fn from_slice<T: Element>(values: &[T]) -> Self {
        Self::from_bytes(bytemuck::cast_slice(values))
    }

    /// The buffer as words (its last one zero-padded).
    #[inline]
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }

    /// The bytes, mutably.
    #[inline]
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut::<u64, u8>(&mut self.words)[..self.len]
    }

    /// A zero-copy view as elements. Panics if the length is not a multiple of
    /// `size_of::<T>()`, which the store never lets happen for a table's rows.
    #[inline]
    pub fn cast<T: Element>(&self) -> &[T] {
        bytemuck::cast_slice(self.as_bytes())
    }

    /// A zero-copy mutable view as elements (same contract as [`cast`](Self::cast)).
    #[inline]
    pub fn cast_mut<T: Element>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.as_bytes_mut())
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

impl Serialize for AlignedBuf {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.as_bytes())
    }
}

impl<'de> Deserialize<'de> for AlignedBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = AlignedBuf;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<AlignedBuf, E> {
                Ok(AlignedBuf::from_bytes(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<AlignedBuf, A::Error> {
                let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(b) = seq.next_element::<u8>()? {
                    bytes.push(b);
                }
                Ok(AlignedBuf::from_bytes(&bytes))
            }
        }
        d.deserialize_bytes(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::ElemType;

    #[test]
    fn add_bytes_aligned_and_unaligned() {
        let mut dst = AlignedBuf::from_slice(&[1.0f32, 2.0, 3.0]);
        let src = AlignedBuf::from_slice(&[0.5f32, 0.5, 0.5]);
        ElemType::F32.add(dst.as_bytes_mut(), src.as_bytes());
        assert_eq!(dst.cast::<f32>(), &[1.5, 2.5, 3.5]);
        let mut unaligned = [0u8; 13];
        unaligned[1..].copy_from_slice(bytemuck::cast_slice::<i32, u8>(&[7, -1, 2]));
        let mut ints = AlignedBuf::from_slice(&[1i32, 1, 1]);
        ElemType::I32.add(ints.as_bytes_mut(), &unaligned[1..]);
        assert_eq!(ints.cast::<i32>(), &[8, 0, 3]);
    }

    #[test]
    fn views_round_trip() {
        let mut b = AlignedBuf::from_slice(&[1.5f64, -2.0]);
        assert_eq!(b.len(), 16);
        b.cast_mut::<f64>()[1] = 4.0;
        assert_eq!(b.cast::<f64>(), &[1.5, 4.0]);
        let odd = AlignedBuf::from_slice(&[1i32, 2, 3]);
        assert_eq!(odd.len(), 12);
        assert_eq!(odd.cast::<i32>(), &[1, 2, 3]);
    }

    #[test]
    fn copies_are_whole_from_aligned_unaligned_and_word_sources() {
        let bytes: Vec<u8> = (1..=21).collect();
        for start in [0, 1, 3] {
            let src = &bytes[start..];
            let buf = AlignedBuf::from_bytes(src);
            assert_eq!(buf.as_bytes(), src);
            assert_eq!(buf, {
                let mut z = AlignedBuf::zeroed(src.len());
                z.as_bytes_mut().copy_from_slice(src);
                z
            });
        }
        let buf = AlignedBuf::from_words(3, [&[1u64, 2][..], &[3]]);
        assert_eq!(buf.cast::<i64>(), &[1, 2, 3]);
        assert_eq!(buf.len(), 24);
    }
}
