//! The rendezvous's frames on the wire, their authentication, and reading and writing
//! them under a deadline.
//!
//! A frame is a 10-byte header — `ISRV`, version 1, a kind byte, the body's length (u32,
//! big-endian) — and a body. Rank 0 opens each connection with a [`Kind::Challenge`] (a
//! fresh nonce); the other rank answers with a [`Kind::Hello`] (its rank, the world size,
//! its cluster address and a nonce of its own), whose HMAC-SHA256 tag covers rank 0's
//! nonce; rank 0 ends the connection with [`Kind::Hosts`] (every rank's address) or
//! [`Kind::Refused`] (why), tagged over that rank's nonce. So neither side accepts a frame
//! recorded from another connection. A body's length is checked against what its kind may
//! hold before anything is allocated. This module knows nothing of ranks' meaning or of
//! who waits for whom.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Instant;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::membership::MAX_HOSTLIST_HOSTS;

/// A nonce's length: a connection's challenge, a hello's own nonce.
pub(super) const NONCE_LEN: usize = 16;

/// A fresh nonce.
pub(super) type Nonce = [u8; NONCE_LEN];

/// The first bytes of every frame.
const MAGIC: [u8; 4] = *b"ISRV";

/// The protocol's version: a frame of another version is refused.
const VERSION: u8 = 1;

/// Magic, version, kind and body length.
const HEADER_LEN: usize = 10;

/// An HMAC-SHA256 tag.
const TAG_LEN: usize = 32;

/// An encoded address: family (4 or 6), 16 address bytes, port.
const ADDR_LEN: usize = 19;

/// A hello's body: rank, world size, address, nonce, tag.
const HELLO_LEN: usize = 4 + 4 + ADDR_LEN + NONCE_LEN + TAG_LEN;

/// The longest refusal text sent or accepted, in bytes.
pub(super) const MAX_REFUSAL: usize = 2048;

/// What the tags are computed under, so that no other use of the secret yields a valid
/// rendezvous tag.
const DOMAIN: &[u8] = b"iterstore rendezvous v1\0";

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Rank 0's first frame on a connection: a nonce.
    Challenge = 1,
    /// Another rank's check-in.
    Hello = 2,
    /// Rank 0's answer: every rank's address.
    Hosts = 3,
    /// Rank 0's answer: why the rendezvous failed or this rank was refused.
    Refused = 4,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        [Kind::Challenge, Kind::Hello, Kind::Hosts, Kind::Refused]
            .into_iter()
            .find(|k| *k as u8 == b)
    }

    /// The body lengths a frame of this kind may have, for a world of `world` processes.
    fn allows(self, len: usize, world: usize) -> bool {
        match self {
            Kind::Challenge => len == NONCE_LEN,
            Kind::Hello => len == HELLO_LEN,
            Kind::Hosts => world <= MAX_HOSTLIST_HOSTS && len == 4 + world * ADDR_LEN + TAG_LEN,
            Kind::Refused => (TAG_LEN..=TAG_LEN + MAX_REFUSAL).contains(&len),
        }
    }
}

/// A rank's check-in, as [`Kind::Hello`] carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    /// The rank it claims.
    pub(super) rank: u32,
    /// The world size it expects.
    pub(super) world: u32,
    /// Where it will listen for the cluster.
    pub(super) addr: SocketAddr,
    /// Its nonce, which rank 0's answer is tagged over.
    pub(super) nonce: Nonce,
}

/// A fresh random nonce (or why the system gave none).
pub(super) fn nonce() -> Result<Nonce, String> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).map_err(|e| format!("no randomness for a nonce: {e}"))?;
    Ok(n)
}

/// The tag of a `kind` frame's `body` over `nonce`.
fn tag(secret: &[u8], kind: Kind, nonce: &Nonce, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC accepts keys of any length");
    mac.update(DOMAIN);
    mac.update(&[kind as u8]);
    mac.update(nonce);
    mac.update(body);
    mac
}

/// A frame of `kind` around `body`.
fn frame(kind: Kind, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADER_LEN + body.len());
    f.extend_from_slice(&MAGIC);
    f.push(VERSION);
    f.push(kind as u8);
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// A frame of `kind` around `body` and its tag over `nonce`.
fn tagged(secret: &[u8], kind: Kind, nonce: &Nonce, mut body: Vec<u8>) -> Vec<u8> {
    let t = tag(secret, kind, nonce, &body).finalize().into_bytes();
    body.extend_from_slice(&t);
    frame(kind, &body)
}

/// `body` (tag last) if its tag over `nonce` is right.
fn verified<'a>(
    secret: &[u8],
    kind: Kind,
    nonce: &Nonce,
    body: &'a [u8],
) -> Result<&'a [u8], String> {
    let (data, t) = body
        .split_at_checked(body.len().saturating_sub(TAG_LEN))
        .ok_or("too short for its tag")?;
    tag(secret, kind, nonce, data)
        .verify_slice(t)
        .map_err(|_| "not authenticated by this cluster's secret (is the secret the same?)")?;
    Ok(data)
}

