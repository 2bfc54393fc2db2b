//! The network under the attacks of issue 45: idle sockets at start-up, a bit flipped on
//! the wire by an on-path relay, a frame dribbled slower than the least rate.

use super::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Idle sockets cannot keep the cluster from forming (issue 45): 100 connections that never
/// say a word wait on rank 0's port before it starts, and more keep coming while it
/// starts; the oldest unauthenticated connection makes room for each new one, so rank 1's
/// handshake gets through.
#[test]
fn idle_connections_do_not_keep_a_listed_peer_out() {
    let (listeners, addrs) = bind(2);
    let target = addrs[0];
    let mut idle: Vec<std::net::TcpStream> = (0..100)
        .map(|_| TcpStream::connect(target).unwrap())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // Connections are opened faster than the handshake timeout retires them and
            // held (the newest 4,000) until the cluster has started.
            let mut held = std::collections::VecDeque::new();
            while !stop.load(Ordering::SeqCst) {
                for _ in 0..16 {
                    if let Ok(s) = TcpStream::connect(target) {
                        held.push_back(s);
                    }
                }
                while held.len() > 4000 {
                    held.pop_front();
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let cfgs = listeners
        .into_iter()
        .enumerate()
        .map(|(r, l)| (config(r as u32, &addrs, l), channel_deliver().0))
        .collect();
    let started = Instant::now();
    let nets = start_all(cfgs);
    stop.store(true, Ordering::SeqCst);
    flood.join().unwrap();
    for (rank, net) in nets.iter().enumerate() {
        assert!(net.is_ok(), "rank {rank}: {:?}", net.as_ref().err());
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    idle.clear();
}

/// A relay between rank 1 and rank 0's real address that forwards both directions and,
/// once `after` bytes have gone from rank 1 towards rank 0, flips bit `mask` of the next
/// byte: an on-path attacker without the secret. Returns the address rank 1 should dial.
fn flipping_relay(target: SocketAddr, after: usize, mask: u8) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((from_dialer, _)) = listener.accept() else {
            return;
        };
        let Ok(to_acceptor) = TcpStream::connect(target) else {
            return;
        };
        let pump = |mut src: TcpStream, mut dst: TcpStream, flip: Option<(usize, u8)>| {
            std::thread::spawn(move || {
                let mut seen = 0usize;
                let mut buf = [0u8; 4096];
                while let Ok(n) = src.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Some((at, mask)) = flip {
                        if (seen..seen + n).contains(&at) {
                            buf[at - seen] ^= mask;
                        }
                    }
                    seen += n;
                    if dst.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = dst.shutdown(std::net::Shutdown::Both);
            })
        };
        let a = pump(
            from_dialer.try_clone().unwrap(),
            to_acceptor.try_clone().unwrap(),
            Some((after, mask)),
        );
        let b = pump(to_acceptor, from_dialer, None);
        let _ = (a.join(), b.join());
    });
    addr
}

/// An on-path attacker flips one bit of a frame after the handshake (issue 45: a flipped
/// bit went unnoticed and changed a model): rank 0 refuses the frame as an integrity
/// failure and loses rank 1, naming it; nothing altered is delivered.
#[test]
fn a_bit_flipped_on_the_wire_after_the_handshake_is_an_integrity_failure() {
    use crate::net::handshake::{HELLO_LEN, PROOF_LEN};
    let (listeners, addrs) = bind(2);
    let mut listeners = listeners.into_iter();
    let l0 = listeners.next().unwrap();
    let l1 = listeners.next().unwrap();
    // Rank 1 sends its hello and proof, then frames: flip a bit inside the first data
    // frame's body (past its header and header tag).
    let past = HELLO_LEN + PROOF_LEN + crate::net::frame::WIRE_HEADER_LEN + 3;
    let relay = flipping_relay(addrs[0], past, 0x20);
    let c0 = config(0, &addrs, l0);
    let c1 = config(1, &[relay, addrs[1]], l1);
    let (d0, e0) = channel_deliver();
    let (d1, e1) = channel_deliver();
    let mut nets = start_all(vec![(c0, d0), (c1, d1)]).into_iter();
    let n0 = Node {
        net: nets.next().unwrap().expect("rank 0 starts"),
        events: e0,
    };
    let n1 = Node {
        net: nets.next().unwrap().expect("rank 1 starts"),
        events: e1,
    };
    n1.net.send(0, &msg(1, 0, 1, 300)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match n0.events.recv_timeout(left) {
            Ok(NetEvent::PeerLost {
                rank: 1, reason, ..
            }) => {
                assert!(reason.contains("integrity"), "{reason}");
                break;
            }
            Ok(NetEvent::Msg { msg, .. }) => panic!("an altered frame was delivered: {msg:?}"),
            Ok(_) => {}
            Err(e) => panic!("rank 0 did not refuse the altered frame: {e:?}"),
        }
    }
}

/// A peer that authenticates, sends a frame header announcing 200 KiB and then dribbles
/// its body a byte at a time (issue 45: a forged 200 MiB header dribbled a byte every
/// 0.5 s kept the liveness check quiet for 65 s) is lost once the frame's allowance — the
/// heartbeat timeout plus its length at `MIN_FRAME_RATE` — has passed, naming the frame.
#[test]
fn a_frame_dribbled_slower_than_the_least_rate_is_lost_at_its_deadline() {
    use crate::net::frame;
    use crate::net::handshake::{fresh_nonce, Handshake, Role};
    use crate::net::seal::Sealer;
    let (mut listeners, addrs) = bind(2);
    let mut c0 = config(0, &addrs, listeners.remove(0));
    c0.heartbeat_timeout = Duration::from_millis(600);
    let (d0, e0) = channel_deliver();
    let rank0 = std::thread::spawn(move || Net::<TestMsg>::start(c0, d0));
    // Rank 1, by hand: dial, handshake, then the slow frame.
    let mut s = TcpStream::connect(addrs[0]).unwrap();
    let mut hs = Handshake::new(
        Role::Dialer { target: 0 },
        1,
        2,
        CLUSTER,
        SECRET,
        fresh_nonce().unwrap(),
    );
    s.write_all(&hs.hello()).unwrap();
    let mut buf = [0u8; 256];
    let done = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "rank 0 closed during the handshake");
        let mut out = Vec::new();
        let r = hs.feed(&buf[..n], &mut out, |_| false).unwrap();
        s.write_all(&out).unwrap();
        if let Some(done) = r {
            break done;
        }
    };
    let n0 = Node {
        net: rank0.join().unwrap().expect("rank 0 starts"),
        events: e0,
    };
    let len = 200 << 10;
    let mut header = frame::control_frame(frame::FrameKind::Heartbeat).to_vec();
    header[..4].copy_from_slice(&(len as u32).to_le_bytes());
    header[4] = frame::FrameKind::Data as u8;
    Sealer::new(&done.keys.send).seal(&mut header, frame::HEADER_LEN);
    s.write_all(&header).unwrap();
    let started = Instant::now();
    let dribble = std::thread::spawn(move || {
        while started.elapsed() < Duration::from_secs(10) && s.write_all(&[0]).is_ok() {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let (_, reason) = wait_lost(&n0, 1, Duration::from_secs(10));
    let took = started.elapsed();
    assert!(
        reason.contains("a frame of 204816 bytes did not arrive"),
        "{reason}"
    );
    // Its allowance is 0.6 s + 204816 B / 1 MiB/s = 0.8 s.
    assert!(took >= Duration::from_millis(790), "lost after {took:?}");
    dribble.join().unwrap();
}
