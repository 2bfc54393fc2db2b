//! The TCP network layer of a cluster of processes.
//!
//! `N` processes (ranks `0..N`) each run one [`Net`]: a full mesh of TCP connections, one
//! per pair of ranks, driven by one event-loop thread per process (mio). Rank `i` dials
//! every rank `j < i` and accepts the ranks above it; every connection starts with an
//! authenticated handshake (HMAC-SHA256 over fresh nonces with the cluster's shared
//! secret, see [`handshake`]) and then carries length-prefixed frames (see [`frame`]).
//! [`Net`] is generic over the message type, so it does not depend on the protocol.
//!
//! # Ordering guarantee
//!
//! **FIFO per pair of processes**: the messages that [`Net::send`] /
//! [`Net::send_nonblocking`] enqueue for rank `j`, from any threads of this process, are
//! delivered to `j` in the order they were enqueued (the order in which the calls took
//! the queue of `j`; calls from one thread are enqueued in program order). Nothing is
//! guaranteed across different pairs. Delivery is at most once: a message enqueued
//! before a peer is lost may never arrive.
//!
//! # Liveness
//!
//! An idle connection carries a heartbeat every `heartbeat_interval`; a peer from which
//! nothing arrived for `heartbeat_timeout` is lost, as is one that closes without saying
//! Bye, fails a write or sends a bad frame: the `deliver` callback gets
//! [`NetEvent::PeerLost`] naming it, and later sends to it fail. The listener stays open
//! for the life of the [`Net`]: a stray connection is handshaken, refused (logged at
//! warn) and closed without disturbing the cluster.
//!
//! # Memory
//!
//! Each peer's outbound queue is bounded: a blocking [`Net::send`] waits (bounded by
//! `send_timeout`) while more than `queue_bytes` are queued; [`Net::send_nonblocking`]
//! never waits and declares the peer lost when it finds more than `4 x queue_bytes` already
//! queued (so one frame of any size up to `max_frame` goes to a peer that keeps up). Incoming frames are
//! capped at `max_frame` bytes, checked before any allocation.

pub(crate) mod conn;
pub(crate) mod event_loop;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod peers;
pub(crate) mod seal;
pub(crate) mod shared;
#[cfg(test)]
mod tests;
pub(crate) mod timers;

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use self::shared::{Mode, Shared};

/// Configuration of one process's [`Net`]. Its `Debug` output leaves the secret out.
pub(crate) struct NetConfig {
    /// This process's rank.
    pub(crate) rank: u32,
    /// Every rank's address (index = rank); `addrs[rank]` is where this process listens.
    pub(crate) addrs: Vec<SocketAddr>,
    /// A pre-bound listener for `addrs[rank]` (tests bind `127.0.0.1:0` first); `None`
    /// binds `addrs[rank]`.
    pub(crate) listener: Option<std::net::TcpListener>,
    /// Identifies the cluster: a process of another cluster is refused.
    pub(crate) cluster_id: u64,
    /// The shared secret (at least 16 bytes). Never from the command line: the caller
    /// reads it from a file or the environment.
    pub(crate) secret: Vec<u8>,
    /// Start-up: every peer connected and authenticated within this, else an error naming
    /// the missing ranks and their addresses.
    pub(crate) connect_timeout: Duration,
    /// A connection must complete its handshake within this, else it is closed.
    pub(crate) handshake_timeout: Duration,
    /// An idle connection sends a heartbeat this often.
    pub(crate) heartbeat_interval: Duration,
    /// A peer silent for this long is lost (must exceed `heartbeat_interval`).
    pub(crate) heartbeat_timeout: Duration,
    /// Cap on one frame's body length (at most [`frame::MAX_FRAME_LIMIT`]).
    pub(crate) max_frame: usize,
    /// Per-peer outbound bound: blocking sends wait while more is queued.
    pub(crate) queue_bytes: usize,
    /// Longest a blocking send waits for queue space before failing.
    pub(crate) send_timeout: Duration,
    /// Longest `shutdown` waits to flush the queues and exchange Bye.
    pub(crate) shutdown_timeout: Duration,
}

