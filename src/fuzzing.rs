//! Entry points for the fuzz targets in `fuzz/` and for the tests that replay their
//! corpora: each function drives one crate-private decoder of untrusted bytes — the frame
//! decoder and message decoding of `net::frame`, the handshake of
//! `net::handshake` — with arbitrary input, and **panics** when a property the
//! network layer relies on fails. Bad input itself is never a panic: it must come back as
//! an error value.
//!
//! **Not a stable API.** This module exists so that the fuzz crate (outside the
//! workspace) and `cargo test` can reach internals; it is hidden from the docs and may
//! change in any release. It knows the wire formats only through the functions it
//! drives, and nothing of clusters, shards or workers.

use crate::msg::{Envelope, ToClient, ToShard, WantedChunks};
use crate::net::{
    frame::control_frame, frame::decode_data, frame::encode_data, frame::Frame,
    frame::FrameDecoder, frame::FrameKind, frame::HEADER_LEN, handshake::Done,
    handshake::Handshake, handshake::Hello, handshake::Refusal, handshake::Role,
    handshake::HELLO_LEN, handshake::PROOF_LEN, seal::test_key, seal::Opener, seal::Sealer,
    seal::TAG_LEN,
};
use input::Input;

mod input;

/// The body cap the frame targets decode under unless the input picks a smaller one.
pub const MAX_FRAME: usize = 64 * 1024;

/// Caps a frame target may pick with its first byte (boundaries of the length check).
const CAPS: [usize; 6] = [0, 1, 16, 300, 4096, MAX_FRAME];

/// Chunk sizes a target may pick to split a stream (`usize::MAX`: all at once).
const CHUNKS: [usize; 8] = [1, 2, 3, 5, 8, 13, 64, usize::MAX];