/// A challenge frame.
pub(super) fn challenge(nonce: &Nonce) -> Vec<u8> {
    frame(Kind::Challenge, nonce)
}

/// A hello frame, tagged over rank 0's challenge `challenge`.
pub(super) fn hello(secret: &[u8], challenge: &Nonce, hello: &Hello) -> Vec<u8> {
    let mut body = Vec::with_capacity(HELLO_LEN);
    body.extend_from_slice(&hello.rank.to_be_bytes());
    body.extend_from_slice(&hello.world.to_be_bytes());
    put_addr(&mut body, hello.addr);
    body.extend_from_slice(&hello.nonce);
    tagged(secret, Kind::Hello, challenge, body)
}

/// A hosts frame for the rank whose nonce is `nonce`.
pub(super) fn hosts(secret: &[u8], nonce: &Nonce, hosts: &[SocketAddr]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + hosts.len() * ADDR_LEN + TAG_LEN);
    body.extend_from_slice(&(hosts.len() as u32).to_be_bytes());
    for &a in hosts {
        put_addr(&mut body, a);
    }
    tagged(secret, Kind::Hosts, nonce, body)
}

/// A refusal frame for the rank whose nonce is `nonce` (`why` cut to [`MAX_REFUSAL`]
/// bytes).
pub(super) fn refused(secret: &[u8], nonce: &Nonce, why: &str) -> Vec<u8> {
    let mut cut = why.len().min(MAX_REFUSAL);
    while !why.is_char_boundary(cut) {
        cut -= 1;
    }
    tagged(secret, Kind::Refused, nonce, why.as_bytes()[..cut].to_vec())
}

/// The hello in `body`, if its tag over `challenge` is right.
pub(super) fn read_hello(secret: &[u8], challenge: &Nonce, body: &[u8]) -> Result<Hello, String> {
    let data = verified(secret, Kind::Hello, challenge, body)?;
    if data.len() != HELLO_LEN - TAG_LEN {
        return Err(format!("a hello of {} bytes", body.len()));
    }
    let (rank, rest) = data.split_at(4);
    let (world, rest) = rest.split_at(4);
    let (addr, nonce) = rest.split_at(ADDR_LEN);
    Ok(Hello {
        rank: u32::from_be_bytes(rank.try_into().map_err(|_| "bad rank")?),
        world: u32::from_be_bytes(world.try_into().map_err(|_| "bad world size")?),
        addr: get_addr(addr)?,
        nonce: nonce.try_into().map_err(|_| "bad nonce")?,
    })
}

/// The nonce a hello's sender chose, read without checking the tag (to tag a refusal of
/// a hello that failed the check).
pub(super) fn hello_nonce(body: &[u8]) -> Option<Nonce> {
    body.get(4 + 4 + ADDR_LEN..4 + 4 + ADDR_LEN + NONCE_LEN)?
        .try_into()
        .ok()
}

/// The addresses in a hosts frame's `body`, if its tag over `nonce` is right.
pub(super) fn read_hosts(
    secret: &[u8],
    nonce: &Nonce,
    body: &[u8],
) -> Result<Vec<SocketAddr>, String> {
    let data = verified(secret, Kind::Hosts, nonce, body)?;
    let (count, addrs) = data.split_at_checked(4).ok_or("no host count")?;
    let count = u32::from_be_bytes(count.try_into().map_err(|_| "no host count")?) as usize;
    if addrs.len() != count.saturating_mul(ADDR_LEN) {
        return Err(format!(
            "{count} hosts announced, {} bytes given",
            addrs.len()
        ));
    }
    addrs.chunks_exact(ADDR_LEN).map(get_addr).collect()
}

/// A refusal's text (control characters replaced) and whether its tag over `nonce` is
/// right.
pub(super) fn read_refusal(secret: &[u8], nonce: &Nonce, body: &[u8]) -> (String, bool) {
    let (text, authentic) = match verified(secret, Kind::Refused, nonce, body) {
        Ok(data) => (data, true),
        Err(_) => (&body[..body.len().saturating_sub(TAG_LEN)], false),
    };
    let text = String::from_utf8_lossy(text)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    (text, authentic)
}

fn put_addr(out: &mut Vec<u8>, addr: SocketAddr) {
    let mut ip = [0u8; 16];
    match addr.ip() {
        IpAddr::V4(v4) => {
            out.push(4);
            ip[..4].copy_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            out.push(6);
            ip = v6.octets();
        }
    }
    out.extend_from_slice(&ip);
    out.extend_from_slice(&addr.port().to_be_bytes());
}

/// An address as [`put_addr`] wrote it; refused if its family is unknown, its port 0 or
/// its address unspecified.
fn get_addr(b: &[u8]) -> Result<SocketAddr, String> {
    let (&family, rest) = b.split_first().ok_or("no address")?;
    let (ip, port) = rest.split_at_checked(16).ok_or("a short address")?;
    let port = u16::from_be_bytes(port.try_into().map_err(|_| "a short address")?);
    let ip: [u8; 16] = ip.try_into().map_err(|_| "a short address")?;
    let ip = match family {
        4 => IpAddr::from([ip[0], ip[1], ip[2], ip[3]]),
        6 => IpAddr::from(ip),
        f => return Err(format!("an address of unknown family {f}")),
    };
    if port == 0 || ip.is_unspecified() {
        return Err(format!("an unusable address {}", SocketAddr::new(ip, port)));
    }
    Ok(SocketAddr::new(ip, port))
}

