//! Integrity, freshness and privacy of every frame after the handshake: per-connection,
//! per-direction keys derived from the handshake, a sequence number per direction, and
//! AES-256-GCM (RustCrypto's `aes-gcm`) on each frame's header and body. AES-GCM rather
//! than ChaCha20-Poly1305 because both are sound and AES-GCM runs on the AES and
//! carry-less-multiply instructions of current x86 and ARM cores: in `cargo bench --bench
//! kv` on this project's 2-core Xeon, ChaCha20-Poly1305 cost pulls 35 % against 10 %
//! (BENCHMARKS.md, issue 45).
//!
//! **Keys.** Both ends of a connection derive, after the proofs verified,
//! `key(direction) = HMAC-SHA256(secret, "iterstore frame key v1" || direction ||
//! dialer_nonce || acceptor_nonce || dialer_rank || acceptor_rank || cluster_id)` for
//! `direction` = `"dialer->acceptor"` and `"acceptor->dialer"`: fresh nonces make every
//! connection's keys new, so a frame of one connection (or direction) is worthless on
//! another.
//!
//! **Frames.** On the wire a frame is `[5-byte header][16-byte header tag][body][16-byte
//! body tag]` (no body and no body tag for a control frame; see [`super::frame`]). The
//! header tag authenticates the header (its length and kind) under nonce `(seq, 0)`, so a
//! forged header is refused *before* its body is waited for or allocated; the body is
//! encrypted and authenticated under nonce `(seq, 1)` with the header as associated data.
//! `seq` counts this direction's frames from 0, so a dropped, replayed, reordered or
//! injected frame fails to open: the connection is then closed as an integrity failure.
//!
//! Pure: no I/O, no clock. The sealing side and the opening side each own their state.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, Key, KeyInit, Nonce, Tag};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of an authentication tag.
pub(crate) const TAG_LEN: usize = 16;

/// Label of the key derivation.
const KEY_LABEL: &[u8] = b"iterstore frame key v1";

/// One direction's 32-byte key.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct FrameKey([u8; 32]);

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKey(..)")
    }
}

/// The two keys of one end of a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FrameKeys {
    /// For the frames this end sends.
    pub(crate) send: FrameKey,
    /// For the frames it receives.
    pub(crate) recv: FrameKey,
}

/// What the keys of a connection are derived from (known to both ends after the
/// handshake).
pub(crate) struct KeyInput<'a> {
    /// HMAC-SHA256 keyed with the cluster's shared secret.
    pub(crate) keyed: &'a Hmac<Sha256>,
    /// The dialer's hello nonce.
    pub(crate) dialer_nonce: &'a [u8; 32],
    /// The acceptor's hello nonce.
    pub(crate) acceptor_nonce: &'a [u8; 32],
    /// The dialer's rank.
    pub(crate) dialer_rank: u32,
    /// The acceptor's rank.
    pub(crate) acceptor_rank: u32,
    /// The cluster id both hellos carried.
    pub(crate) cluster_id: u64,
}

impl KeyInput<'_> {
    /// The keys of the end that dialed (`we_dial`) or accepted.
    pub(crate) fn keys(&self, we_dial: bool) -> FrameKeys {
        let d2a = self.key(b"dialer->acceptor");
        let a2d = self.key(b"acceptor->dialer");
        if we_dial {
            FrameKeys {
                send: d2a,
                recv: a2d,
            }
        } else {
            FrameKeys {
                send: a2d,
                recv: d2a,
            }
        }
    }

    fn key(&self, direction: &[u8]) -> FrameKey {
        let mut mac = self.keyed.clone();
        mac.update(KEY_LABEL);
        mac.update(direction);
        mac.update(self.dialer_nonce);
        mac.update(self.acceptor_nonce);
        mac.update(&self.dialer_rank.to_le_bytes());
        mac.update(&self.acceptor_rank.to_le_bytes());
        mac.update(&self.cluster_id.to_le_bytes());
        FrameKey(mac.finalize().into_bytes().into())
    }
}

