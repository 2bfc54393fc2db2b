//! State shared between the threads that send and the event-loop thread: one bounded
//! outbound queue of encoded frames per peer, the peer's status, the counters, and the
//! [`mio::Waker`] that tells the loop a queue went from empty to non-empty.
//!
//! Senders push whole encoded frames under the queue's mutex, so the order of a peer's
//! frames is the order in which `send` calls took that mutex (FIFO per pair of
//! processes). `bytes` counts the frames in the queue *and* those the loop has taken but
//! not yet written to the socket, so the memory held for a peer is bounded by it.
//!
//! The traffic counters are kept in total and per peer ([`PeerCounters`], relaxed atomics
//! the event loop adds to as it reads and writes) for the metrics endpoint.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{NetCounters, NetError};

/// The status of a peer, as senders see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PeerStatus {
    /// Connected: sends are accepted.
    Up,
    /// Gone abnormally; the reason.
    Lost(String),
    /// Closed gracefully (it said Bye).
    Closed,
}

/// The outbound queue of one peer.
#[derive(Debug)]
pub(crate) struct Queue {
    /// Encoded frames not yet taken by the loop.
    pub(crate) frames: VecDeque<Vec<u8>>,
    /// Bytes of the frames queued or taken by the loop and not yet written.
    pub(crate) bytes: usize,
    /// Whether sends are accepted.
    pub(crate) status: PeerStatus,
}

/// A peer's queue and the condition variable senders wait on for space.
#[derive(Debug)]
pub(crate) struct PeerQueue {
    /// The queue.
    queue: Mutex<Queue>,
    /// Signalled when bytes are written or the status changes.
    space: Condvar,
}

/// How `enqueue` treats a full queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Wait (up to `send_timeout`) while the queue is over `queue_bytes`.
    Blocking,
    /// Never wait; if more than the hard bound is already queued, declare the peer lost.
    NonBlocking,
}

/// Atomic traffic counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Bytes of frames written.
    pub(crate) bytes_sent: AtomicU64,
    /// Frames written (all kinds).
    pub(crate) frames_sent: AtomicU64,
    /// Bytes of frames read.
    pub(crate) bytes_received: AtomicU64,
    /// Frames read (all kinds).
    pub(crate) frames_received: AtomicU64,
    /// Blocking sends that waited for queue space.
    pub(crate) send_waits: AtomicU64,
    /// The most bytes ever queued for one peer.
    pub(crate) peak_queued_bytes: AtomicU64,
}

/// Atomic traffic counters of one peer (what [`Counters`] totals, by peer).
#[derive(Debug, Default)]
pub(crate) struct PeerCounters {
    /// Bytes of frames written to the peer.
    bytes_sent: AtomicU64,
    /// Frames written to the peer.
    frames_sent: AtomicU64,
    /// Bytes of frames read from the peer.
    bytes_received: AtomicU64,
    /// Frames read from the peer.
    frames_received: AtomicU64,
}

/// The traffic with one peer so far, and what is queued for it now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PeerTraffic {
    /// The peer's rank.
    pub(crate) rank: u32,
    /// Bytes of frames written to it (headers and heartbeats included).
    pub(crate) bytes_sent: u64,
    /// Frames written to it.
    pub(crate) frames_sent: u64,
    /// Bytes of frames read from it.
    pub(crate) bytes_received: u64,
    /// Frames read from it.
    pub(crate) frames_received: u64,
    /// Bytes queued for it and not yet written.
    pub(crate) queued_bytes: u64,
}

/// Everything the senders and the loop share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Our rank.
    pub(crate) rank: u32,
    /// Every rank's address (index = rank).
    pub(crate) addrs: Vec<SocketAddr>,
    /// One queue per rank (ours unused).
    queues: Vec<PeerQueue>,
    /// Wakes the loop.
    pub(crate) waker: mio::Waker,
    /// Activity counters.
    pub(crate) counters: Counters,
    /// The same by peer (index = rank; ours stays zero).
    peer_counters: Vec<PeerCounters>,
    /// Blocking sends wait while a queue holds more than this.
    pub(crate) queue_bytes: usize,
    /// Non-blocking sends finding more than this queued declare the peer lost.
    pub(crate) hard_bytes: usize,
    /// Longest a blocking send waits for space.
    pub(crate) send_timeout: Duration,
    /// Set by `shutdown`: sends fail, the loop says Bye.
    pub(crate) stopping: AtomicBool,
    /// Whether `failure` is set (checked without the lock on every send).
    failed: AtomicBool,
    /// Set when the loop died (panic or fatal error): the reason.
    failure: Mutex<Option<String>>,
    /// Test hook: stop sending heartbeats.
    #[cfg(test)]
    pub(crate) silent: AtomicBool,
    /// Test hook: exit the loop at once, closing sockets without Bye.
    #[cfg(test)]
    pub(crate) kill: AtomicBool,
}