/// Reads one frame of one of the kinds `expected` from `stream` by `deadline`, for a
/// world of `world` processes: its kind and body. The header is checked before the body
/// is read, and the body's length against its kind before it is allocated.
pub(super) fn read(
    stream: &mut TcpStream,
    deadline: Instant,
    expected: &[Kind],
    world: usize,
) -> Result<(Kind, Vec<u8>), String> {
    let mut header = [0u8; HEADER_LEN];
    read_exact_by(stream, &mut header, deadline)?;
    if header[..4] != MAGIC {
        return Err(format!(
            "not a rendezvous frame (it starts {})",
            header[..4]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if header[4] != VERSION {
        return Err(format!(
            "rendezvous protocol version {}, not {VERSION}",
            header[4]
        ));
    }
    let kind = Kind::from_byte(header[5])
        .filter(|k| expected.contains(k))
        .ok_or_else(|| format!("an unexpected frame of kind {}", header[5]))?;
    let len = u32::from_be_bytes([header[6], header[7], header[8], header[9]]) as usize;
    if !kind.allows(len, world) {
        return Err(format!("a {kind:?} frame of {len} bytes"));
    }
    let mut body = vec![0u8; len];
    read_exact_by(stream, &mut body, deadline)?;
    Ok((kind, body))
}

/// Fills `buf` from `stream`, failing once `deadline` has passed.
fn read_exact_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<(), String> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err("the connection was closed".into()),
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// Writes `bytes` to `stream`, failing once `deadline` has passed.
pub(super) fn write_by(
    stream: &mut TcpStream,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), String> {
    let mut sent = 0;
    while sent < bytes.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err("timed out".into());
        }
        stream
            .set_write_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        match stream.write(&bytes[sent..]) {
            Ok(0) => return Err("the connection was closed".into()),
            Ok(n) => sent += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// A frame's kind and body, without the header's checks (the body after the header).
    fn body(f: &[u8]) -> &[u8] {
        &f[HEADER_LEN..]
    }

    #[test]
    fn frames_round_trip_and_their_tags_bind_secret_and_nonce() {
        let (c, n) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let h = Hello {
            rank: 3,
            world: 4,
            addr: "[::1]:7000".parse().unwrap(),
            nonce: n,
        };
        let f = hello(SECRET, &c, &h);
        assert!(Kind::Hello.allows(body(&f).len(), 4));
        assert_eq!(read_hello(SECRET, &c, body(&f)).unwrap(), h);
        assert_eq!(hello_nonce(body(&f)), Some(n));
        assert!(read_hello(b"another secret, 32 bytes long...", &c, body(&f)).is_err());
        assert!(
            read_hello(SECRET, &n, body(&f)).is_err(),
            "replayed to another challenge"
        );
        let list: Vec<SocketAddr> = vec!["10.0.0.1:1".parse().unwrap(), h.addr];
        let f = hosts(SECRET, &n, &list);
        assert!(Kind::Hosts.allows(body(&f).len(), 2));
        assert!(!Kind::Hosts.allows(body(&f).len(), 3));
        assert_eq!(read_hosts(SECRET, &n, body(&f)).unwrap(), list);
        assert!(read_hosts(SECRET, &c, body(&f)).is_err());
        let f = refused(SECRET, &n, "no\nway");
        assert_eq!(
            read_refusal(SECRET, &n, body(&f)),
            ("no?way".to_string(), true)
        );
        assert_eq!(
            read_refusal(SECRET, &c, body(&f)),
            ("no?way".to_string(), false)
        );
        let long = refused(SECRET, &n, &"é".repeat(MAX_REFUSAL));
        assert!(Kind::Refused.allows(body(&long).len(), 1));
    }

    #[test]
    fn a_flipped_bit_or_a_bad_address_is_refused() {
        let c = [7u8; NONCE_LEN];
        let h = Hello {
            rank: 1,
            world: 2,
            addr: "127.0.0.1:9".parse().unwrap(),
            nonce: [0; NONCE_LEN],
        };
        let f = hello(SECRET, &c, &h);
        for i in 0..body(&f).len() {
            let mut b = body(&f).to_vec();
            b[i] ^= 1;
            assert!(read_hello(SECRET, &c, &b).is_err(), "bit flipped at {i}");
        }
        let mut a = Vec::new();
        put_addr(&mut a, "0.0.0.0:5".parse().unwrap());
        assert!(get_addr(&a).unwrap_err().contains("unusable"));
        a[0] = 5;
        assert!(get_addr(&a).unwrap_err().contains("family 5"));
        assert!(get_addr(&[4, 1]).is_err());
        assert!(!Kind::Hosts.allows(4 + 32, MAX_HOSTLIST_HOSTS + 1));
        assert!(!Kind::Refused.allows(TAG_LEN + MAX_REFUSAL + 1, 1));
    }
}
