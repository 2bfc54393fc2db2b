//! The authenticated handshake that opens every connection, as a pure state machine
//! (bytes in, bytes out: testable without sockets).
//!
//! Both sides send a fixed-size [`Hello`] at once (`magic`, protocol version, cluster id,
//! rank, a fresh 32-byte nonce). When the dialer has the acceptor's hello it checks it,
//! then proves it knows the cluster's shared secret by sending
//! `HMAC-SHA256(secret, label || dialer_nonce || acceptor_nonce || dialer_rank ||
//! acceptor_rank || cluster_id)` (integers little-endian). The label differs per direction
//! (`"iterstore dialer proof v1"` / `"iterstore acceptor proof v1"`), so a proof received
//! from one side cannot be sent back as the other side's proof; both nonces are in every
//! proof, so a proof cannot be replayed on another connection. Proofs are verified in
//! constant time ([`Mac::verify_slice`]). The acceptor sends its own proof only once the
//! dialer's verified: a stranger dialing in collects no proof to attack the secret with
//! offline. Both ends then derive the connection's frame keys ([`super::seal`]).
//!
//! Roles: the **dialer** is always the higher rank (rank `i` dials every `j < i`) and
//! expects exactly the rank it dialed; an **acceptor** accepts only ranks above its own.
//! Every message has a fixed size, so nothing a stranger sends makes this side allocate;
//! and nothing about this side's peers is revealed before the stranger's proof verified
//! (the duplicate-rank check comes last).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::seal::{FrameKeys, KeyInput};

/// First bytes of every hello ("IterStore Net").
pub(crate) const MAGIC: [u8; 4] = *b"ISNt";
/// Version of the handshake and framing; both sides must agree.
pub(crate) const PROTOCOL_VERSION: u32 = 13;
/// Size of a hello on the wire.
pub(crate) const HELLO_LEN: usize = 4 + 4 + 8 + 4 + 32;
/// Size of a proof (an HMAC-SHA256 tag) on the wire.
pub(crate) const PROOF_LEN: usize = 32;
/// Label of the proof the dialer sends.
const DIALER_LABEL: &[u8] = b"iterstore dialer proof v1";
/// Label of the proof the acceptor sends.
const ACCEPTOR_LABEL: &[u8] = b"iterstore acceptor proof v1";

/// HMAC-SHA256, keyed with the cluster secret.
type HmacSha256 = Hmac<Sha256>;

/// The first message of each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hello {
    /// Must be [`MAGIC`].
    pub(crate) magic: [u8; 4],
    /// Must be [`PROTOCOL_VERSION`].
    pub(crate) protocol_version: u32,
    /// Must be the receiver's cluster id.
    pub(crate) cluster_id: u64,
    /// The sender's rank.
    pub(crate) rank: u32,
    /// Fresh randomness of the sender for this connection.
    pub(crate) nonce: [u8; 32],
}

impl Hello {
    /// The wire form: fields in order, integers little-endian.
    pub(crate) fn to_bytes(self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&self.magic);
        b[4..8].copy_from_slice(&self.protocol_version.to_le_bytes());
        b[8..16].copy_from_slice(&self.cluster_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.rank.to_le_bytes());
        b[20..52].copy_from_slice(&self.nonce);
        b
    }

    /// Parses the wire form (any 52 bytes parse; [`Handshake`] checks the fields).
    pub(crate) fn from_bytes(b: &[u8; HELLO_LEN]) -> Hello {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Hello {
            magic: b[0..4].try_into().expect("4 bytes"),
            protocol_version: u32_at(4),
            cluster_id: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            rank: u32_at(16),
            nonce: b[20..52].try_into().expect("32 bytes"),
        }
    }
}

/// Which end of the connection this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// This side dialed `target` (a rank below its own) and accepts only that rank.
    Dialer {
        /// The rank dialed.
        target: u32,
    },
    /// This side accepted the connection: only ranks above its own may dial it.
    Acceptor,
}

