//! The [`Transport`] trait: how protocol messages, each in its [`Envelope`], reach their
//! [`Endpoint`].
//!
//! A transport only moves messages; it never looks inside them. Every endpoint receives
//! from one [`Inbox`] (a channel that a transport's receive side feeds) of its own
//! direction's messages — a shard's of [`ToShard`]s, a communication thread's of
//! [`ToClient`]s — so the consumers are the same whatever the transport, and neither is
//! ever handed a message meant for the other.
//!
//! **Ordering guarantee:** messages from one process to one endpoint arrive in the order
//! the process sent them (FIFO per pair of processes, whichever of its threads sent
//! them, as long as one send happens before the other). So a process's `CreateTable`,
//! `Specialize` and `RunEnd` precede its workers' later messages everywhere. Nothing is
//! promised across senders: the protocol is tested under every interleaving of them.

mod inproc;
mod tcp;

pub(crate) use inproc::InProcTransport;
pub(crate) use tcp::{LocalInboxes, TcpTransport};

use crate::ids::{ProcessId, ShardId};
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};

/// Network traffic of one kind of protocol message ([`Cluster::traffic`](crate::Cluster::traffic)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct KindTraffic {
    /// The message kind, e.g. `Clock` (a worker's updates of a clock), `SlabRows` (an
    /// arena refresh), `Rows` (generic row fetches), `RunReady` (the run barrier).
    pub kind: &'static str,
    /// Messages of this kind this process sent to other processes.
    pub messages_sent: u64,
    /// Their bytes on the wire (frame header included).
    pub bytes_sent: u64,
    /// Messages of this kind this process received from other processes.
    pub messages_received: u64,
    /// Their bytes on the wire.
    pub bytes_received: u64,
}

/// What an endpoint's thread receives: a protocol message of its direction (`M`:
/// [`ToShard`] or [`ToClient`]), or a local stop (which never crosses a network and is not
/// a protocol message: one process stopping its threads stops nobody else's).
#[derive(Debug)]
pub(crate) enum Inbound<M> {
    /// A protocol message.
    Msg(M),
    /// Stop the receiving thread (sent only by the endpoint's own process).
    Stop,
    /// The transport lost a peer or found it misbehaving: the cluster fails with this
    /// reason (sent to the communication thread only).
    Lost(String),
}

/// The receiving side of an endpoint that receives `M`s.
pub(crate) type Inbox<M> = crossbeam::channel::Receiver<Inbound<M>>;

/// A server shard's inbox.
pub(crate) type ShardInbox = Inbox<ToShard>;

/// A communication thread's inbox.
pub(crate) type ClientInbox = Inbox<ToClient>;

/// A server shard that its senders may drive (see `server::ShardCell`).
pub(crate) trait DirectShard: Send + Sync {
    /// Called after a message was queued in the shard's inbox: handles what is waiting
    /// on this thread if no other thread is driving the shard, else leaves it to the
    /// shard's own thread.
    fn poke(&self);

    /// Handles what is waiting on this thread if messages wait and no other thread is
    /// driving the shard (never waits for the thread that is); `true` if it handled any.
    fn help(&self) -> bool;
}

/// A client process that handles its messages on the sender's thread: what the in-process
/// transport calls instead of queueing for the communication thread (see
/// [`LocalDrive::attach_client`]). It must be safe to call from several threads at once.
pub(crate) trait DirectClient: Send + Sync {
    /// Handles one message; never panics (a handler's panic fails the client instead).
    fn deliver(&self, msg: ToClient);
}

/// Why a message could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum TransportError {
    /// The endpoint does not exist.
    #[error("no such endpoint {0:?}")]
    UnknownEndpoint(Endpoint),
    /// The endpoint has stopped receiving.
    #[error("endpoint {0:?} is closed")]
    Closed(Endpoint),
    /// The network could not carry the message.
    #[error("{1}")]
    Network(Endpoint, String),
}

/// Moves messages to endpoints. Implementations are shared by all threads of a process.
pub(crate) trait Transport: Send + Sync + 'static {
    /// Sends `msg` to the endpoint it names (see the module docs for the ordering
    /// guarantee).
    fn send(&self, msg: Envelope) -> Result<(), TransportError>;

    /// Sends a server shard's reply: never blocks on a slow peer (a peer too slow to
    /// keep up is declared lost instead), so a shard's state machine never waits on one.
    fn reply(&self, msg: Envelope) -> Result<(), TransportError> {
        self.send(msg)
    }

    /// The transport's scheduling of this OS process's shards and clients on the
    /// threads that send to them, if it does that ([`LocalDrive`]): the in-process
    /// transport's; a transport that leaves the process has none.
    fn local_drive(&self) -> Option<&dyn LocalDrive> {
        None
    }

    /// Stops the thread of `to`, an endpoint of this process ([`Inbound::Stop`]).
    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError>;

    /// Bytes and frames this process sent and received over the network so far (zero
    /// for a transport that does not leave the process).
    fn traffic(&self) -> crate::net::NetCounters {
        crate::net::NetCounters::default()
    }

    /// Bytes and frames sent to and received from each other process so far, and the
    /// bytes queued for it now (empty for a transport that does not leave the process).
    fn peer_traffic(&self) -> Vec<crate::net::shared::PeerTraffic> {
        Vec::new()
    }

    /// Messages and bytes sent to and received from other processes so far, by kind of
    /// message (kinds with none left out; empty for a transport that does not leave the
    /// process).
    fn traffic_by_kind(&self) -> Vec<KindTraffic> {
        Vec::new()
    }

    /// Closes the transport once this process has stopped its threads: what is queued is
    /// flushed and peers are told this process leaves (bounded in time).
    fn close(&self) -> Result<(), TransportError> {
        Ok(())
    }
}

/// Who runs a shard of this OS process: the in-process transport lets the thread that
/// sends a shard a message drive it at once when no other thread does, and lets waiting
/// workers take queued shard work. Moving messages is [`Transport`]'s; this is only the
/// scheduling of this process's threads, offered through [`Transport::local_drive`] by a
/// transport that delivers within the process.
pub(crate) trait LocalDrive: Send + Sync {
    /// Lets client `rank`, a process of this OS process, handle its messages on the
    /// senders' threads from now on, until its thread is stopped; a transport that
    /// cannot (one that leaves the process) has no `LocalDrive`.
    fn attach_client(&self, rank: ProcessId, client: std::sync::Weak<dyn DirectClient>);

    /// Lets the senders of shard `id`, a shard of this OS process, drive it after queueing
    /// their messages ([`DirectShard::poke`]); `true` if this transport does (the shard's
    /// thread then only takes what a sender left to it).
    fn attach_shard(&self, id: ShardId, shard: std::sync::Weak<dyn DirectShard>) -> bool;

    /// Queues `msg` for shard `to` like [`Transport::send`], but does not drive a shard
    /// of this process on this thread: a worker waiting for an answer takes it
    /// ([`help`](Self::help)), or the sender's later [`drive`](Self::drive).
    fn enqueue(&self, to: ShardId, msg: ToShard) -> Result<(), TransportError>;

    /// After [`enqueue`](Self::enqueue)s to shard `to`: drives it on this thread if no
    /// other thread does and messages wait, else leaves them to the thread that does
    /// ([`DirectShard::poke`]).
    fn drive(&self, to: ShardId);

    /// Drives, on this thread, each shard of this process that has messages waiting and
    /// no other thread driving it: what a worker does while it waits for an answer, so
    /// that the work a CLOCK released is shared ([`DirectShard::help`]). `true` if it
    /// handled any.
    fn help(&self) -> bool;
}
