//! [`Mailboxes`]: the worker-to-worker messages of one process ([`Worker::send`] and
//! [`Worker::recv`]).
//!
//! Each local worker has a mailbox: a queue per `(sender, tag)`, filled by local senders
//! directly and by the communication thread for [`Msg::Pass`] from other processes. A
//! message from one worker to another with one tag is received in the order it was sent
//! (FIFO per pair of processes, see [`crate::transport`]); messages of different tags or
//! senders are independent. A receiver waits in [`WAIT_SLICE`]s, re-checking the cluster's
//! health, whether the sender has stopped in this round with an error
//! ([`Mailboxes::stop`], [`Msg::WorkerStopped`]) and its deadline, so it never waits
//! forever.
//!
//! [`Worker::send`]: crate::Worker::send
//! [`Worker::recv`]: crate::Worker::recv
//! [`Msg::Pass`]: crate::msg::Msg::Pass
//! [`Msg::WorkerStopped`]: crate::msg::Msg::WorkerStopped
//! [`WAIT_SLICE`]: super::WAIT_SLICE

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::msg::WorkerId;
use crate::{AlignedBuf, ElemType};

/// One message waiting in a mailbox.
#[derive(Debug)]
pub(crate) struct Letter {
    /// The element type it was sent as.
    pub(crate) elem: ElemType,
    /// Its values, raw little-endian bytes.
    pub(crate) values: AlignedBuf,
}

#[derive(Default)]
struct Queues {
    /// Messages by `(sender, tag)`, oldest first.
    waiting: FxHashMap<(WorkerId, u32), VecDeque<Letter>>,
}

#[derive(Default)]
struct Mailbox {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

/// Why a [`Mailboxes::take`] found nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Empty {
    /// The sender stopped with an error in the receiver's round.
    SenderStopped,
    /// The deadline passed.
    TimedOut,
}

