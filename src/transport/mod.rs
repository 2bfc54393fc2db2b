//! The [`Transport`] trait: how protocol [`Msg`]s reach an [`Endpoint`].
//!
//! A transport only moves messages; it never looks inside them. Every endpoint receives
//! from one [`Inbox`] (a channel that a transport's receive side feeds), so the consumers —
//! server shards and client communication threads — are the same whatever the transport.
//!
//! **Ordering guarantee:** messages from one process to one endpoint arrive in the order
//! the process sent them (FIFO per pair of processes, whichever of its threads sent
//! them, as long as one send happens before the other). So a process's `CreateTable`,
//! `Specialize` and `RunEnd` precede its workers' later messages everywhere. Nothing is
//! promised across senders: the protocol is tested under every interleaving of them.

mod inproc;

pub(crate) use inproc::InProcTransport;

use crate::msg::{Endpoint, Msg};

/// What an endpoint's thread receives: a protocol message, or a local stop (which never
/// crosses a network and is not a protocol message: one process stopping its threads
/// stops nobody else's).
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A protocol message.
    Msg(Msg),
    /// Stop the receiving thread (sent only by the endpoint's own process).
    Stop,
}

/// The receiving side of an endpoint.
pub(crate) type Inbox = crossbeam::channel::Receiver<Inbound>;

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
}

/// Moves messages to endpoints. Implementations are shared by all threads of a process.
pub(crate) trait Transport: Send + Sync + 'static {
    /// Sends `msg` to `to` (see the module docs for the ordering guarantee).
    fn send(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError>;

    /// Stops the thread of `to`, an endpoint of this process ([`Inbound::Stop`]).
    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError>;
}