/// Why a received frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum IntegrityError {
    /// The header's tag does not verify: a forged, altered, replayed or misordered frame.
    #[error("frame {seq}'s header failed its integrity check (altered, forged, replayed or out of order)")]
    Header {
        /// The frame's sequence number in its direction.
        seq: u64,
    },
    /// The body's tag does not verify.
    #[error("frame {seq}'s body failed its integrity check (altered on the way)")]
    Body {
        /// The frame's sequence number in its direction.
        seq: u64,
    },
}

/// The nonce of part `part` (0: header, 1: body) of frame `seq`.
fn nonce(seq: u64, part: u32) -> Nonce<aes_gcm::aead::consts::U12> {
    let mut n = [0u8; 12];
    n[..8].copy_from_slice(&seq.to_le_bytes());
    n[8..].copy_from_slice(&part.to_le_bytes());
    n.into()
}

/// The sending end of one direction: seals frames in order.
pub(crate) struct Sealer {
    /// The cipher with its expanded key (boxed: it is large).
    cipher: Box<Aes256Gcm>,
    seq: u64,
}

impl Sealer {
    /// A sealer under `key`, its first frame numbered 0.
    pub(crate) fn new(key: &FrameKey) -> Sealer {
        Sealer {
            cipher: Box::new(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key.0))),
            seq: 0,
        }
    }

    /// Seals a frame laid out as `[header][TAG_LEN zeros][body][TAG_LEN zeros]` (the body
    /// part absent when `header_len == frame.len() - TAG_LEN`) in place: fills in the tags
    /// and encrypts the body. `header_len` is the plain header's length.
    pub(crate) fn seal(&mut self, frame: &mut [u8], header_len: usize) {
        let seq = self.seq;
        self.seq += 1;
        let (header, rest) = frame.split_at_mut(header_len);
        let (header_tag, rest) = rest.split_at_mut(TAG_LEN);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce(seq, 0), header, &mut [])
            .expect("a header is far below AES-GCM's length limit");
        header_tag.copy_from_slice(&tag);
        if rest.is_empty() {
            return;
        }
        let (body, body_tag) = rest.split_at_mut(rest.len() - TAG_LEN);
        let tag = self
            .cipher
            .encrypt_in_place_detached(&nonce(seq, 1), header, body)
            .expect("a frame body is far below AES-GCM's length limit");
        body_tag.copy_from_slice(&tag);
    }
}

/// The receiving end of one direction: opens frames in order.
pub(crate) struct Opener {
    /// The cipher with its expanded key (boxed: it is large).
    cipher: Box<Aes256Gcm>,
    seq: u64,
}

impl Opener {
    /// An opener under `key`, expecting frame 0 first.
    pub(crate) fn new(key: &FrameKey) -> Opener {
        Opener {
            cipher: Box::new(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&key.0))),
            seq: 0,
        }
    }

    /// Checks the next frame's `header` against its `tag`. A frame without a body is
    /// complete once its header verified (call [`Opener::next`] then).
    pub(crate) fn open_header(&self, header: &[u8], tag: &[u8]) -> Result<(), IntegrityError> {
        self.cipher
            .decrypt_in_place_detached(&nonce(self.seq, 0), header, &mut [], Tag::from_slice(tag))
            .map_err(|_| IntegrityError::Header { seq: self.seq })
    }

    /// Decrypts and checks the body of the frame whose header was just opened:
    /// `body` is the ciphertext followed by the tag; on success it is the plaintext (the
    /// tag cut off). Moves on to the next frame either way.
    pub(crate) fn open_body(
        &mut self,
        header: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<(), IntegrityError> {
        let seq = self.seq;
        self.seq += 1;
        if body.len() < TAG_LEN {
            return Err(IntegrityError::Body { seq });
        }
        let at = body.len() - TAG_LEN;
        let tag = *Tag::from_slice(&body[at..]);
        body.truncate(at);
        self.cipher
            .decrypt_in_place_detached(&nonce(seq, 1), header, body, &tag)
            .map_err(|_| IntegrityError::Body { seq })
    }

    /// Moves on to the next frame (after a frame without a body).
    pub(crate) fn next(&mut self) {
        self.seq += 1;
    }
}