/// The mailboxes of one process's workers, and which workers of the cluster stopped with
/// an error in which round.
pub(crate) struct Mailboxes {
    boxes: Vec<Mailbox>,
    /// Global worker → the latest round in which it stopped with an error.
    stopped: Mutex<FxHashMap<WorkerId, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mailboxes {
    /// Mailboxes for `workers` local workers.
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            boxes: (0..workers).map(|_| Mailbox::default()).collect(),
            stopped: Mutex::new(FxHashMap::default()),
        }
    }

    /// Puts a message from `from` with `tag` into local worker `to`'s mailbox and wakes it.
    /// `false` if there is no such local worker.
    pub(crate) fn deliver(&self, to: usize, from: WorkerId, tag: u32, letter: Letter) -> bool {
        let Some(mailbox) = self.boxes.get(to) else {
            return false;
        };
        lock(&mailbox.queues)
            .waiting
            .entry((from, tag))
            .or_default()
            .push_back(letter);
        mailbox.arrived.notify_all();
        true
    }

    /// Records that global worker `worker` stopped with an error in `round`, and wakes
    /// every waiting receiver.
    pub(crate) fn stop(&self, worker: WorkerId, round: u64) {
        let mut stopped = lock(&self.stopped);
        let latest = stopped.entry(worker).or_insert(round);
        *latest = (*latest).max(round);
        drop(stopped);
        for mailbox in &self.boxes {
            // Take the lock so a receiver between its check and its wait is not missed.
            drop(lock(&mailbox.queues));
            mailbox.arrived.notify_all();
        }
    }

    /// Wakes every waiting receiver (the cluster failed).
    pub(crate) fn wake_all(&self) {
        for mailbox in &self.boxes {
            drop(lock(&mailbox.queues));
            mailbox.arrived.notify_all();
        }
    }

    fn has_stopped(&self, worker: WorkerId, round: u64) -> bool {
        lock(&self.stopped).get(&worker) == Some(&round)
    }

    /// Takes the oldest message from `from` with `tag` out of local worker `to`'s mailbox,
    /// waiting until `deadline` (checking `healthy` and whether `from` stopped in `round`
    /// every [`super::WAIT_SLICE`]). A message already there is returned even if the
    /// sender has stopped since.
    pub(crate) fn take<E>(
        &self,
        to: usize,
        from: WorkerId,
        tag: u32,
        round: u64,
        deadline: Option<Instant>,
        mut healthy: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<Letter, Empty>, E> {
        let mailbox = &self.boxes[to];
        let mut queues = lock(&mailbox.queues);
        loop {
            if let Some(letter) = queues
                .waiting
                .get_mut(&(from, tag))
                .and_then(VecDeque::pop_front)
            {
                return Ok(Ok(letter));
            }
            healthy()?;
            if self.has_stopped(from, round) {
                return Ok(Err(Empty::SenderStopped));
            }
            let now = Instant::now();
            let slice = match deadline {
                Some(d) if now >= d => return Ok(Err(Empty::TimedOut)),
                Some(d) => (d - now).min(super::WAIT_SLICE),
                None => super::WAIT_SLICE,
            };
            queues = mailbox
                .arrived
                .wait_timeout(queues, slice)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Messages waiting in local worker `to`'s mailbox (none received yet).
    #[cfg(test)]
    fn pending(&self, to: usize) -> usize {
        lock(&self.boxes[to].queues)
            .waiting
            .values()
            .map(VecDeque::len)
            .sum()
    }
}

/// `timeout` from now, or no deadline if it does not fit.
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn letter(v: f32) -> Letter {
        Letter {
            elem: ElemType::F32,
            values: AlignedBuf::from_slice(&[v]),
        }
    }

    fn take(
        m: &Mailboxes,
        from: WorkerId,
        tag: u32,
        round: u64,
        wait: Duration,
    ) -> Result<f32, Empty> {
        m.take::<()>(0, from, tag, round, deadline(wait), || Ok(()))
            .unwrap()
            .map(|l| l.values.cast::<f32>()[0])
    }

    #[test]
    fn messages_of_a_sender_and_tag_come_in_order_and_tags_are_independent() {
        let m = Mailboxes::new(1);
        assert!(m.deliver(0, 3, 1, letter(1.0)));
        assert!(m.deliver(0, 3, 2, letter(9.0)));
        assert!(m.deliver(0, 3, 1, letter(2.0)));
        assert!(m.deliver(0, 4, 1, letter(5.0)));
        assert!(!m.deliver(1, 3, 1, letter(0.0)), "no local worker 1");
        assert_eq!(m.pending(0), 4);
        let short = Duration::from_millis(1);
        assert_eq!(take(&m, 3, 2, 0, short), Ok(9.0));
        assert_eq!(take(&m, 4, 1, 0, short), Ok(5.0));
        assert_eq!(take(&m, 3, 1, 0, short), Ok(1.0));
        assert_eq!(take(&m, 3, 1, 0, short), Ok(2.0));
        assert_eq!(take(&m, 3, 1, 0, short), Err(Empty::TimedOut));
    }

    #[test]
    fn a_waiting_receiver_wakes_for_a_message_a_stop_or_a_failure() {
        let m = Arc::new(Mailboxes::new(1));
        let long = Duration::from_secs(30);
        let sender = {
            let m = m.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                m.deliver(0, 1, 0, letter(7.0));
                std::thread::sleep(Duration::from_millis(20));
                m.stop(1, 5);
            })
        };
        let t = Instant::now();
        assert_eq!(take(&m, 1, 0, 5, long), Ok(7.0));
        assert_eq!(take(&m, 1, 0, 5, long), Err(Empty::SenderStopped));
        assert!(t.elapsed() < Duration::from_secs(10));
        sender.join().unwrap();
        // A stop in another round does not stop this one.
        assert_eq!(
            take(&m, 1, 0, 6, Duration::from_millis(5)),
            Err(Empty::TimedOut)
        );
        // An unhealthy cluster ends the wait with its error.
        let failed = m.take(0, 1, 0, 6, None, || Err("failed"));
        assert_eq!(failed.unwrap_err(), "failed");
    }
}
