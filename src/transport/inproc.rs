//! The in-process transport: one crossbeam channel per endpoint.

use super::{Inbox, Transport, TransportError};
use crate::msg::{Endpoint, Msg};
use crossbeam::channel::{unbounded, Sender};

/// Delivers messages between endpoints of one process through unbounded channels.
#[derive(Debug)]
pub struct InProcTransport {
    shards: Vec<Sender<Msg>>,
    clients: Vec<Sender<Msg>>,
}

impl InProcTransport {
    /// A transport for `clients` client processes and `shards` server shards, with the
    /// inboxes of the shards and of the clients (indexed by id).
    pub fn new(clients: usize, shards: usize) -> (Self, Vec<Inbox>, Vec<Inbox>) {
        let (shard_tx, shard_rx): (Vec<_>, Vec<_>) = (0..shards).map(|_| unbounded()).unzip();
        let (client_tx, client_rx): (Vec<_>, Vec<_>) = (0..clients).map(|_| unbounded()).unzip();
        let transport = InProcTransport {
            shards: shard_tx,
            clients: client_tx,
        };
        (transport, shard_rx, client_rx)
    }
}

impl Transport for InProcTransport {
    fn send(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError> {
        let tx = match to {
            Endpoint::Shard(s) => self.shards.get(s as usize),
            Endpoint::Client(c) => self.clients.get(c as usize),
        }
        .ok_or(TransportError::UnknownEndpoint(to))?;
        tx.send(msg).map_err(|_| TransportError::Closed(to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_order_and_reports_closed_endpoints() {
        let (t, shards, clients) = InProcTransport::new(1, 2);
        t.send(Endpoint::Shard(1), Msg::Finish { worker: 1 })
            .unwrap();
        t.send(Endpoint::Shard(1), Msg::Finish { worker: 2 })
            .unwrap();
        assert!(matches!(shards[1].recv(), Ok(Msg::Finish { worker: 1 })));
        assert!(matches!(shards[1].recv(), Ok(Msg::Finish { worker: 2 })));
        assert_eq!(
            t.send(Endpoint::Shard(5), Msg::Shutdown).unwrap_err(),
            TransportError::UnknownEndpoint(Endpoint::Shard(5))
        );
        drop(clients);
        assert_eq!(
            t.send(Endpoint::Client(0), Msg::Shutdown).unwrap_err(),
            TransportError::Closed(Endpoint::Client(0))
        );
    }
}