/// An envelope of every kind of message, with field values taken from `inp`: a byte
/// (unused: the kind decides the direction; read so that the corpus inputs keep their
/// layout), the endpoint's id, a byte picking the kind (in an order of this function's
/// own), then the fields.
fn envelope(inp: &mut Input<'_>) -> Envelope {
    let _ = inp.u8();
    let to = inp.u32();
    let shard = |msg| Envelope::Shard(to, msg);
    let client = |msg| Envelope::Client(to, msg);
    match usize::from(inp.u8()) % Envelope::KINDS.len() {
        0 => shard(ToShard::DeclareTable {
            from: inp.u32(),
            name: inp.string(),
            width: inp.u64() as usize,
            elem: inp.elem(),
            rows: inp.row_count(),
            rule: inp.rule(),
        }),
        1 => shard(ToShard::Gather {
            from: inp.u32(),
            round: inp.u64(),
            values: inp.buf(),
        }),
        2 => shard(ToShard::CreateTable { meta: inp.meta() }),
        3 => shard(ToShard::Fetch {
            from: inp.u32(),
            rows: (0..inp.count()).map(|_| (inp.key(), inp.u64())).collect(),
        }),
        4 => shard(ToShard::Clock {
            worker: inp.u32(),
            clock: inp.u64(),
            epoch: inp.u32(),
            rows: inp.rows(),
            outer: (0..inp.count())
                .map(|_| crate::msg::Outer {
                    table: inp.u32(),
                    rows: (0..inp.count()).map(|_| inp.u64()).collect(),
                    left: inp.buf(),
                    right: inp.buf(),
                })
                .collect(),
            slab: inp.buf(),
            slab_rows: inp.opt_u32s(),
        }),
        5 => shard(ToShard::Finish { worker: inp.u32() }),
        6 => shard(ToShard::RunEnd {
            from: inp.u32(),
            run: inp.u64(),
        }),
        7 => shard(ToShard::Dump {
            from: inp.u32(),
            table: inp.u32(),
            backup: (inp.u8() & 1 == 1).then(|| inp.u32()),
        }),
        8 => shard(ToShard::Specialize {
            from: inp.u32(),
            epoch: inp.u32(),
            keys: (0..inp.count()).map(|_| inp.key()).collect(),
            chunk_ends: inp.u32s(),
            chunk_phases: (0..inp.count()).map(|_| inp.u64()).collect(),
            updaters: (0..inp.count()).map(|_| (inp.u32(), inp.u32s())).collect(),
        }),
        9 => shard(ToShard::SlabFetch {
            from: inp.u32(),
            epoch: inp.u32(),
            required: inp.u64(),
            want: match inp.u8() % 3 {
                0 => WantedChunks::All,
                1 => WantedChunks::Chunk(inp.u32()),
                _ => WantedChunks::Phase(inp.u32()),
            },
        }),
        10 => shard(ToShard::Leave { from: inp.u32() }),
        11 => client(ToClient::TableDeclared { meta: inp.meta() }),
        12 => client(ToClient::Gathered {
            round: inp.u64(),
            parts: (0..inp.count()).map(|_| inp.buf()).collect(),
        }),
        13 => client(ToClient::Rows {
            shard: inp.u32(),
            data_clock: inp.u64(),
            rows: inp.rows(),
        }),
        14 => client(ToClient::SlabRows {
            shard: inp.u32(),
            epoch: inp.u32(),
            chunk: inp.u32(),
            data_clock: inp.u64(),
            rows: inp.opt_u32s(),
            bytes: inp.buf(),
        }),
        15 => client(ToClient::MinClock {
            shard: inp.u32(),
            clock: inp.u64(),
        }),
        16 => client(ToClient::RunReady {
            shard: inp.u32(),
            run: inp.u64(),
            start: inp.u64(),
        }),
        17 => client(ToClient::DumpRows {
            shard: inp.u32(),
            rows: inp.rows(),
        }),
        18 => client(ToClient::Rejected {
            shard: inp.u32(),
            reason: inp.string(),
        }),
        19 => shard(ToShard::Migrate {
            from: inp.u32(),
            overrides: (0..inp.count()).map(|_| (inp.key(), inp.u32())).collect(),
        }),
        20 => shard(ToShard::Adopt {
            shard: inp.u32(),
            rows: inp.rows(),
            states: inp.states(),
        }),
        21 => client(ToClient::Migrated { shard: inp.u32() }),
        22 => shard(ToShard::Checkpoint {
            from: inp.u32(),
            root: inp.string().into(),
            clock: inp.u64(),
        }),
        23 => shard(ToShard::Restore {
            from: inp.u32(),
            clock: inp.u64(),
            rows: inp.rows(),
            states: inp.states(),
            last: inp.u8() & 1 == 1,
        }),
        24 => client(ToClient::Checkpointed {
            shard: inp.u32(),
            part: if inp.u8() & 1 == 0 {
                Ok((inp.string(), inp.u64(), inp.string()))
            } else {
                Err(inp.string())
            },
        }),
        25 => client(ToClient::Restored { shard: inp.u32() }),
        26 => client(ToClient::Pass {
            from: inp.u32(),
            to: inp.u32(),
            tag: inp.u32(),
            round: inp.u64(),
            elem: inp.elem(),
            values: inp.buf(),
        }),
        27 => client(ToClient::WorkerStopped {
            worker: inp.u32(),
            round: inp.u64(),
        }),
        28 => shard(ToShard::SetRows {
            from: inp.u32(),
            rows: inp.rows(),
            last: inp.u8() & 1 == 1,
        }),
        29 => client(ToClient::RowsSet { shard: inp.u32() }),
        30 => shard(ToShard::SetRule {
            from: inp.u32(),
            table: inp.u32(),
            rule: inp.rule(),
        }),
        31 => shard(ToShard::Call {
            from: inp.u32(),
            function: inp.u32(),
            args: (0..inp.count())
                .map(|_| f64::from_bits(inp.u64()))
                .collect(),
        }),
        32 => shard(ToShard::Branch {
            from: inp.u32(),
            clock: inp.u64(),
            op: {
                let id = crate::ids::BranchId(inp.u32());
                match inp.u8() % 5 {
                    0 => crate::msg::BranchOp::Fork {
                        source: crate::ids::BranchId(inp.u32()),
                        id,
                    },
                    1 => crate::msg::BranchOp::Switch { to: id },
                    2 => crate::msg::BranchOp::Free { id },
                    3 => crate::msg::BranchOp::Park { id },
                    _ => crate::msg::BranchOp::Unpark {
                        id,
                        part: inp.buf().as_bytes().to_vec(),
                    },
                }
            },
        }),
        33 => client(ToClient::Branched {
            shard: inp.u32(),
            outcome: if inp.u8() & 1 == 0 {
                Ok(inp.buf().as_bytes().to_vec())
            } else {
                Err(inp.string())
            },
        }),
        34 => shard(ToShard::Replicate {
            primary: inp.u32(),
            run_start: inp.u64(),
            since: inp.u64(),
            clock: inp.u64(),
            tables: (0..inp.count()).map(|_| inp.meta()).collect(),
            clocks: (0..inp.count())
                .map(|_| crate::msg::ReplicatedClock {
                    clock: inp.u64(),
                    rows: inp.rows(),
                    states: inp.states(),
                })
                .collect(),
        }),
        35 => shard(ToShard::ReplicaAck {
            backup: inp.u32(),
            primary: inp.u32(),
            clock: inp.u64(),
        }),
        36 => shard(ToShard::KeepState {
            from: inp.u32(),
            clock: inp.u64(),
            state: inp.buf().as_bytes().to_vec(),
        }),
        37 => client(ToClient::StateKept {
            shard: inp.u32(),
            clock: inp.u64(),
        }),
        _ => client(ToClient::Called {
            called: crate::msg::Called {
                shard: inp.u32(),
                result: if inp.u8() & 1 == 0 {
                    Ok((0..inp.count())
                        .map(|_| f64::from_bits(inp.u64()))
                        .collect())
                } else {
                    Err(inp.string())
                },
                wrote: inp.u8() & 1 == 1,
            },
        }),
    }
}