impl std::fmt::Debug for NetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetConfig")
            .field("rank", &self.rank)
            .field("addrs", &self.addrs)
            .field("listener", &self.listener)
            .field("cluster_id", &self.cluster_id)
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .field("connect_timeout", &self.connect_timeout)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("heartbeat_timeout", &self.heartbeat_timeout)
            .field("max_frame", &self.max_frame)
            .field("queue_bytes", &self.queue_bytes)
            .field("send_timeout", &self.send_timeout)
            .field("shutdown_timeout", &self.shutdown_timeout)
            .finish()
    }
}

impl NetConfig {
    /// A configuration with default timeouts and bounds: connect 60 s, handshake 10 s,
    /// heartbeat every 1 s and lost after 15 s, frames up to 256 MiB, queues of 64 MiB,
    /// sends waiting up to 60 s, shutdown up to 10 s.
    pub(crate) fn new(
        rank: u32,
        addrs: Vec<SocketAddr>,
        cluster_id: u64,
        secret: Vec<u8>,
    ) -> NetConfig {
        NetConfig {
            rank,
            addrs,
            listener: None,
            cluster_id,
            secret,
            connect_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(15),
            max_frame: 256 << 20,
            queue_bytes: 64 << 20,
            send_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the configuration; the error says what is wrong.
    fn validate(&self) -> Result<(), NetError> {
        let bad = |why: String| Err(NetError::Config(why));
        if self.addrs.is_empty() || self.addrs.len() > u32::MAX as usize {
            return bad(format!(
                "{} addresses: need 1 to {}",
                self.addrs.len(),
                u32::MAX
            ));
        }
        if self.rank as usize >= self.addrs.len() {
            return bad(format!(
                "rank {} out of range ({} addresses)",
                self.rank,
                self.addrs.len()
            ));
        }
        if self.secret.len() < 16 {
            return bad(format!(
                "the secret has {} bytes: need at least 16",
                self.secret.len()
            ));
        }
        if self.max_frame == 0 || self.max_frame > frame::MAX_FRAME_LIMIT {
            return bad(format!(
                "max_frame {} not in 1..={}",
                self.max_frame,
                frame::MAX_FRAME_LIMIT
            ));
        }
        if self.queue_bytes == 0 {
            return bad("queue_bytes is 0".into());
        }
        let positive = [
            ("connect_timeout", self.connect_timeout),
            ("handshake_timeout", self.handshake_timeout),
            ("heartbeat_interval", self.heartbeat_interval),
            ("send_timeout", self.send_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
        ];
        for (name, d) in positive {
            if d.is_zero() {
                return bad(format!("{name} is zero"));
            }
        }
        if self.heartbeat_timeout <= self.heartbeat_interval {
            return bad(format!(
                "heartbeat_timeout {:?} must exceed heartbeat_interval {:?}",
                self.heartbeat_timeout, self.heartbeat_interval
            ));
        }
        Ok(())
    }
}

/// What the event loop hands to the `deliver` callback.
#[derive(Debug)]
pub(crate) enum NetEvent<M> {
    /// A message from rank `from`.
    Msg {
        /// The sender's rank.
        from: u32,
        /// The message.
        msg: M,
        /// Bytes of its frame on the wire (header included).
        bytes: usize,
    },
    /// A peer is gone (closed without Bye, missed heartbeats, failed write, bad frame,
    /// outbound queue over the hard bound): sends to it fail from now on.
    PeerLost {
        /// Its rank.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
        /// Why it is considered gone.
        reason: String,
    },
    /// The event loop itself failed (a panic, an I/O error of the poller): every peer is
    /// unreachable and every later send fails.
    Failed {
        /// What happened.
        reason: String,
    },
}

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetError {
    /// An invalid [`NetConfig`].
    #[error("invalid network configuration: {0}")]
    Config(String),
    /// An I/O error setting up the network.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Start-up did not connect every peer in time.
    #[error("not every peer connected within {timeout:?}; missing: {missing}")]
    ConnectTimeout {
        /// The missing ranks with their addresses (and what went wrong, if known).
        missing: String,
        /// The connect timeout.
        timeout: Duration,
    },
    /// A peer we dialed at start-up refused our handshake or failed it.
    #[error("handshake with rank {rank} at {addr} failed: {reason}")]
    Handshake {
        /// The peer's rank.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The peer is gone.
    #[error("rank {rank} at {addr} is lost: {reason}")]
    PeerLost {
        /// The peer's rank.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The peer closed its side gracefully (it shut down).
    #[error("rank {rank} at {addr} has shut down")]
    PeerClosed {
        /// The peer's rank.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
    },
    /// A blocking send waited too long for queue space.
    #[error("rank {rank} at {addr} is not reading: {queued} bytes still queued after waiting {waited:?}")]
    Backpressure {
        /// The peer's rank.
        rank: u32,
        /// Its address.
        addr: SocketAddr,
        /// How long the send waited.
        waited: Duration,
        /// Bytes queued for the peer.
        queued: usize,
    },
    /// Sending to one's own rank: the caller handles local messages.
    #[error("rank {0} cannot send to itself through the network")]
    SelfSend(u32),
    /// No such rank.
    #[error("no rank {rank} in a cluster of {size}")]
    NoSuchRank {
        /// The rank asked for.
        rank: u32,
        /// The cluster size.
        size: usize,
    },
    /// The message cannot be framed (too large, or not encodable).
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
    /// The network is shut down.
    #[error("the network is shut down")]
    ShutDown,
    /// Shutdown could not flush and close every connection in time.
    #[error("shutdown incomplete: {0}")]
    ShutdownIncomplete(String),
    /// The event loop failed.
    #[error("the network event loop failed: {0}")]
    Failed(String),
}

/// Activity so far (every frame kind, headers included; not the handshakes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct NetCounters {
    /// Bytes written.
    pub(crate) bytes_sent: u64,
    /// Frames written.
    pub(crate) frames_sent: u64,
    /// Bytes read.
    pub(crate) bytes_received: u64,
    /// Frames read.
    pub(crate) frames_received: u64,
    /// Blocking sends that found their peer's queue full and waited for space (a slow
    /// reader holding this process back).
    pub(crate) send_waits: u64,
    /// The most bytes ever queued for one peer (bounded by `queue_bytes` plus one frame
    /// for blocking sends, `4 x queue_bytes` for non-blocking ones).
    pub(crate) peak_queued_bytes: u64,
}

/// The callback the event loop hands every incoming message and event to, in arrival
/// order. It runs on the event-loop thread and must not block (push into a channel).
pub(crate) type Deliver<M> = Box<dyn FnMut(NetEvent<M>) + Send>;

/// One process's end of the cluster's full mesh. See the [module docs](self).
pub(crate) struct Net<M> {
    /// State shared with the event loop.
    shared: Arc<Shared>,
    /// Number of ranks.
    size: usize,
    /// Cap on a frame's body.
    max_frame: usize,
    /// The event-loop thread, until shut down.
    thread: Option<JoinHandle<Result<(), NetError>>>,
    /// The message type (sent from any thread, delivered on the loop's).
    _msg: PhantomData<fn(M) -> M>,
}

impl<M: Serialize + DeserializeOwned + Send + 'static> Net<M> {
    /// Uses the pre-bound listener (or binds `addrs[rank]`), dials every lower rank
    /// (retrying until `connect_timeout`), accepts the higher ones, authenticates all;
    /// returns when all `N - 1` peers are up. `deliver` is called on the event-loop thread
    /// for each incoming message and event in arrival order (possibly before `start`
    /// returns); it must not block.
    pub(crate) fn start(mut cfg: NetConfig, deliver: Deliver<M>) -> Result<Net<M>, NetError> {
        cfg.validate()?;
        let io = |context: String| move |source| NetError::Io { context, source };
        let rank = cfg.rank;
        let listener = match cfg.listener.take() {
            Some(l) => l,
            None => std::net::TcpListener::bind(cfg.addrs[rank as usize]).map_err(io(format!(
                "rank {rank}: cannot listen on {}",
                cfg.addrs[rank as usize]
            )))?,
        };
        listener
            .set_nonblocking(true)
            .map_err(io("cannot make the listener non-blocking".into()))?;
        let listener = mio::net::TcpListener::from_std(listener);
        let poll = mio::Poll::new().map_err(io("cannot create the poller".into()))?;
        let waker = mio::Waker::new(poll.registry(), event_loop::WAKER)
            .map_err(io("cannot create the waker".into()))?;
        let shared = Arc::new(Shared::new(
            rank,
            cfg.addrs.clone(),
            waker,
            cfg.queue_bytes,
            cfg.send_timeout,
        ));
        let size = cfg.addrs.len();
        let max_frame = cfg.max_frame;
        let (ready_tx, ready_rx) = mpsc::channel();
        let loop_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("iterstore-net-{rank}"))
            .spawn(move || {
                event_loop::thread_main::<M>(cfg, poll, listener, loop_shared, deliver, ready_tx)
            })
            .map_err(io("cannot spawn the network thread".into()))?;
        let ready = ready_rx.recv();
        match ready {
            Ok(Ok(())) => Ok(Net {
                shared,
                size,
                max_frame,
                thread: Some(thread),
                _msg: PhantomData,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let r = thread.join();
                Err(NetError::Failed(match r {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the event loop exited during start-up".into(),
                }))
            }
        }
    }

    /// This process's rank.
    #[cfg(test)]
    pub(crate) fn rank(&self) -> u32 {
        self.shared.rank
    }

    /// Number of ranks in the cluster.
    #[cfg(test)]
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Checks `to` and encodes `msg` (on the caller's thread) as a frame.
    fn frame_for(&self, to: u32, msg: &M) -> Result<Vec<u8>, NetError> {
        if to == self.shared.rank {
            return Err(NetError::SelfSend(to));
        }
        if to as usize >= self.size {
            return Err(NetError::NoSuchRank {
                rank: to,
                size: self.size,
            });
        }
        Ok(frame::encode_data(msg, self.max_frame)?)
    }

    /// Encodes `msg` on the caller's thread and enqueues it for `to`. Blocks while more
    /// than `queue_bytes` are queued for that peer (backpressure), but at most
    /// `send_timeout` ([`NetError::Backpressure`] then, naming the peer). Fails at once if
    /// the peer is lost or closed, or the net is shut down.
    /// Returns the frame's size on the wire.
    pub(crate) fn send(&self, to: u32, msg: &M) -> Result<usize, NetError> {
        let frame = self.frame_for(to, msg)?;
        let bytes = frame.len();
        self.shared
            .enqueue(to, frame, Mode::Blocking)
            .map(|()| bytes)
    }

    /// Like [`Net::send`] but never blocks (for server shards that must not wait on a slow
    /// peer): if more than `4 x queue_bytes` are already queued, the peer is declared lost
    /// instead ([`NetError::PeerLost`], and a [`NetEvent::PeerLost`] is delivered).
    pub(crate) fn send_nonblocking(&self, to: u32, msg: &M) -> Result<usize, NetError> {
        let frame = self.frame_for(to, msg)?;
        let bytes = frame.len();
        self.shared
            .enqueue(to, frame, Mode::NonBlocking)
            .map(|()| bytes)
    }

    /// Flushes the queues, sends Bye to every peer and waits for theirs (or their close),
    /// all within `shutdown_timeout`, then stops the thread. Sends fail from the moment it
    /// is called. Idempotent (later calls return `Ok`); also run on drop.
    pub(crate) fn shutdown(&mut self) -> Result<(), NetError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.shared.begin_stop();
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(NetError::Failed("the event loop thread panicked".into())),
        }
    }

    /// Bytes and frames sent and received so far.
    pub(crate) fn counters(&self) -> NetCounters {
        self.shared.counters()
    }

    /// The same by peer, with each peer's queued bytes now.
    pub(crate) fn peer_traffic(&self) -> Vec<shared::PeerTraffic> {
        self.shared.peer_traffic()
    }

    /// Test hook: stops the loop at once and closes every socket without Bye, as if the
    /// process died.
    #[cfg(test)]
    pub(crate) fn kill(&mut self) {
        self.shared
            .kill
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.begin_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Test hook: stops (or resumes) sending heartbeats, as if the process hung.
    #[cfg(test)]
    pub(crate) fn set_silent(&self, silent: bool) {
        self.shared
            .silent
            .store(silent, std::sync::atomic::Ordering::SeqCst);
    }

    /// Test hook: bytes queued for `to`.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self, to: u32) -> usize {
        self.shared.queued_bytes(to)
    }
}

impl<M> Drop for Net<M> {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.shared.begin_stop();
            let _ = thread.join();
        }
    }
}