/// Why a handshake was refused (the connection is then closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The first bytes are not [`MAGIC`]: not an iterstore process.
    #[error("not an iterstore peer (bad magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// Another protocol version.
    #[error("protocol version {got}, expected {want}")]
    Version {
        /// The peer's version.
        got: u32,
        /// Ours.
        want: u32,
    },
    /// A process of another cluster.
    #[error("cluster id {got:#x}, expected {want:#x} (a process of another cluster)")]
    ClusterId {
        /// The peer's cluster id.
        got: u64,
        /// Ours.
        want: u64,
    },
    /// A rank that does not exist in this cluster.
    #[error("rank {rank} out of range (cluster of {size})")]
    RankOutOfRange {
        /// The claimed rank.
        rank: u32,
        /// The cluster size.
        size: u32,
    },
    /// A rank that may not be on this end of this connection.
    #[error("unexpected rank {got}: expected {want}")]
    UnexpectedRank {
        /// The claimed rank.
        got: u32,
        /// What was expected, in words.
        want: String,
    },
    /// The peer sent our own nonce back: a reflected hello.
    #[error("the peer echoed our nonce (reflected hello)")]
    ReflectedNonce,
    /// The peer's proof does not verify: it does not know the secret (or used another one).
    #[error("rank {rank}'s proof does not verify (wrong or different secret)")]
    BadProof {
        /// The claimed rank.
        rank: u32,
    },
    /// The peer we dialed closed the connection once it had our proof: it refused it (an
    /// acceptor says nothing more to a dialer whose proof does not verify).
    #[error("rank {rank} closed the connection on our proof: it refused it (wrong or different secret, or this rank is connected already)")]
    ClosedAfterProof {
        /// The peer's rank.
        rank: u32,
    },
    /// The peer authenticated, but its rank is already connected (or was, and left).
    #[error("rank {rank} is already connected (duplicate rank)")]
    DuplicateRank {
        /// The rank.
        rank: u32,
    },
    /// Bytes fed after the handshake ended.
    #[error("handshake already over")]
    Finished,
}

impl Refusal {
    /// The rank the peer claimed, when it got that far.
    pub(crate) fn claimed_rank(&self) -> Option<u32> {
        match self {
            Refusal::UnexpectedRank { got, .. } => Some(*got),
            Refusal::BadProof { rank }
            | Refusal::DuplicateRank { rank }
            | Refusal::ClosedAfterProof { rank } => Some(*rank),
            Refusal::RankOutOfRange { rank, .. } => Some(*rank),
            _ => None,
        }
    }
}

/// A completed handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    /// The authenticated peer's rank.
    pub(crate) peer_rank: u32,
    /// How many bytes of the last input belonged to the handshake; the rest are the
    /// peer's first frames.
    pub(crate) consumed: usize,
    /// This end's keys for the connection's frames.
    pub(crate) keys: FrameKeys,
}

/// Where the handshake is.
#[derive(Clone, Copy, Debug)]
enum State {
    /// Collecting the peer's hello.
    Hello,
    /// The peer's hello checked (and, dialing, our proof sent); collecting the peer's
    /// proof.
    Proof {
        /// The rank the peer's hello claimed.
        peer_rank: u32,
        /// The peer's nonce.
        peer_nonce: [u8; 32],
    },
    /// Authenticated.
    Done,
    /// Refused.
    Failed,
}

/// One side of the handshake of one connection.
pub(crate) struct Handshake {
    /// Our end.
    role: Role,
    /// Our rank.
    rank: u32,
    /// Number of ranks.
    size: u32,
    /// Our cluster id.
    cluster_id: u64,
    /// HMAC keyed with the secret (cloned per proof).
    mac: HmacSha256,
    /// Our hello.
    hello: Hello,
    /// Bytes of the peer's current message collected so far.
    buf: Vec<u8>,
    /// Where we are.
    state: State,
}

impl Handshake {
    /// The rank the peer's hello claimed, once it arrived (not authenticated before the
    /// handshake is done: for error messages only).
    pub(crate) fn claimed_peer(&self) -> Option<u32> {
        match self.state {
            State::Proof { peer_rank, .. } => Some(peer_rank),
            _ => None,
        }
    }