/// The wire bytes of `frame` (header and body).
fn wire_of(frame: &Frame) -> Vec<u8> {
    let mut wire = (frame.body.len() as u32).to_le_bytes().to_vec();
    wire.push(frame.kind as u8);
    wire.extend_from_slice(&frame.body);
    wire
}

/// A decoded frame as `encode_data` / `control_frame` lay it out before sealing (header,
/// zeroed tag, and for a body the body and a zeroed tag).
fn unsealed_of(frame: &Frame) -> Vec<u8> {
    let mut wire = (frame.body.len() as u32).to_le_bytes().to_vec();
    wire.push(frame.kind as u8);
    wire.extend_from_slice(&[0; TAG_LEN]);
    if !frame.body.is_empty() {
        wire.extend_from_slice(&frame.body);
        wire.extend_from_slice(&[0; TAG_LEN]);
    }
    wire
}

/// A decoder with the targets' key, capped at `max_frame`.
fn decoder(max_frame: usize) -> FrameDecoder {
    FrameDecoder::new(max_frame, Opener::new(&test_key()))
}

/// Seals unsealed frames (`encode_data` / `control_frame` output) in order, as one
/// connection's sender does, and concatenates them.
fn sealed(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut sealer = Sealer::new(&test_key());
    let mut wire = Vec::new();
    for f in frames {
        let mut f = f.clone();
        sealer.seal(&mut f, HEADER_LEN);
        wire.extend_from_slice(&f);
    }
    wire
}

