//! Tests of whole clusters of [`Net`]s in one process, on 127.0.0.1 with pre-bound
//! `:0` listeners. Every wait is bounded; nothing asserts speed.

use crossbeam::channel::{unbounded as channel, Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Net, NetConfig, NetError, NetEvent};

/// The shared secret of the test clusters.
const SECRET: &[u8] = b"the test cluster's shared secret";
/// The cluster id of the test clusters.
const CLUSTER: u64 = 0x1735_70AE;

/// A byte buffer serialized with `serialize_bytes`, like the protocol's `AlignedBuf`
/// (bincode writes a length and the raw bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Bytes(pub(super) Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        /// Accepts a byte string.
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
        }
        d.deserialize_byte_buf(Visitor)
    }
}

/// The test message: who sent it from which thread, its sequence number, a payload
/// derived from those, and a small plain `Vec<u8>` (serialized as a sequence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct TestMsg {
    from: u32,
    thread: u32,
    seq: u64,
    payload: Bytes,
    tail: Vec<u8>,
}

/// The payload byte `i` of message (`from`, `thread`, `seq`).
fn pattern(from: u32, thread: u32, seq: u64, i: usize) -> u8 {
    (from as usize * 31 + thread as usize * 7 + seq as usize + i * 13) as u8
}

/// Message `seq` of `thread` on rank `from`, with a `len`-byte payload.
fn msg(from: u32, thread: u32, seq: u64, len: usize) -> TestMsg {
    TestMsg {
        from,
        thread,
        seq,
        payload: Bytes((0..len).map(|i| pattern(from, thread, seq, i)).collect()),
        tail: vec![seq as u8; (seq % 7) as usize],
    }
}

/// Whether `m` is intact.
fn intact(m: &TestMsg) -> bool {
    m.payload
        .0
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(m.from, m.thread, m.seq, i))
        && m.tail == vec![m.seq as u8; (m.seq % 7) as usize]
}

/// `n` listeners on 127.0.0.1:0 and their addresses.
fn bind(n: usize) -> (Vec<TcpListener>, Vec<SocketAddr>) {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let addrs = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
    (listeners, addrs)
}

/// The test configuration of `rank`: short timeouts.
fn config(rank: u32, addrs: &[SocketAddr], listener: TcpListener) -> NetConfig {
    let mut c = NetConfig::new(rank, addrs.to_vec(), CLUSTER, SECRET.to_vec());
    c.listener = Some(listener);
    c.connect_timeout = Duration::from_secs(10);
    c.handshake_timeout = Duration::from_secs(2);
    c.heartbeat_interval = Duration::from_millis(50);
    c.heartbeat_timeout = Duration::from_secs(3);
    c.max_frame = 16 << 20;
    c.queue_bytes = 8 << 20;
    c.send_timeout = Duration::from_secs(10);
    c.shutdown_timeout = Duration::from_secs(5);
    c
}

/// One process of a test cluster: its net and the events its `deliver` received.
struct Node {
    net: Net<TestMsg>,
    events: Receiver<NetEvent<TestMsg>>,
}

/// A `deliver` pushing into a channel, and the channel.
fn channel_deliver() -> (super::Deliver<TestMsg>, Receiver<NetEvent<TestMsg>>) {
    let (tx, rx) = channel();
    (
        Box::new(move |e| {
            let _ = tx.send(e);
        }),
        rx,
    )
}

/// Starts every config concurrently (each `start` waits for the others); results in rank
/// order, each with its event channel.
fn start_all(
    cfgs: Vec<(NetConfig, super::Deliver<TestMsg>)>,
) -> Vec<Result<Net<TestMsg>, NetError>> {
    let handles: Vec<_> = cfgs
        .into_iter()
        .map(|(cfg, deliver)| std::thread::spawn(move || Net::start(cfg, deliver)))
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// A cluster of `n` nodes, each config adjusted by `tweak`.
fn cluster(n: usize, tweak: impl Fn(&mut NetConfig)) -> (Vec<Node>, Vec<SocketAddr>) {
    let (listeners, addrs) = bind(n);
    let mut receivers = Vec::new();
    let cfgs = listeners
        .into_iter()
        .enumerate()
        .map(|(r, l)| {
            let mut c = config(r as u32, &addrs, l);
            tweak(&mut c);
            let (deliver, rx) = channel_deliver();
            receivers.push(rx);
            (c, deliver)
        })
        .collect();
    let nets = start_all(cfgs);
    let nodes = nets
        .into_iter()
        .zip(receivers)
        .map(|(net, events)| Node {
            net: net.expect("cluster start"),
            events,
        })
        .collect();
    (nodes, addrs)
}

/// Receives `count` messages on `node` within `timeout`; panics on any other event.
fn recv_msgs(node: &Node, count: usize, timeout: Duration) -> Vec<TestMsg> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::with_capacity(count);
    while got.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match node.events.recv_timeout(left) {
            Ok(NetEvent::Msg { from, msg, .. }) => {
                assert_eq!(from, msg.from, "delivered as from the wrong rank");
                got.push(msg);
            }
            Ok(other) => panic!("rank {}: unexpected event {other:?}", node.net.rank()),
            Err(e) => panic!(
                "rank {}: {} of {count} messages after {timeout:?}: {e:?}",
                node.net.rank(),
                got.len()
            ),
        }
    }
    got
}

