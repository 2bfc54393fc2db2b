//! The event loop: one thread per process, driving every socket of the [`Net`] with mio.
//!
//! Phases (kept by the peer table, [`super::peers`]): **starting** (dial every lower rank
//! with retries, accept the higher ones, until every peer is authenticated or
//! `connect_timeout` passes), **running**, **stopping** (flush every queue, send Bye, wait
//! for the peers' Bye or close, bounded by `shutdown_timeout`). The listener stays
//! registered until stopping, so a stray connection is handshaken, refused and closed at
//! any time.
//!
//! Each connection ([`super::conn`]) is handshaking (with its own deadline) or up (a
//! [`FrameDecoder`] for input, a queue of frames for output). Senders' frames move from the
//! shared queue (see [`super::shared`]) to the connection's output when the loop is woken;
//! their bytes stay counted until written. Reads and writes go until `WouldBlock` (mio is
//! edge-triggered). Timers (dial retries, handshake deadlines, heartbeats, silence; see
//! [`super::timers`]) are checked on every turn; the poll timeout is a short tick.
//!
//! Owns: polling, accepting, dialing, reading and writing sockets, feeding the
//! handshakes and frame decoders, delivering messages and events, and the clock: this
//! driver alone reads the time ([`now`]) and passes it to the peer table, the connections
//! and the timers, then acts on what they return. Must not know: the rules of who to dial
//! when, when start-up or shutdown is complete or overdue, or when a timer is due — those
//! are the peer table's and the timers' (pure, tested with a fake clock).
//!
//! [`Net`]: super::Net
//! [`FrameDecoder`]: super::frame::FrameDecoder

use std::io::{self, Read};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use serde::de::DeserializeOwned;

use super::conn::{Conn, ConnState, OutFrame};
use super::frame::{self, Frame, FrameKind};
use super::handshake::{self, Handshake, Role};
use super::peers::{DialFailed, Loss, Peers, Step};
use super::shared::{PeerStatus, Shared};
use super::timers::{Liveness, Timeouts};
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

/// The event loop's state.
struct EventLoop<M> {
    /// Configuration (the listener was taken out).
    cfg: NetConfig,
    /// The timeouts of `cfg`.
    timeouts: Timeouts,
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
    /// The peer table and phase.
    peers: Peers,
    /// Read buffer.
    scratch: Vec<u8>,
    /// Frames decoded from one read.
    frames: Vec<Frame>,
    /// The message type.
    _msg: PhantomData<fn() -> M>,
}

/// The driver's clock: the one place the network reads the time, passed from here to
/// the peer table, the connections and the timers.
fn now() -> Instant {
    Instant::now()
}

impl<M: DeserializeOwned> EventLoop<M> {
    /// A loop for `cfg` (whose listener is `listener`).
    fn new(cfg: NetConfig, poll: Poll, listener: TcpListener, shared: Arc<Shared>) -> EventLoop<M> {
        let timeouts = Timeouts::of(&cfg);
        let peers = Peers::new(cfg.rank, cfg.addrs.clone(), timeouts, now());
        EventLoop {
            cfg,
            timeouts,
            poll,
            listener: Some(listener),
            shared,
            conns: Vec::new(),
            free: Vec::new(),
            peers,
            scratch: vec![0; READ_CHUNK],
            frames: Vec::new(),
            _msg: PhantomData,
        }
    }

