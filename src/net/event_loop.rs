//! The event loop: one thread per process, driving every socket of the [`Net`] with mio.
//!
//! Phases: **starting** (dial every lower rank with retries, accept the higher ones, until
//! every peer is authenticated or `connect_timeout` passes), **running**, **stopping**
//! (flush every queue, send Bye, wait for the peers' Bye or close, bounded by
//! `shutdown_timeout`). The listener stays registered until stopping, so a stray
//! connection is handshaken, refused and closed at any time.
//!
//! Each connection is handshaking (with its own deadline) or up (a [`FrameDecoder`] for
//! input, a queue of frames for output). Senders' frames move from the shared queue
//! (see [`super::shared`]) to the connection's output when the loop is woken; their bytes
//! stay counted until written. Reads and writes go until `WouldBlock` (mio is
//! edge-triggered). Timers (dial retries, handshake deadlines, heartbeats, silence) are
//! checked on every turn; the poll timeout is a short tick.
//!
//! [`Net`]: super::Net

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use serde::de::DeserializeOwned;

use super::frame::{self, Frame, FrameDecoder, FrameKind};
use super::handshake::{self, Handshake, Role};
use super::shared::{PeerStatus, Shared};
use super::{Deliver, NetConfig, NetError, NetEvent};

/// Token of the waker.
pub(crate) const WAKER: Token = Token(0);
/// Token of the listener.
const LISTENER: Token = Token(1);
/// Tokens of connections start here (token = slot + this).
const FIRST_CONN: usize = 2;
/// At most this many accepted connections may be handshaking at once; more are closed.
const MAX_PENDING_ACCEPTS: usize = 64;
/// Read buffer size.
const READ_CHUNK: usize = 64 * 1024;
/// Frames written per `write_vectored` call, at most.
const MAX_IOVECS: usize = 64;
/// First and largest pause between two dials of the same peer.
const DIAL_BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(500));

/// The body of the event-loop thread: runs the loop, catching panics. Until start-up
/// completes, the outcome goes to `ready`; after, a failure is recorded in `shared`
/// (later sends fail) and delivered as [`NetEvent::Failed`].
pub(crate) fn thread_main<M: DeserializeOwned + Send + 'static>(
    cfg: NetConfig,
    poll: Poll,
    listener: TcpListener,
    shared: Arc<Shared>,
    mut deliver: Deliver<M>,
    ready: mpsc::Sender<Result<(), NetError>>,
) -> Result<(), NetError> {
    let mut ready = Some(ready);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        EventLoop::<M>::new(cfg, poll, listener, Arc::clone(&shared)).run(&mut deliver, &mut ready)
    }));
    let outcome = match outcome {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!(
                rank = shared.rank,
                "iterstore net: the event loop panicked: {what}"
            );
            Err(NetError::Failed(format!("the event loop panicked: {what}")))
        }
    };
    // Whatever happened, no send may succeed from now on.
    shared.stopping.store(true, Ordering::SeqCst);
    match outcome {
        Ok(()) => Ok(()),
        // Not a failure of the loop: `shutdown` reports it, later sends fail as shut down.
        Err(e @ NetError::ShutdownIncomplete(_)) => Err(e),
        Err(e) => {
            shared.fail(&e.to_string());
            if let Some(tx) = ready.take() {
                let _ = tx.send(Err(e));
                Ok(())
            } else {
                let reason = e.to_string();
                let _ = catch_unwind(AssertUnwindSafe(|| deliver(NetEvent::Failed { reason })));
                Err(e)
            }
        }
    }
}

/// A frame waiting to be written.
struct OutFrame {
    /// The whole frame.
    bytes: Vec<u8>,
    /// Whether its bytes count in the peer's shared queue bound (senders' frames do;
    /// handshake, heartbeat and bye bytes do not).
    counted: bool,
}