/// Waits (bounded) for a `PeerLost` naming `rank` on `node`, skipping messages; returns
/// its address and reason.
fn wait_lost(node: &Node, rank: u32, timeout: Duration) -> (SocketAddr, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match node.events.recv_timeout(left) {
            Ok(NetEvent::PeerLost {
                rank: r,
                addr,
                reason,
            }) if r == rank => return (addr, reason),
            Ok(NetEvent::Msg { .. }) => {}
            Ok(other) => panic!("rank {}: unexpected event {other:?}", node.net.rank()),
            Err(e) => panic!(
                "rank {}: no PeerLost for rank {rank} within {timeout:?}: {e:?}",
                node.net.rank()
            ),
        }
    }
}

/// Panics if `node` has received a `PeerLost` or `Failed` event.
fn assert_no_loss(node: &Node) {
    while let Ok(e) = node.events.try_recv() {
        assert!(
            matches!(e, NetEvent::Msg { .. }),
            "rank {}: unexpected event {e:?}",
            node.net.rank()
        );
    }
}

/// A message `from` -> `to` and back arrives: the pair still works.
fn ping(nodes: &[Node], from: usize, to: usize) {
    let m = msg(from as u32, 99, 1234, 100);
    nodes[from].net.send(to as u32, &m).unwrap();
    assert_eq!(recv_msgs(&nodes[to], 1, Duration::from_secs(10)), vec![m]);
}

/// Shuts every node down concurrently; each must succeed.
fn shutdown_all(nodes: &mut [Node]) {
    std::thread::scope(|s| {
        for node in nodes.iter_mut() {
            s.spawn(move || node.net.shutdown().expect("graceful shutdown"));
        }
    });
}

#[test]
fn three_nets_all_to_all_fifo_from_several_threads() {
    let (mut nodes, _) = cluster(3, |_| {});
    const THREADS: u32 = 3;
    const PER_THREAD: u64 = 40;
    let len = |seq: u64| match seq {
        30 => 3 << 20,
        s if s % 16 == 7 => 1 << 20,
        s => (s as usize * 37) % 2000,
    };
    std::thread::scope(|s| {
        for node in &nodes {
            for t in 0..THREADS {
                s.spawn(move || {
                    let me = node.net.rank();
                    for seq in 0..PER_THREAD {
                        for to in (0..3).filter(|&to| to != me) {
                            node.net.send(to, &msg(me, t, seq, len(seq))).unwrap();
                        }
                    }
                });
            }
        }
        // Receive concurrently with the sends.
        for node in &nodes {
            s.spawn(move || {
                let got = recv_msgs(
                    node,
                    2 * THREADS as usize * PER_THREAD as usize,
                    Duration::from_secs(60),
                );
                let mut next: HashMap<(u32, u32), u64> = HashMap::new();
                for m in &got {
                    assert_ne!(m.from, node.net.rank());
                    let n = next.entry((m.from, m.thread)).or_insert(0);
                    assert_eq!(m.seq, *n, "FIFO from rank {} thread {}", m.from, m.thread);
                    *n += 1;
                    assert_eq!(m.payload.0.len(), len(m.seq));
                    assert!(
                        intact(m),
                        "payload of {}/{}/{} corrupted",
                        m.from,
                        m.thread,
                        m.seq
                    );
                }
                assert_eq!(next.len(), 2 * THREADS as usize);
            });
        }
    });
    for node in &nodes {
        let c = node.net.counters();
        assert!(c.frames_sent >= 2 * THREADS as u64 * PER_THREAD, "{c:?}");
        assert!(
            c.frames_received >= 2 * THREADS as u64 * PER_THREAD,
            "{c:?}"
        );
        assert!(c.bytes_received > 2 * (3 << 20), "{c:?}");
    }
    shutdown_all(&mut nodes);
    for node in &nodes {
        assert_no_loss(node);
    }
}

