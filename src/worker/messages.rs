//! Worker-to-worker messages: [`Worker::send_to`] and [`Worker::recv_from`], for apps whose
//! workers exchange values besides the store's rows (a model-parallel DNN's activations
//! and error terms).
//!
//! A message to a worker of this process goes straight into its mailbox; one to another
//! process's worker travels as [`ToClient::Pass`] over the transport (FIFO per pair of
//! processes) and its communication thread files it. In a virtual iteration nothing is
//! sent and a receive returns zeros at once: the values there are meaningless anyway, and
//! the rows an iteration touches must not depend on them.

use super::Worker;
use crate::buf::AlignedBuf;
use crate::client::{deadline, Empty, Letter};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ids::WorkerId;
use crate::msg::{Envelope, ToClient};
use std::time::Instant;

impl Worker<'_> {
    /// Sends `values` to worker `to` (a global id, `0..workers()`), tagged `tag`. Never
    /// waits for the receiver: the message is queued for it. Messages from one worker to
    /// another with one tag are received in the order they were sent.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let got = cluster.run(|w| {
    ///     let other = 1 - w.id();
    ///     w.send_to(other, 7, &[w.id() as f32 + 0.5])?;
    ///     let mut v = [0.0f32];
    ///     w.recv_from(other, 7, &mut v)?;
    ///     Ok(v[0])
    /// })?;
    /// assert_eq!(got, vec![1.5, 0.5]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_to<T: Element>(&mut self, to: usize, tag: u32, values: &[T]) -> Result<()> {
        let Some(process) = self.shared.world.process_of_worker(to as WorkerId) else {
            return Err(Error::config(
                "worker",
                format!(
                    "worker {} sent to worker {to}, but the cluster has {} workers",
                    self.global, self.workers
                ),
            ));
        };
        if self.virtual_only {
            return Ok(());
        }
        let letter = Letter {
            round: self.round,
            elem: T::TYPE,
            values: AlignedBuf::from_slice(values),
        };
        if process == self.shared.process {
            let local = to % self.shared.world.workers;
            self.shared
                .mailboxes
                .deliver(local, self.global, tag, letter);
            Ok(())
        } else {
            self.shared.send(Envelope::Client(
                process,
                ToClient::Pass {
                    from: self.global,
                    to: to as WorkerId,
                    tag,
                    round: letter.round,
                    elem: letter.elem,
                    values: letter.values,
                },
            ))
        }
    }

    /// Receives the oldest message from worker `from` tagged `tag` into `out`, waiting
    /// for it if it has not arrived. `out` must have the message's length and element
    /// type. The wait ends with [`Error::Receive`] if `from` stops this run with an error
    /// or after [`Config::message_timeout`](crate::Config::message_timeout), and with the
    /// cluster's error if it fails.
    pub fn recv_from<T: Element>(&mut self, from: usize, tag: u32, out: &mut [T]) -> Result<()> {
        if self.virtual_only {
            self.check_sender(from, tag)?;
            out.fill(T::default());
            return Ok(());
        }
        let timeout = self.shared.config.message_timeout;
        match self.receive(from, tag, out, deadline(timeout))? {
            true => Ok(()),
            false => Err(self.refuse(
                from,
                tag,
                format!(
                    "no message within {} s (Config::message_timeout)",
                    timeout.as_secs_f64()
                ),
            )),
        }
    }

    /// [`recv_from`](Self::recv_from) without waiting: `Ok(true)` with the oldest message
    /// from `from` tagged `tag` copied into `out`, `Ok(false)` if none has arrived yet (for
    /// a worker that polls for news between steps of its own, such as an epoch quorum).
    /// The errors are [`recv_from`](Self::recv_from)'s but the timeout. In a virtual
    /// iteration nothing was sent, so nothing has arrived: always `Ok(false)`.
    ///
    /// ```
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2))?;
    /// let got = cluster.run(|w| {
    ///     let mut v = [0i64];
    ///     if w.id() == 0 {
    ///         w.send_to(1, 3, &[7i64])?;
    ///         return Ok(0);
    ///     }
    ///     // Poll until worker 0's message is there.
    ///     while !w.try_recv_from(0, 3, &mut v)? {
    ///         std::thread::yield_now();
    ///     }
    ///     Ok(v[0])
    /// })?;
    /// assert_eq!(got, vec![0, 7]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_recv_from<T: Element>(
        &mut self,
        from: usize,
        tag: u32,
        out: &mut [T],
    ) -> Result<bool> {
        if self.virtual_only {
            self.check_sender(from, tag)?;
            return Ok(false);
        }
        self.receive(from, tag, out, Some(Instant::now()))
    }

    /// The error of a receive from `from` with `tag`.
    fn refuse(&self, from: usize, tag: u32, reason: String) -> Error {
        Error::Receive {
            worker: self.global as usize,
            from,
            tag,
            reason,
        }
    }

    /// Refuses a sender that is not a worker of the cluster.
    fn check_sender(&self, from: usize, tag: u32) -> Result<()> {
        if from >= self.workers {
            return Err(self.refuse(
                from,
                tag,
                format!("the cluster has {} workers", self.workers),
            ));
        }
        Ok(())
    }

    /// Takes the oldest message from `from` with `tag` into `out`, waiting until
    /// `deadline`: `Ok(false)` if none came by then.
    fn receive<T: Element>(
        &mut self,
        from: usize,
        tag: u32,
        out: &mut [T],
        deadline: Option<Instant>,
    ) -> Result<bool> {
        self.check_sender(from, tag)?;
        let local = self.global as usize % self.shared.world.workers;
        let letter = self.shared.mailboxes.take(
            local,
            from as WorkerId,
            tag,
            self.round,
            deadline,
            || self.shared.check(),
        )?;
        let reason = match letter {
            Ok(letter) => return self.copy_letter(from, tag, letter, out),
            Err(Empty::TimedOut) => return Ok(false),
            Err(Empty::SenderStopped) => super::SENDER_STOPPED.to_string(),
            Err(Empty::Unreceived { round, count }) => format!(
                "{count} message(s) it sent in an earlier run (round {round}) were never \
                 received: the runs' sends and receives do not match"
            ),
            Err(Empty::SenderMovedOn { round }) => format!(
                "the sender is already in a later run (round {round}): it sent fewer \
                 messages with this tag in this run than are received"
            ),
        };
        Err(self.refuse(from, tag, reason))
    }

    /// Copies `letter` from `from` with `tag` into `out`, refusing another element type
    /// or length.
    fn copy_letter<T: Element>(
        &self,
        from: usize,
        tag: u32,
        letter: Letter,
        out: &mut [T],
    ) -> Result<bool> {
        if letter.elem != T::TYPE {
            return Err(self.refuse(
                from,
                tag,
                format!(
                    "the message holds {:?} values, the receiver expects {:?}",
                    letter.elem,
                    T::TYPE
                ),
            ));
        }
        let values = letter.values.cast::<T>();
        if values.len() != out.len() {
            return Err(self.refuse(
                from,
                tag,
                format!(
                    "the message holds {} values, the receiver expects {}",
                    values.len(),
                    out.len()
                ),
            ));
        }
        out.copy_from_slice(values);
        Ok(true)
    }
}
