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
//! Owns: the turn (poll, dispatch readiness, move the senders' frames, run the timers,
//! deliver losses, step the peer table), the connection slots and their registration,
//! closing and losing peers, the shutdown's sockets, and the clock: this driver alone
//! reads the time ([`now`]) and passes it to the peer table, the connections and the
//! timers, then acts on what they return. Accepting and dialing are in [`connect`],
//! reading and writing in [`read_write`]. Must not know: the rules of who to dial when,
//! when start-up or shutdown is complete or overdue, or when a timer is due — those are
//! the peer table's and the timers' (pure, tested with a fake clock).
//!
//! [`Net`]: super::Net
//! [`FrameDecoder`]: super::frame::FrameDecoder

use std::io;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Instant;

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use serde::de::DeserializeOwned;

use super::conn::{Conn, ConnState};
use super::frame::{Frame, FrameKind};
use super::peers::{Loss, Lost, Peers, Step};
use super::shared::{PeerStatus, Shared};
use super::timers::{frame_allowance, since, Liveness, Timeouts, WarnLimit};
use super::{Deliver, NetConfig, NetError, NetEvent};

mod connect;
mod read_write;

/// Token of the waker.
pub(crate) const WAKER: Token = Token(0);
/// Token of the listener.
const LISTENER: Token = Token(1);
/// Tokens of connections start here (token = slot + this).
const FIRST_CONN: usize = 2;
/// At most this many accepted connections may be handshaking at once; a new one beyond
/// them closes the oldest (so idle sockets cannot keep a listed peer out: its connection
/// is always the newest, and a handshake takes milliseconds).
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
    /// The rate limit of warnings about strangers (accepted connections that do not
    /// authenticate).
    strangers: WarnLimit,
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
            strangers: WarnLimit::default(),
            _msg: PhantomData,
        }
    }

    /// Our rank.
    fn rank(&self) -> u32 {
        self.cfg.rank
    }

    /// Logs `what` about a stranger at `addr` (an accepted connection that did not
    /// authenticate), at most once per [`WARN_INTERVAL`](super::timers::WARN_INTERVAL),
    /// mentioning how many were held back since the last.
    fn warn_stranger(&mut self, addr: std::net::SocketAddr, what: std::fmt::Arguments<'_>) {
        if let Some(held) = self.strangers.allow(now()) {
            let more = if held > 0 {
                format!(" ({held} more such warnings held back)")
            } else {
                String::new()
            };
            tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: {what}{more}");
        }
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
        let Lost::Now { close } = self.peers.lost(rank, reason.clone()) else {
            return; // gone already
        };
        if let Some(slot) = close {
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
                ConnState::Up {
                    rank,
                    bye_sent,
                    bye_received,
                    decoder,
                    ..
                } => {
                    let (rank, bye_sent, bye_received) = (*rank, *bye_sent, *bye_received);
                    if let (Some(started), Some(len)) = (conn.frame_started, decoder.pending_body())
                    {
                        let allowed = frame_allowance(len, self.cfg.heartbeat_timeout);
                        if since(now, started) > allowed {
                            let why = format!(
                                "a frame of {len} bytes did not arrive within {allowed:.1?} of its header"
                            );
                            self.lose(rank, why);
                            continue;
                        }
                    }
                    let may_heartbeat = !silent && !bye_sent && conn.out.is_empty();
                    match conn
                        .activity
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