/// Where a connection is.
enum ConnState {
    /// Authenticating, until `deadline`.
    Handshaking {
        /// The state machine.
        hs: Box<Handshake>,
        /// When the connection is closed if not authenticated.
        deadline: Instant,
    },
    /// Authenticated peer `rank`.
    Up {
        /// The peer's rank.
        rank: u32,
        /// Incoming frames.
        decoder: FrameDecoder,
        /// Our Bye is queued: nothing goes after it.
        bye_sent: bool,
        /// The peer's Bye arrived.
        bye_received: bool,
    },
}

/// One TCP connection.
struct Conn {
    /// The socket.
    stream: TcpStream,
    /// The peer's address (for dialed connections, the configured one).
    addr: SocketAddr,
    /// The rank this connection dialed, if we dialed it.
    dialed: Option<u32>,
    /// Whether the TCP connection is established (dialed ones start unconnected).
    connected: bool,
    /// Handshaking or up.
    state: ConnState,
    /// Frames to write, in order.
    out: VecDeque<OutFrame>,
    /// Bytes of `out[0]` already written.
    out_off: usize,
    /// When bytes last arrived.
    last_recv: Instant,
    /// When bytes were last written (or the connection came up).
    last_send: Instant,
}

impl Conn {
    /// A new connection starting its handshake: our hello queued first, the handshake
    /// due within `timeout`. `dialed`: the rank we dialed (`None`: accepted; an accepted
    /// socket is connected already, a dialed one once writable).
    fn handshaking(
        stream: TcpStream,
        addr: SocketAddr,
        dialed: Option<u32>,
        hs: Box<Handshake>,
        timeout: Duration,
    ) -> Conn {
        // Small protocol messages (a refresh request, a barrier) must not wait for
        // Nagle's algorithm and the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        let now = Instant::now();
        let hello = hs.hello().to_vec();
        Conn {
            stream,
            addr,
            dialed,
            connected: dialed.is_none(),
            state: ConnState::Handshaking {
                hs,
                deadline: now + timeout,
            },
            out: VecDeque::from([OutFrame {
                bytes: hello,
                counted: false,
            }]),
            out_off: 0,
            last_recv: now,
            last_send: now,
        }
    }
}

/// Dialing state of a lower rank during start-up.
struct Dial {
    /// When to try next.
    next: Instant,
    /// Pause after the next failure.
    backoff: Duration,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

/// What the loop knows about one rank.
#[derive(Default)]
struct Peer {
    /// Its connection slot (handshaking if dialed, or up).
    conn: Option<usize>,
    /// Authenticated and connected.
    up: bool,
    /// Lost or closed: never connected again.
    gone: bool,
    /// Dialing state (lower ranks, during start-up).
    dial: Option<Dial>,
    /// Why the last connection claiming this rank was refused.
    last_refusal: Option<String>,
}

/// The loop's phase.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connecting everyone until the deadline.
    Starting {
        /// `connect_timeout` from start.
        deadline: Instant,
    },
    /// Serving.
    Running,
    /// Flushing and saying Bye until the deadline.
    Stopping {
        /// `shutdown_timeout` from the stop.
        deadline: Instant,
    },
}

/// The event loop's state.
struct EventLoop<M> {
    /// Configuration (the listener was taken out).
    cfg: NetConfig,
    /// Number of ranks.
    size: u32,
    /// The poller.
    poll: Poll,
    /// The listener, until stopping.
    listener: Option<TcpListener>,
    /// Shared with senders.
    shared: Arc<Shared>,
    /// Connection slots (token = slot + [`FIRST_CONN`]).
    conns: Vec<Option<Conn>>,
    /// Free slots.
    free: Vec<usize>,
    /// One entry per rank (ours unused).
    peers: Vec<Peer>,
    /// The phase.
    phase: Phase,
    /// A fatal start-up error to return.
    fatal: Option<NetError>,
    /// Peers lost since the last delivery of events: (rank, address, reason).
    pending_lost: Vec<(u32, SocketAddr, String)>,
    /// Read buffer.
    scratch: Vec<u8>,
    /// Frames decoded from one read.
    frames: Vec<Frame>,
    /// The message type.
    _msg: PhantomData<fn() -> M>,
}

/// `a - b`, or zero.
fn since(now: Instant, then: Instant) -> Duration {
    now.saturating_duration_since(then)
}

