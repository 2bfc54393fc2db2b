//! The event loop's timers: deadlines, a peer's redial backoff, a connection's liveness
//! (heartbeat due, peer silent) and the poll tick — all computed from a `now: Instant`
//! the caller passes in.
//!
//! Owns: the arithmetic of when something is due, and the rule at the boundary (a
//! deadline fires at the deadline, not before; a peer is silent once quiet for *longer*
//! than the heartbeat timeout; a heartbeat is due once the interval has passed). Must not
//! know: sockets, mio, the peer table or the phase — nor the clock: nothing here calls
//! `Instant::now()`; the event loop's driver samples the clock and passes the time, so
//! tests drive everything here with a fake clock.

use std::time::{Duration, Instant};

use super::NetConfig;

/// First and largest pause between two dials of the same peer.
pub(crate) const DIAL_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(20), Duration::from_millis(500));

/// The timeouts of a [`NetConfig`] that the timers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// Start-up: every peer up within this.
    pub(crate) connect: Duration,
    /// A connection authenticated within this.
    pub(crate) handshake: Duration,
    /// An idle connection sends a heartbeat this often.
    pub(crate) heartbeat_interval: Duration,
    /// A peer silent for longer than this is lost.
    pub(crate) heartbeat_timeout: Duration,
    /// Shutdown: every Bye exchanged within this.
    pub(crate) shutdown: Duration,
}

impl Timeouts {
    /// The timeouts of `cfg`.
    pub(crate) fn of(cfg: &NetConfig) -> Timeouts {
        Timeouts {
            connect: cfg.connect_timeout,
            handshake: cfg.handshake_timeout,
            heartbeat_interval: cfg.heartbeat_interval,
            heartbeat_timeout: cfg.heartbeat_timeout,
            shutdown: cfg.shutdown_timeout,
        }
    }

    /// The poll timeout: short enough for every timer to fire within a few percent (a
    /// quarter of the heartbeat interval or of the handshake timeout, within 1..=50 ms).
    pub(crate) fn tick(&self) -> Duration {
        let by_heartbeat = self.heartbeat_interval.min(self.handshake) / 4;
        by_heartbeat.clamp(Duration::from_millis(1), Duration::from_millis(50))
    }
}

/// `now - then`, or zero.
pub(crate) fn since(now: Instant, then: Instant) -> Duration {
    now.saturating_duration_since(then)
}

/// A moment by which something must have happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadline(Instant);

impl Deadline {
    /// `timeout` after `now`.
    pub(crate) fn after(now: Instant, timeout: Duration) -> Deadline {
        Deadline(now + timeout)
    }

    /// The moment itself (to find the earliest of several).
    pub(crate) fn at(self) -> Instant {
        self.0
    }

    /// Whether it has passed at `now`: at the deadline, not before.
    pub(crate) fn passed(self, now: Instant) -> bool {
        now >= self.0
    }
}

/// How often warnings about strangers (connections that never authenticate) are logged:
/// the first at once, then at most one per this interval, with the count of those held
/// back — so that a flood of connections cannot flood the log (540,000 lines in 28 s).
pub(crate) const WARN_INTERVAL: Duration = Duration::from_secs(5);

/// The slowest a frame's body may arrive once its header has been read, in bytes per
/// second: a frame of `n` bytes must be complete within the heartbeat timeout plus
/// `n / MIN_FRAME_RATE` seconds of its header ([`frame_allowance`]), or the peer is lost —
/// a header announcing 200 MiB followed by a byte every half second no longer keeps a
/// connection alive for minutes on the strength of "bytes arrived".
pub(crate) const MIN_FRAME_RATE: f64 = (1 << 20) as f64;

/// How long a frame body of `len` bytes may take to arrive after its header, with
/// `heartbeat_timeout` the peer's allowed silence.
pub(crate) fn frame_allowance(len: usize, heartbeat_timeout: Duration) -> Duration {
    heartbeat_timeout + Duration::from_secs_f64(len as f64 / MIN_FRAME_RATE)
}

