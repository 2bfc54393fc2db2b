//! The in-process transport: one crossbeam channel per endpoint. It carries one process's
//! clients and shards, or — for tests that P processes compute what one process of as
//! many workers computes — several processes' clients and shards in one OS process.

use super::{Inbound, Inbox, Transport, TransportError};
use crate::msg::{Endpoint, Msg};
use crossbeam::channel::{unbounded, Sender};

/// Delivers messages between endpoints of one OS process through unbounded channels
/// (one channel per endpoint, so messages from one thread to one endpoint stay in order).
#[derive(Debug)]
pub(crate) struct InProcTransport {
    shards: Vec<Sender<Inbound>>,
    clients: Vec<Sender<Inbound>>,
}

impl InProcTransport {
    /// A transport for `clients` client processes and `shards` server shards, with the
    /// inboxes of the shards and of the clients (indexed by id).
    pub(crate) fn new(clients: usize, shards: usize) -> (Self, Vec<Inbox>, Vec<Inbox>) {
        let (shard_tx, shard_rx): (Vec<_>, Vec<_>) = (0..shards).map(|_| unbounded()).unzip();
        let (client_tx, client_rx): (Vec<_>, Vec<_>) = (0..clients).map(|_| unbounded()).unzip();
        let transport = InProcTransport {
            shards: shard_tx,
            clients: client_tx,
        };
        (transport, shard_rx, client_rx)
    }

    fn deliver(&self, to: Endpoint, what: Inbound) -> Result<(), TransportError> {
        let tx = match to {
            Endpoint::Shard(s) => self.shards.get(s as usize),
            Endpoint::Client(c) => self.clients.get(c as usize),
        }
        .ok_or(TransportError::UnknownEndpoint(to))?;
        tx.send(what).map_err(|_| TransportError::Closed(to))
    }
}

impl Transport for InProcTransport {
    fn send(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError> {
        self.deliver(to, Inbound::Msg(msg))
    }

    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError> {
        self.deliver(to, Inbound::Stop)
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
        t.stop_local(Endpoint::Shard(1)).unwrap();
        let got = |i: &Inbox| i.recv().unwrap();
        assert!(matches!(
            got(&shards[1]),
            Inbound::Msg(Msg::Finish { worker: 1 })
        ));
        assert!(matches!(
            got(&shards[1]),
            Inbound::Msg(Msg::Finish { worker: 2 })
        ));
        assert!(matches!(got(&shards[1]), Inbound::Stop));
        assert_eq!(
            t.send(Endpoint::Shard(5), Msg::Leave { from: 0 })
                .unwrap_err(),
            TransportError::UnknownEndpoint(Endpoint::Shard(5))
        );
        drop(clients);
        assert_eq!(
            t.send(Endpoint::Client(0), Msg::Leave { from: 0 })
                .unwrap_err(),
            TransportError::Closed(Endpoint::Client(0))
        );
    }
}