impl Shared {
    /// Shared state for `rank` among `addrs.len()` ranks.
    pub(crate) fn new(
        rank: u32,
        addrs: Vec<SocketAddr>,
        waker: mio::Waker,
        queue_bytes: usize,
        send_timeout: Duration,
    ) -> Shared {
        let queues = (0..addrs.len())
            .map(|_| PeerQueue {
                queue: Mutex::new(Queue {
                    frames: VecDeque::new(),
                    bytes: 0,
                    status: PeerStatus::Up,
                }),
                space: Condvar::new(),
            })
            .collect();
        let addrs_len = addrs.len();
        Shared {
            rank,
            addrs,
            queues,
            waker,
            counters: Counters::default(),
            peer_counters: (0..addrs_len).map(|_| PeerCounters::default()).collect(),
            queue_bytes,
            hard_bytes: queue_bytes.saturating_mul(4),
            send_timeout,
            stopping: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            #[cfg(test)]
            silent: AtomicBool::new(false),
            #[cfg(test)]
            kill: AtomicBool::new(false),
        }
    }

    /// Locks `rank`'s queue (a poisoned lock is still usable: the queue is consistent
    /// after every statement).
    pub(crate) fn lock(&self, rank: u32) -> MutexGuard<'_, Queue> {
        self.queues[rank as usize]
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the loop (an error is only logged: the loop also polls on a short tick).
    pub(crate) fn wake(&self) {
        if let Err(e) = self.waker.wake() {
            tracing::warn!("iterstore net: cannot wake the event loop: {e}");
        }
    }

    /// The error a send to `to` fails with now, if any.
    fn refusal(&self, to: u32, q: &Queue) -> Option<NetError> {
        if self.failed.load(Ordering::SeqCst) {
            let reason = self
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            return Some(NetError::Failed(reason.unwrap_or_default()));
        }
        if self.stopping.load(Ordering::SeqCst) {
            return Some(NetError::ShutDown);
        }
        let addr = self.addrs[to as usize];
        match &q.status {
            PeerStatus::Up => None,
            PeerStatus::Lost(reason) => Some(NetError::PeerLost {
                rank: to,
                addr,
                reason: reason.clone(),
            }),
            PeerStatus::Closed => Some(NetError::PeerClosed { rank: to, addr }),
        }
    }

