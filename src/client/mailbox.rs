//! [`Mailboxes`]: the worker-to-worker messages of one process ([`Worker::send_to`] and
//! [`Worker::recv_from`]).
//!
//! Each local worker has a mailbox: a queue per `(sender, tag)`, filled by local senders
//! directly and by the communication thread for [`ToClient::Pass`] from other processes. A
//! message from one worker to another with one tag is received in the order it was sent
//! (FIFO per pair of processes, see [`crate::transport`]); messages of different tags or
//! senders are independent. A receiver waits in [`WAIT_SLICE`]s, re-checking the cluster's
//! health, whether the sender has stopped in this round with an error
//! ([`Mailboxes::stop`], [`ToClient::WorkerStopped`]) and its deadline, so it never waits
//! forever.
//!
//! **Rounds.** Every message carries its sender's round (run or virtual iteration), and a
//! receiver takes only messages of its own: one sent in an earlier round and never
//! received there, or a sender already in a later round whose messages of this round ran
//! out, fails the receive instead of handing it another run's values. At the end of a
//! round the cluster asks for the messages still waiting ([`Mailboxes::leftovers`]) and
//! fails the run naming them: nothing sent is silently dropped or taken by a later run.
//!
//! [`Worker::send_to`]: crate::Worker::send_to
//! [`Worker::recv_from`]: crate::Worker::recv_from
//! [`ToClient::Pass`]: crate::msg::ToClient::Pass
//! [`ToClient::WorkerStopped`]: crate::msg::ToClient::WorkerStopped
//! [`WAIT_SLICE`]: super::WAIT_SLICE

use crate::sync::lock;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::ids::WorkerId;

/// One message waiting in a mailbox.
#[derive(Debug)]
pub(crate) struct Letter {
    /// The sender's round.
    pub(crate) round: u64,
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
    /// The oldest messages from the sender with the tag were sent in an earlier round
    /// (`round`, `count` of them) and never received; they are dropped.
    Unreceived {
        /// Their round.
        round: u64,
        /// How many.
        count: usize,
    },
    /// The oldest message from the sender with the tag is of a later round (`round`): the
    /// sender sent all it will send in this one.
    SenderMovedOn {
        /// The message's round.
        round: u64,
    },
}

/// Messages a round left in a mailbox, found by [`Mailboxes::leftovers`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leftover {
    /// The local receiver.
    pub(crate) to: usize,
    /// The sender (global id) and tag.
    pub(crate) from: WorkerId,
    pub(crate) tag: u32,
    /// How many messages.
    pub(crate) count: usize,
}

/// The mailboxes of one process's workers, and which workers of the cluster stopped with
/// an error in which round.
pub(crate) struct Mailboxes {
    boxes: Vec<Mailbox>,
    /// Global worker → the latest round in which it stopped with an error.
    stopped: Mutex<FxHashMap<WorkerId, u64>>,
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

    /// Takes the oldest message of round `round` from `from` with `tag` out of local
    /// worker `to`'s mailbox, waiting until `deadline` (checking `healthy` and whether
    /// `from` stopped in `round` every [`super::WAIT_SLICE`]). A message already there is
    /// returned even if the sender has stopped since. Older rounds' messages in front of
    /// it are dropped and reported ([`Empty::Unreceived`]); a later round's message in
    /// front means none of this round will come ([`Empty::SenderMovedOn`]).
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
            if let Some(queue) = queues.waiting.get_mut(&(from, tag)) {
                let stale = queue.iter().take_while(|l| l.round < round).count();
                if stale > 0 {
                    let old = queue.front().map_or(0, |l| l.round);
                    queue.drain(..stale);
                    return Ok(Err(Empty::Unreceived {
                        round: old,
                        count: stale,
                    }));
                }
                match queue.front() {
                    Some(l) if l.round > round => {
                        return Ok(Err(Empty::SenderMovedOn { round: l.round }));
                    }
                    Some(_) => return Ok(Ok(queue.pop_front().expect("a front letter"))),
                    None => {}
                }
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

    /// Takes out every message of round `round` or earlier still waiting in any local
    /// mailbox (messages of later rounds, from a process already ahead, stay), grouped by
    /// receiver, sender and tag in that order.
    pub(crate) fn leftovers(&self, round: u64) -> Vec<Leftover> {
        let mut found = Vec::new();
        for (to, mailbox) in self.boxes.iter().enumerate() {
            let mut queues = lock(&mailbox.queues);
            for (&(from, tag), queue) in queues.waiting.iter_mut() {
                let before = queue.len();
                queue.retain(|l| l.round > round);
                if queue.len() < before {
                    found.push(Leftover {
                        to,
                        from,
                        tag,
                        count: before - queue.len(),
                    });
                }
            }
            queues.waiting.retain(|_, q| !q.is_empty());
        }
        found.sort_by_key(|l| (l.to, l.from, l.tag));
        found
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
        sent_in(0, v)
    }

    fn sent_in(round: u64, v: f32) -> Letter {
        Letter {
            round,
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
                m.deliver(0, 1, 0, sent_in(5, 7.0));
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

    #[test]
    fn a_receiver_takes_only_its_rounds_messages_and_reports_the_others() {
        let m = Mailboxes::new(2);
        let short = Duration::from_millis(1);
        // Round 1 sent two, its receiver took one: the next round's receive reports the
        // other and drops it, then takes its own.
        m.deliver(0, 3, 1, sent_in(1, 1.0));
        m.deliver(0, 3, 1, sent_in(1, 2.0));
        assert_eq!(take(&m, 3, 1, 1, short), Ok(1.0));
        m.deliver(0, 3, 1, sent_in(2, 3.0));
        assert_eq!(
            take(&m, 3, 1, 2, short),
            Err(Empty::Unreceived { round: 1, count: 1 })
        );
        assert_eq!(take(&m, 3, 1, 2, short), Ok(3.0));
        // A sender already in round 4 sent nothing more for round 3.
        m.deliver(0, 3, 1, sent_in(4, 4.0));
        assert_eq!(
            take(&m, 3, 1, 3, short),
            Err(Empty::SenderMovedOn { round: 4 })
        );
        assert_eq!(take(&m, 3, 1, 4, short), Ok(4.0));
    }

    #[test]
    fn leftovers_are_this_and_earlier_rounds_messages_by_receiver_sender_and_tag() {
        let m = Mailboxes::new(2);
        m.deliver(1, 0, 7, sent_in(2, 1.0));
        m.deliver(1, 0, 7, sent_in(2, 1.0));
        m.deliver(0, 5, 1, sent_in(1, 1.0));
        m.deliver(0, 5, 2, sent_in(3, 1.0));
        let found = m.leftovers(2);
        let by = |to, from, tag, count| Leftover {
            to,
            from,
            tag,
            count,
        };
        assert_eq!(found, [by(0, 5, 1, 1), by(1, 0, 7, 2)]);
        // The later round's message stays, to be received in its round.
        assert_eq!((m.pending(0), m.pending(1)), (1, 0));
        assert!(m.leftovers(2).is_empty());
        assert_eq!(m.leftovers(3), [by(0, 5, 2, 1)]);
    }
}
