//! The in-process transport: one crossbeam channel per endpoint. It carries one process's
//! clients and shards, or — for tests that P processes compute what one process of as
//! many workers computes — several processes' clients and shards in one OS process.
//!
//! A client attached with [`LocalDrive::attach_client`] takes its messages on the
//! sender's thread instead (a shard's refresh is written into the process arena by the
//! shard thread, and the workers waiting for it are woken from there): one thread
//! hand-off less on every clock's critical path. Each sender still delivers in the order
//! it sends, so the ordering guarantee holds. Once the client's thread is stopped its
//! messages go to the channel again. Likewise a shard attached with
//! [`LocalDrive::attach_shard`] is poked after every message queued for it, and the
//! sender drives it if no other thread does (`server::ShardCell`).

use super::{
    ClientInbox, DirectClient, DirectShard, Inbound, LocalDrive, ShardInbox, Transport,
    TransportError,
};
use crate::ids::{ProcessId, ShardId};
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};
use crossbeam::channel::{unbounded, Sender};
use std::sync::{RwLock, Weak};

/// Delivers messages between endpoints of one OS process through unbounded channels
/// (one channel per endpoint, so messages from one thread to one endpoint stay in order).
#[derive(Debug)]
pub(crate) struct InProcTransport {
    shards: Vec<Sender<Inbound<ToShard>>>,
    clients: Vec<Sender<Inbound<ToClient>>>,
    /// Clients that handle their messages on the sender's thread (by process).
    direct: Vec<RwLock<Option<Weak<dyn DirectClient>>>>,
    /// Shards their senders drive (by id).
    driven: Vec<RwLock<Option<Weak<dyn DirectShard>>>>,
}

impl InProcTransport {
    /// A transport for `clients` client processes and `shards` server shards, with the
    /// inboxes of the shards and of the clients (indexed by id).
    pub(crate) fn new(clients: usize, shards: usize) -> (Self, Vec<ShardInbox>, Vec<ClientInbox>) {
        let (shard_tx, shard_rx): (Vec<_>, Vec<_>) = (0..shards).map(|_| unbounded()).unzip();
        let (client_tx, client_rx): (Vec<_>, Vec<_>) = (0..clients).map(|_| unbounded()).unzip();
        let transport = InProcTransport {
            shards: shard_tx,
            clients: client_tx,
            direct: (0..clients).map(|_| RwLock::new(None)).collect(),
            driven: (0..shards).map(|_| RwLock::new(None)).collect(),
        };
        (transport, shard_rx, client_rx)
    }

    /// Puts `what` in shard `to`'s channel.
    fn queue_shard(&self, to: ShardId, what: Inbound<ToShard>) -> Result<(), TransportError> {
        put(self.shards.get(to as usize), Endpoint::Shard(to), what)
    }

    /// Puts `what` in client `to`'s channel.
    fn queue_client(&self, to: ProcessId, what: Inbound<ToClient>) -> Result<(), TransportError> {
        put(self.clients.get(to as usize), Endpoint::Client(to), what)
    }
}

/// Sends `what` on `tx`, the channel of endpoint `to` if it exists.
fn put<M>(
    tx: Option<&Sender<Inbound<M>>>,
    to: Endpoint,
    what: Inbound<M>,
) -> Result<(), TransportError> {
    let tx = tx.ok_or(TransportError::UnknownEndpoint(to))?;
    tx.send(what).map_err(|_| TransportError::Closed(to))
}

impl Transport for InProcTransport {
    fn send(&self, msg: Envelope) -> Result<(), TransportError> {
        match msg {
            Envelope::Shard(s, msg) => {
                self.queue_shard(s, Inbound::Msg(msg))?;
                self.drive(s);
                Ok(())
            }
            Envelope::Client(c, msg) => {
                if let Some(client) = self.direct.get(c as usize).and_then(upgraded) {
                    client.deliver(msg);
                    return Ok(());
                }
                self.queue_client(c, Inbound::Msg(msg))
            }
        }
    }