/// A rate limit on one kind of warning: at most one per [`WARN_INTERVAL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WarnLimit {
    /// When the last warning was let through.
    last: Option<Instant>,
    /// Warnings held back since then.
    held: u64,
}

impl WarnLimit {
    /// Whether a warning at `now` is to be logged: `Some(held)` (the number held back
    /// since the last one, to mention) if it is, `None` if it is held back (and counted).
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if since(now, last) < WARN_INTERVAL => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

/// The redial schedule of one peer: when to dial next, and the pause after the next
/// failure (doubling from [`DIAL_BACKOFF`]`.0` up to [`DIAL_BACKOFF`]`.1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Redial {
    /// When to dial next.
    next: Instant,
    /// The pause after the next failure.
    pause: Duration,
}

impl Redial {
    /// Due at once (`now`).
    pub(crate) fn new(now: Instant) -> Redial {
        Redial {
            next: now,
            pause: DIAL_BACKOFF.0,
        }
    }

    /// Whether a dial is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// A dial failed at `now`: the next is due after the current pause, which doubles
    /// (up to the cap) for the one after. Returns the pause.
    pub(crate) fn failed(&mut self, now: Instant) -> Duration {
        let pause = self.pause;
        self.next = now + pause;
        self.pause = (pause * 2).min(DIAL_BACKOFF.1);
        pause
    }
}

/// What a connection's liveness calls for at some moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Nothing.
    Fine,
    /// The peer has been silent (nothing received) for this long, over the timeout: it
    /// is lost.
    Silent(Duration),
    /// Nothing was written for a heartbeat interval: send a heartbeat.
    HeartbeatDue,
}

/// When a connection last received and last sent bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Activity {
    /// When bytes last arrived (or the connection was opened or came up).
    last_recv: Instant,
    /// When bytes were last written (or the connection was opened or came up).
    last_send: Instant,
}

impl Activity {
    /// A connection opened (or authenticated) at `now`: as if both ways just carried bytes.
    pub(crate) fn new(now: Instant) -> Activity {
        Activity {
            last_recv: now,
            last_send: now,
        }
    }

    /// Bytes arrived at `now`.
    pub(crate) fn received(&mut self, now: Instant) {
        self.last_recv = now;
    }

    /// Bytes were written at `now`.
    pub(crate) fn sent(&mut self, now: Instant) {
        self.last_send = now;
    }

    /// What is due at `now` on an authenticated connection. `expects_bytes`: the peer has
    /// not said Bye (after its Bye, silence is no loss); `may_heartbeat`: a heartbeat may
    /// be queued (we have not said Bye, nothing else is waiting to be written, heartbeats
    /// are not suppressed). Silence is checked first.
    pub(crate) fn check(
        &self,
        now: Instant,
        t: &Timeouts,
        expects_bytes: bool,
        may_heartbeat: bool,
    ) -> Liveness {
        let quiet = since(now, self.last_recv);
        if expects_bytes && quiet > t.heartbeat_timeout {
            return Liveness::Silent(quiet);
        }
        if may_heartbeat && since(now, self.last_send) >= t.heartbeat_interval {
            return Liveness::HeartbeatDue;
        }
        Liveness::Fine
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The time limits the network's pure tests run under (`peers.rs`'s too).
    pub(in crate::net) fn timeouts() -> Timeouts {
        Timeouts {
            connect: 1000 * MS,
            handshake: 200 * MS,
            heartbeat_interval: 50 * MS,
            heartbeat_timeout: 300 * MS,
            shutdown: 500 * MS,
        }
    }

    #[test]
    fn a_deadline_fires_at_the_deadline_not_before() {
        let t0 = Instant::now();
        let d = Deadline::after(t0, 100 * MS);
        assert!(!d.passed(t0));
        assert!(!d.passed(t0 + 99 * MS));
        assert!(d.passed(t0 + 100 * MS));
        assert!(d.passed(t0 + 1000 * MS));
    }

