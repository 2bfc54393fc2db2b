//! Leaving the cluster: [`Cluster::shutdown`] (coordinated: this process's shards serve
//! the others until every process has left them), shutdown on drop, and [`Threads`], the
//! shard, communication and metrics threads a process stops and joins (after a failed
//! start too).
//!
//! It knows the threads and the leave protocol ([`ToShard::Leave`]); what a shard does until
//! every process has left it is `server`'s, closing the network the transport's.

use super::metrics::MetricsServer;
use super::Cluster;
use crate::error::{panic_message, Error, Result};
use crate::ids::ProcessId;
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};
use crate::server;
use crate::transport::Transport;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

impl Cluster {
    /// Leaves the cluster and stops this process's threads. Idempotent; later calls on
    /// the cluster return [`Error::ShutDown`].
    ///
    /// Shutdown is coordinated: this process tells every shard it leaves, and its own
    /// shards keep serving the others until every process has left them (so no process
    /// stops shards that others still use), within [`Membership::shutdown_timeout`]
    /// ([`SHUTDOWN_TIMEOUT`] by default); past it, the error names the processes that had
    /// not left. A cluster that
    /// has failed stops its threads at once.
    ///
    /// [`Membership::shutdown_timeout`]: crate::membership::Membership::shutdown_timeout
    /// [`SHUTDOWN_TIMEOUT`]: crate::membership::SHUTDOWN_TIMEOUT
    pub fn shutdown(&mut self) -> Result<()> {
        if self.down {
            return Ok(());
        }
        self.down = true;
        let rank = self.shared.process;
        self.tell_the_others_it_failed();
        for shard in 0..self.shared.world.total_shards() {
            // Best effort: a failed cluster still tells the others it is gone.
            let _ = self
                .transport
                .send(Envelope::Shard(shard as u32, ToShard::Leave { from: rank }));
        }
        let failed = self.shared.has_failed();
        // A process lost while this one waits for the others to leave ends the wait.
        let shared = &self.shared;
        let gave_up = || shared.has_failed();
        let (mut result, shards) =
            self.threads
                .stop(self.transport.as_ref(), rank, failed, &gave_up);
        if failed {
            self.keep_after_failure(shards);
        }
        if let Err(e) = self.transport.close() {
            tracing::warn!("process {rank}: closing the network: {e}");
        }
        if !failed && (result.is_ok() || self.shared.has_failed()) {
            // The cause (a lost process), rather than that its shards were not released;
            // this process's own stop is no cause.
            match self.shared.check() {
                Err(Error::ShutDown) | Ok(()) => {}
                Err(cause) => result = Err(cause),
            }
        }
        match result {
            Err(Error::ShutDown) => Ok(()),
            other => other,
        }
    }
}

impl Cluster {
    /// If this process failed of its own accord (not because a peer was lost, which the
    /// others detect themselves), tells every other process's client so, as a rejection
    /// by this process's first shard: whatever they wait for from this process (a table's
    /// id from its coordinator, an all-gather part, a run barrier) fails at once with the
    /// cause instead of waiting out its bound. Best effort: a process already gone needs no
    /// telling.
    fn tell_the_others_it_failed(&self) {
        let Err(cause) = self.shared.check() else {
            return;
        };
        if matches!(cause, Error::ShutDown) || cause.lost_process().is_some() {
            return;
        }
        let world = &self.shared.world;
        let rank = self.shared.process;
        let shard = world.shards_of(rank).start;
        for other in (0..world.processes as ProcessId).filter(|&p| p != rank) {
            let reason = format!("process {rank} failed: {cause}");
            let msg = ToClient::Rejected { shard, reason };
            let _ = self.transport.send(Envelope::Client(other, msg));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// A process's shard threads, communication thread and metrics endpoint.
#[derive(Default)]
pub(super) struct Threads {
    pub(super) shards: Vec<(u32, JoinHandle<Option<server::Shard>>, server::Staying)>,
    pub(super) comm: Option<JoinHandle<Option<()>>>,
    /// The metrics endpoint, if any: stopped first, before the transport it reads closes.
    pub(super) metrics: Option<MetricsServer>,
    /// How long `stop` waits for the other processes to leave the shards.
    pub(super) shutdown_timeout: Duration,
}

impl Cluster {
    /// Stops this process's threads at once and closes the network, without telling any
    /// shard it leaves: for a process that has just joined and found that the others run
    /// with other settings, whose idea of which shard lives where cannot be trusted.
    pub(super) fn abandon(&mut self) {
        if self.down {
            return;
        }
        self.down = true;
        let rank = self.shared.process;
        let _ = self
            .threads
            .stop(self.transport.as_ref(), rank, true, &|| true);
        let _ = self.transport.close();
    }
}

impl Threads {
    /// Stops and joins every thread after a failed start; returns `error`.
    pub(super) fn abort(
        &mut self,
        transport: &dyn Transport,
        rank: ProcessId,
        error: Error,
    ) -> Error {
        let _ = self.stop(transport, rank, true, &|| true);
        error
    }

    /// Waits for the shard threads to be released by every process (at once if
    /// `now`, else within `shutdown_timeout` or until `give_up()`), then stops the
    /// communication thread. Returns the outcome and the shards as their threads left
    /// them.
    fn stop(
        &mut self,
        transport: &dyn Transport,
        rank: ProcessId,
        now: bool,
        give_up: &dyn Fn() -> bool,
    ) -> (Result<()>, Vec<server::Shard>) {
        if let Some(mut m) = self.metrics.take() {
            m.stop();
        }
        let deadline = Instant::now()
            + if now {
                Duration::ZERO
            } else {
                self.shutdown_timeout
            };
        let mut result = Ok(());
        while self.shards.iter().any(|(_, t, _)| !t.is_finished())
            && Instant::now() < deadline
            && !give_up()
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let now = now || give_up();
        let mut kept = Vec::new();
        for (id, t, staying) in self.shards.drain(..) {
            if !t.is_finished() {
                if !now && result.is_ok() {
                    let names: Vec<String> = staying.get().iter().map(|p| p.to_string()).collect();
                    result = Err(Error::failed(
                        format!("server shard {id} (process {rank})"),
                        format!(
                            "process(es) {} did not leave it within {:.1} s (still running, \
                             or stopped without shutting down)",
                            names.join(", "),
                            self.shutdown_timeout.as_secs_f64()
                        ),
                    ));
                }
                let _ = transport.stop_local(Endpoint::Shard(id));
            }
            match t.join() {
                Ok(shard) => kept.extend(shard),
                Err(payload) => {
                    let name = format!("server shard {id}");
                    result = result.and(Err(Error::failed(name, panic_message(payload.as_ref()))));
                }
            }
        }
        if let Some(t) = self.comm.take() {
            let _ = transport.stop_local(Endpoint::Client(rank));
            if let Err(payload) = t.join() {
                let name = format!("client communication thread {rank}");
                result = result.and(Err(Error::failed(name, panic_message(payload.as_ref()))));
            }
        }
        (result, kept)
    }
}