    fn local_drive(&self) -> Option<&dyn LocalDrive> {
        Some(self)
    }

    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError> {
        match to {
            Endpoint::Shard(s) => {
                self.queue_shard(s, Inbound::Stop)?;
                self.drive(s);
                Ok(())
            }
            Endpoint::Client(c) => {
                if let Some(d) = self.direct.get(c as usize) {
                    *d.write().unwrap_or_else(|e| e.into_inner()) = None;
                }
                self.queue_client(c, Inbound::Stop)
            }
        }
    }
}

impl LocalDrive for InProcTransport {
    fn enqueue(&self, to: ShardId, msg: ToShard) -> Result<(), TransportError> {
        self.queue_shard(to, Inbound::Msg(msg))
    }

    fn drive(&self, to: ShardId) {
        if let Some(shard) = self.driven.get(to as usize).and_then(upgraded) {
            shard.poke();
        }
    }

    fn help(&self) -> bool {
        let mut any = false;
        for driven in &self.driven {
            if let Some(shard) = upgraded(driven) {
                any |= shard.help();
            }
        }
        any
    }

    fn attach_client(&self, rank: ProcessId, client: Weak<dyn DirectClient>) {
        if let Some(d) = self.direct.get(rank as usize) {
            *d.write().unwrap_or_else(|e| e.into_inner()) = Some(client);
        }
    }

    fn attach_shard(&self, id: ShardId, shard: Weak<dyn DirectShard>) -> bool {
        let Some(d) = self.driven.get(id as usize) else {
            return false;
        };
        *d.write().unwrap_or_else(|e| e.into_inner()) = Some(shard);
        true
    }
}

