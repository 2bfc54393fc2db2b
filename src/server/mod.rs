//! Server shards: the authoritative copy of the rows placed on them, the clocks of every
//! worker, and the reads waiting for those clocks.
//!
//! A [`Shard`] is a state machine — `handle(msg) -> replies` — and [`spawn`] drives it
//! from a thread fed by the transport. It knows the protocol and the SSP rules, nothing
//! about caches, workers' threads or how messages travel.

mod arena;
mod shard;

pub(crate) use arena::padded;

pub(crate) use shard::{shard_of, Shard};

use crate::msg::{Endpoint, Msg};
use crate::transport::{Inbox, Transport};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Runs `shard` on a new thread, bound to the CPUs `pus` when given, until it receives
/// [`Msg::Shutdown`] or its inbox closes.
pub(crate) fn spawn(
    mut shard: Shard,
    inbox: Inbox,
    transport: Arc<dyn Transport>,
    pus: Option<Vec<u32>>,
) -> std::io::Result<JoinHandle<()>> {
    let name = format!("iterstore-shard-{}", shard.id());
    crate::topology::bind::spawn_bound(name, pus, move || {
        let mut out: Vec<(Endpoint, Msg)> = Vec::new();
        while let Ok(msg) = inbox.recv() {
            let stop = matches!(msg, Msg::Shutdown);
            shard.handle(msg, &mut out);
            for (to, reply) in out.drain(..) {
                // A client that has gone away needs no answer; keep serving the others.
                let _ = transport.send(to, reply);
            }
            if stop {
                break;
            }
        }
    })
}
