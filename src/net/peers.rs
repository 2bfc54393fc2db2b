//! The peer table and the network's phase: a pure state machine with an injected clock.
//!
//! Every other rank is, in turn, *waiting* (a lower rank to dial, with its redial
//! schedule; a higher one to be accepted), *connecting* (a dialed connection handshaking),
//! *up* (authenticated), then *gone*: closed after Bye, or lost. The network is
//! **starting** (until every peer is up, or the connect deadline passes), **running**,
//! then **stopping** (until every connection is closed, or the shutdown deadline passes).
//!
//! The event loop feeds it what happened (a dial started, failed or was refused; a
//! handshake completed; a peer said Bye and closed, or was lost; a shutdown was asked
//! for) with the time, and acts on what it returns: which ranks to dial now, which
//! connection to close, which losses to report, and from [`Peers::step`] whether start-up
//! is complete, a shutdown is to begin, or the loop is done or failed.
//!
//! Owns: which rank to (re)dial when, who is up, gone or missing (and what went wrong
//! last with each, for the errors), which losses are fatal (during start-up) and which are
//! reported, the phase and its deadlines. Must not know: sockets, mio, frames, the
//! handshakes' contents, the senders' shared queues — a connection is an opaque [`Slot`]
//! — nor the clock: time is a `now` argument, never `Instant::now()`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::timers::{Deadline, Redial, Timeouts};
use super::NetError;

/// A connection, as the event loop numbers them (the peer table only stores it).
pub(crate) type Slot = usize;

/// Dialing state of a lower rank during start-up.
#[derive(Debug)]
struct Dial {
    /// When to dial next.
    redial: Redial,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

/// What the table knows about one rank.
#[derive(Debug, Default)]
struct Peer {
    /// Its connection (handshaking if dialed, or up).
    conn: Option<Slot>,
    /// Authenticated and connected.
    up: bool,
    /// Lost or closed: never connected again.
    gone: bool,
    /// Dialing state (lower ranks, during start-up).
    dial: Option<Dial>,
    /// Why the last connection claiming this rank was refused.
    last_refusal: Option<String>,
}

/// The network's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Connecting everyone until the deadline.
    Starting {
        /// `connect_timeout` from start.
        deadline: Deadline,
    },
    /// Serving.
    Running,
    /// Flushing and saying Bye until the deadline.
    Stopping {
        /// `shutdown_timeout` from the stop.
        deadline: Deadline,
    },
}

/// A peer lost after start-up, to report to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Loss {
    /// Its rank.
    pub(crate) rank: u32,
    /// Its address.
    pub(crate) addr: SocketAddr,
    /// Why.
    pub(crate) reason: String,
}

/// What a dial's failure leads to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DialFailed {
    /// Retry after this pause; close the peer's connection, if any.
    Retry {
        /// The connection to close.
        close: Option<Slot>,
        /// The pause before the next dial (`None`: the rank is not being dialed).
        pause: Option<Duration>,
    },
    /// The peer refused us during start-up: retrying will not help; the start-up fails
    /// (see [`Peers::step`]). The failed connection is to be closed.
    Fatal,
}

/// What a loss leads to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The peer was gone already (closed or lost): nothing to do.
    Already,
    /// The peer is lost now: close its connection, if any, and fail its sends.
    Now {
        /// Its connection, to close.
        close: Option<Slot>,
    },
}

/// What [`Peers::step`] asks the event loop to do.
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing: keep polling.
    Wait,
    /// Every peer is up: start-up is complete (the phase is now running).
    Ready,
    /// A shutdown was asked for while running: begin stopping ([`Peers::begin_stop`]).
    Stop,
    /// Stopping, and every connection is closed: the loop ends.
    Done,
    /// The loop ends with this error (a fatal start-up error, the connect timeout, an
    /// incomplete shutdown).
    Fail(NetError),
}

/// The peer table and phase of one process. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Peers {
    /// Our rank.
    rank: u32,
    /// Every rank's address.
    addrs: Vec<SocketAddr>,
    /// The timeouts of the phases.
    timeouts: Timeouts,
    /// One entry per rank (ours unused).
    peers: Vec<Peer>,
    /// The phase.
    phase: Phase,
    /// A fatal start-up error to return.
    fatal: Option<NetError>,
    /// Peers lost since the last [`Peers::take_losses`].
    lost: Vec<Loss>,
}