    /// A handshake for our end `role` of a connection, by `rank` of a cluster of `size`
    /// ranks, with a fresh `nonce`; send [`Handshake::hello`] first.
    pub(crate) fn new(
        role: Role,
        rank: u32,
        size: u32,
        cluster_id: u64,
        secret: &[u8],
        nonce: [u8; 32],
    ) -> Handshake {
        Handshake {
            role,
            rank,
            size,
            cluster_id,
            mac: HmacSha256::new_from_slice(secret).expect("HMAC accepts keys of any length"),
            hello: Hello {
                magic: MAGIC,
                protocol_version: PROTOCOL_VERSION,
                cluster_id,
                rank,
                nonce,
            },
            buf: Vec::with_capacity(HELLO_LEN),
            state: State::Hello,
        }
    }

    /// Our hello, to send first.
    pub(crate) fn hello(&self) -> [u8; HELLO_LEN] {
        self.hello.to_bytes()
    }

    /// Feeds the peer's bytes. Bytes to send to the peer (our proof) are appended to
    /// `out`. Returns `Some(Done)` once the peer is authenticated (`is_connected(rank)`
    /// then says whether that rank already has a connection: a duplicate is refused).
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        is_connected: impl Fn(u32) -> bool,
    ) -> Result<Option<Done>, Refusal> {
        let r = self.feed_inner(input, out, is_connected);
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    /// [`Handshake::feed`] without the failure bookkeeping.
    fn feed_inner(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        is_connected: impl Fn(u32) -> bool,
    ) -> Result<Option<Done>, Refusal> {
        let mut consumed = 0;
        loop {
            let need = match self.state {
                State::Hello => HELLO_LEN,
                State::Proof { .. } => PROOF_LEN,
                State::Done | State::Failed => return Err(Refusal::Finished),
            };
            let take = (need - self.buf.len()).min(input.len() - consumed);
            self.buf
                .extend_from_slice(&input[consumed..consumed + take]);
            consumed += take;
            if matches!(self.state, State::Hello) && self.buf.len() >= 4 && self.buf[..4] != MAGIC {
                // Refuse garbage as soon as it shows.
                return Err(Refusal::BadMagic(
                    self.buf[..4].try_into().expect("4 bytes"),
                ));
            }
            if self.buf.len() < need {
                return Ok(None);
            }
            match self.state {
                State::Hello => {
                    let hello =
                        Hello::from_bytes(self.buf.as_slice().try_into().expect("a whole hello"));
                    self.buf.clear();
                    self.check_hello(&hello)?;
                    if matches!(self.role, Role::Dialer { .. }) {
                        out.extend_from_slice(&self.proof(true, &hello).finalize().into_bytes());
                    }
                    self.state = State::Proof {
                        peer_rank: hello.rank,
                        peer_nonce: hello.nonce,
                    };
                }
                State::Proof {
                    peer_rank,
                    peer_nonce,
                } => {
                    let peer = Hello {
                        rank: peer_rank,
                        nonce: peer_nonce,
                        ..self.hello
                    };
                    let verified = self.proof(false, &peer).verify_slice(&self.buf).is_ok();
                    self.buf.clear();
                    if !verified {
                        return Err(Refusal::BadProof { rank: peer_rank });
                    }
                    if is_connected(peer_rank) {
                        return Err(Refusal::DuplicateRank { rank: peer_rank });
                    }
                    let we_dial = matches!(self.role, Role::Dialer { .. });
                    if !we_dial {
                        // The dialer proved itself: now ours.
                        out.extend_from_slice(&self.proof(true, &peer).finalize().into_bytes());
                    }
                    let (dialer, acceptor) = if we_dial {
                        (&self.hello, &peer)
                    } else {
                        (&peer, &self.hello)
                    };
                    let keys = KeyInput {
                        keyed: &self.mac,
                        dialer_nonce: &dialer.nonce,
                        acceptor_nonce: &acceptor.nonce,
                        dialer_rank: dialer.rank,
                        acceptor_rank: acceptor.rank,
                        cluster_id: self.cluster_id,
                    }
                    .keys(we_dial);
                    self.state = State::Done;
                    return Ok(Some(Done {
                        peer_rank,
                        consumed,
                        keys,
                    }));
                }
                State::Done | State::Failed => unreachable!("checked above"),
            }
        }
    }

    /// Checks the peer's hello against our cluster and role.
    fn check_hello(&self, h: &Hello) -> Result<(), Refusal> {
        if h.magic != MAGIC {
            return Err(Refusal::BadMagic(h.magic));
        }
        if h.protocol_version != PROTOCOL_VERSION {
            return Err(Refusal::Version {
                got: h.protocol_version,
                want: PROTOCOL_VERSION,
            });
        }
        if h.cluster_id != self.cluster_id {
            return Err(Refusal::ClusterId {
                got: h.cluster_id,
                want: self.cluster_id,
            });
        }
        if h.rank >= self.size {
            return Err(Refusal::RankOutOfRange {
                rank: h.rank,
                size: self.size,
            });
        }
        match self.role {
            Role::Dialer { target } if h.rank != target => {
                return Err(Refusal::UnexpectedRank {
                    got: h.rank,
                    want: format!("rank {target}, the one dialed"),
                })
            }
            Role::Acceptor if h.rank <= self.rank => {
                return Err(Refusal::UnexpectedRank {
                    got: h.rank,
                    want: format!(
                        "a rank above {} (lower ranks are dialed, not accepted)",
                        self.rank
                    ),
                })
            }
            _ => {}
        }
        if h.nonce == self.hello.nonce {
            return Err(Refusal::ReflectedNonce);
        }
        Ok(())
    }

    /// The MAC of a proof: ours (`mine`) or the one expected from `peer`.
    fn proof(&self, mine: bool, peer: &Hello) -> HmacSha256 {
        let we_dial = matches!(self.role, Role::Dialer { .. });
        // The sender of the proof is the dialer iff (we send it) == (we dial).
        let label = if mine == we_dial {
            DIALER_LABEL
        } else {
            ACCEPTOR_LABEL
        };
        let (dialer, acceptor) = if we_dial {
            (&self.hello, peer)
        } else {
            (peer, &self.hello)
        };
        let mut mac = self.mac.clone();
        mac.update(label);
        mac.update(&dialer.nonce);
        mac.update(&acceptor.nonce);
        mac.update(&dialer.rank.to_le_bytes());
        mac.update(&acceptor.rank.to_le_bytes());
        mac.update(&self.cluster_id.to_le_bytes());
        mac
    }
}