    /// Appends an encoded frame to `to`'s queue (see [`Mode`]) and wakes the loop if the
    /// queue was empty.
    pub(crate) fn enqueue(&self, to: u32, frame: Vec<u8>, mode: Mode) -> Result<(), NetError> {
        let pq = &self.queues[to as usize];
        let len = frame.len();
        let mut q = self.lock(to);
        let mut deadline: Option<Instant> = None;
        loop {
            if let Some(e) = self.refusal(to, &q) {
                return Err(e);
            }
            match mode {
                Mode::Blocking => {
                    // An empty queue takes any frame, so one larger than the bound still goes.
                    if q.bytes == 0 || q.bytes + len <= self.queue_bytes {
                        break;
                    }
                    let now = Instant::now();
                    let deadline = *deadline.get_or_insert_with(|| {
                        self.counters.send_waits.fetch_add(1, Ordering::Relaxed);
                        now + self.send_timeout
                    });
                    if now >= deadline {
                        return Err(NetError::Backpressure {
                            rank: to,
                            addr: self.addrs[to as usize],
                            waited: self.send_timeout,
                            queued: q.bytes,
                        });
                    }
                    q = pq
                        .space
                        .wait_timeout(q, deadline - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                Mode::NonBlocking => {
                    // The backlog decides, not this frame: one large reply to a peer that
                    // keeps up is not a sign of a slow peer.
                    if q.bytes > self.hard_bytes {
                        let reason = format!(
                            "its outbound queue passed the hard bound of {} bytes ({} queued): too slow",
                            self.hard_bytes, q.bytes
                        );
                        q.status = PeerStatus::Lost(reason.clone());
                        q.frames.clear();
                        pq.space.notify_all();
                        drop(q);
                        self.wake();
                        return Err(NetError::PeerLost {
                            rank: to,
                            addr: self.addrs[to as usize],
                            reason,
                        });
                    }
                    break;
                }
            }
        }
        let was_empty = q.frames.is_empty();
        q.frames.push_back(frame);
        q.bytes += len;
        self.counters
            .peak_queued_bytes
            .fetch_max(q.bytes as u64, Ordering::Relaxed);
        drop(q);
        if was_empty {
            self.wake();
        }
        Ok(())
    }

    /// Loop side: takes every queued frame of `rank` (they stay counted in `bytes`) and
    /// returns them with the peer's status.
    pub(crate) fn take(&self, rank: u32) -> (VecDeque<Vec<u8>>, PeerStatus) {
        let mut q = self.lock(rank);
        (std::mem::take(&mut q.frames), q.status.clone())
    }

    /// Loop side: `bytes` of `rank`'s frames were written; wakes waiting senders.
    pub(crate) fn release(&self, rank: u32, bytes: usize) {
        let mut q = self.lock(rank);
        q.bytes = q.bytes.saturating_sub(bytes);
        drop(q);
        self.queues[rank as usize].space.notify_all();
    }

    /// Loop side: sets `rank`'s status (a lost peer stays lost); on anything but `Up` the
    /// queue is dropped. Wakes waiting senders.
    pub(crate) fn set_status(&self, rank: u32, status: PeerStatus) {
        let mut q = self.lock(rank);
        if !matches!(q.status, PeerStatus::Lost(_)) {
            q.status = status;
        }
        if q.status != PeerStatus::Up {
            q.frames.clear();
            q.bytes = 0;
        }
        drop(q);
        self.queues[rank as usize].space.notify_all();
    }

    /// Bytes queued for `rank` (tests check the bound).
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self, rank: u32) -> usize {
        self.lock(rank).bytes
    }

    /// Starts shutting down: every later send fails; wakes waiting senders and the loop.
    pub(crate) fn begin_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.notify_all_senders();
        self.wake();
    }