impl Peers {
    /// Rank `rank` of the cluster at `addrs` starting at `now`: every lower rank due to be
    /// dialed at once, the connect deadline `timeouts.connect` away.
    pub(crate) fn new(
        rank: u32,
        addrs: Vec<SocketAddr>,
        timeouts: Timeouts,
        now: Instant,
    ) -> Peers {
        let mut peers: Vec<Peer> = (0..addrs.len()).map(|_| Peer::default()).collect();
        for peer in &mut peers[..rank as usize] {
            peer.dial = Some(Dial {
                redial: Redial::new(now),
                last_error: None,
            });
        }
        Peers {
            rank,
            timeouts,
            peers,
            phase: Phase::Starting {
                deadline: Deadline::after(now, timeouts.connect),
            },
            fatal: None,
            lost: Vec::new(),
            addrs,
        }
    }

    /// Number of ranks.
    pub(crate) fn size(&self) -> u32 {
        self.addrs.len() as u32
    }

    /// The address of `rank`.
    pub(crate) fn addr(&self, rank: u32) -> SocketAddr {
        self.addrs[rank as usize]
    }

    /// "rank r at addr".
    pub(crate) fn name(&self, rank: u32) -> String {
        format!("rank {rank} at {}", self.addr(rank))
    }

    /// Whether start-up is still going on.
    pub(crate) fn starting(&self) -> bool {
        matches!(self.phase, Phase::Starting { .. })
    }

    /// Whether `rank` is up or gone: a new connection claiming it is a duplicate.
    pub(crate) fn settled(&self, rank: u32) -> bool {
        let p = &self.peers[rank as usize];
        p.up || p.gone
    }

    /// The ranks to dial at `now`: during start-up, the lower ranks without a connection
    /// whose next dial is due.
    pub(crate) fn due_dials(&self, now: Instant) -> Vec<u32> {
        if !self.starting() {
            return Vec::new();
        }
        (0..self.rank)
            .filter(|&r| {
                let p = &self.peers[r as usize];
                p.conn.is_none() && !p.up && p.dial.as_ref().is_some_and(|d| d.redial.due(now))
            })
            .collect()
    }

    /// A dial of `rank` started on `slot`.
    pub(crate) fn dialing(&mut self, rank: u32, slot: Slot) {
        self.peers[rank as usize].conn = Some(slot);
    }

    /// A dial of `rank` failed at `now` (transiently: the socket, or its handshake broke):
    /// its connection is to be closed and the dial retried after a pause.
    pub(crate) fn dial_failed(&mut self, rank: u32, why: String, now: Instant) -> DialFailed {
        let peer = &mut self.peers[rank as usize];
        let close = peer.conn.take();
        let pause = peer.dial.as_mut().map(|d| {
            d.last_error = Some(why);
            d.redial.failed(now)
        });
        DialFailed::Retry { close, pause }
    }

    /// The handshake of our dial of `rank` failed at `now` with `why`. `refused`: the peer
    /// refused us or is not who we expect (as opposed to an I/O problem): during start-up
    /// that is fatal; otherwise it is a failed dial.
    pub(crate) fn dial_handshake_failed(
        &mut self,
        rank: u32,
        why: String,
        refused: bool,
        now: Instant,
    ) -> DialFailed {
        if !(refused && self.starting()) {
            return self.dial_failed(rank, why, now);
        }
        self.peers[rank as usize].conn = None;
        let addr = self.addr(rank);
        self.fatal.get_or_insert(NetError::Handshake {
            rank,
            addr,
            reason: why,
        });
        DialFailed::Fatal
    }

    /// A connection claiming to be `rank` was refused for `why` (kept to explain a
    /// connect timeout). Claims outside the cluster are ignored.
    pub(crate) fn note_refusal(&mut self, rank: u32, why: String) {
        if let Some(p) = self.peers.get_mut(rank as usize) {
            p.last_refusal = Some(why);
        }
    }

    /// `rank` authenticated on `slot`: it is up.
    pub(crate) fn authenticated(&mut self, rank: u32, slot: Slot) {
        let peer = &mut self.peers[rank as usize];
        peer.conn = Some(slot);
        peer.up = true;
        peer.dial = None;
        peer.last_refusal = None;
    }

    /// The connected peers and their connections, by rank.
    pub(crate) fn up(&self) -> Vec<(u32, Slot)> {
        (0..self.size())
            .filter_map(|r| {
                let p = &self.peers[r as usize];
                p.conn.filter(|_| p.up).map(|slot| (r, slot))
            })
            .collect()
    }

    /// Both Byes are exchanged with `rank` (or it closed after its Bye): it is gone
    /// quietly. Returns its connection, to close.
    pub(crate) fn closed(&mut self, rank: u32) -> Option<Slot> {
        let peer = &mut self.peers[rank as usize];
        peer.up = false;
        peer.gone = true;
        peer.conn.take()
    }