/// Seals a stream in the plain layout `[u32 length][kind][body]...` (the fuzz input of
/// `frame_raw`) frame by frame as the decoder will delimit it: each whole frame sealed;
/// of an incomplete last frame, its header sealed and the body bytes there are passed
/// through (the decoder only collects them); fewer bytes than a header, passed through.
/// So the structure checks behind the integrity check see whatever the fuzzer builds.
fn seal_plain_stream(plain: &[u8]) -> Vec<u8> {
    let mut sealer = Sealer::new(&test_key());
    let mut wire = Vec::new();
    let mut at = 0;
    while plain.len() - at >= HEADER_LEN {
        let header = &plain[at..at + HEADER_LEN];
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let body = &plain[at + HEADER_LEN..];
        let mut f = header.to_vec();
        f.extend_from_slice(&[0; TAG_LEN]);
        if body.len() < len || len == 0 {
            sealer.seal(&mut f, HEADER_LEN);
            wire.extend_from_slice(&f);
            if body.len() < len {
                wire.extend_from_slice(body);
                return wire;
            }
            at += HEADER_LEN;
            continue;
        }
        f.extend_from_slice(&body[..len]);
        f.extend_from_slice(&[0; TAG_LEN]);
        sealer.seal(&mut f, HEADER_LEN);
        wire.extend_from_slice(&f);
        at += HEADER_LEN + len;
    }
    wire.extend_from_slice(&plain[at..]);
    wire
}

/// Raw bytes through the streaming frame decoder and the message decoder.
///
/// The first byte picks the body cap and the chunk size the rest is fed in. The rest is
/// read as plain frames and sealed as a sender would ([`seal_plain_stream`]), so that
/// what the fuzzer builds reaches the checks behind the integrity check; the raw bytes
/// themselves are fed to a decoder too, which must yield nothing (they are not sealed).
/// Panics unless: the decoder never holds more than the cap and a tag; an error is
/// returned again by every later call; without an error, the frames it yielded,
/// re-encoded, are the start of the input and the rest is one incomplete frame;
/// every data body that decodes as an `Envelope` re-encodes to exactly its frame (the
/// encoding is canonical, so a message cannot be smuggled in two spellings).
pub fn frame_raw(data: &[u8]) {
    let mut inp = Input(data);
    let selector = inp.u8();
    let max_frame = CAPS[usize::from(selector) % CAPS.len()];
    let chunk = CHUNKS[usize::from(selector >> 4) % CHUNKS.len()];
    let stream = inp.0;
    let mut raw = Vec::new();
    let _ = decoder(max_frame).feed(stream, &mut raw);
    assert!(raw.is_empty(), "unsealed bytes made a frame");
    let wire = seal_plain_stream(stream);
    let mut dec = decoder(max_frame);
    let mut frames = Vec::new();
    let mut failed = None;
    for piece in wire.chunks(chunk.min(wire.len()).max(1)) {
        if let Err(e) = dec.feed(piece, &mut frames) {
            failed = Some(e);
            break;
        }
        assert!(
            dec.buffered_capacity() <= max_frame + TAG_LEN,
            "the decoder holds {} bytes under a {max_frame}-byte cap",
            dec.buffered_capacity()
        );
    }
    if let Some(e) = failed {
        let before = frames.len();
        assert_eq!(dec.feed(&[0], &mut frames), Err(e), "errors are sticky");
        assert_eq!(frames.len(), before, "a failed decoder yields nothing");
    } else {
        let mut consumed = 0;
        for f in &frames {
            let wire = wire_of(f);
            assert_eq!(
                &stream[consumed..consumed + wire.len()],
                &wire[..],
                "frame re-encodes to other bytes"
            );
            consumed += wire.len();
        }
        let mut rest = Vec::new();
        let _ = decoder(max_frame).feed(&seal_plain_stream(&stream[consumed..]), &mut rest);
        assert!(rest.is_empty(), "the rest of the input held a whole frame");
    }
    for f in &frames {
        assert!(f.body.len() <= max_frame, "a frame over the cap came out");
        match f.kind {
            FrameKind::Data => {
                if let Ok(env) = decode_data::<Envelope>(&f.body) {
                    let again = encode_data(&env, usize::MAX).expect("a decoded message encodes");
                    assert_eq!(
                        again,
                        unsealed_of(f),
                        "decoded message re-encodes differently"
                    );
                }
            }
            FrameKind::Heartbeat | FrameKind::Bye => {
                assert!(f.body.is_empty(), "a control frame with a body");
                assert_eq!(unsealed_of(f), control_frame(f.kind));
            }
        }
    }
}