impl<M: DeserializeOwned> EventLoop<M> {
    /// A loop for `cfg` (whose listener is `listener`).
    fn new(cfg: NetConfig, poll: Poll, listener: TcpListener, shared: Arc<Shared>) -> EventLoop<M> {
        let size = cfg.addrs.len() as u32;
        let now = Instant::now();
        let mut peers: Vec<Peer> = (0..size).map(|_| Peer::default()).collect();
        for peer in &mut peers[..cfg.rank as usize] {
            peer.dial = Some(Dial {
                next: now,
                backoff: DIAL_BACKOFF.0,
                last_error: None,
            });
        }
        EventLoop {
            phase: Phase::Starting {
                deadline: now + cfg.connect_timeout,
            },
            cfg,
            size,
            poll,
            listener: Some(listener),
            shared,
            conns: Vec::new(),
            free: Vec::new(),
            peers,
            fatal: None,
            pending_lost: Vec::new(),
            scratch: vec![0; READ_CHUNK],
            frames: Vec::new(),
            _msg: PhantomData,
        }
    }

    /// Our rank.
    fn rank(&self) -> u32 {
        self.cfg.rank
    }

    /// The poll timeout: short enough for every timer to fire within a few percent.
    fn tick(&self) -> Duration {
        let by_heartbeat = self.cfg.heartbeat_interval.min(self.cfg.handshake_timeout) / 4;
        by_heartbeat.clamp(Duration::from_millis(1), Duration::from_millis(50))
    }

