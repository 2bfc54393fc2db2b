//! Server shards: the authoritative copy of the rows placed on them, the clocks of every
//! worker, and the reads waiting for those clocks.
//!
//! A [`Shard`] is a state machine — `handle(msg) -> replies` — that does no IO, and
//! [`spawn`] drives it from a thread fed by the transport (and, in one OS process, from
//! the threads that send it messages: `ShardCell`). It knows the protocol and the SSP
//! rules, nothing about caches, workers' threads or how messages travel; the process in
//! its own OS process it knows only as a [`LocalArena`] to write that process's refreshes
//! into.
//!
//! The driver here does the IO the shard asks for ([`step`]): a checkpoint's part, which
//! the shard names ([`PartWrite`]) and encodes, is stored through `crate::checkpoint` by
//! the thread driving the shard at that moment (its own, or a sender's), before the shard
//! handles anything else, and the outcome handed back to the shard, which answers.

mod arena;
mod coordinator;
pub(crate) mod functions;
mod local;
mod shard;

pub(crate) use arena::RefreshRows;
pub(crate) use local::LocalArena;
pub(crate) use shard::{keep_newest, CopyAt, Shard};

use shard::PartWrite;

use crate::checkpoint::{PartEntry, PartWriter};
use crate::error::checkpoint::CheckpointError;
use crate::ids::ProcessId;
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};
use crate::sync::{lock, Signal};
use crate::transport::{DirectShard, Inbound, ShardInbox, Transport};
use crossbeam::channel::{Select, TryRecvError};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

/// How long an attached shard's thread sleeps between looks at its inbox when nobody
/// kicks it (a kick wakes it at once; the slice only bounds the wait).
const KICK_SLICE: Duration = Duration::from_millis(100);
use std::thread::JoinHandle;

/// The processes that have not left a shard yet, as its thread last saw them: what a
/// process waiting at shutdown reads to name who keeps it waiting.
#[derive(Debug, Clone, Default)]
pub(crate) struct Staying(Arc<Mutex<Vec<ProcessId>>>);

impl Staying {
    /// The processes still to leave.
    pub(crate) fn get(&self) -> Vec<ProcessId> {
        lock(&self.0).clone()
    }

    fn set(&self, staying: Vec<ProcessId>) {
        *lock(&self.0) = staying;
    }
}

/// A shard's state machine and its inbox, driven by whoever holds it: its own thread, or —
/// when the transport attached it ([`LocalDrive::attach_shard`](crate::transport::LocalDrive::attach_shard), one OS process) — the
/// thread that has just sent it a message, which then handles everything waiting (a
/// worker's CLOCK is applied, and the refresh it completes delivered, on the worker's own
/// thread, with no hand-off to wait for). Messages are always taken from the inbox in
/// its order, by one holder at a time, so the state machine sees what a thread of its own
/// would. A sender that finds the shard held kicks its thread, which takes what is
/// left once the holder is done: nothing waits in the inbox unseen.
struct ShardCell {
    driver: Mutex<Driver>,
    inbox: ShardInbox,
    transport: Arc<dyn Transport>,
    staying: Staying,
    /// The shard has stopped (stopped locally, released by every process, or panicked).
    done: AtomicBool,
    /// Bumped by a sender that could not drive the shard itself (or that stopped it);
    /// the thread waits on it. It sleeps at once: the shard's thread is the fallback.
    kick: Signal,
}

/// What the holder of a [`ShardCell`] works with.
struct Driver {
    shard: Shard,
    out: Vec<Envelope>,
}

impl ShardCell {
    /// Handles every message waiting in the inbox; `true` if the shard has stopped.
    fn drain(&self, d: &mut Driver) -> bool {
        if self.done.load(Ordering::Acquire) {
            return true;
        }
        loop {
            let msg = match self.inbox.try_recv() {
                Ok(Inbound::Msg(msg)) => msg,
                Ok(Inbound::Lost(_)) => continue,
                Err(TryRecvError::Empty) => return false,
                Ok(Inbound::Stop) | Err(TryRecvError::Disconnected) => break,
            };
            if !self.handle(d, msg) {
                break;
            }
        }
        self.done.store(true, Ordering::Release);
        true
    }