#[test]
fn graceful_shutdown_emits_no_peer_lost() {
    let (mut nodes, addrs) = cluster(3, |_| {});
    ping(&nodes, 1, 0);
    ping(&nodes, 0, 2);
    // Rank 0 leaves first: the others see it closed, not lost.
    let m = msg(0, 0, 0, 10);
    nodes[0].net.send(1, &m).unwrap();
    nodes[0].net.shutdown().unwrap();
    nodes[0].net.shutdown().unwrap(); // idempotent
    assert!(matches!(nodes[0].net.send(1, &m), Err(NetError::ShutDown)));
    // What rank 0 enqueued before shutting down was flushed before its Bye.
    assert_eq!(
        recv_msgs(&nodes[1], 1, Duration::from_secs(10)),
        vec![m.clone()]
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match nodes[1].net.send(0, &m) {
            Err(NetError::PeerClosed { rank: 0, addr }) => {
                assert_eq!(addr, addrs[0]);
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "rank 0's Bye never arrived"),
            Err(e) => panic!("unexpected {e}"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // The rest still works, then leaves together.
    ping(&nodes, 2, 1);
    ping(&nodes, 1, 2);
    shutdown_all(&mut nodes[1..]);
    for node in &nodes {
        assert_no_loss(node);
    }
}

#[test]
fn wrong_secret_fails_start_naming_the_peer() {
    let (mut listeners, addrs) = bind(2);
    let mut c0 = config(0, &addrs, listeners.remove(0));
    c0.connect_timeout = Duration::from_millis(1500);
    let mut c1 = config(1, &addrs, listeners.remove(0));
    c1.connect_timeout = Duration::from_millis(1500);
    c1.secret = b"not the test cluster's secret!!!".to_vec();
    let (d0, _e0) = channel_deliver();
    let (d1, _e1) = channel_deliver();
    let mut results = start_all(vec![(c0, d0), (c1, d1)]).into_iter();
    match results.next().unwrap() {
        Err(NetError::ConnectTimeout { missing, .. }) => {
            assert!(
                missing.contains(&format!("rank 1 at {}", addrs[1])),
                "{missing}"
            )
        }
        other => panic!("rank 0: {:?}", other.map(|_| ())),
    }
    match results.next().unwrap() {
        Err(e @ NetError::Handshake { rank: 0, .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(&addrs[0].to_string()) && text.contains("proof"),
                "{text}"
            )
        }
        other => panic!("rank 1: {:?}", other.map(|_| ())),
    }
}

#[test]
fn impostors_are_refused_and_the_cluster_is_unaffected() {
    let (mut nodes, addrs) = cluster(2, |_| {});
    let impostor = |tweak: &dyn Fn(&mut NetConfig)| {
        let (mut l, a) = bind(1);
        let mut c = config(1, &[addrs[0], a[0]], l.remove(0));
        c.connect_timeout = Duration::from_secs(3);
        tweak(&mut c);
        let (d, _e) = channel_deliver();
        Net::<TestMsg>::start(c, d).map(|_| ()).unwrap_err()
    };
    let e = impostor(&|c| c.secret = b"an impostor without the secret!!".to_vec());
    assert!(
        matches!(&e, NetError::Handshake { rank: 0, reason, .. } if reason.contains("proof")),
        "{e}"
    );
    let e = impostor(&|c| c.cluster_id = 7);
    assert!(
        matches!(&e, NetError::Handshake { rank: 0, reason, .. } if reason.contains("cluster id")),
        "{e}"
    );
    // With the secret, a second rank 1 authenticates but is refused as a duplicate: rank 0
    // closes on it without its own proof (the start fails naming the refusal).
    let (mut l, a) = bind(1);
    let (d, events) = channel_deliver();
    match Net::<TestMsg>::start(config(1, &[addrs[0], a[0]], l.remove(0)), d) {
        Ok(dup) => {
            let dup = Node { net: dup, events };
            wait_lost(&dup, 0, Duration::from_secs(10));
        }
        Err(e) => assert!(
            matches!(&e, NetError::PeerLost { rank: 0, .. })
                || matches!(&e, NetError::Handshake { rank: 0, reason, .. } if reason.contains("connected already")),
            "{e}"
        ),
    }
    ping(&nodes, 0, 1);
    ping(&nodes, 1, 0);
    shutdown_all(&mut nodes);
    for node in &nodes {
        assert_no_loss(node);
    }
}

/// Reads from `s` until the peer closes it; panics if that takes longer than `timeout`.
fn expect_closed(mut s: TcpStream, timeout: Duration) {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {} // the net's hello
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("the net did not close a stray connection within {timeout:?}")
            }
            Err(_) => return, // reset
        }
    }
}