    /// Records that the loop died: every later send fails with `reason`.
    pub(crate) fn fail(&self, reason: &str) {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| reason.to_string());
        self.failed.store(true, Ordering::SeqCst);
        self.notify_all_senders();
    }

    /// Wakes every sender waiting for space, so it re-checks why it should stop.
    fn notify_all_senders(&self) {
        for (rank, pq) in self.queues.iter().enumerate() {
            // Take the lock so a sender between its check and its wait cannot miss this.
            drop(self.lock(rank as u32));
            pq.space.notify_all();
        }
    }

    /// Loop side: `bytes` in `frames` frames were written to `rank`.
    pub(crate) fn count_sent(&self, rank: u32, bytes: u64, frames: u64) {
        let (c, p) = (&self.counters, &self.peer_counters[rank as usize]);
        c.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
        c.frames_sent.fetch_add(frames, Ordering::Relaxed);
        p.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
        p.frames_sent.fetch_add(frames, Ordering::Relaxed);
    }

    /// Loop side: `bytes` were read from `rank`.
    pub(crate) fn count_received_bytes(&self, rank: u32, bytes: u64) {
        self.counters
            .bytes_received
            .fetch_add(bytes, Ordering::Relaxed);
        self.peer_counters[rank as usize]
            .bytes_received
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// Loop side: `frames` whole frames were read from `rank`.
    pub(crate) fn count_received_frames(&self, rank: u32, frames: u64) {
        self.counters
            .frames_received
            .fetch_add(frames, Ordering::Relaxed);
        self.peer_counters[rank as usize]
            .frames_received
            .fetch_add(frames, Ordering::Relaxed);
    }

    /// Every other rank's traffic so far and its queue now (each queue's lock taken in
    /// turn, briefly: for observers, not for the hot path).
    pub(crate) fn peer_traffic(&self) -> Vec<PeerTraffic> {
        (0..self.addrs.len() as u32)
            .filter(|&r| r != self.rank)
            .map(|rank| {
                let p = &self.peer_counters[rank as usize];
                PeerTraffic {
                    rank,
                    bytes_sent: p.bytes_sent.load(Ordering::Relaxed),
                    frames_sent: p.frames_sent.load(Ordering::Relaxed),
                    bytes_received: p.bytes_received.load(Ordering::Relaxed),
                    frames_received: p.frames_received.load(Ordering::Relaxed),
                    queued_bytes: self.lock(rank).bytes as u64,
                }
            })
            .collect()
    }

    /// A snapshot of the counters.
    pub(crate) fn counters(&self) -> NetCounters {
        let c = &self.counters;
        NetCounters {
            bytes_sent: c.bytes_sent.load(Ordering::Relaxed),
            frames_sent: c.frames_sent.load(Ordering::Relaxed),
            bytes_received: c.bytes_received.load(Ordering::Relaxed),
            frames_received: c.frames_received.load(Ordering::Relaxed),
            send_waits: c.send_waits.load(Ordering::Relaxed),
            peak_queued_bytes: c.peak_queued_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared state for rank 0 of two, with `queue_bytes` per peer and no event loop (so
    /// nothing queued is ever written).
    fn shared(queue_bytes: usize) -> (Shared, mio::Poll) {
        let poll = mio::Poll::new().unwrap();
        let waker = mio::Waker::new(poll.registry(), mio::Token(0)).unwrap();
        let addrs = vec!["127.0.0.1:1".parse().unwrap(); 2];
        let s = Shared::new(0, addrs, waker, queue_bytes, Duration::from_millis(50));
        (s, poll)
    }

    #[test]
    fn nonblocking_sends_judge_the_backlog_not_the_frame() {
        let (s, _poll) = shared(1024);
        s.enqueue(1, vec![0; 10], Mode::NonBlocking).unwrap();
        // One reply far larger than the hard bound still goes to a peer that keeps up.
        s.enqueue(1, vec![0; 100_000], Mode::NonBlocking).unwrap();
        assert_eq!(s.counters().peak_queued_bytes, 100_010);
        // Now the backlog is over 4 x 1024: the next send declares the peer lost.
        let e = s.enqueue(1, vec![0; 10], Mode::NonBlocking).unwrap_err();
        assert!(
            matches!(&e, NetError::PeerLost { rank: 1, reason, .. } if reason.contains("hard bound")),
            "{e}"
        );
    }

    #[test]
    fn a_blocking_send_to_a_full_queue_waits_counts_and_times_out() {
        let (s, _poll) = shared(1024);
        // An empty queue takes a frame of any size.
        s.enqueue(1, vec![0; 5000], Mode::Blocking).unwrap();
        assert_eq!(s.counters().send_waits, 0);
        let e = s.enqueue(1, vec![0; 10], Mode::Blocking).unwrap_err();
        assert!(matches!(e, NetError::Backpressure { rank: 1, .. }), "{e}");
        let c = s.counters();
        assert_eq!((c.send_waits, c.peak_queued_bytes), (1, 5000));
    }

    #[test]
    fn traffic_is_counted_by_peer_as_well_as_in_total() {
        let (s, _poll) = shared(1024);
        s.enqueue(1, vec![0; 10], Mode::NonBlocking).unwrap();
        s.count_sent(1, 30, 2);
        s.count_received_bytes(1, 7);
        s.count_received_frames(1, 1);
        let peers = s.peer_traffic();
        assert_eq!(
            peers,
            [PeerTraffic {
                rank: 1,
                bytes_sent: 30,
                frames_sent: 2,
                bytes_received: 7,
                frames_received: 1,
                queued_bytes: 10,
            }],
            "our own rank is left out"
        );
        let c = s.counters();
        assert_eq!(
            (
                c.bytes_sent,
                c.frames_sent,
                c.bytes_received,
                c.frames_received
            ),
            (30, 2, 7, 1)
        );
    }
}