/// Structured messages that must round-trip: builds an `Envelope` of any kind from the
/// input, encodes it as a data frame, and panics unless the frame decodes back to a
/// message with the same encoding, in one piece through the streaming decoder too, and
/// unless the body with a byte more, or cut short (at an input-chosen point), is refused.
/// Also panics unless the message's kind, which names it in the traffic counters, is the
/// name of its variant.
pub fn frame_roundtrip(data: &[u8]) {
    let mut inp = Input(data);
    let env = envelope(&mut inp);
    let debug = format!("{env:?}");
    let name = Envelope::KINDS[env.kind()];
    assert!(
        debug
            .split_once(", ")
            .is_some_and(|(_, msg)| msg.starts_with(&format!("{name} {{"))),
        "{debug} counted as {name}"
    );
    let frame = encode_data(&env, MAX_FRAME).expect("a generated message fits the cap");
    assert_eq!(frame[4], FrameKind::Data as u8);
    let body = crate::net::frame::body_of(&frame);
    assert_eq!(
        u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as usize,
        body.len(),
        "the length prefix counts the body"
    );
    let decoded: Envelope = decode_data(body).expect("an encoded message decodes");
    assert_eq!(encode_data(&decoded, MAX_FRAME).as_ref(), Ok(&frame));
    assert_eq!(format!("{decoded:?}"), format!("{env:?}"));

    let mut frames = Vec::new();
    let wire = sealed(std::slice::from_ref(&frame));
    decoder(body.len())
        .feed(&wire, &mut frames)
        .expect("a frame at exactly the cap is accepted");
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].body, body);
    let mut flipped = wire.clone();
    let at = usize::from(inp.u8()) % flipped.len();
    flipped[at] ^= 1;
    assert!(
        decoder(body.len()).feed(&flipped, &mut Vec::new()).is_err(),
        "a frame with byte {at} flipped is accepted"
    );
    if !body.is_empty() {
        let refused = decoder(body.len() - 1).feed(&wire, &mut Vec::new());
        assert!(
            refused.is_err(),
            "a frame one byte over the cap is accepted"
        );
    }

    let mut longer = body.to_vec();
    longer.push(inp.u8());
    assert!(
        decode_data::<Envelope>(&longer).is_err(),
        "trailing byte accepted"
    );
    let cut = usize::from(inp.u8()) % body.len().max(1);
    assert!(
        decode_data::<Envelope>(&body[..cut]).is_err(),
        "truncated body accepted"
    );
    assert_eq!(
        encode_data(&env, body.len().saturating_sub(1)).is_err(),
        !body.is_empty(),
        "encoding checks the cap"
    );
}

/// Valid frames split at arbitrary points: builds up to 16 frames (heartbeats, byes and
/// data frames of generated messages), concatenates them, feeds the stream to a decoder
/// capped at exactly the largest body in pieces whose sizes come from the rest of the
/// input, and panics unless exactly the same frames come out, in order.
pub fn frame_split(data: &[u8]) {
    let mut inp = Input(data);
    let n = usize::from(inp.u8() % 17);
    let mut expected = Vec::new();
    for _ in 0..n {
        let frame = match inp.u8() % 4 {
            0 => control_frame(FrameKind::Heartbeat).to_vec(),
            1 => control_frame(FrameKind::Bye).to_vec(),
            _ => encode_data(&envelope(&mut inp), MAX_FRAME).expect("fits the cap"),
        };
        expected.push(frame);
    }
    let wire = sealed(&expected);
    let cap = expected
        .iter()
        .map(|f| crate::net::frame::body_len(f))
        .max()
        .unwrap_or(0);
    let mut dec = decoder(cap);
    let mut frames = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let len = if inp.is_empty() {
            wire.len() - at
        } else {
            usize::from(inp.u8())
        };
        let end = (at + len).min(wire.len());
        dec.feed(&wire[at..end], &mut frames)
            .expect("valid frames decode");
        assert!(dec.buffered_capacity() <= cap + TAG_LEN);
        at = end;
    }
    let got: Vec<Vec<u8>> = frames.iter().map(unsealed_of).collect();
    assert_eq!(got, expected, "frames differ after splitting");
}