    /// Handles one message and sends its replies; `false` once the shard has stopped (a
    /// panic, reported to every process still in the cluster as a rejection naming the
    /// shard, or every process has left).
    fn handle(&self, d: &mut Driver, msg: ToShard) -> bool {
        let Driver { shard, out } = d;
        // Only a Leave changes who stays: nothing more per message on this path.
        let leave = matches!(msg, ToShard::Leave { .. });
        let handled = catch_unwind(AssertUnwindSafe(|| step(shard, msg, out)));
        if let Err(payload) = handled {
            let reason = format!(
                "server shard {} panicked: {}",
                shard.id(),
                crate::error::panic_message(payload.as_ref())
            );
            for p in shard.staying() {
                let msg = ToClient::Rejected {
                    shard: shard.id(),
                    reason: reason.clone(),
                };
                let _ = self.transport.reply(Envelope::Client(p, msg));
            }
            return false;
        }
        for reply in out.drain(..) {
            let to = reply.to();
            // A process that has gone away needs no answer; its loss is detected and
            // reported by the transport. Another shard (a migration's rows, a backup's
            // clocks or acks) would be waited for: a failed send fails the cluster.
            if let (Err(e), Endpoint::Shard(s)) = (self.transport.reply(reply), to) {
                let reason = format!(
                    "server shard {} could not send to shard {s}: {e}",
                    shard.id()
                );
                for p in shard.staying() {
                    let msg = ToClient::Rejected {
                        shard: shard.id(),
                        reason: reason.clone(),
                    };
                    let _ = self.transport.reply(Envelope::Client(p, msg));
                }
            }
        }
        if leave {
            self.staying.set(shard.staying());
        }
        !shard.released()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Driver> {
        lock(&self.driver)
    }

    /// Takes the stopped shard out, leaving an empty one of the same id in its place
    /// (nothing drives a stopped shard again).
    fn take_shard(&self) -> Shard {
        let mut d = self.lock();
        let empty = Shard::new(d.shard.id(), d.shard.world());
        std::mem::replace(&mut d.shard, empty)
    }
}

/// Handles `msg` on `shard`, pushing its replies onto `out`, and carries out the IO it
/// asks for before anything else reaches it: a checkpoint's part is written on the
/// calling thread and its outcome — the part's entry, or the error (a full disk, say) — handed
/// back to the shard, which answers the process that asked.
fn step(shard: &mut Shard, msg: ToShard, out: &mut Vec<Envelope>) {
    if let Some(write) = shard.handle(msg, out) {
        let written = write_part(shard, &write);
        shard.part_written(write, written, out);
    }
}

/// Stores the checkpoint part `write` names as a standalone part of the checkpoint
/// directory its process has begun, with the bytes `shard` encodes streamed into it: its
/// entry for the manifest, or the error naming the file.
fn write_part(shard: &Shard, write: &PartWrite) -> Result<PartEntry, CheckpointError> {
    PartWriter::standalone(write.root(), write.clock(), write.name())?
        .write_all_with(|file| shard.encode_part(write, file))
}

impl ShardCell {
    /// Drains what waits on this thread unless another thread holds the shard (never
    /// waiting for it); `false` if one does.
    fn drive_here(&self) -> bool {
        let mut d = match self.driver.try_lock() {
            Ok(d) => d,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        if self.drain(&mut d) {
            drop(d);
            self.kick.notify(); // so that its thread ends
        }
        true
    }
}

impl DirectShard for ShardCell {
    fn help(&self) -> bool {
        !self.inbox.is_empty() && self.drive_here()
    }

    fn poke(&self) {
        if !self.drive_here() {
            // Another thread holds it: the thread takes what we left once it is free.
            self.kick.notify();
        }
    }
}

/// Runs `shard` on a new thread, bound to the CPUs `pus` when given, until every process
/// has left it, it is stopped locally ([`Inbound::Stop`]) or its inbox closes. A panic
/// while handling a message is reported to every process still in the cluster as a
/// rejection naming the shard (the cluster fails rather than waits on a dead shard).
/// When `transport` attaches it ([`LocalDrive::attach_shard`](crate::transport::LocalDrive::attach_shard)), senders drive it too (see
/// [`ShardCell`]). Returns the thread and who has not left the shard yet ([`Staying`]).
pub(crate) fn spawn(
    shard: Shard,
    inbox: ShardInbox,
    transport: Arc<dyn Transport>,
    pus: Option<Vec<u32>>,
) -> std::io::Result<(JoinHandle<Option<Shard>>, Staying)> {
    let name = format!("iterstore-shard-{}", shard.id());
    let (cell, attached) = attached_cell(shard, inbox, transport);
    let staying = cell.staying.clone();
    let thread = crate::topology::bind::spawn_bound(name, pus, move || loop {
        // Read before draining: a kick while it drains is not missed.
        let seen = cell.kick.generation();
        if cell.drain(&mut cell.lock()) {
            return cell.take_shard();
        }
        if attached {
            cell.kick.wait(seen, KICK_SLICE);
        } else {
            // Only this thread drives it: wait for the next message.
            let mut ready = Select::new();
            ready.recv(&cell.inbox);
            ready.ready();
        }
    })?;
    Ok((thread, staying))
}

/// `shard` in a [`ShardCell`], offered to `transport` for its senders to drive; whether
/// the transport took it.
fn attached_cell(
    shard: Shard,
    inbox: ShardInbox,
    transport: Arc<dyn Transport>,
) -> (Arc<ShardCell>, bool) {
    let id = shard.id();
    let staying = Staying::default();
    staying.set(shard.staying());
    let cell = Arc::new(ShardCell {
        driver: Mutex::new(Driver {
            shard,
            out: Vec::new(),
        }),
        inbox,
        transport: transport.clone(),
        staying: staying.clone(),
        done: AtomicBool::new(false),
        kick: Signal::new(false),
    });
    let direct: Arc<dyn DirectShard> = cell.clone();
    let attached = cell
        .transport
        .local_drive()
        .is_some_and(|drive| drive.attach_shard(id, Arc::downgrade(&direct)));
    (cell, attached)
}

#[cfg(test)]
mod tests;
