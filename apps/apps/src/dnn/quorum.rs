//! The epoch quorum's messages ([`DnnConfig::epoch_quorum`], Project Adam's): a model
//! replica that has finished its share of an epoch tells every other replica so
//! ([`Worker::send_to`]); one still training polls for those words between mini-batches
//! ([`Worker::try_recv_from`], never waiting) and stops once `needed` of them have come.
//! Every replica then waits for every other one's word, so no message outlives the
//! epoch's run, and the last of them comes at most one of the slowest replica's
//! mini-batches after the quorum.
//!
//! A replica only stops after hearing from `needed` others, so the first to stop heard
//! `needed` replicas that finished their shares: the words of stopped replicas, counted
//! alike, come only once the quorum is reached anyway.
//!
//! [`DnnConfig::epoch_quorum`]: iterstore_algo::dnn::DnnConfig::epoch_quorum

use iterstore::Worker;

/// The tag of a replica's "my share of this epoch is over" (its samples processed).
const OVER: u32 = 0x5155_4f52;

/// One replica's view of an epoch's quorum.
pub(super) struct Quorum {
    /// Other replicas' words that end the epoch.
    needed: usize,
    /// This replica (a global worker id, `0..replicas`).
    me: usize,
    /// Which replicas' words have come.
    heard: Vec<bool>,
}

impl Quorum {
    /// Replica `me` of `replicas`, in an epoch that `needed` finished shares end.
    pub(super) fn new(needed: usize, me: usize, replicas: usize) -> Self {
        Self {
            needed,
            me,
            heard: vec![false; replicas],
        }
    }

    /// Whether `needed` other replicas have said their share is over (takes the words
    /// that have come, never waits).
    pub(super) fn reached(&mut self, w: &mut Worker<'_>) -> iterstore::Result<bool> {
        let mut samples = [0i64];
        for r in 0..self.heard.len() {
            if r != self.me && !self.heard[r] && w.try_recv_from(r, OVER, &mut samples)? {
                self.heard[r] = true;
            }
        }
        Ok(self.heard.iter().filter(|&&h| h).count() >= self.needed)
    }

    /// Tells every other replica this one's share is over (`samples` processed), then
    /// takes every other replica's word (each at most one of its mini-batches away once
    /// the quorum is reached; bounded by `Config::message_timeout`).
    pub(super) fn finish(&mut self, w: &mut Worker<'_>, samples: u64) -> iterstore::Result<()> {
        let word = [i64::try_from(samples).unwrap_or(i64::MAX)];
        for r in (0..self.heard.len()).filter(|&r| r != self.me) {
            w.send_to(r, OVER, &word)?;
        }
        let mut theirs = [0i64];
        for r in 0..self.heard.len() {
            if r != self.me && !self.heard[r] {
                w.recv_from(r, OVER, &mut theirs)?;
                self.heard[r] = true;
            }
        }
        Ok(())
    }
}
