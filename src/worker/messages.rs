//! Worker-to-worker messages: [`Worker::send_to`] and [`Worker::recv_from`], for apps whose
//! workers exchange values besides the store's rows (a model-parallel DNN's activations
//! and error terms).
//!
//! A message to a worker of this process goes straight into its mailbox; one to another
//! process's worker travels as [`Msg::Pass`] over the transport (FIFO per pair of
//! processes) and its communication thread files it. In a virtual iteration nothing is
//! sent and a receive returns zeros at once: the values there are meaningless anyway, and
//! the rows an iteration touches must not depend on them.

use super::Worker;
use crate::buf::AlignedBuf;
use crate::client::{deadline, Empty, Letter};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::ids::WorkerId;
use crate::msg::{Endpoint, Msg};

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
            self.shared.send(
                Endpoint::Client(process),
                Msg::Pass {
                    from: self.global,
                    to: to as WorkerId,
                    tag,
                    round: letter.round,
                    elem: letter.elem,
                    values: letter.values,
                },
            )
        }
    }

    /// Receives the oldest message from worker `from` tagged `tag` into `out`, waiting
    /// for it if it has not arrived. `out` must have the message's length and element
    /// type. The wait ends with [`Error::Receive`] if `from` stops this run with an error
    /// or after [`Config::message_timeout`](crate::Config::message_timeout), and with the
    /// cluster's error if it fails.
    pub fn recv_from<T: Element>(&mut self, from: usize, tag: u32, out: &mut [T]) -> Result<()> {
        let refuse = |reason: String| Error::Receive {
            worker: self.global as usize,
            from,
            tag,
            reason,
        };
        if from >= self.workers {
            return Err(refuse(format!("the cluster has {} workers", self.workers)));
        }
        if self.virtual_only {
            out.fill(T::default());
            return Ok(());
        }
        let timeout = self.shared.config.message_timeout;
        let local = self.global as usize % self.shared.world.workers;
        let letter = self.shared.mailboxes.take(
            local,
            from as WorkerId,
            tag,
            self.round,
            deadline(timeout),
            || self.shared.check(),
        )?;
        let letter = letter.map_err(|why| {
            refuse(match why {
                Empty::SenderStopped => "the sender stopped with an error".to_string(),
                Empty::Unreceived { round, count } => format!(
                    "{count} message(s) it sent in an earlier run (round {round}) were never \
                     received: the runs' sends and receives do not match"
                ),
                Empty::SenderMovedOn { round } => format!(
                    "the sender is already in a later run (round {round}): it sent fewer \
                     messages with this tag in this run than are received"
                ),
                Empty::TimedOut => format!(
                    "no message within {} s (Config::message_timeout)",
                    timeout.as_secs_f64()
                ),
            })
        })?;
        if letter.elem != T::TYPE {
            return Err(refuse(format!(
                "the message holds {:?} values, the receiver expects {:?}",
                letter.elem,
                T::TYPE
            )));
        }
        let values = letter.values.cast::<T>();
        if values.len() != out.len() {
            return Err(refuse(format!(
                "the message holds {} values, the receiver expects {}",
                values.len(),
                out.len()
            )));
        }
        out.copy_from_slice(values);
        Ok(())
    }
}