/// What `slot` holds, if it is attached and still alive.
fn upgraded<T: ?Sized>(slot: &RwLock<Option<Weak<T>>>) -> Option<std::sync::Arc<T>> {
    slot.read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(Weak::upgrade)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message for a client.
    fn min_clock(clock: u64) -> ToClient {
        ToClient::MinClock { shard: 0, clock }
    }

    #[test]
    fn delivers_in_order_and_reports_closed_endpoints() {
        let (t, shards, clients) = InProcTransport::new(1, 2);
        t.send(Envelope::Shard(1, ToShard::Finish { worker: 1 }))
            .unwrap();
        t.send(Envelope::Shard(1, ToShard::Finish { worker: 2 }))
            .unwrap();
        t.stop_local(Endpoint::Shard(1)).unwrap();
        let got = |i: &ShardInbox| i.recv().unwrap();
        assert!(matches!(
            got(&shards[1]),
            Inbound::Msg(ToShard::Finish { worker: 1 })
        ));
        assert!(matches!(
            got(&shards[1]),
            Inbound::Msg(ToShard::Finish { worker: 2 })
        ));
        assert!(matches!(got(&shards[1]), Inbound::Stop));
        assert_eq!(
            t.send(Envelope::Shard(5, ToShard::Leave { from: 0 }))
                .unwrap_err(),
            TransportError::UnknownEndpoint(Endpoint::Shard(5))
        );
        drop(clients);
        assert_eq!(
            t.send(Envelope::Client(0, min_clock(0))).unwrap_err(),
            TransportError::Closed(Endpoint::Client(0))
        );
    }
    /// Records what it is given.
    #[derive(Default)]
    struct Recorder(std::sync::Mutex<Vec<String>>);

    impl DirectClient for Recorder {
        fn deliver(&self, msg: ToClient) {
            self.0.lock().unwrap().push(format!("{msg:?}"));
        }
    }

    #[test]
    fn an_attached_client_takes_its_messages_on_the_senders_thread_until_stopped() {
        let (t, _shards, clients) = InProcTransport::new(2, 1);
        let direct = std::sync::Arc::new(Recorder::default());
        let weak: Weak<dyn DirectClient> = std::sync::Arc::downgrade(&direct) as _;
        t.attach_client(1, weak);
        t.send(Envelope::Client(1, min_clock(1))).unwrap();
        t.send(Envelope::Client(1, min_clock(2))).unwrap();
        // Client 0 is not attached: its messages are queued.
        t.send(Envelope::Client(0, min_clock(3))).unwrap();
        assert_eq!(
            *direct.0.lock().unwrap(),
            [
                "MinClock { shard: 0, clock: 1 }",
                "MinClock { shard: 0, clock: 2 }"
            ]
        );
        assert!(clients[1].is_empty());
        assert!(matches!(
            clients[0].try_recv(),
            Ok(Inbound::Msg(ToClient::MinClock { clock: 3, .. }))
        ));
        // Stopped: the stop and what follows go to the channel.
        t.stop_local(Endpoint::Client(1)).unwrap();
        t.send(Envelope::Client(1, min_clock(4))).unwrap();
        assert!(matches!(clients[1].try_recv(), Ok(Inbound::Stop)));
        assert!(matches!(
            clients[1].try_recv(),
            Ok(Inbound::Msg(ToClient::MinClock { clock: 4, .. }))
        ));
        assert_eq!(direct.0.lock().unwrap().len(), 2);
        // A client dropped without a stop is not called either.
        let gone = std::sync::Arc::new(Recorder::default());
        let weak: Weak<dyn DirectClient> = std::sync::Arc::downgrade(&gone) as _;
        t.attach_client(0, weak);
        drop(gone);
        t.send(Envelope::Client(0, min_clock(5))).unwrap();
        assert!(matches!(
            clients[0].try_recv(),
            Ok(Inbound::Msg(ToClient::MinClock { clock: 5, .. }))
        ));
    }

    /// Counts how it is driven; `help` handles what its inbox holds.
    struct Driven {
        inbox: ShardInbox,
        pokes: std::sync::atomic::AtomicUsize,
        taken: std::sync::atomic::AtomicUsize,
    }

    impl DirectShard for Driven {
        fn poke(&self) {
            self.pokes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }

        fn help(&self) -> bool {
            let n = self.inbox.try_iter().count();
            self.taken
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            n > 0
        }
    }

    /// A message sent to an attached shard pokes it; one only queued does not, until the
    /// sender drives the shard or another thread helps take what waits.
    #[test]
    fn an_enqueued_message_waits_for_a_drive_or_a_helper() {
        use std::sync::atomic::Ordering::Relaxed;
        let (t, mut shards, _clients) = InProcTransport::new(1, 2);
        let shard = std::sync::Arc::new(Driven {
            inbox: shards.remove(1),
            pokes: 0.into(),
            taken: 0.into(),
        });
        let weak: Weak<dyn DirectShard> = std::sync::Arc::downgrade(&shard) as _;
        assert!(t.attach_shard(1, weak));
        t.send(Envelope::Shard(1, ToShard::Finish { worker: 1 }))
            .unwrap();
        assert_eq!(shard.pokes.load(Relaxed), 1);
        t.enqueue(1, ToShard::Finish { worker: 2 }).unwrap();
        assert_eq!(shard.pokes.load(Relaxed), 1, "only queued");
        assert!(t.help(), "two messages wait");
        assert_eq!(shard.taken.load(Relaxed), 2);
        assert!(!t.help(), "nothing waits");
        t.enqueue(1, ToShard::Finish { worker: 3 }).unwrap();
        t.drive(1);
        assert_eq!(shard.pokes.load(Relaxed), 2);
        // Shard 0 is not attached: queued either way, and never driven here.
        t.enqueue(0, ToShard::Finish { worker: 4 }).unwrap();
        t.drive(0);
        assert!(matches!(
            shards[0].try_recv(),
            Ok(Inbound::Msg(ToShard::Finish { worker: 4 }))
        ));
    }
}
