//! Framing of the byte stream between two authenticated processes.
//!
//! Every frame is `[u32 LE body length][u8 kind]` (the header), a 16-byte tag of the
//! header, then, if the body is not empty, the body and its 16-byte tag: the length counts
//! the body only. Tags and the body's encryption are [`super::seal`]'s: encoding here
//! leaves the tags zeroed for the connection's [`Sealer`](super::seal::Sealer) to fill in
//! order, and the decoder opens each frame with the connection's
//! [`Opener`] — the header before its body is waited for or
//! allocated, so a forged length is an integrity error at once. Kinds are [`FrameKind::Data`] (the body is the bincode 2
//! encoding of one message, `standard()` configuration with fixed-width integers),
//! [`FrameKind::Heartbeat`] and [`FrameKind::Bye`] (graceful close); the two control kinds
//! have an empty body.
//!
//! [`FrameDecoder`] turns arbitrary chunks of bytes (a frame may be split anywhere) into
//! complete, opened frames. The length prefix is checked against the cap *before* anything is
//! allocated for the body, so a hostile prefix (`u32::MAX`) is an error, never an
//! allocation. [`decode_data`] bounds what bincode may claim (a byte string's length, say)
//! by a limit derived from the frame's own length, so the body of a frame cannot make the
//! decoder allocate more than a small multiple of the bytes it actually received.
//!
//! Bad input is an error value ([`FrameError`]); nothing here panics on it.

use super::seal::{IntegrityError, Opener, TAG_LEN};
use bincode::config::{Configuration, Fixint, LittleEndian, NoLimit};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Length of the frame header: the `u32` body length and the kind byte.
pub(crate) const HEADER_LEN: usize = 5;

/// Length of the header on the wire: the header and its tag (a whole control frame).
pub(crate) const WIRE_HEADER_LEN: usize = HEADER_LEN + TAG_LEN;

/// The largest `max_frame` a [`super::NetConfig`] may ask for (1 GiB): it keeps every
/// length representable in the `u32` prefix and bounds the decoding limits of
/// [`decode_data`].
pub(crate) const MAX_FRAME_LIMIT: usize = 1 << 30;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FrameKind {
    /// One message, bincode-encoded.
    Data = 1,
    /// "Still here": sent on an idle connection every heartbeat interval. Empty body.
    Heartbeat = 2,
    /// Graceful close: the sender sends nothing after it. Empty body.
    Bye = 3,
}

impl FrameKind {
    /// The kind a header byte names, if any.
    fn from_byte(byte: u8) -> Option<FrameKind> {
        match byte {
            1 => Some(FrameKind::Data),
            2 => Some(FrameKind::Heartbeat),
            3 => Some(FrameKind::Bye),
            _ => None,
        }
    }
}

/// One complete frame, as the decoder yields it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// What the frame carries.
    pub(crate) kind: FrameKind,
    /// The body (empty for control frames).
    pub(crate) body: Vec<u8>,
}

/// A frame that cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FrameError {
    /// The body is longer than the cap (`max_frame`).
    #[error("frame body of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The body length (announced or encoded).
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The kind byte names no frame kind.
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    /// A heartbeat or bye frame with a body.
    #[error("{kind:?} frame with a {len}-byte body (control frames are empty)")]
    NonEmptyControl {
        /// The control kind.
        kind: FrameKind,
        /// The announced body length.
        len: usize,
    },
    /// The message could not be encoded.
    #[error("cannot encode the message: {0}")]
    Encode(String),
    /// The body is not the encoding of a message.
    #[error("cannot decode the message: {0}")]
    Decode(String),
    /// A frame failed its integrity check.
    #[error("integrity: {0}")]
    Integrity(#[from] IntegrityError),
}

/// The bincode configuration of every body (the decoding limit is added per frame).
fn bincode_config() -> Configuration<LittleEndian, Fixint, NoLimit> {
    bincode::config::standard().with_fixed_int_encoding()
}

/// The 5-byte header of a frame.
fn header(kind: FrameKind, body_len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&body_len.to_le_bytes());
    h[4] = kind as u8;
    h
}

/// A complete heartbeat or bye frame (header and its zeroed tag, to be sealed).
pub(crate) fn control_frame(kind: FrameKind) -> [u8; WIRE_HEADER_LEN] {
    debug_assert!(kind != FrameKind::Data, "data frames have a body");
    let mut f = [0u8; WIRE_HEADER_LEN];
    f[..HEADER_LEN].copy_from_slice(&header(kind, 0));
    f
}