    /// Runs until stopped (`Ok`) or a fatal error.
    fn run(
        mut self,
        deliver: &mut Deliver<M>,
        ready: &mut Option<mpsc::Sender<Result<(), NetError>>>,
    ) -> Result<(), NetError> {
        let io = |context: &'static str| {
            move |source| NetError::Io {
                context: context.into(),
                source,
            }
        };
        if let Some(l) = &mut self.listener {
            self.poll
                .registry()
                .register(l, LISTENER, Interest::READABLE)
                .map_err(io("cannot register the listener"))?;
        }
        tracing::debug!(
            rank = self.rank(),
            size = self.size,
            "iterstore net: starting"
        );
        let mut events = Events::with_capacity(256);
        let mut tokens = Vec::new();
        loop {
            #[cfg(test)]
            if self.shared.kill.load(Ordering::SeqCst) {
                return Ok(()); // Dropping `self` closes every socket without Bye.
            }
            match self.poll.poll(&mut events, Some(self.tick())) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("poll failed")(e)),
            }
            tokens.clear();
            tokens.extend(events.iter().map(|e| e.token()));
            for &token in &tokens {
                match token {
                    WAKER => {}
                    LISTENER => self.accept_all(),
                    Token(t) => self.conn_ready(t - FIRST_CONN, deliver),
                }
            }
            self.pump_queues();
            self.timers();
            self.deliver_losses(deliver);
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
            match self.phase {
                Phase::Starting { deadline } => {
                    if self.all_up() {
                        tracing::debug!(
                            rank = self.rank(),
                            "iterstore net: all {} peers up",
                            self.size - 1
                        );
                        self.phase = Phase::Running;
                        if let Some(tx) = ready.take() {
                            let _ = tx.send(Ok(()));
                        }
                    } else if Instant::now() >= deadline {
                        return Err(NetError::ConnectTimeout {
                            missing: self.missing(),
                            timeout: self.cfg.connect_timeout,
                        });
                    }
                }
                Phase::Running => {
                    if self.shared.stopping.load(Ordering::SeqCst) {
                        // `kill` is set before `stopping`: a killed loop never says Bye.
                        #[cfg(test)]
                        if self.shared.kill.load(Ordering::SeqCst) {
                            return Ok(());
                        }
                        self.begin_stop();
                        self.deliver_losses(deliver);
                    }
                }
                Phase::Stopping { deadline } => {
                    let open: Vec<u32> = (0..self.size)
                        .filter(|&r| self.peers[r as usize].conn.is_some())
                        .collect();
                    if open.is_empty() {
                        tracing::debug!(rank = self.rank(), "iterstore net: shut down");
                        return Ok(());
                    }
                    if Instant::now() >= deadline {
                        let names: Vec<String> = open.iter().map(|&r| self.name(r)).collect();
                        return Err(NetError::ShutdownIncomplete(format!(
                            "no Bye exchanged within {:?} with {}",
                            self.cfg.shutdown_timeout,
                            names.join(", ")
                        )));
                    }
                }
            }
        }
    }

    /// "rank r at addr".
    fn name(&self, rank: u32) -> String {
        format!("rank {rank} at {}", self.cfg.addrs[rank as usize])
    }

    /// Whether every other rank is up.
    fn all_up(&self) -> bool {
        (0..self.size).all(|r| r == self.rank() || self.peers[r as usize].up)
    }

    /// The ranks not up, with addresses and what went wrong, for the timeout error.
    fn missing(&self) -> String {
        let mut parts = Vec::new();
        for r in 0..self.size {
            let p = &self.peers[r as usize];
            if r == self.rank() || p.up {
                continue;
            }
            let mut s = self.name(r);
            let why = p
                .last_refusal
                .clone()
                .or_else(|| p.dial.as_ref().and_then(|d| d.last_error.clone()));
            match why {
                Some(why) => s.push_str(&format!(" (last: {why})")),
                None if r > self.rank() => s.push_str(" (never dialed us)"),
                None => {}
            }
            parts.push(s);
        }
        parts.join(", ")
    }

    /// Stores a new connection and registers it; returns its slot.
    fn add_conn(&mut self, mut conn: Conn) -> io::Result<usize> {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        if let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(slot + FIRST_CONN),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(slot);
            return Err(e);
        }
        self.conns[slot] = Some(conn);
        Ok(slot)
    }

    /// Closes and forgets the connection in `slot` (the peer table is the caller's).
    fn drop_conn(&mut self, slot: usize) -> Option<Conn> {
        let mut conn = self.conns.get_mut(slot)?.take()?;
        let _ = self.poll.registry().deregister(&mut conn.stream);
        self.free.push(slot);
        Some(conn)
    }

    /// A new handshake for our end `role`.
    fn handshake(&self, role: Role) -> io::Result<Box<Handshake>> {
        Ok(Box::new(Handshake::new(
            role,
            self.rank(),
            self.size,
            self.cfg.cluster_id,
            &self.cfg.secret,
            handshake::fresh_nonce()?,
        )))
    }

    /// Accepts every pending connection and starts its handshake.
    fn accept_all(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            let (stream, addr) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(rank = self.rank(), "iterstore net: accept failed: {e}");
                    return;
                }
            };
            let pending = self
                .conns
                .iter()
                .flatten()
                .filter(|c| c.dialed.is_none() && matches!(c.state, ConnState::Handshaking { .. }))
                .count();
            if pending >= MAX_PENDING_ACCEPTS {
                tracing::warn!(
                    rank = self.rank(),
                    peer = %addr,
                    "iterstore net: refused connection: {pending} handshakes already pending"
                );
                continue;
            }
            let hs = match self.handshake(Role::Acceptor) {
                Ok(hs) => hs,
                Err(e) => {
                    tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: no nonce: {e}");
                    continue;
                }
            };
            let conn = Conn::handshaking(stream, addr, None, hs, self.cfg.handshake_timeout);
            match self.add_conn(conn) {
                Ok(slot) => {
                    tracing::debug!(rank = self.rank(), peer = %addr, "iterstore net: accepted a connection");
                    self.flush(slot);
                }
                Err(e) => {
                    tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: cannot register: {e}")
                }
            }
        }
    }

    /// Dials `rank` now.
    fn dial(&mut self, rank: u32) {
        let addr = self.cfg.addrs[rank as usize];
        let attempt = TcpStream::connect(addr).and_then(|stream| {
            let hs = self.handshake(Role::Dialer { target: rank })?;
            let timeout = self.cfg.handshake_timeout;
            self.add_conn(Conn::handshaking(stream, addr, Some(rank), hs, timeout))
        });
        match attempt {
            Ok(slot) => {
                tracing::debug!(
                    rank = self.rank(),
                    "iterstore net: dialing {}",
                    self.name(rank)
                );
                self.peers[rank as usize].conn = Some(slot);
            }
            Err(e) => self.dial_failed(rank, format!("cannot connect: {e}")),
        }
    }

    /// A dial of `rank` failed (transiently): close it and retry after a pause.
    fn dial_failed(&mut self, rank: u32, why: String) {
        if let Some(slot) = self.peers[rank as usize].conn.take() {
            self.drop_conn(slot);
        }
        let name = self.name(rank);
        let my_rank = self.rank();
        if let Some(d) = &mut self.peers[rank as usize].dial {
            tracing::debug!(
                rank = my_rank,
                "iterstore net: dialing {name} failed ({why}); retrying in {:?}",
                d.backoff
            );
            d.next = Instant::now() + d.backoff;
            d.backoff = (d.backoff * 2).min(DIAL_BACKOFF.1);
            d.last_error = Some(why);
        }
    }

    /// A connection's handshake failed or the connection broke before authentication.
    /// `refusal` says whether the peer was refused (wrong cluster, bad proof...) as opposed
    /// to an I/O problem.
    fn handshake_failed(&mut self, slot: usize, why: String, refusal: Option<&handshake::Refusal>) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        let (addr, dialed) = (conn.addr, conn.dialed);
        let claimed = match &conn.state {
            ConnState::Handshaking { hs, .. } => hs.claimed_peer(),
            _ => None,
        };
        match dialed {
            Some(rank) if refusal.is_some() && matches!(self.phase, Phase::Starting { .. }) => {
                // The peer we are configured to reach refuses us, or is not who we expect:
                // retrying will not help.
                tracing::warn!(
                    rank = self.rank(),
                    "iterstore net: handshake with {} failed: {why}",
                    self.name(rank)
                );
                self.peers[rank as usize].conn = None;
                self.drop_conn(slot);
                self.fatal.get_or_insert(NetError::Handshake {
                    rank,
                    addr,
                    reason: why,
                });
            }
            Some(rank) => self.dial_failed(rank, why),
            None => {
                if let Some(r) = refusal {
                    tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: refused connection: {why}");
                    if let Some(claimed) = r.claimed_rank().filter(|&c| c < self.size) {
                        self.peers[claimed as usize].last_refusal =
                            Some(format!("refused a connection from {addr}: {why}"));
                    }
                } else {
                    if let Some(c) = claimed.filter(|&c| c < self.size) {
                        // The peer saw our proof and closed: it most likely refused it.
                        self.peers[c as usize].last_refusal = Some(format!(
                            "a connection from {addr} claiming this rank {why} (it may have \
                             refused our proof: a different secret or settings)"
                        ));
                    }
                    tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: closed unauthenticated connection: {why}");
                }
                self.drop_conn(slot);
            }
        }
    }

    /// Handles readiness of the connection in `slot`.
    fn conn_ready(&mut self, slot: usize, deliver: &mut Deliver<M>) {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if !conn.connected {
            match conn.stream.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => {
                    return self.handshake_failed(slot, format!("cannot connect: {e}"), None)
                }
            }
            match conn.stream.peer_addr() {
                Ok(_) => conn.connected = true,
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return,
                Err(e) => return self.handshake_failed(slot, format!("cannot connect: {e}"), None),
            }
        }
        self.read(slot, deliver);
        if self.conns.get(slot).is_some_and(|c| c.is_some()) {
            self.flush(slot);
        }
    }

    /// Reads everything available on `slot` and handles it.
    fn read(&mut self, slot: usize, deliver: &mut Deliver<M>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) {
            match conn.stream.read(&mut scratch) {
                Ok(0) => {
                    self.eof(slot);
                    break;
                }
                Ok(n) => {
                    conn.last_recv = Instant::now();
                    if !self.input(slot, &scratch[..n], deliver) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken(slot, format!("read failed: {e}"));
                    break;
                }
            }
        }
        self.scratch = scratch;
    }

    /// The connection in `slot` broke (I/O error).
    fn broken(&mut self, slot: usize, why: String) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        match conn.state {
            ConnState::Handshaking { .. } => self.handshake_failed(slot, why, None),
            ConnState::Up { rank, .. } => self.lose(rank, why),
        }
    }

    /// The peer closed `slot`.
    fn eof(&mut self, slot: usize) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        match conn.state {
            ConnState::Handshaking { .. } => {
                self.handshake_failed(slot, "closed during the handshake".into(), None)
            }
            ConnState::Up {
                rank,
                bye_received: true,
                ..
            } => self.close_gracefully(rank),
            ConnState::Up { rank, .. } => {
                self.lose(rank, "closed the connection without Bye".into())
            }
        }
    }

    /// Handles bytes read from `slot`; false if the connection is gone.
    fn input(&mut self, slot: usize, bytes: &[u8], deliver: &mut Deliver<M>) -> bool {
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        let bytes = if let ConnState::Handshaking { hs, .. } = &mut conn.state {
            let mut out = Vec::new();
            let peers = &self.peers;
            let result = hs.feed(bytes, &mut out, |r| {
                peers[r as usize].up || peers[r as usize].gone
            });
            if !out.is_empty() {
                conn.out.push_back(OutFrame {
                    bytes: out,
                    counted: false,
                });
            }
            match result {
                Ok(None) => return true,
                Err(refusal) => {
                    self.handshake_failed(slot, refusal.to_string(), Some(&refusal));
                    return false;
                }
                Ok(Some(done)) => {
                    self.promote(slot, done.peer_rank);
                    &bytes[done.consumed..]
                }
            }
        } else {
            bytes
        };
        if bytes.is_empty() {
            return true;
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        let ConnState::Up { rank, decoder, .. } = &mut conn.state else {
            return true;
        };
        let rank = *rank;
        self.shared
            .counters
            .bytes_received
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let mut frames = std::mem::take(&mut self.frames);
        let fed = decoder.feed(bytes, &mut frames);
        self.shared
            .counters
            .frames_received
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        let mut alive = true;
        for f in frames.drain(..) {
            if !alive {
                break;
            }
            match f.kind {
                FrameKind::Data => match frame::decode_data::<M>(&f.body) {
                    Ok(msg) => deliver(NetEvent::Msg {
                        from: rank,
                        msg,
                        bytes: f.body.len() + frame::HEADER_LEN,
                    }),
                    Err(e) => {
                        self.lose(rank, format!("bad frame: {e}"));
                        alive = false;
                    }
                },
                FrameKind::Heartbeat => {}
                FrameKind::Bye => self.on_bye(slot, rank),
            }
        }
        self.frames = frames;
        if let (true, Err(e)) = (alive, fed) {
            self.lose(rank, format!("bad frame: {e}"));
            alive = false;
        }
        alive && self.conns[slot].is_some()
    }

    /// The handshake of `slot` completed with `rank`.
    fn promote(&mut self, slot: usize, rank: u32) {
        let now = Instant::now();
        let max_frame = self.cfg.max_frame;
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        conn.state = ConnState::Up {
            rank,
            decoder: FrameDecoder::new(max_frame),
            bye_sent: false,
            bye_received: false,
        };
        conn.last_recv = now;
        conn.last_send = now;
        let addr = conn.addr;
        let peer = &mut self.peers[rank as usize];
        peer.conn = Some(slot);
        peer.up = true;
        peer.dial = None;
        peer.last_refusal = None;
        self.shared.set_status(rank, PeerStatus::Up);
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: rank {rank} at {addr} authenticated"
        );
    }

    /// The peer `rank` (on `slot`) said Bye: no more sends to it; flush, answer Bye.
    fn on_bye(&mut self, slot: usize, rank: u32) {
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: {} said Bye",
            self.name(rank)
        );
        self.move_queue(slot, rank);
        self.shared.set_status(rank, PeerStatus::Closed);
        if let Some(Conn {
            state: ConnState::Up { bye_received, .. },
            ..
        }) = self.conns[slot].as_mut()
        {
            *bye_received = true;
        }
        self.send_bye(slot);
    }

    /// Queues our Bye on `slot` (once).
    fn send_bye(&mut self, slot: usize) {
        if let Some(Conn {
            state: ConnState::Up { bye_sent, .. },
            out,
            ..
        }) = self.conns[slot].as_mut()
        {
            if !*bye_sent {
                *bye_sent = true;
                out.push_back(OutFrame {
                    bytes: frame::control_frame(FrameKind::Bye).to_vec(),
                    counted: false,
                });
            }
        }
    }

    /// Moves the frames senders queued for `rank` to `slot`'s output (unless our Bye is
    /// already out); returns the peer's status.
    fn move_queue(&mut self, slot: usize, rank: u32) -> PeerStatus {
        let Some(Conn {
            state: ConnState::Up {
                bye_sent: false, ..
            },
            out,
            ..
        }) = self.conns[slot].as_mut()
        else {
            return PeerStatus::Closed;
        };
        let (frames, status) = self.shared.take(rank);
        out.extend(frames.into_iter().map(|bytes| OutFrame {
            bytes,
            counted: true,
        }));
        status
    }

    /// Moves every peer's queued frames to its connection and writes what it can; a peer
    /// declared lost by a sender (queue over the hard bound) is closed here.
    fn pump_queues(&mut self) {
        for rank in 0..self.size {
            let p = &self.peers[rank as usize];
            let (Some(slot), true) = (p.conn, p.up) else {
                continue;
            };
            if let PeerStatus::Lost(reason) = self.move_queue(slot, rank) {
                self.lose(rank, reason);
                continue;
            }
            self.flush(slot);
        }
    }

    /// Writes as much of `slot`'s output as the socket takes.
    fn flush(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if !conn.connected {
            return;
        }
        let (mut written, mut frames, mut released) = (0usize, 0u64, 0usize);
        let mut error = None;
        while !conn.out.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOVECS];
            let mut n_iov = 0;
            for (i, f) in conn.out.iter().take(MAX_IOVECS).enumerate() {
                let start = if i == 0 { conn.out_off } else { 0 };
                iov[i] = IoSlice::new(&f.bytes[start..]);
                n_iov += 1;
            }
            match conn.stream.write_vectored(&iov[..n_iov]) {
                Ok(0) => {
                    error = Some("write returned 0".to_string());
                    break;
                }
                Ok(mut n) => {
                    written += n;
                    while n > 0 {
                        let left = conn.out[0].bytes.len() - conn.out_off;
                        if n >= left {
                            n -= left;
                            let f = conn.out.pop_front().expect("a frame");
                            conn.out_off = 0;
                            frames += 1;
                            if f.counted {
                                released += f.bytes.len();
                            }
                        } else {
                            conn.out_off += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    error = Some(format!("write failed: {e}"));
                    break;
                }
            }
        }
        if written > 0 {
            conn.last_send = Instant::now();
        }
        let up = match conn.state {
            ConnState::Up {
                rank,
                bye_sent,
                bye_received,
                ..
            } => Some((rank, bye_sent && bye_received && conn.out.is_empty())),
            ConnState::Handshaking { .. } => None,
        };
        if let Some((rank, _)) = up {
            let c = &self.shared.counters;
            c.bytes_sent.fetch_add(written as u64, Ordering::Relaxed);
            c.frames_sent.fetch_add(frames, Ordering::Relaxed);
            if released > 0 {
                self.shared.release(rank, released);
            }
        }
        match (error, up) {
            (Some(why), _) => self.broken(slot, why),
            (None, Some((rank, true))) => self.close_gracefully(rank),
            _ => {}
        }
    }

    /// Both Byes are exchanged (or the peer closed after its Bye): close quietly.
    fn close_gracefully(&mut self, rank: u32) {
        let peer = &mut self.peers[rank as usize];
        peer.up = false;
        peer.gone = true;
        if let Some(slot) = peer.conn.take() {
            self.drop_conn(slot);
        }
        self.shared.set_status(rank, PeerStatus::Closed);
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: closed the connection to {}",
            self.name(rank)
        );
    }

    /// `rank` is lost: close its connection, fail its sends, tell the caller (after
    /// start-up) or fail the start-up.
    fn lose(&mut self, rank: u32, reason: String) {
        let peer = &mut self.peers[rank as usize];
        if peer.gone {
            return;
        }
        peer.up = false;
        peer.gone = true;
        if let Some(slot) = peer.conn.take() {
            self.drop_conn(slot);
        }
        self.shared
            .set_status(rank, PeerStatus::Lost(reason.clone()));
        let addr = self.cfg.addrs[rank as usize];
        tracing::error!(
            rank = self.rank(),
            "iterstore net: lost rank {rank} at {addr}: {reason}"
        );
        if let Phase::Starting { .. } = self.phase {
            self.fatal
                .get_or_insert(NetError::PeerLost { rank, addr, reason });
            return;
        }
        self.pending_lost.push((rank, addr, reason));
    }

    /// Hands the losses recorded since the last call to `deliver`.
    fn deliver_losses(&mut self, deliver: &mut Deliver<M>) {
        for (rank, addr, reason) in std::mem::take(&mut self.pending_lost) {
            deliver(NetEvent::PeerLost { rank, addr, reason });
        }
    }

    /// Dial retries, handshake deadlines, heartbeats and silence.
    fn timers(&mut self) {
        let now = Instant::now();
        if let Phase::Starting { .. } = self.phase {
            for rank in 0..self.rank() {
                let p = &self.peers[rank as usize];
                if p.conn.is_none() && !p.up && p.dial.as_ref().is_some_and(|d| now >= d.next) {
                    self.dial(rank);
                }
            }
        }
        #[cfg(test)]
        let silent = self.shared.silent.load(Ordering::SeqCst);
        #[cfg(not(test))]
        let silent = false;
        let heartbeat = frame::control_frame(FrameKind::Heartbeat);
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            match &conn.state {
                ConnState::Handshaking { deadline, .. } => {
                    if now >= *deadline {
                        let why = format!("no handshake within {:?}", self.cfg.handshake_timeout);
                        self.handshake_failed(slot, why, None);
                    }
                }
                ConnState::Up {
                    rank,
                    bye_sent,
                    bye_received,
                    ..
                } => {
                    let rank = *rank;
                    let quiet = since(now, conn.last_recv);
                    if !*bye_received && quiet > self.cfg.heartbeat_timeout {
                        let why = format!(
                            "silent for {quiet:?} (no data or heartbeat; timeout {:?})",
                            self.cfg.heartbeat_timeout
                        );
                        self.lose(rank, why);
                        continue;
                    }
                    if !silent
                        && !*bye_sent
                        && conn.out.is_empty()
                        && since(now, conn.last_send) >= self.cfg.heartbeat_interval
                    {
                        conn.out.push_back(OutFrame {
                            bytes: heartbeat.to_vec(),
                            counted: false,
                        });
                        self.flush(slot);
                    }
                }
            }
        }
    }

    /// Starts the shutdown: stop accepting, flush every queue, say Bye.
    fn begin_stop(&mut self) {
        tracing::debug!(rank = self.rank(), "iterstore net: shutting down");
        self.phase = Phase::Stopping {
            deadline: Instant::now() + self.cfg.shutdown_timeout,
        };
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        for slot in 0..self.conns.len() {
            if matches!(
                self.conns[slot],
                Some(Conn {
                    state: ConnState::Handshaking { .. },
                    ..
                })
            ) {
                self.drop_conn(slot);
            }
        }
        for rank in 0..self.size {
            let p = &self.peers[rank as usize];
            let (Some(slot), true) = (p.conn, p.up) else {
                continue;
            };
            if let PeerStatus::Lost(reason) = self.move_queue(slot, rank) {
                self.lose(rank, reason);
                continue;
            }
            self.send_bye(slot);
            self.flush(slot);
        }
    }
}