    #[test]
    fn redial_backs_off_doubling_up_to_the_cap() {
        let t0 = Instant::now();
        let mut r = Redial::new(t0);
        assert!(r.due(t0), "the first dial is due at once");
        let mut now = t0;
        let mut pauses = Vec::new();
        for _ in 0..8 {
            let p = r.failed(now);
            pauses.push(p.as_millis());
            assert!(!r.due(now + p - MS), "not before the pause");
            assert!(r.due(now + p), "at the pause");
            now += p;
        }
        assert_eq!(pauses, [20, 40, 80, 160, 320, 500, 500, 500]);
    }

    #[test]
    fn silence_is_a_loss_only_past_the_timeout_and_before_bye() {
        let t = timeouts();
        let t0 = Instant::now();
        let mut tr = Activity::new(t0);
        // Exactly the timeout: not yet (strictly longer is lost).
        assert_eq!(tr.check(t0 + 300 * MS, &t, true, false), Liveness::Fine);
        assert_eq!(
            tr.check(t0 + 301 * MS, &t, true, false),
            Liveness::Silent(301 * MS)
        );
        // After the peer's Bye, silence is expected.
        assert_eq!(tr.check(t0 + 301 * MS, &t, false, false), Liveness::Fine);
        // Bytes arriving reset it.
        tr.received(t0 + 250 * MS);
        assert_eq!(tr.check(t0 + 400 * MS, &t, true, false), Liveness::Fine);
        // Silence wins over a due heartbeat.
        assert_eq!(
            tr.check(t0 + 600 * MS, &t, true, true),
            Liveness::Silent(350 * MS)
        );
    }

    #[test]
    fn a_heartbeat_is_due_an_interval_after_the_last_write() {
        let t = timeouts();
        let t0 = Instant::now();
        let mut tr = Activity::new(t0);
        assert_eq!(tr.check(t0 + 49 * MS, &t, true, true), Liveness::Fine);
        assert_eq!(
            tr.check(t0 + 50 * MS, &t, true, true),
            Liveness::HeartbeatDue
        );
        // Not while something else is queued, Bye is out, or heartbeats are off.
        assert_eq!(tr.check(t0 + 50 * MS, &t, true, false), Liveness::Fine);
        tr.sent(t0 + 40 * MS);
        assert_eq!(tr.check(t0 + 89 * MS, &t, true, true), Liveness::Fine);
        assert_eq!(
            tr.check(t0 + 90 * MS, &t, true, true),
            Liveness::HeartbeatDue
        );
        // A clock that went backwards (a `now` before the last write) is no heartbeat.
        assert_eq!(tr.check(t0, &t, true, true), Liveness::Fine);
    }

    #[test]
    fn the_tick_is_a_quarter_of_the_shortest_timer_within_bounds() {
        let mut t = timeouts();
        assert_eq!(t.tick(), Duration::from_micros(12_500));
        t.heartbeat_interval = Duration::from_secs(1);
        assert_eq!(t.tick(), 50 * MS, "200 ms handshake / 4 = 50 ms");
        t.handshake = Duration::from_secs(10);
        assert_eq!(t.tick(), 50 * MS, "capped");
        t.heartbeat_interval = 2 * MS;
        assert_eq!(t.tick(), MS, "at least 1 ms");
    }

    #[test]
    fn warnings_are_let_through_once_per_interval_with_the_count_held_back() {
        let t0 = Instant::now();
        let mut w = WarnLimit::default();
        assert_eq!(w.allow(t0), Some(0));
        for i in 1..=1000u32 {
            assert_eq!(w.allow(t0 + Duration::from_micros(u64::from(i))), None);
        }
        assert_eq!(w.allow(t0 + WARN_INTERVAL - Duration::from_nanos(1)), None);
        assert_eq!(w.allow(t0 + WARN_INTERVAL), Some(1001));
        assert_eq!(w.allow(t0 + WARN_INTERVAL), None);
        assert_eq!(w.allow(t0 + 3 * WARN_INTERVAL), Some(1));
    }
}