/// Encodes `msg` as a complete data frame (header included, tags zeroed, to be sealed),
/// refusing a body longer than `max_frame`.
pub(crate) fn encode_data<M: Serialize>(msg: &M, max_frame: usize) -> Result<Vec<u8>, FrameError> {
    let max = max_frame.min(MAX_FRAME_LIMIT);
    let mut frame = vec![0u8; WIRE_HEADER_LEN];
    bincode::serde::encode_into_std_write(msg, &mut frame, bincode_config())
        .map_err(|e| FrameError::Encode(e.to_string()))?;
    let len = frame.len() - WIRE_HEADER_LEN;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    frame.extend_from_slice(&[0; TAG_LEN]);
    // `len <= MAX_FRAME_LIMIT < u32::MAX`.
    frame[..HEADER_LEN].copy_from_slice(&header(FrameKind::Data, len as u32));
    Ok(frame)
}

/// The body length an encoded frame (`encode_data` or `control_frame` output) announces.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn body_len(frame: &[u8]) -> usize {
    u32::from_le_bytes(frame[..4].try_into().expect("a header")) as usize
}

/// The plaintext body of an encoded, unsealed data frame (tests and fuzz targets).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn body_of(frame: &[u8]) -> &[u8] {
    &frame[WIRE_HEADER_LEN..frame.len() - TAG_LEN]
}

/// Decodes the body of a data frame into a message: the whole body must be consumed.
///
/// Decoding runs with a bincode byte limit (`with_limit`) of the body length rounded up to
/// a power of 4 (at least 4 KiB): every claim bincode makes before allocating (a byte
/// string's announced length) counts against it, so a body announcing a huge string is
/// refused instead of allocated. A valid body never claims more than its own length.
pub(crate) fn decode_data<M: DeserializeOwned>(body: &[u8]) -> Result<M, FrameError> {
    let finish = |r: Result<(M, usize), bincode::error::DecodeError>| match r {
        Ok((msg, used)) if used == body.len() => Ok(msg),
        Ok((_, used)) => Err(FrameError::Decode(format!(
            "{} trailing bytes after the message",
            body.len() - used
        ))),
        Err(e) => Err(FrameError::Decode(e.to_string())),
    };
    macro_rules! decode_with_limit {
        ($($shift:literal)*) => {
            $(
                if body.len() <= 1usize << $shift {
                    return finish(bincode::serde::decode_from_slice::<M, _>(
                        body,
                        bincode_config().with_limit::<{ 1usize << $shift }>(),
                    ));
                }
            )*
        };
    }
    decode_with_limit!(12 14 16 18 20 22 24 26 28 30);
    Err(FrameError::TooLarge {
        len: body.len(),
        max: MAX_FRAME_LIMIT,
    })
}

/// A frame whose header has been read and opened and whose body is being collected.
#[derive(Debug)]
struct Partial {
    /// The frame's kind.
    kind: FrameKind,
    /// The body's length on the wire (the announced length and the tag).
    wire_len: usize,
    /// The body bytes received so far (capacity `wire_len`, allocated after the header
    /// verified and the length check).
    body: Vec<u8>,
}

/// Streaming frame decoder: feed it the bytes of a connection in chunks of any size, get
/// complete, opened frames back. After an error the connection must be dropped (the
/// decoder stays failed).
pub(crate) struct FrameDecoder {
    /// Cap on a body's length.
    max_frame: usize,
    /// Opens the connection's frames in order.
    opener: Opener,
    /// Header bytes (and the header's tag) received so far.
    header: [u8; WIRE_HEADER_LEN],
    /// How many of `header` are filled.
    header_len: usize,
    /// The frame whose body is being collected.
    partial: Option<Partial>,
    /// The first error, returned again by every later call.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    /// A decoder opening frames with `opener` and refusing bodies longer than
    /// `max_frame` bytes (itself capped at [`MAX_FRAME_LIMIT`]).
    pub(crate) fn new(max_frame: usize, opener: Opener) -> FrameDecoder {
        FrameDecoder {
            max_frame: max_frame.min(MAX_FRAME_LIMIT),
            opener,
            header: [0; WIRE_HEADER_LEN],
            header_len: 0,
            partial: None,
            failed: None,
        }
    }