/// Fixed keys for the fuzz targets and tests (both directions the same key, so a
/// sealer's frames open with an opener of the same key).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn test_key() -> FrameKey {
    FrameKey([7; 32])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(secret: &[u8]) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(secret).unwrap()
    }

    fn input<'a>(keyed: &'a Hmac<Sha256>, dn: &'a [u8; 32], an: &'a [u8; 32]) -> KeyInput<'a> {
        KeyInput {
            keyed,
            dialer_nonce: dn,
            acceptor_nonce: an,
            dialer_rank: 1,
            acceptor_rank: 0,
            cluster_id: 9,
        }
    }

    #[test]
    fn each_end_sends_with_the_key_the_other_receives_with_and_connections_differ() {
        let (dn, an) = ([1u8; 32], [2u8; 32]);
        let k = keyed(b"secret");
        let d = input(&k, &dn, &an).keys(true);
        let a = input(&k, &dn, &an).keys(false);
        assert_eq!(d.send, a.recv);
        assert_eq!(d.recv, a.send);
        assert_ne!(d.send, d.recv);
        let other_nonce = input(&k, &[3u8; 32], &an).keys(true);
        assert_ne!(other_nonce.send, d.send);
        let other_secret = input(&keyed(b"secreT"), &dn, &an).keys(true);
        assert_ne!(other_secret.send, d.send);
    }

    /// `[header][tag][body][tag]` with zeroed tags.
    fn frame(header: &[u8], body: &[u8]) -> Vec<u8> {
        let mut f = header.to_vec();
        f.extend([0; TAG_LEN]);
        if !body.is_empty() {
            f.extend(body);
            f.extend([0; TAG_LEN]);
        }
        f
    }

    /// Opens `wire` (frames of header length 5) with `opener`; the bodies, or the error.
    fn open_all(opener: &mut Opener, frames: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, IntegrityError> {
        let mut out = Vec::new();
        for f in frames {
            let (header, rest) = f.split_at(5);
            opener.open_header(header, &rest[..TAG_LEN])?;
            if rest.len() == TAG_LEN {
                opener.next();
                out.push(Vec::new());
            } else {
                let mut body = rest[TAG_LEN..].to_vec();
                opener.open_body(header, &mut body)?;
                out.push(body);
            }
        }
        Ok(out)
    }

    #[test]
    fn sealed_frames_open_in_order_and_any_change_is_refused() {
        let key = test_key();
        let mut sealer = Sealer::new(&key);
        let plain = [
            frame(b"hdr01", b"hello, world"),
            frame(b"hdr02", b""),
            frame(b"hdr03", b"x"),
        ];
        let mut wire = plain.clone();
        for f in &mut wire {
            sealer.seal(f, 5);
        }
        assert_ne!(
            &wire[0][5 + TAG_LEN..][..12],
            b"hello, world",
            "the body is encrypted"
        );
        let bodies = open_all(&mut Opener::new(&key), &wire).unwrap();
        assert_eq!(bodies, [b"hello, world".to_vec(), vec![], b"x".to_vec()]);

        // Every single bit flipped anywhere in any frame is refused.
        for i in 0..wire.len() {
            for byte in 0..wire[i].len() {
                let mut bad = wire.clone();
                bad[i][byte] ^= 0x10;
                assert!(
                    open_all(&mut Opener::new(&key), &bad).is_err(),
                    "frame {i} byte {byte}"
                );
            }
        }
        // Dropped, replayed and reordered frames are refused.
        let err = open_all(&mut Opener::new(&key), &wire[1..]).unwrap_err();
        assert_eq!(err, IntegrityError::Header { seq: 0 });
        let replayed = [wire[0].clone(), wire[0].clone()];
        assert!(open_all(&mut Opener::new(&key), &replayed).is_err());
        let swapped = [wire[2].clone(), wire[1].clone(), wire[0].clone()];
        assert!(open_all(&mut Opener::new(&key), &swapped).is_err());
        // Another key opens nothing.
        let other = FrameKey([8; 32]);
        assert!(open_all(&mut Opener::new(&other), &wire).is_err());
    }
}
