//! Server shards: the authoritative copy of the rows placed on them, the clocks of every
//! worker, and the reads waiting for those clocks.
//!
//! A [`Shard`] is a state machine — `handle(msg) -> replies` — and [`spawn`] drives it
//! from a thread fed by the transport. It knows the protocol and the SSP rules, nothing
//! about caches, workers' threads or how messages travel.

mod arena;
mod coordinator;
mod shard;

pub(crate) use shard::Shard;

use crate::msg::{Endpoint, Msg, ProcessId};
use crate::transport::{Inbound, Inbox, Transport};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

/// The processes that have not left a shard yet, as its thread last saw them: what a
/// process waiting at shutdown reads to name who keeps it waiting.
#[derive(Debug, Clone, Default)]
pub(crate) struct Staying(Arc<Mutex<Vec<ProcessId>>>);

impl Staying {
    /// The processes still to leave.
    pub(crate) fn get(&self) -> Vec<ProcessId> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, staying: Vec<ProcessId>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = staying;
    }
}

/// Runs `shard` on a new thread, bound to the CPUs `pus` when given, until every process
/// has left it, it is stopped locally ([`Inbound::Stop`]) or its inbox closes. A panic
/// while handling a message is reported to every process still in the cluster as a
/// rejection naming the shard (the cluster fails rather than waits on a dead shard).
/// Returns the thread and who has not left the shard yet ([`Staying`]).
pub(crate) fn spawn(
    mut shard: Shard,
    inbox: Inbox,
    transport: Arc<dyn Transport>,
    pus: Option<Vec<u32>>,
) -> std::io::Result<(JoinHandle<()>, Staying)> {
    let name = format!("iterstore-shard-{}", shard.id());
    let staying = Staying::default();
    staying.set(shard.staying());
    let seen = staying.clone();
    let thread = crate::topology::bind::spawn_bound(name, pus, move || {
        let mut out: Vec<(Endpoint, Msg)> = Vec::new();
        loop {
            let msg = match inbox.recv() {
                Ok(Inbound::Msg(msg)) => msg,
                Ok(Inbound::Lost(_)) => continue,
                Ok(Inbound::Stop) | Err(_) => return,
            };
            // Only a Leave changes who stays: nothing more per message on this path.
            let leave = matches!(msg, Msg::Leave { .. });
            let handled = catch_unwind(AssertUnwindSafe(|| shard.handle(msg, &mut out)));
            if let Err(payload) = handled {
                let reason = format!(
                    "server shard {} panicked: {}",
                    shard.id(),
                    crate::error::panic_message(payload.as_ref())
                );
                for p in shard.staying() {
                    let msg = Msg::Rejected {
                        shard: shard.id(),
                        reason: reason.clone(),
                    };
                    let _ = transport.reply(Endpoint::Client(p), msg);
                }
                return;
            }
            for (to, reply) in out.drain(..) {
                // A process that has gone away needs no answer; its loss is detected and
                // reported by the transport.
                let _ = transport.reply(to, reply);
            }
            if leave {
                seen.set(shard.staying());
            }
            if shard.released() {
                return;
            }
        }
    })?;
    Ok((thread, staying))
}