/// A fresh 32-byte nonce from the operating system's randomness.
pub(crate) fn fresh_nonce() -> std::io::Result<[u8; 32]> {
    let mut nonce = [0u8; 32];
    getrandom::getrandom(&mut nonce)
        .map_err(|e| std::io::Error::other(format!("no randomness for a nonce: {e}")))?;
    Ok(nonce)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const CLUSTER: u64 = 0xC0FFEE;

    fn dialer(rank: u32, target: u32, secret: &[u8]) -> Handshake {
        Handshake::new(
            Role::Dialer { target },
            rank,
            4,
            CLUSTER,
            secret,
            fresh_nonce().unwrap(),
        )
    }

    fn acceptor(rank: u32, secret: &[u8]) -> Handshake {
        Handshake::new(
            Role::Acceptor,
            rank,
            4,
            CLUSTER,
            secret,
            fresh_nonce().unwrap(),
        )
    }

    /// Result of one side of a run.
    type Outcome = Result<Option<Done>, Refusal>;

    /// Runs both sides against each other (delivering `chunk` bytes at a time) until each is
    /// done or refused; `extra` is sent by each side right after its own proof, as frames.
    fn run(a: &mut Handshake, b: &mut Handshake, chunk: usize, extra: &[u8]) -> (Outcome, Outcome) {
        let mut to_a = a_hello_for(b);
        let mut to_b = a_hello_for(a);
        let (mut ra, mut rb): (Outcome, Outcome) = (Ok(None), Ok(None));
        for _ in 0..1000 {
            if !matches!(ra, Ok(None)) && !matches!(rb, Ok(None)) {
                break;
            }
            if matches!(ra, Ok(None)) && !to_a.is_empty() {
                let n = chunk.min(to_a.len());
                let input: Vec<u8> = to_a.drain(..n).collect();
                let mut out = Vec::new();
                ra = a.feed(&input, &mut out, |_| false);
                if let Ok(Some(d)) = &ra {
                    to_a.splice(0..0, input[d.consumed..].iter().copied());
                }
                let sent_proof = !out.is_empty();
                to_b.extend(out);
                if sent_proof {
                    to_b.extend(extra);
                }
            }
            if matches!(rb, Ok(None)) && !to_b.is_empty() {
                let n = chunk.min(to_b.len());
                let input: Vec<u8> = to_b.drain(..n).collect();
                let mut out = Vec::new();
                rb = b.feed(&input, &mut out, |_| false);
                if let Ok(Some(d)) = &rb {
                    to_b.splice(0..0, input[d.consumed..].iter().copied());
                }
                let sent_proof = !out.is_empty();
                to_a.extend(out);
                if sent_proof {
                    to_a.extend(extra);
                }
            }
            if to_a.is_empty() && to_b.is_empty() {
                break;
            }
        }
        (ra, rb)
    }

    fn a_hello_for(h: &Handshake) -> Vec<u8> {
        h.hello().to_vec()
    }

    #[test]
    fn success_in_any_chunking_leaves_the_frames_after_the_proof() {
        for chunk in [1, 3, 32, 52, 84, 1000] {
            let mut d = dialer(2, 1, SECRET);
            let mut a = acceptor(1, SECRET);
            let (rd, ra) = run(&mut d, &mut a, chunk, b"");
            assert_eq!(rd.unwrap().unwrap().peer_rank, 1, "chunk {chunk}");
            assert_eq!(ra.unwrap().unwrap().peer_rank, 2, "chunk {chunk}");
        }
        // The peer's first frame arriving with its proof is left to the caller.
        let mut d = dialer(3, 0, SECRET);
        let mut a = acceptor(0, SECRET);
        let mut out_d = Vec::new();
        let mut out_a = Vec::new();
        assert_eq!(d.feed(&a.hello(), &mut out_d, |_| false), Ok(None));
        let mut to_a = d.hello().to_vec();
        to_a.extend(&out_d);
        to_a.extend(b"FRAMES");
        let a_done = a.feed(&to_a, &mut out_a, |_| false).unwrap().unwrap();
        assert_eq!(a_done.peer_rank, 3);
        assert_eq!(&to_a[a_done.consumed..], b"FRAMES");
        assert_eq!(out_a.len(), PROOF_LEN);
        let done = d.feed(&out_a, &mut Vec::new(), |_| false).unwrap().unwrap();
        assert_eq!((done.peer_rank, done.consumed), (0, PROOF_LEN));
        // Each end sends with the key the other receives with.
        assert_eq!(done.keys.send, a_done.keys.recv);
        assert_eq!(done.keys.recv, a_done.keys.send);
        assert_eq!(
            d.feed(b"x", &mut Vec::new(), |_| false),
            Err(Refusal::Finished)
        );
    }

    #[test]
    fn wrong_secret_is_refused_both_ways() {
        let mut d = dialer(2, 0, b"a different secret, same length!");
        let mut a = acceptor(0, SECRET);
        // The acceptor refuses the dialer's proof and sends none of its own: the dialer
        // is left waiting (the acceptor then closes, which the event loop reports as
        // `ClosedAfterProof`).
        let (rd, ra) = run(&mut d, &mut a, 1000, b"");
        assert_eq!(rd, Ok(None));
        assert_eq!(ra, Err(Refusal::BadProof { rank: 2 }));
        let mut d = dialer(2, 0, SECRET);
        let mut a = acceptor(0, b"short");
        let (rd, ra) = run(&mut d, &mut a, 7, b"");
        assert_eq!(rd, Ok(None));
        assert_eq!(ra, Err(Refusal::BadProof { rank: 2 }));
    }

    #[test]
    fn reflected_proof_is_refused() {
        // An attacker without the secret dials rank 0 claiming rank 1: rank 0 (the
        // acceptor) reveals no proof before the dialer's verified, so there is nothing to
        // reflect (or to attack the secret with offline) ...
        let mut victim = acceptor(0, SECRET);
        let attacker = Hello {
            magic: MAGIC,
            protocol_version: PROTOCOL_VERSION,
            cluster_id: CLUSTER,
            rank: 1,
            nonce: [7; 32],
        };
        let mut proof = Vec::new();
        assert_eq!(
            victim.feed(&attacker.to_bytes(), &mut proof, |_| false),
            Ok(None)
        );
        assert!(proof.is_empty(), "the acceptor revealed its proof first");
        // ... and even the acceptor's own proof over these nonces, were it obtained, sent
        // back as the dialer's does not verify: the labels differ.
        let reflected = victim.proof(true, &attacker).finalize().into_bytes();
        assert_eq!(
            victim.feed(&reflected, &mut Vec::new(), |_| false),
            Err(Refusal::BadProof { rank: 1 })
        );
        // Reflecting the victim's own hello (same nonce) is refused before any proof.
        let mut victim = dialer(2, 1, SECRET);
        let mut mirrored = Hello::from_bytes(&victim.hello());
        mirrored.rank = 1;
        assert_eq!(
            victim.feed(&mirrored.to_bytes(), &mut Vec::new(), |_| false),
            Err(Refusal::ReflectedNonce)
        );
    }

    fn hello_with(f: impl FnOnce(&mut Hello)) -> [u8; HELLO_LEN] {
        let mut h = Hello {
            magic: MAGIC,
            protocol_version: PROTOCOL_VERSION,
            cluster_id: CLUSTER,
            rank: 2,
            nonce: [1; 32],
        };
        f(&mut h);
        h.to_bytes()
    }

    #[test]
    fn hello_checks() {
        let feed = |bytes: &[u8]| acceptor(1, SECRET).feed(bytes, &mut Vec::new(), |_| false);
        assert_eq!(
            feed(&hello_with(|h| h.cluster_id = 1)),
            Err(Refusal::ClusterId {
                got: 1,
                want: CLUSTER
            })
        );
        assert_eq!(
            feed(&hello_with(|h| h.protocol_version = 1)),
            Err(Refusal::Version {
                got: 1,
                want: PROTOCOL_VERSION
            })
        );
        assert_eq!(
            feed(&hello_with(|h| h.rank = 4)),
            Err(Refusal::RankOutOfRange { rank: 4, size: 4 })
        );
        // Acceptors accept only higher ranks; dialers only the rank they dialed.
        assert!(matches!(
            feed(&hello_with(|h| h.rank = 0)),
            Err(Refusal::UnexpectedRank { got: 0, .. })
        ));
        assert!(matches!(
            feed(&hello_with(|h| h.rank = 1)),
            Err(Refusal::UnexpectedRank { got: 1, .. })
        ));
        assert!(matches!(
            dialer(3, 0, SECRET).feed(&hello_with(|h| h.rank = 1), &mut Vec::new(), |_| false),
            Err(Refusal::UnexpectedRank { got: 1, .. })
        ));
        // A valid hello needs the proof next.
        assert_eq!(feed(&hello_with(|_| {})), Ok(None));
    }

    #[test]
    fn garbage_is_refused_early() {
        let mut a = acceptor(0, SECRET);
        let mut out = Vec::new();
        assert_eq!(a.feed(b"GE", &mut out, |_| false), Ok(None));
        assert_eq!(
            a.feed(b"T / HTTP/1.1\r\n", &mut out, |_| false),
            Err(Refusal::BadMagic(*b"GET "))
        );
        assert!(out.is_empty());
        assert_eq!(a.feed(b"more", &mut out, |_| false), Err(Refusal::Finished));
        // A huge "length prefix" is just bad magic here.
        let mut a = acceptor(0, SECRET);
        assert!(matches!(
            a.feed(&[0xff; 64], &mut out, |_| false),
            Err(Refusal::BadMagic(_))
        ));
    }

    #[test]
    fn duplicate_rank_is_refused_after_authentication() {
        let mut d = dialer(2, 0, SECRET);
        let mut a = acceptor(0, SECRET);
        let mut to_a = d.hello().to_vec();
        let mut out_d = Vec::new();
        d.feed(&a.hello(), &mut out_d, |_| false).unwrap();
        to_a.extend(out_d);
        assert_eq!(
            a.feed(&to_a, &mut Vec::new(), |r| r == 2),
            Err(Refusal::DuplicateRank { rank: 2 })
        );
    }
}