    /// The wire length of the body being collected, if a frame's header has been read
    /// and its body is not complete (for the deadline on its arrival).
    pub(crate) fn pending_body(&self) -> Option<usize> {
        self.partial.as_ref().map(|p| p.wire_len)
    }

    /// Bytes allocated for the frame being collected (tests and the fuzz targets check
    /// that a refused length allocated nothing and an accepted one no more than the cap).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn buffered_capacity(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.body.capacity())
    }

    /// Consumes `input`, appending every frame it completes to `out`, in order.
    pub(crate) fn feed(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<Frame>,
    ) -> Result<(), FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        while !input.is_empty() {
            match &mut self.partial {
                None => {
                    let take = (WIRE_HEADER_LEN - self.header_len).min(input.len());
                    self.header[self.header_len..self.header_len + take]
                        .copy_from_slice(&input[..take]);
                    self.header_len += take;
                    input = &input[take..];
                    if self.header_len == WIRE_HEADER_LEN {
                        self.header_len = 0;
                        match self.start_frame() {
                            Ok(Some(frame)) => out.push(frame),
                            Ok(None) => {}
                            Err(e) => {
                                self.failed = Some(e.clone());
                                return Err(e);
                            }
                        }
                    }
                }
                Some(p) => {
                    let take = (p.wire_len - p.body.len()).min(input.len());
                    p.body.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if p.body.len() == p.wire_len {
                        let mut p = self.partial.take().expect("a partial frame");
                        if let Err(e) = self
                            .opener
                            .open_body(&self.header[..HEADER_LEN], &mut p.body)
                        {
                            let e = FrameError::Integrity(e);
                            self.failed = Some(e.clone());
                            return Err(e);
                        }
                        out.push(Frame {
                            kind: p.kind,
                            body: p.body,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens and checks a complete header; returns the frame at once if its body is
    /// empty, else starts collecting the body.
    fn start_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let (header, tag) = self.header.split_at(HEADER_LEN);
        self.opener.open_header(header, tag)?;
        let len = u32::from_le_bytes(self.header[..4].try_into().expect("4 bytes")) as usize;
        let kind =
            FrameKind::from_byte(self.header[4]).ok_or(FrameError::UnknownKind(self.header[4]))?;
        if len > self.max_frame {
            return Err(FrameError::TooLarge {
                len,
                max: self.max_frame,
            });
        }
        if kind != FrameKind::Data && len != 0 {
            return Err(FrameError::NonEmptyControl { kind, len });
        }
        if len == 0 {
            self.opener.next();
            return Ok(Some(Frame {
                kind,
                body: Vec::new(),
            }));
        }
        self.partial = Some(Partial {
            kind,
            wire_len: len + TAG_LEN,
            body: Vec::with_capacity(len + TAG_LEN),
        });
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::seal::{test_key, Sealer};
    use crate::net::tests::Bytes;
    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Msg {
        Small {
            id: u64,
            tag: u8,
        },
        Payload {
            id: u32,
            data: Bytes,
            list: Vec<u16>,
        },
        Unit,
    }

    fn sample() -> Vec<Msg> {
        vec![
            Msg::Small { id: 7, tag: 1 },
            Msg::Payload {
                id: 3,
                data: Bytes((0..300).map(|i| i as u8).collect()),
                list: vec![1, 2, 3],
            },
            Msg::Unit,
            Msg::Payload {
                id: 0,
                data: Bytes(Vec::new()),
                list: Vec::new(),
            },
        ]
    }

    /// A decoder with the test key.
    fn decoder(max_frame: usize) -> FrameDecoder {
        FrameDecoder::new(max_frame, Opener::new(&test_key()))
    }

    /// `frames` (unsealed) sealed in order and concatenated.
    fn seal_all(frames: Vec<Vec<u8>>) -> Vec<u8> {
        let mut sealer = Sealer::new(&test_key());
        frames
            .into_iter()
            .flat_map(|mut f| {
                sealer.seal(&mut f, HEADER_LEN);
                f
            })
            .collect()
    }

    /// A first frame's plain header `h`, sealed (its tag after it).
    fn sealed_header(h: [u8; HEADER_LEN]) -> Vec<u8> {
        let mut f = h.to_vec();
        f.extend([0; TAG_LEN]);
        seal_all(vec![f])
    }

    /// The wire bytes of `msgs` with a heartbeat and a bye interleaved.
    fn stream_of(msgs: &[Msg]) -> Vec<u8> {
        let mut frames = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            if i == 1 {
                frames.push(control_frame(FrameKind::Heartbeat).to_vec());
            }
            frames.push(encode_data(m, 1 << 20).unwrap());
        }
        if msgs.len() < 2 {
            frames.push(control_frame(FrameKind::Heartbeat).to_vec());
        }
        frames.push(control_frame(FrameKind::Bye).to_vec());
        seal_all(frames)
    }

    fn decode_all(frames: &[Frame]) -> Vec<Msg> {
        frames
            .iter()
            .filter(|f| f.kind == FrameKind::Data)
            .map(|f| decode_data(&f.body).unwrap())
            .collect()
    }

    #[test]
    fn round_trip() {
        let msgs = sample();
        let mut dec = decoder(1 << 20);
        let mut frames = Vec::new();
        dec.feed(&stream_of(&msgs), &mut frames).unwrap();
        assert_eq!(frames.len(), msgs.len() + 2);
        assert_eq!(frames[1].kind, FrameKind::Heartbeat);
        assert_eq!(frames.last().unwrap().kind, FrameKind::Bye);
        assert_eq!(decode_all(&frames), msgs);
    }

    #[test]
    fn every_split_point_of_a_valid_stream() {
        let msgs = sample();
        let wire = stream_of(&msgs);
        for split in 0..=wire.len() {
            let mut dec = decoder(1 << 20);
            let mut frames = Vec::new();
            dec.feed(&wire[..split], &mut frames).unwrap();
            dec.feed(&wire[split..], &mut frames).unwrap();
            assert_eq!(frames.len(), msgs.len() + 2, "split at {split}");
            assert_eq!(decode_all(&frames), msgs, "split at {split}");
        }
        // And one byte at a time.
        let mut dec = decoder(1 << 20);
        let mut frames = Vec::new();
        for b in &wire {
            dec.feed(std::slice::from_ref(b), &mut frames).unwrap();
        }
        assert_eq!(decode_all(&frames), msgs);
    }

    #[test]
    fn oversized_length_is_refused_without_allocating() {
        let mut dec = decoder(1 << 20);
        let mut frames = Vec::new();
        let mut wire = sealed_header(header(FrameKind::Data, u32::MAX));
        wire.extend([0u8; 64]);
        let err = dec.feed(&wire, &mut frames).unwrap_err();
        assert_eq!(
            err,
            FrameError::TooLarge {
                len: u32::MAX as usize,
                max: 1 << 20
            }
        );
        assert_eq!(dec.buffered_capacity(), 0);
        assert!(frames.is_empty());
        // The decoder stays failed.
        assert_eq!(dec.feed(&[0], &mut frames).unwrap_err(), err);
        // One byte over the cap is refused too; exactly the cap is fine.
        let mut dec = decoder(16);
        assert!(matches!(
            dec.feed(&sealed_header(header(FrameKind::Data, 17)), &mut frames),
            Err(FrameError::TooLarge { len: 17, max: 16 })
        ));
        let mut dec = decoder(16);
        dec.feed(&sealed_header(header(FrameKind::Data, 16)), &mut frames)
            .unwrap();
        assert_eq!(dec.buffered_capacity(), 16 + TAG_LEN);
    }

    /// A bit flipped anywhere in a sealed stream stops it there with an integrity error:
    /// the frames before come out, none at or after it.
    #[test]
    fn a_flipped_bit_anywhere_is_an_integrity_error() {
        let msgs = sample();
        let wire = stream_of(&msgs);
        let mut whole = Vec::new();
        decoder(1 << 20).feed(&wire, &mut whole).unwrap();
        // Where each frame ends on the wire.
        let mut ends = Vec::new();
        let mut at = 0;
        for f in &whole {
            at += WIRE_HEADER_LEN
                + if f.body.is_empty() {
                    0
                } else {
                    f.body.len() + TAG_LEN
                };
            ends.push(at);
        }
        assert_eq!(at, wire.len());
        for byte in 0..wire.len() {
            let mut bad = wire.clone();
            bad[byte] ^= 0x04;
            let mut frames = Vec::new();
            let err = decoder(1 << 20).feed(&bad, &mut frames).unwrap_err();
            assert!(
                matches!(err, FrameError::Integrity(_)),
                "byte {byte}: {err}"
            );
            let intact = ends.iter().filter(|&&e| e <= byte).count();
            assert_eq!(frames, whole[..intact], "byte {byte}");
        }
    }

    #[test]
    fn encoding_over_the_cap_is_refused() {
        let m = Msg::Payload {
            id: 1,
            data: Bytes(vec![0; 100]),
            list: vec![],
        };
        assert!(matches!(
            encode_data(&m, 50),
            Err(FrameError::TooLarge { max: 50, .. })
        ));
        assert!(encode_data(&m, 200).is_ok());
    }

    #[test]
    fn garbage_is_refused() {
        let mut frames = Vec::new();
        let mut dec = decoder(1 << 20);
        assert_eq!(
            dec.feed(&sealed_header([0, 0, 0, 0, 0x7f]), &mut frames),
            Err(FrameError::UnknownKind(0x7f))
        );
        let mut dec = decoder(1 << 20);
        assert!(matches!(
            dec.feed(&sealed_header(header(FrameKind::Heartbeat, 3)), &mut frames),
            Err(FrameError::NonEmptyControl { len: 3, .. })
        ));
        // A data body that is not a message: unknown enum variant, truncated, trailing bytes.
        assert!(decode_data::<Msg>(&[9, 0, 0, 0]).is_err());
        assert!(decode_data::<Msg>(&[0, 0, 0]).is_err());
        let mut body = body_of(&encode_data(&Msg::Unit, 64).unwrap()).to_vec();
        body.push(0);
        assert!(matches!(
            decode_data::<Msg>(&body),
            Err(FrameError::Decode(_))
        ));
    }

    #[test]
    fn hostile_inner_length_is_refused_by_the_limit() {
        // Variant `Payload` (u32 1), id, then a byte string announcing 1 GiB in a 24-byte body.
        let mut body = Vec::new();
        body.extend(1u32.to_le_bytes());
        body.extend(5u32.to_le_bytes());
        body.extend((1u64 << 30).to_le_bytes());
        body.extend([0u8; 8]);
        let err = decode_data::<Msg>(&body).unwrap_err();
        assert!(matches!(err, FrameError::Decode(_)), "{err}");
        // Same for a `Vec<u16>` announcing u64::MAX elements.
        let mut body = Vec::new();
        body.extend(1u32.to_le_bytes());
        body.extend(5u32.to_le_bytes());
        body.extend(0u64.to_le_bytes());
        body.extend(u64::MAX.to_le_bytes());
        assert!(decode_data::<Msg>(&body).is_err());
    }

    #[test]
    fn large_payload_round_trips_under_the_limit() {
        let m = Msg::Payload {
            id: 9,
            data: Bytes((0..3_000_000u32).map(|i| (i % 251) as u8).collect()),
            list: vec![5; 1000],
        };
        let frame = encode_data(&m, 4 << 20).unwrap();
        assert_eq!(decode_data::<Msg>(body_of(&frame)).unwrap(), m);
    }

    fn arb_msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            (any::<u64>(), any::<u8>()).prop_map(|(id, tag)| Msg::Small { id, tag }),
            (
                any::<u32>(),
                proptest::collection::vec(any::<u8>(), 0..2000),
                proptest::collection::vec(any::<u16>(), 0..50)
            )
                .prop_map(|(id, data, list)| Msg::Payload {
                    id,
                    data: Bytes(data),
                    list
                }),
            Just(Msg::Unit),
        ]
    }

    proptest! {
        #[test]
        fn random_splits_yield_the_same_frames(
            msgs in proptest::collection::vec(arb_msg(), 0..20),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..30),
        ) {
            let wire = stream_of(&msgs);
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
            points.push(0);
            points.push(wire.len());
            points.sort_unstable();
            let mut dec = decoder(1 << 20);
            let mut frames = Vec::new();
            for w in points.windows(2) {
                dec.feed(&wire[w[0]..w[1]], &mut frames).unwrap();
            }
            prop_assert_eq!(frames.len(), msgs.len() + 2);
            prop_assert_eq!(decode_all(&frames), msgs);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut dec = decoder(256);
            let mut frames = Vec::new();
            let _ = dec.feed(&bytes, &mut frames);
            prop_assert!(dec.buffered_capacity() <= 256 + TAG_LEN);
            // Bytes nobody sealed with the key make no frame.
            prop_assert!(frames.is_empty());
        }
    }
}