/// The secret of every handshake these targets run (the fuzzer is never told it).
const SECRET: &[u8] = b"iterstore fuzzing secret, 32 b!!";

/// The handshake: the first byte's low bit picks a **stranger** (the input is what an
/// unauthenticated peer sends to one side, in input-chosen pieces) or an **honest pair**
/// (two sides with input-chosen ranks, cluster ids, secrets and nonces, talking through a
/// channel that may flip one byte). See `stranger` and `pair` (private) for what must hold.
pub fn handshake(data: &[u8]) {
    let mut inp = Input(data);
    if inp.u8() & 1 == 0 {
        stranger(&mut inp);
    } else {
        pair(&mut inp);
    }
}

/// One side (acceptor, or dialer of rank 0, of cluster `0xC1` of 4 ranks) fed what the
/// input says a stranger sends, one piece per `[len][bytes]` record. Panics unless: our
/// reply is at most one proof, sent only after a whole hello with the right magic; a
/// finished handshake refuses more bytes; and the handshake completes only if the
/// stranger's proof is exactly the one an honest peer with the stranger's hello would
/// send (so a stranger that does not know the secret cannot get in).
fn stranger(inp: &mut Input<'_>) {
    let ours = inp.u8();
    let rank = u32::from(ours % 4);
    let role = if ours & 0x80 == 0 {
        Role::Acceptor
    } else {
        Role::Dialer {
            target: u32::from((ours >> 2) % 4),
        }
    };
    let mut hs = Handshake::new(role, rank, 4, 0xC1, SECRET, [7; 32]);
    let mut received = Vec::new();
    let mut out = Vec::new();
    let mut outcome = Ok(None);
    while !inp.is_empty() {
        let piece = inp.bytes();
        outcome = hs.feed(piece, &mut out, |r| r == 3);
        match &outcome {
            Ok(Some(done)) => {
                assert!(done.consumed <= piece.len());
                received.extend_from_slice(&piece[..done.consumed]);
                break;
            }
            Ok(None) => received.extend_from_slice(piece),
            Err(_) => {
                received.extend_from_slice(piece);
                break;
            }
        }
    }
    assert!(
        out.is_empty() || out.len() == PROOF_LEN,
        "more than one proof"
    );
    if !out.is_empty() {
        assert!(received.len() >= HELLO_LEN && received[..4] == crate::net::handshake::MAGIC);
    }
    if role == Role::Acceptor {
        assert!(
            out.is_empty() || matches!(outcome, Ok(Some(_))),
            "the acceptor revealed its proof to a stranger whose proof did not verify"
        );
    }
    if !matches!(outcome, Ok(None)) {
        assert_eq!(
            hs.feed(b"x", &mut Vec::new(), |_| false),
            Err(Refusal::Finished)
        );
    }
    if let Ok(Some(done)) = outcome {
        assert_eq!(received.len(), HELLO_LEN + PROOF_LEN);
        let hello = Hello::from_bytes(received[..HELLO_LEN].try_into().expect("a hello"));
        assert_eq!(done.peer_rank, hello.rank);
        let honest_role = match role {
            Role::Acceptor => Role::Dialer { target: rank },
            Role::Dialer { .. } => Role::Acceptor,
        };
        let mut honest = Handshake::new(
            honest_role,
            hello.rank,
            4,
            hello.cluster_id,
            SECRET,
            hello.nonce,
        );
        // The honest peer's proof, given our hello and (an acceptor's proof comes after the
        // dialer's) the proof we sent.
        let mut proof = Vec::new();
        let ours = [&hs.hello()[..], &out[..]].concat();
        let _ = honest.feed(&ours, &mut proof, |_| false);
        assert_eq!(
            received[HELLO_LEN..],
            proof[..],
            "authenticated by a proof an honest peer would not send"
        );
    }
}