#[test]
fn stray_bytes_and_huge_length_prefix_are_refused() {
    let (mut nodes, addrs) = cluster(2, |c| c.handshake_timeout = Duration::from_secs(1));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut huge = u32::MAX.to_le_bytes().to_vec();
    huge.push(1);
    huge.extend([0u8; 1000]);
    for addr in &addrs {
        for junk in [&random[..], &huge[..]] {
            let mut s = TcpStream::connect(addr).unwrap();
            let _ = s.write_all(junk); // the net may close before reading it all
            expect_closed(s, Duration::from_secs(5));
        }
        // A connection that never says anything is closed after the handshake timeout.
        let s = TcpStream::connect(addr).unwrap();
        expect_closed(s, Duration::from_secs(5));
    }
    ping(&nodes, 0, 1);
    ping(&nodes, 1, 0);
    shutdown_all(&mut nodes);
    for node in &nodes {
        assert_no_loss(node);
    }
}

#[test]
fn missing_peer_fails_start_within_connect_timeout() {
    // Rank 0 never starts (its port is closed): rank 1 gives up, naming it.
    let (mut listeners, addrs) = bind(2);
    drop(listeners.remove(0));
    let mut c1 = config(1, &addrs, listeners.remove(0));
    c1.connect_timeout = Duration::from_secs(1);
    let (d1, _e1) = channel_deliver();
    let t0 = Instant::now();
    let e = Net::<TestMsg>::start(c1, d1).map(|_| ()).unwrap_err();
    let elapsed = t0.elapsed();
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    match &e {
        NetError::ConnectTimeout { missing, .. } => {
            assert!(
                missing.contains(&format!("rank 0 at {}", addrs[0])),
                "{missing}"
            );
            assert!(missing.contains("cannot connect"), "{missing}");
        }
        other => panic!("{other}"),
    }
    // Rank 1 never starts: rank 0 gives up, naming it.
    let (mut listeners, addrs) = bind(2);
    let mut c0 = config(0, &addrs, listeners.remove(0));
    c0.connect_timeout = Duration::from_secs(1);
    let (d0, _e0) = channel_deliver();
    let e = Net::<TestMsg>::start(c0, d0).map(|_| ()).unwrap_err();
    assert!(
        e.to_string().contains(&format!("rank 1 at {}", addrs[1])),
        "{e}"
    );
}

#[test]
fn killed_peer_is_reported_lost() {
    let (mut nodes, addrs) = cluster(3, |_| {});
    ping(&nodes, 2, 0);
    nodes[2].net.kill();
    for node in &nodes[..2] {
        let (addr, reason) = wait_lost(node, 2, Duration::from_secs(3 + 5));
        assert_eq!(addr, addrs[2]);
        assert!(!reason.is_empty());
    }
    let m = msg(0, 0, 0, 1);
    assert!(matches!(
        nodes[0].net.send(2, &m),
        Err(NetError::PeerLost { rank: 2, .. })
    ));
    assert!(matches!(
        nodes[1].net.send_nonblocking(2, &m),
        Err(NetError::PeerLost { rank: 2, .. })
    ));
    ping(&nodes, 0, 1);
    ping(&nodes, 1, 0);
    shutdown_all(&mut nodes[..2]);
    for node in &nodes[..2] {
        assert_no_loss(node);
    }
}

#[test]
fn silent_peer_is_reported_lost() {
    let (mut nodes, addrs) = cluster(3, |c| c.heartbeat_timeout = Duration::from_millis(800));
    nodes[2].net.set_silent(true);
    for node in &nodes[..2] {
        let (addr, reason) =
            wait_lost(node, 2, Duration::from_millis(800) + Duration::from_secs(5));
        assert_eq!(addr, addrs[2]);
        assert!(reason.contains("silent"), "{reason}");
    }
    let _ = nodes[2].net.shutdown(); // it lost its peers too
    shutdown_all(&mut nodes[..2]);
}