    /// `rank` is lost for `reason`: during start-up the start-up fails (see
    /// [`Peers::step`]), after it the loss is to be reported ([`Peers::take_losses`]).
    pub(crate) fn lost(&mut self, rank: u32, reason: String) -> Lost {
        let peer = &mut self.peers[rank as usize];
        if peer.gone {
            return Lost::Already;
        }
        peer.up = false;
        peer.gone = true;
        let close = peer.conn.take();
        let addr = self.addr(rank);
        if self.starting() {
            self.fatal
                .get_or_insert(NetError::PeerLost { rank, addr, reason });
        } else {
            self.lost.push(Loss { rank, addr, reason });
        }
        Lost::Now { close }
    }

    /// The losses to report since the last call, in order.
    pub(crate) fn take_losses(&mut self) -> Vec<Loss> {
        std::mem::take(&mut self.lost)
    }

    /// Begins stopping at `now`: the shutdown deadline is `timeouts.shutdown` away.
    pub(crate) fn begin_stop(&mut self, now: Instant) {
        self.phase = Phase::Stopping {
            deadline: Deadline::after(now, self.timeouts.shutdown),
        };
    }

    /// What to do at `now`, once the turn's events are in. `stop_asked`: a shutdown was
    /// asked for (it is acted on while running). A fatal start-up error comes first;
    /// then, starting: complete once every peer is up (the phase moves to running),
    /// failed at the connect deadline; running: [`Step::Stop`] if asked; stopping: done
    /// once no connection is left, failed at the shutdown deadline.
    pub(crate) fn step(&mut self, now: Instant, stop_asked: bool) -> Step {
        if let Some(e) = self.fatal.take() {
            return Step::Fail(e);
        }
        match self.phase {
            Phase::Starting { deadline } => {
                if self.all_up() {
                    self.phase = Phase::Running;
                    Step::Ready
                } else if deadline.passed(now) {
                    Step::Fail(NetError::ConnectTimeout {
                        missing: self.missing(),
                        timeout: self.timeouts.connect,
                    })
                } else {
                    Step::Wait
                }
            }
            Phase::Running if stop_asked => Step::Stop,
            Phase::Running => Step::Wait,
            Phase::Stopping { deadline } => {
                let open: Vec<u32> = (0..self.size())
                    .filter(|&r| self.peers[r as usize].conn.is_some())
                    .collect();
                if open.is_empty() {
                    Step::Done
                } else if deadline.passed(now) {
                    let names: Vec<String> = open.iter().map(|&r| self.name(r)).collect();
                    Step::Fail(NetError::ShutdownIncomplete(format!(
                        "no Bye exchanged within {:?} with {}",
                        self.timeouts.shutdown,
                        names.join(", ")
                    )))
                } else {
                    Step::Wait
                }
            }
        }
    }

    /// Whether every other rank is up.
    fn all_up(&self) -> bool {
        (0..self.size()).all(|r| r == self.rank || self.peers[r as usize].up)
    }