/// What one side of a [`pair`] run saw: its outcome and the bytes left after it finished.
struct Side {
    outcome: Result<Option<Done>, Refusal>,
    /// The bytes delivered to this side that belonged to the handshake.
    handshake_bytes: Vec<u8>,
    /// The bytes delivered after the handshake completed (the peer's first frames).
    after: Vec<u8>,
}

/// An honest dialer and acceptor with input-chosen parameters, exchanging bytes in
/// input-chosen pieces; the channel flips one byte of one direction if the input says so,
/// and each side sends `FRAMES` right after its proof. Panics unless: a side completes
/// only if the configurations agree and the bytes it received were not tampered with
/// (when it completes, the peer rank is the real one and every byte after the proof is
/// left for the caller); and when nothing was tampered with and the configurations agree,
/// both sides complete.
fn pair(inp: &mut Input<'_>) {
    const FRAMES: &[u8] = b"FRAMES";
    let size = u32::from(inp.u8() % 6) + 1;
    let dialer_rank = u32::from(inp.u8() % 7);
    let target = u32::from(inp.u8() % 7);
    let acceptor_rank = u32::from(inp.u8() % 7);
    let ids = inp.u8();
    let (dialer_cluster, acceptor_cluster) = (u64::from(ids & 1), u64::from(ids & 2) >> 1);
    let other_secret = ids & 4 != 0;
    let same_nonce = ids & 8 != 0;
    let flip_dir = (ids >> 4) & 3; // 0 or 3: no flip; 1: to the acceptor; 2: to the dialer
    let flip_at = usize::from(inp.u8()) % (HELLO_LEN + PROOF_LEN + FRAMES.len());
    let flip_mask = inp.u8().max(1);
    let chunk = inp.pick(&CHUNKS).min(1 << 16);
    let dialer_nonce = [inp.u8(); 32];
    let acceptor_nonce = if same_nonce {
        dialer_nonce
    } else {
        [!dialer_nonce[0]; 32]
    };
    let acceptor_secret: &[u8] = if other_secret {
        b"another secret, 16+ bytes"
    } else {
        SECRET
    };

    let mut dialer = Handshake::new(
        Role::Dialer { target },
        dialer_rank,
        size,
        dialer_cluster,
        SECRET,
        dialer_nonce,
    );
    let mut acceptor = Handshake::new(
        Role::Acceptor,
        acceptor_rank,
        size,
        acceptor_cluster,
        acceptor_secret,
        acceptor_nonce,
    );
    // Streams in flight, and how many bytes each direction has carried so far.
    let mut to_dialer = acceptor.hello().to_vec();
    let mut to_acceptor = dialer.hello().to_vec();
    let (mut sent_to_dialer, mut sent_to_acceptor) = (0usize, 0usize);
    let mut d = Side::new();
    let mut a = Side::new();
    while !to_dialer.is_empty() || !to_acceptor.is_empty() {
        let flip = |dir| (flip_dir == dir).then_some((flip_at, flip_mask));
        let piece = transmit(&mut to_dialer, &mut sent_to_dialer, chunk, flip(2));
        d.deliver(&mut dialer, &piece, &mut to_acceptor, FRAMES);
        let piece = transmit(&mut to_acceptor, &mut sent_to_acceptor, chunk, flip(1));
        a.deliver(&mut acceptor, &piece, &mut to_dialer, FRAMES);
    }
    let d_done = matches!(d.outcome, Ok(Some(_)));
    let a_done = matches!(a.outcome, Ok(Some(_)));
    let agree = dialer_rank < size
        && acceptor_rank < size
        && target == acceptor_rank
        && dialer_rank > acceptor_rank
        && dialer_cluster == acceptor_cluster
        && !other_secret
        && !same_nonce;
    let handshake_len = HELLO_LEN + PROOF_LEN;
    let untouched = |dir| flip_dir != dir || flip_at >= handshake_len;
    if d_done {
        assert!(agree && untouched(2), "the dialer authenticated a bad peer");
        assert_eq!(d.peer(), acceptor_rank);
        assert_eq!(d.handshake_bytes.len(), handshake_len);
    }
    if a_done {
        assert!(
            agree && untouched(1),
            "the acceptor authenticated a bad peer"
        );
        assert_eq!(a.peer(), dialer_rank);
        assert_eq!(a.handshake_bytes.len(), handshake_len);
    }
    if agree && untouched(1) && untouched(2) {
        assert!(
            d_done && a_done,
            "honest sides failed: {:?} / {:?}",
            d.outcome,
            a.outcome
        );
        for (side, dir) in [(&d, 2), (&a, 1)] {
            if flip_dir != dir {
                assert_eq!(side.after, FRAMES, "frames after the proof lost or mangled");
            }
        }
    }
}