/// A `deliver` that blocks on the first message until the gate opens (or 30 s pass).
fn gated_deliver() -> (
    super::Deliver<TestMsg>,
    Receiver<NetEvent<TestMsg>>,
    Sender<()>,
) {
    let (tx, rx) = channel();
    let (gate_tx, gate_rx) = channel::<()>();
    let mut first = true;
    let deliver: super::Deliver<TestMsg> = Box::new(move |e| {
        if first && matches!(e, NetEvent::Msg { .. }) {
            first = false;
            match gate_rx.recv_timeout(Duration::from_secs(30)) {
                Ok(()) | Err(RecvTimeoutError::Disconnected) => {}
                Err(RecvTimeoutError::Timeout) => panic!("the gate never opened"),
            }
        }
        let _ = tx.send(e);
    });
    (deliver, rx, gate_tx)
}

/// Two nodes with the given `deliver`s (and event channels), configs adjusted by `tweak`.
fn pair(
    tweak: impl Fn(&mut NetConfig),
    delivers: [(super::Deliver<TestMsg>, Receiver<NetEvent<TestMsg>>); 2],
) -> Vec<Node> {
    let (listeners, addrs) = bind(2);
    let (cfgs, receivers): (Vec<_>, Vec<_>) = listeners
        .into_iter()
        .zip(delivers)
        .enumerate()
        .map(|(r, (l, (deliver, rx)))| {
            let mut c = config(r as u32, &addrs, l);
            tweak(&mut c);
            ((c, deliver), rx)
        })
        .unzip();
    start_all(cfgs)
        .into_iter()
        .zip(receivers)
        .map(|(net, events)| Node {
            net: net.expect("pair start"),
            events,
        })
        .collect()
}

/// Two nodes where rank 1's event loop stalls on its first message until the gate opens.
fn stalled_pair(queue_bytes: usize) -> (Vec<Node>, Sender<()>) {
    let (d1, e1, gate) = gated_deliver();
    let nodes = pair(
        |c| {
            c.queue_bytes = queue_bytes;
            c.send_timeout = Duration::from_millis(300);
            c.heartbeat_timeout = Duration::from_secs(30); // the stall is not a loss
        },
        [channel_deliver(), (d1, e1)],
    );
    (nodes, gate)
}

/// Sends `len`-byte messages from `node` to rank 1 (whose reading is stalled) with
/// `send` until it is refused, checking that no more than `bound` bytes (plus one frame)
/// are ever queued; returns how many were accepted and the refusal.
fn fill_until_refused(
    node: &Node,
    len: usize,
    bound: usize,
    send: impl Fn(&Net<TestMsg>, &TestMsg) -> Result<usize, NetError>,
) -> (u64, NetError) {
    let frame_len = super::frame::encode_data(&msg(0, 0, 0, len), usize::MAX)
        .unwrap()
        .len();
    let mut sent = 0u64;
    loop {
        assert!(sent < 20_000, "the receiver's stall never pushed back");
        match send(&node.net, &msg(0, 0, sent, len)) {
            Ok(_) => sent += 1,
            Err(e) => return (sent, e),
        }
        let queued = node.net.queued_bytes(1);
        assert!(queued <= bound + frame_len, "{queued} bytes queued");
    }
}

#[test]
fn send_blocks_under_backpressure_then_fails_and_recovers() {
    const QUEUE: usize = 256 << 10;
    const LEN: usize = 64 << 10;
    let (mut nodes, gate) = stalled_pair(QUEUE);
    let (sent, err) = fill_until_refused(&nodes[0], LEN, QUEUE, |net, m| net.send(1, m));
    assert!(
        matches!(err, NetError::Backpressure { rank: 1, .. }),
        "{err}"
    );
    // The receiver catches up: everything accepted arrives, in order, and sends work again.
    gate.send(()).unwrap();
    let got = recv_msgs(&nodes[1], sent as usize, Duration::from_secs(30));
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, m)| m.seq == i as u64 && intact(m)));
    nodes[0].net.send(1, &msg(0, 0, sent, LEN)).unwrap();
    assert_eq!(
        recv_msgs(&nodes[1], 1, Duration::from_secs(10))[0].seq,
        sent
    );
    shutdown_all(&mut nodes);
    for node in &nodes {
        assert_no_loss(node);
    }
}

