//! How a worker writes its update slabs: with plain stores, or with streaming stores
//! (`crate::stream`) while those are clearly cheaper.
//!
//! A CLOCK's slabs are fresh memory another thread reads next. With plain stores each of
//! their lines is first read into this core's cache; when other jobs on the host load the
//! memory system those reads are what a CLOCK waits on (MF's slabs took 130 µs a CLOCK
//! instead of 25, and 50 with streaming stores). On a quiet machine streaming stores take
//! as long as plain ones but cost the shard that reads the slab next (from memory instead
//! of from this core's cache: MF 1-2 %, PageRank 4-5 % an iteration). So
//! [`SlabStores::Auto`] times its takes both ways: it writes one way, tries the other way
//! once every [`PROBE_EVERY`] takes, and streams while the median of its last [`RECENT`]
//! streamed takes costs less than [`FASTER`] times that of its plain ones.

use crate::config::SlabStores;
use std::time::{Duration, Instant};

/// Takes smaller than this (bytes) are not timed: too short to tell the ways apart.
const MIN_BYTES: usize = 32 << 10;
/// Takes of each way whose median is its cost.
const RECENT: usize = 3;
/// How much cheaper (a fraction of the plain cost) streamed takes must be to be used.
pub(crate) const FASTER: f64 = 0.7;
/// Takes of the chosen way between two trials of the other.
pub(crate) const PROBE_EVERY: u32 = 32;

/// The last [`RECENT`] costs of one way of writing, ns per KiB.
#[derive(Debug, Clone, Default)]
struct Costs {
    recent: [f64; RECENT],
    count: usize,
}

impl Costs {
    fn push(&mut self, cost: f64) {
        if self.count == RECENT {
            self.recent.rotate_left(1);
            self.count -= 1;
        }
        self.recent[self.count] = cost;
        self.count += 1;
    }

    /// The median of the last costs (of one or two when there are no more); `None`
    /// before the first.
    fn median(&self) -> Option<f64> {
        let mut v = self.recent;
        let v = &mut v[..self.count];
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }
}

/// The state of the choice (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct SlabWrites {
    mode: SlabStores,
    plain: Costs,
    streamed: Costs,
    /// Whether [`SlabStores::Auto`] currently streams.
    streaming: bool,
    /// Timed takes of the chosen way since the last trial of the other.
    since_probe: u32,
}

impl SlabWrites {
    /// The choice `mode` asks for (plain stores where the platform has no streaming
    /// ones).
    pub(crate) fn new(mode: SlabStores) -> Self {
        SlabWrites {
            mode: if crate::stream::AVAILABLE {
                mode
            } else {
                SlabStores::Plain
            },
            plain: Costs::default(),
            streamed: Costs::default(),
            streaming: false,
            // The first trial of streaming comes after RECENT plain takes.
            since_probe: PROBE_EVERY - RECENT as u32,
        }
    }

    /// Whether the next take streams.
    pub(crate) fn streaming(&self) -> bool {
        match self.mode {
            SlabStores::Plain => false,
            SlabStores::Streaming => true,
            SlabStores::Auto => self.streaming != (self.since_probe >= PROBE_EVERY),
        }
    }

    /// The start of a take's timing: only `Auto` times its takes.
    pub(crate) fn timer(&self) -> Option<Instant> {
        (self.mode == SlabStores::Auto).then(Instant::now)
    }

    /// Records a take of `bytes` bytes, written with streaming stores if `streamed`, that
    /// took `elapsed`.
    pub(crate) fn record(&mut self, streamed: bool, bytes: usize, elapsed: Duration) {
        if self.mode != SlabStores::Auto || bytes < MIN_BYTES {
            return;
        }
        let cost = elapsed.as_nanos() as f64 * 1024.0 / bytes as f64;
        if streamed {
            self.streamed.push(cost);
        } else {
            self.plain.push(cost);
        }
        if streamed == self.streaming {
            self.since_probe += 1;
        } else {
            self.since_probe = 0; // that was the trial of the other way
        }
        if let (Some(plain), Some(streamed)) = (self.plain.median(), self.streamed.median()) {
            let streaming = streamed < FASTER * plain;
            if streaming != self.streaming {
                self.streaming = streaming;
                self.since_probe = 0;
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    /// One take: plain ones cost `plain` µs a KiB, streamed ones `streamed`. Whether it
    /// streamed.
    fn take(w: &mut SlabWrites, plain: u64, streamed: u64) -> bool {
        let streaming = w.streaming();
        let micros = if streaming { streamed } else { plain };
        w.record(streaming, 64 * KIB, Duration::from_micros(micros * 64));
        streaming
    }

    #[test]
    fn auto_streams_only_while_streaming_is_clearly_cheaper() {
        let mut w = SlabWrites::new(SlabStores::Auto);
        // A quiet machine: streaming takes as long, so plain stores stay, and streaming
        // is tried once every PROBE_EVERY takes.
        let quiet: Vec<bool> = (0..100).map(|_| take(&mut w, 10, 10)).collect();
        let trials = quiet.iter().filter(|&&s| s).count();
        assert!((2..=4).contains(&trials), "{trials} trials in 100 takes");
        assert!(!quiet[..RECENT].iter().any(|&s| s), "plain first");
        // Contended: plain takes cost 5x, streamed ones 2x; after the next trial (at
        // most PROBE_EVERY takes) streaming wins, but not at once (medians of three).
        let contended: Vec<bool> = (0..100).map(|_| take(&mut w, 50, 20)).collect();
        let first = contended.iter().position(|&s| s).expect("a trial");
        assert!(first <= PROBE_EVERY as usize, "{first}");
        assert!(
            contended[60..].iter().filter(|&&s| !s).count() <= 2,
            "{contended:?}"
        );
        // Quiet again: the next trial of plain stores brings them back.
        let calm: Vec<bool> = (0..100).map(|_| take(&mut w, 10, 10)).collect();
        assert!(calm[60..].iter().filter(|&&s| s).count() <= 2, "{calm:?}");
    }

    #[test]
    fn one_odd_take_decides_nothing() {
        let mut w = SlabWrites::new(SlabStores::Auto);
        for _ in 0..40 {
            take(&mut w, 10, 10);
        }
        // One slow plain take (an interrupt) among quick ones.
        let slow = w.streaming();
        w.record(
            slow,
            64 * KIB,
            Duration::from_micros(if slow { 640 } else { 64_000 }),
        );
        assert!(!w.streaming(), "one take is not the median of three");
    }

    #[test]
    fn small_takes_and_fixed_modes_are_not_measured() {
        let mut w = SlabWrites::new(SlabStores::Auto);
        for i in 0..100 {
            let s = w.streaming();
            w.record(s, KIB, Duration::from_micros(if s { 1 } else { 1000 + i }));
        }
        let trials = (0..3).filter(|_| w.streaming()).count();
        assert_eq!(trials, 0, "takes under {MIN_BYTES} bytes decide nothing");
        let mut plain = SlabWrites::new(SlabStores::Plain);
        let mut streaming = SlabWrites::new(SlabStores::Streaming);
        for _ in 0..50 {
            assert!(!take(&mut plain, 50, 1));
            assert!(take(&mut streaming, 1, 50));
        }
    }

    #[test]
    fn medians() {
        let mut c = Costs::default();
        assert_eq!(c.median(), None);
        for (x, m) in [(3.0, 3.0), (1.0, 3.0), (2.0, 2.0), (9.0, 2.0), (8.0, 8.0)] {
            c.push(x);
            assert_eq!(c.median(), Some(m));
        }
    }
}