    /// The ranks not up, with addresses and what went wrong, for the timeout error.
    fn missing(&self) -> String {
        let mut parts = Vec::new();
        for r in 0..self.size() {
            let p = &self.peers[r as usize];
            if r == self.rank || p.up {
                continue;
            }
            let mut s = self.name(r);
            let why = p
                .last_refusal
                .clone()
                .or_else(|| p.dial.as_ref().and_then(|d| d.last_error.clone()));
            match why {
                Some(why) => s.push_str(&format!(" (last: {why})")),
                None if r > self.rank => s.push_str(" (never dialed us)"),
                None => {}
            }
            parts.push(s);
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    //! The peer table driven directly with a fake clock: `t0` is read once, every later
    //! moment is `t0` plus an offset, and events arrive in the orders the sockets could
    //! produce them.

    use super::*;

    use crate::net::timers::tests::timeouts;

    const MS: Duration = Duration::from_millis(1);

    fn addrs(n: u16) -> Vec<SocketAddr> {
        (0..n)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 7000 + i)))
            .collect()
    }

    /// Rank `rank` of `n`, started at `t0`.
    fn peers(rank: u32, n: u16, t0: Instant) -> Peers {
        Peers::new(rank, addrs(n), timeouts(), t0)
    }

    /// Steps at `now` (no shutdown asked), expecting `Wait`.
    fn waits(p: &mut Peers, now: Instant) {
        let step = p.step(now, false);
        assert!(matches!(step, Step::Wait), "{step:?}");
    }

    #[test]
    fn a_higher_rank_that_never_dials_fails_start_at_the_deadline_not_before() {
        let t0 = Instant::now();
        let mut p = peers(0, 2, t0);
        assert!(p.due_dials(t0).is_empty(), "rank 0 dials no one");
        waits(&mut p, t0);
        waits(&mut p, t0 + 999 * MS);
        match p.step(t0 + 1000 * MS, false) {
            Step::Fail(NetError::ConnectTimeout { missing, timeout }) => {
                assert_eq!(missing, "rank 1 at 127.0.0.1:7001 (never dialed us)");
                assert_eq!(timeout, 1000 * MS);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unreachable_lower_rank_is_redialed_with_backoff_and_named_at_the_timeout() {
        let t0 = Instant::now();
        let mut p = peers(1, 2, t0);
        assert_eq!(p.due_dials(t0), [0], "dialed at once");
        // The connect fails synchronously: no connection to close, retry in 20 ms.
        let failed = p.dial_failed(0, "cannot connect: refused".into(), t0);
        assert_eq!(
            failed,
            DialFailed::Retry {
                close: None,
                pause: Some(20 * MS)
            }
        );
        assert!(p.due_dials(t0 + 19 * MS).is_empty());
        assert_eq!(p.due_dials(t0 + 20 * MS), [0]);
        // The next attempt connects, then breaks: its connection is closed, the pause doubles.
        p.dialing(0, 5);
        assert!(p.due_dials(t0 + 30 * MS).is_empty(), "not while dialing");
        let failed = p.dial_failed(0, "cannot connect: reset".into(), t0 + 30 * MS);
        assert_eq!(
            failed,
            DialFailed::Retry {
                close: Some(5),
                pause: Some(40 * MS)
            }
        );
        assert!(p.due_dials(t0 + 69 * MS).is_empty());
        assert_eq!(p.due_dials(t0 + 70 * MS), [0]);
        match p.step(t0 + 1000 * MS, false) {
            Step::Fail(NetError::ConnectTimeout { missing, .. }) => assert_eq!(
                missing,
                "rank 0 at 127.0.0.1:7000 (last: cannot connect: reset)"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn start_up_completes_whichever_peer_comes_up_first() {
        for lower_first in [true, false] {
            let t0 = Instant::now();
            let mut p = peers(1, 3, t0);
            assert_eq!(p.due_dials(t0), [0]);
            p.dialing(0, 0);
            let (first, second) = if lower_first {
                ((0, 0), (2, 1))
            } else {
                ((2, 1), (0, 0))
            };
            p.authenticated(first.0, first.1);
            assert!(p.settled(first.0) && !p.settled(second.0));
            waits(&mut p, t0 + 10 * MS);
            p.authenticated(second.0, second.1);
            assert!(matches!(p.step(t0 + 20 * MS, false), Step::Ready));
            assert_eq!(p.phase, Phase::Running);
            assert_eq!(p.up(), [(0, 0), (2, 1)]);
            // Running: no more dials, no timeout, whatever the time.
            assert!(p.due_dials(t0 + 5000 * MS).is_empty());
            waits(&mut p, t0 + 5000 * MS);
        }
    }

    #[test]
    fn a_cluster_of_one_is_ready_at_once() {
        let t0 = Instant::now();
        let mut p = peers(0, 1, t0);
        assert!(matches!(p.step(t0, false), Step::Ready));
    }

    #[test]
    fn a_loss_during_start_up_fails_it() {
        let t0 = Instant::now();
        let mut p = peers(0, 3, t0);
        p.authenticated(1, 0);
        assert_eq!(p.lost(1, "bad frame".into()), Lost::Now { close: Some(0) });
        assert!(
            p.take_losses().is_empty(),
            "not reported: the start-up fails"
        );
        match p.step(t0 + MS, false) {
            Step::Fail(NetError::PeerLost {
                rank: 1, reason, ..
            }) => {
                assert_eq!(reason, "bad frame")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lost_peer_is_reported_once_and_stays_gone() {
        let t0 = Instant::now();
        let mut p = peers(0, 3, t0);
        p.authenticated(1, 0);
        p.authenticated(2, 1);
        assert!(matches!(p.step(t0, false), Step::Ready));
        assert_eq!(p.lost(2, "silent".into()), Lost::Now { close: Some(1) });
        assert_eq!(p.lost(2, "closed".into()), Lost::Already, "lost once");
        assert_eq!(
            p.take_losses(),
            [Loss {
                rank: 2,
                addr: addrs(3)[2],
                reason: "silent".into()
            }]
        );
        assert!(p.take_losses().is_empty());
        assert!(p.settled(2), "a new connection claiming it is a duplicate");
        assert_eq!(p.up(), [(1, 0)]);
        waits(&mut p, t0 + MS);
    }

    #[test]
    fn a_peer_closed_after_bye_is_no_loss() {
        let t0 = Instant::now();
        let mut p = peers(0, 2, t0);
        p.authenticated(1, 3);
        assert!(matches!(p.step(t0, false), Step::Ready));
        assert_eq!(p.closed(1), Some(3));
        assert_eq!(p.lost(1, "closed without Bye".into()), Lost::Already);
        assert!(p.take_losses().is_empty());
        assert!(p.up().is_empty());
    }

    #[test]
    fn a_refusing_peer_fails_start_up_but_not_later() {
        let t0 = Instant::now();
        let mut p = peers(1, 2, t0);
        p.dialing(0, 4);
        let failed = p.dial_handshake_failed(0, "bad proof".into(), true, t0 + MS);
        assert_eq!(failed, DialFailed::Fatal);
        match p.step(t0 + MS, false) {
            Step::Fail(NetError::Handshake {
                rank: 0, reason, ..
            }) => {
                assert_eq!(reason, "bad proof")
            }
            other => panic!("{other:?}"),
        }
        // An I/O failure of the handshake is retried, as is a refusal after start-up.
        let mut p = peers(1, 2, t0);
        p.dialing(0, 4);
        let failed = p.dial_handshake_failed(0, "closed".into(), false, t0 + MS);
        assert_eq!(
            failed,
            DialFailed::Retry {
                close: Some(4),
                pause: Some(20 * MS)
            }
        );
        waits(&mut p, t0 + MS);
        p.phase = Phase::Running;
        p.dialing(0, 4);
        assert!(matches!(
            p.dial_handshake_failed(0, "bad proof".into(), true, t0 + MS),
            DialFailed::Retry { close: Some(4), .. }
        ));
    }

    #[test]
    fn refusals_explain_a_missing_peer_until_it_comes_up() {
        let t0 = Instant::now();
        let mut p = peers(0, 3, t0);
        p.note_refusal(1, "refused a connection from x: bad proof".into());
        p.note_refusal(9, "outside the cluster: ignored".into());
        match p.step(t0 + 1000 * MS, false) {
            Step::Fail(NetError::ConnectTimeout { missing, .. }) => assert_eq!(
                missing,
                "rank 1 at 127.0.0.1:7001 (last: refused a connection from x: bad proof), \
                 rank 2 at 127.0.0.1:7002 (never dialed us)"
            ),
            other => panic!("{other:?}"),
        }
        let mut p = peers(0, 2, t0);
        p.note_refusal(1, "bad proof".into());
        p.authenticated(1, 0);
        p.lost(1, "later".into());
        assert!(!p.missing().contains("bad proof"), "{}", p.missing());
    }

    #[test]
    fn shutdown_is_done_once_every_connection_is_closed() {
        let t0 = Instant::now();
        let mut p = peers(1, 3, t0);
        p.authenticated(0, 0);
        p.authenticated(2, 1);
        assert!(matches!(p.step(t0, false), Step::Ready));
        assert!(matches!(p.step(t0, true), Step::Stop));
        p.begin_stop(t0 + 100 * MS);
        waits(&mut p, t0 + 100 * MS);
        assert_eq!(p.closed(0), Some(0));
        waits(&mut p, t0 + 200 * MS);
        assert_eq!(
            p.lost(2, "closed without Bye".into()),
            Lost::Now { close: Some(1) }
        );
        assert!(matches!(p.step(t0 + 300 * MS, true), Step::Done));
        assert_eq!(
            p.take_losses().len(),
            1,
            "a loss while stopping is reported"
        );
    }

    #[test]
    fn shutdown_fails_at_its_deadline_naming_who_is_left() {
        let t0 = Instant::now();
        let mut p = peers(0, 3, t0);
        p.authenticated(1, 0);
        p.authenticated(2, 1);
        assert!(matches!(p.step(t0, false), Step::Ready));
        waits(&mut p, t0 + 50 * MS);
        assert!(matches!(p.step(t0 + 60 * MS, true), Step::Stop));
        p.begin_stop(t0 + 60 * MS);
        p.closed(1);
        waits(&mut p, t0 + 559 * MS);
        match p.step(t0 + 560 * MS, true) {
            Step::Fail(NetError::ShutdownIncomplete(why)) => assert_eq!(
                why,
                "no Bye exchanged within 500ms with rank 2 at 127.0.0.1:7002"
            ),
            other => panic!("{other:?}"),
        }
    }
}