#[test]
fn send_nonblocking_declares_a_slow_peer_lost() {
    const QUEUE: usize = 256 << 10;
    const LEN: usize = 64 << 10;
    let (mut nodes, gate) = stalled_pair(QUEUE);
    let (_, err) = fill_until_refused(&nodes[0], LEN, 4 * QUEUE, |net, m| {
        net.send_nonblocking(1, m)
    });
    assert!(
        matches!(&err, NetError::PeerLost { rank: 1, reason, .. } if reason.contains("hard bound")),
        "{err}"
    );
    let (_, reason) = wait_lost(&nodes[0], 1, Duration::from_secs(5));
    assert!(reason.contains("hard bound"), "{reason}");
    assert!(matches!(
        nodes[0].net.send(1, &msg(0, 0, 0, 1)),
        Err(NetError::PeerLost { rank: 1, .. })
    ));
    gate.send(()).unwrap();
    let _ = nodes[1].net.shutdown(); // rank 0 closed on it: a loss on its side
    nodes[0].net.shutdown().unwrap();
}

#[test]
fn panic_on_the_event_loop_fails_later_sends() {
    let (tx, e1) = channel();
    let d1: super::Deliver<TestMsg> = Box::new(move |e| {
        if let NetEvent::Msg { msg, .. } = &e {
            assert!(msg.seq != 1, "deliver panics on message 1");
        }
        let _ = tx.send(e);
    });
    let mut nodes = pair(|_| {}, [channel_deliver(), (d1, e1)]);
    nodes[0].net.send(1, &msg(0, 0, 0, 5)).unwrap();
    nodes[0].net.send(1, &msg(0, 0, 1, 5)).unwrap();
    assert_eq!(recv_msgs(&nodes[1], 1, Duration::from_secs(10))[0].seq, 0);
    match nodes[1].events.recv_timeout(Duration::from_secs(10)) {
        Ok(NetEvent::Failed { reason }) => assert!(reason.contains("panicked"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        nodes[1].net.send(0, &msg(1, 0, 0, 1)),
        Err(NetError::Failed(_))
    ));
    wait_lost(&nodes[0], 1, Duration::from_secs(10));
    assert!(matches!(nodes[1].net.shutdown(), Err(NetError::Failed(_))));
    nodes[0].net.shutdown().unwrap();
}

#[test]
fn bad_sends_and_configs_are_errors() {
    let (mut nodes, _) = cluster(2, |c| c.max_frame = 1 << 20);
    let m = msg(0, 0, 0, 1);
    assert!(matches!(
        nodes[0].net.send(0, &m),
        Err(NetError::SelfSend(0))
    ));
    assert!(matches!(
        nodes[0].net.send(2, &m),
        Err(NetError::NoSuchRank { rank: 2, size: 2 })
    ));
    assert!(matches!(
        nodes[0].net.send_nonblocking(1, &msg(0, 0, 0, 2 << 20)),
        Err(NetError::Frame(super::frame::FrameError::TooLarge { .. }))
    ));
    ping(&nodes, 0, 1);
    shutdown_all(&mut nodes);
    assert_eq!((nodes[0].net.rank(), nodes[0].net.size()), (0, 2));

    let (mut l, addrs) = bind(1);
    let mut c = config(0, &addrs, l.remove(0));
    assert!(
        !format!("{c:?}").contains("shared secret"),
        "Debug shows the secret"
    );
    c.secret = b"short".to_vec();
    let (d, _e) = channel_deliver();
    assert!(matches!(
        Net::<TestMsg>::start(c, d),
        Err(NetError::Config(_))
    ));
    // A cluster of one has no peers: it starts at once.
    let (mut l, addrs) = bind(1);
    let (d, _e) = channel_deliver();
    let mut solo = Net::<TestMsg>::start(config(0, &addrs, l.remove(0)), d).unwrap();
    solo.shutdown().unwrap();
}

#[test]
fn shutdown_is_bounded_when_a_peer_does_not_answer() {
    let (d1, e1, gate) = gated_deliver();
    let mut nodes = pair(
        |c| {
            c.shutdown_timeout = Duration::from_millis(500);
            c.heartbeat_timeout = Duration::from_secs(30); // the stall is not a loss
        },
        [channel_deliver(), (d1, e1)],
    );
    nodes[0].net.send(1, &msg(0, 0, 0, 1)).unwrap(); // rank 1's loop stalls on it
    let t0 = Instant::now();
    match nodes[0].net.shutdown() {
        Err(NetError::ShutdownIncomplete(why)) => assert!(why.contains("rank 1 at"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert!(matches!(
        nodes[0].net.send(1, &msg(0, 0, 1, 1)),
        Err(NetError::ShutDown)
    ));
    assert_no_loss(&nodes[0]);
    gate.send(()).unwrap();
    let _ = nodes[1].net.shutdown();
}

mod hostile;