/// Takes the next piece of up to `chunk` bytes off a direction's `inbox`, of which `sent`
/// bytes went before, applying the channel's `flip` (position in the direction, mask).
fn transmit(
    inbox: &mut Vec<u8>,
    sent: &mut usize,
    chunk: usize,
    flip: Option<(usize, u8)>,
) -> Vec<u8> {
    let n = chunk.min(inbox.len());
    let mut piece: Vec<u8> = inbox.drain(..n).collect();
    if let Some((at, mask)) = flip {
        if (*sent..*sent + n).contains(&at) {
            piece[at - *sent] ^= mask;
        }
    }
    *sent += n;
    piece
}

impl Side {
    fn new() -> Side {
        Side {
            outcome: Ok(None),
            handshake_bytes: Vec::new(),
            after: Vec::new(),
        }
    }

    fn peer(&self) -> u32 {
        match &self.outcome {
            Ok(Some(done)) => done.peer_rank,
            _ => unreachable!("only asked of a completed side"),
        }
    }

    /// Delivers `piece` to this side; once it has sent its proof, `frames` follow it.
    fn deliver(&mut self, hs: &mut Handshake, piece: &[u8], outbox: &mut Vec<u8>, frames: &[u8]) {
        match self.outcome {
            Ok(None) => {}
            Ok(Some(_)) => {
                self.after.extend_from_slice(piece);
                return;
            }
            Err(_) => return,
        }
        let mut out = Vec::new();
        self.outcome = hs.feed(piece, &mut out, |_| false);
        match &self.outcome {
            Ok(Some(done)) => {
                self.handshake_bytes
                    .extend_from_slice(&piece[..done.consumed]);
                self.after.extend_from_slice(&piece[done.consumed..]);
            }
            Ok(None) => self.handshake_bytes.extend_from_slice(piece),
            Err(_) => {}
        }
        if !out.is_empty() {
            assert_eq!(out.len(), PROOF_LEN);
            outbox.extend_from_slice(&out);
            outbox.extend_from_slice(frames);
        }
    }
}

/// Runs `check` on every file of the corpus directory `dir` (the replay of a fuzz target's
/// corpus in the normal `cargo test`); panics naming each input that panicked, and if the
/// directory is missing or empty.
pub fn replay(dir: &std::path::Path, check: fn(&[u8])) {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut inputs = 0;
    let mut failed = Vec::new();
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        inputs += 1;
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(inputs > 0, "{}: empty corpus", dir.display());
    assert!(
        failed.is_empty(),
        "{} inputs fail: {failed:?}",
        failed.len()
    );
}