    /// Our rank.
    fn rank(&self) -> u32 {
        self.cfg.rank
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
            size = self.peers.size(),
            "iterstore net: starting"
        );
        let mut events = Events::with_capacity(256);
        let mut tokens = Vec::new();
        loop {
            #[cfg(test)]
            if self.shared.kill.load(Ordering::SeqCst) {
                return Ok(()); // Dropping `self` closes every socket without Bye.
            }
            match self.poll.poll(&mut events, Some(self.timeouts.tick())) {
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
            let stop_asked = self.shared.stopping.load(Ordering::SeqCst);
            match self.peers.step(now(), stop_asked) {
                Step::Wait => {}
                Step::Ready => {
                    tracing::debug!(
                        rank = self.rank(),
                        "iterstore net: all {} peers up",
                        self.peers.size() - 1
                    );
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(Ok(()));
                    }
                }
                Step::Stop => {
                    // `kill` is set before `stopping`: a killed loop never says Bye.
                    #[cfg(test)]
                    if self.shared.kill.load(Ordering::SeqCst) {
                        return Ok(());
                    }
                    self.begin_stop();
                    self.deliver_losses(deliver);
                }
                Step::Done => {
                    tracing::debug!(rank = self.rank(), "iterstore net: shut down");
                    return Ok(());
                }
                Step::Fail(e) => return Err(e),
            }
        }
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
            self.peers.size(),
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
                .filter(|c| c.pending_accept())
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
            let timeout = self.cfg.handshake_timeout;
            let conn = Conn::handshaking(stream, addr, None, hs, now(), timeout);
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
        let addr = self.peers.addr(rank);
        let attempt = TcpStream::connect(addr).and_then(|stream| {
            let hs = self.handshake(Role::Dialer { target: rank })?;
            let timeout = self.cfg.handshake_timeout;
            self.add_conn(Conn::handshaking(
                stream,
                addr,
                Some(rank),
                hs,
                now(),
                timeout,
            ))
        });
        match attempt {
            Ok(slot) => {
                tracing::debug!(
                    rank = self.rank(),
                    "iterstore net: dialing {}",
                    self.peers.name(rank)
                );
                self.peers.dialing(rank, slot);
            }
            Err(e) => self.dial_failed(rank, format!("cannot connect: {e}")),
        }
    }

    /// A dial of `rank` failed (transiently): close it and retry after a pause.
    fn dial_failed(&mut self, rank: u32, why: String) {
        let failed = self.peers.dial_failed(rank, why.clone(), now());
        self.after_dial_failure(rank, &why, failed);
    }

    /// Acts on what the peer table made of a failed dial of `rank`.
    fn after_dial_failure(&mut self, rank: u32, why: &str, failed: DialFailed) {
        let DialFailed::Retry { close, pause } = failed else {
            return;
        };
        if let Some(slot) = close {
            self.drop_conn(slot);
        }
        if let Some(pause) = pause {
            tracing::debug!(
                rank = self.rank(),
                "iterstore net: dialing {} failed ({why}); retrying in {pause:?}",
                self.peers.name(rank)
            );
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
        if let Some(rank) = dialed {
            let refused = refusal.is_some();
            match self
                .peers
                .dial_handshake_failed(rank, why.clone(), refused, now())
            {
                DialFailed::Fatal => {
                    // The peer we are configured to reach refuses us, or is not who we
                    // expect: retrying will not help.
                    tracing::warn!(
                        rank = self.rank(),
                        "iterstore net: handshake with {} failed: {why}",
                        self.peers.name(rank)
                    );
                    self.drop_conn(slot);
                }
                failed => self.after_dial_failure(rank, &why, failed),
            }
            return;
        }
        if let Some(r) = refusal {
            tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: refused connection: {why}");
            if let Some(claimed) = r.claimed_rank() {
                self.peers
                    .note_refusal(claimed, format!("refused a connection from {addr}: {why}"));
            }
        } else {
            if let Some(c) = claimed {
                // The peer saw our proof and closed: it most likely refused it.
                self.peers.note_refusal(
                    c,
                    format!(
                        "a connection from {addr} claiming this rank {why} (it may have \
                         refused our proof: a different secret or settings)"
                    ),
                );
            }
            tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: closed unauthenticated connection: {why}");
        }
        self.drop_conn(slot);
    }

    /// Handles readiness of the connection in `slot`.
    fn conn_ready(&mut self, slot: usize, deliver: &mut Deliver<M>) {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        match conn.check_connected() {
            Ok(true) => {}
            Ok(false) => return,
            Err(why) => return self.handshake_failed(slot, why, None),
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
                    conn.traffic.received(now());
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
            let result = hs.feed(bytes, &mut out, |r| peers.settled(r));
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
        let now = now();
        let max_frame = self.cfg.max_frame;
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        conn.authenticated(rank, max_frame, now);
        let addr = conn.addr;
        self.peers.authenticated(rank, slot);
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
            self.peers.name(rank)
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
        if let Some(conn) = self.conns[slot].as_mut() {
            conn.queue_bye();
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
        for (rank, slot) in self.peers.up() {
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
        let written = conn.write_out();
        if written.bytes > 0 {
            conn.traffic.sent(now());
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
            c.bytes_sent
                .fetch_add(written.bytes as u64, Ordering::Relaxed);
            c.frames_sent.fetch_add(written.frames, Ordering::Relaxed);
            if written.released > 0 {
                self.shared.release(rank, written.released);
            }
        }
        match (written.error, up) {
            (Some(why), _) => self.broken(slot, why),
            (None, Some((rank, true))) => self.close_gracefully(rank),
            _ => {}
        }
    }

    /// Both Byes are exchanged (or the peer closed after its Bye): close quietly.
    fn close_gracefully(&mut self, rank: u32) {
        if let Some(slot) = self.peers.closed(rank) {
            self.drop_conn(slot);
        }
        self.shared.set_status(rank, PeerStatus::Closed);
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: closed the connection to {}",
            self.peers.name(rank)
        );
    }

    /// `rank` is lost: close its connection, fail its sends, tell the caller (after
    /// start-up) or fail the start-up.
    fn lose(&mut self, rank: u32, reason: String) {
        let Some(conn) = self.peers.lost(rank, reason.clone()) else {
            return; // gone already
        };
        if let Some(slot) = conn {
            self.drop_conn(slot);
        }
        self.shared
            .set_status(rank, PeerStatus::Lost(reason.clone()));
        let addr = self.peers.addr(rank);
        tracing::error!(
            rank = self.rank(),
            "iterstore net: lost rank {rank} at {addr}: {reason}"
        );
    }

    /// Hands the losses recorded since the last call to `deliver`.
    fn deliver_losses(&mut self, deliver: &mut Deliver<M>) {
        for Loss { rank, addr, reason } in self.peers.take_losses() {
            deliver(NetEvent::PeerLost { rank, addr, reason });
        }
    }

    /// Dial retries, handshake deadlines, heartbeats and silence.
    fn timers(&mut self) {
        let now = now();
        for rank in self.peers.due_dials(now) {
            self.dial(rank);
        }
        #[cfg(test)]
        let silent = self.shared.silent.load(Ordering::SeqCst);
        #[cfg(not(test))]
        let silent = false;
        for slot in 0..self.conns.len() {
            let Some(conn) = self.conns[slot].as_mut() else {
                continue;
            };
            match &conn.state {
                ConnState::Handshaking { deadline, .. } => {
                    if deadline.passed(now) {
                        let why = format!("no handshake within {:?}", self.cfg.handshake_timeout);
                        self.handshake_failed(slot, why, None);
                    }
                }
                &ConnState::Up {
                    rank,
                    bye_sent,
                    bye_received,
                    ..
                } => {
                    let may_heartbeat = !silent && !bye_sent && conn.out.is_empty();
                    match conn
                        .traffic
                        .check(now, &self.timeouts, !bye_received, may_heartbeat)
                    {
                        Liveness::Fine => {}
                        Liveness::Silent(quiet) => {
                            let why = format!(
                                "silent for {quiet:?} (no data or heartbeat; timeout {:?})",
                                self.cfg.heartbeat_timeout
                            );
                            self.lose(rank, why);
                        }
                        Liveness::HeartbeatDue => {
                            conn.queue_control(FrameKind::Heartbeat);
                            self.flush(slot);
                        }
                    }
                }
            }
        }
    }

    /// Starts the shutdown: stop accepting, flush every queue, say Bye.
    fn begin_stop(&mut self) {
        tracing::debug!(rank = self.rank(), "iterstore net: shutting down");
        self.peers.begin_stop(now());
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
        for (rank, slot) in self.peers.up() {
            if let PeerStatus::Lost(reason) = self.move_queue(slot, rank) {
                self.lose(rank, reason);
                continue;
            }
            self.send_bye(slot);
            self.flush(slot);
        }
    }
}
