//! The [`Transport`] trait: how protocol [`Msg`]s reach an [`Endpoint`].
//!
//! A transport only moves messages; it never looks inside them. Every endpoint receives
//! from one [`Inbox`] (a channel that a transport's receive side feeds), so the consumers —
//! server shards and client communication threads — are the same whatever the transport.

mod inproc;

pub use inproc::InProcTransport;

use crate::msg::{Endpoint, Msg};

/// The receiving side of an endpoint.
pub type Inbox = crossbeam::channel::Receiver<Msg>;

/// Why a message could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The endpoint does not exist.
    #[error("no such endpoint {0:?}")]
    UnknownEndpoint(Endpoint),
    /// The endpoint has stopped receiving.
    #[error("endpoint {0:?} is closed")]
    Closed(Endpoint),
}

/// Moves messages to endpoints. Implementations are shared by all threads of a process.
pub trait Transport: Send + Sync + 'static {
    /// Sends `msg` to `to`. Messages from one thread to one endpoint arrive in order.
    fn send(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError>;
}
