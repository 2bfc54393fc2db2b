//! The TCP transport: the same protocol messages as the in-process transport, carried
//! between processes by the network layer ([`Net`]), and between a process's own
//! endpoints by channels.
//!
//! A message for another rank travels as an [`Envelope`] naming its endpoint. What
//! arrives is checked before it reaches a shard or the communication thread: the endpoint
//! must be this process's, and a message naming its sending process or worker must come
//! from that process's connection (the handshake authenticated the connection's rank, so
//! a process cannot speak for another). A peer that breaks this, is lost, or a network
//! layer that fails, fails this process's cluster with an error naming the peer.

use super::{Inbound, Transport, TransportError};
use crate::ids::ProcessId;
use crate::msg::{Endpoint, Msg};
use crate::net::{Net, NetConfig, NetError, NetEvent};
use crate::world::World;
use crossbeam::channel::Sender;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// What crosses the network: a message and the endpoint it is for.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    /// The endpoint on the receiving process.
    pub(crate) to: Endpoint,
    /// The message.
    pub(crate) msg: Msg,
}

/// This process's endpoints' inboxes.
#[derive(Clone)]
pub(crate) struct LocalInboxes {
    /// Per local shard (in global shard order).
    pub(crate) shards: Vec<Sender<Inbound>>,
    /// The communication thread.
    pub(crate) client: Sender<Inbound>,
}

/// Messages and bytes of one kind of message, sent and received.
#[derive(Debug, Default)]
struct KindCounter {
    messages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    messages_received: AtomicU64,
    bytes_received: AtomicU64,
}

/// Moves messages between the processes of a TCP cluster (see the module docs).
pub(crate) struct TcpTransport {
    rank: ProcessId,
    world: World,
    local: LocalInboxes,
    net: RwLock<Net<Envelope>>,
    /// Per kind of message ([`Msg::KINDS`]).
    kinds: Arc<Vec<KindCounter>>,
}

impl TcpTransport {
    /// Connects to every other process of `world` (blocking until all are connected and
    /// authenticated, or `cfg.connect_timeout` passed) and delivers what arrives to
    /// `local`.
    pub(crate) fn start(
        cfg: NetConfig,
        world: World,
        local: LocalInboxes,
    ) -> Result<TcpTransport, NetError> {
        let rank = cfg.rank;
        let inboxes = local.clone();
        let kinds: Arc<Vec<KindCounter>> = Arc::new(
            (0..Msg::KINDS.len())
                .map(|_| KindCounter::default())
                .collect(),
        );
        let counted = kinds.clone();
        let deliver = Box::new(move |event: NetEvent<Envelope>| match event {
            NetEvent::Msg { from, msg, bytes } => {
                let k = &counted[msg.msg.kind()];
                k.messages_received.fetch_add(1, Ordering::Relaxed);
                k.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
                let delivered = match check(world, rank, from, &msg) {
                    Ok(()) => deliver_local(&inboxes, world, rank, msg.to, Inbound::Msg(msg.msg)),
                    Err(why) => Err(why),
                };
                if let Err(why) = delivered {
                    let _ = inboxes.client.send(Inbound::Lost(why));
                }
            }
            NetEvent::PeerLost { rank, addr, reason } => {
                let why = format!("process {rank} at {addr} was lost: {reason}");
                let _ = inboxes.client.send(Inbound::Lost(why));
            }
            NetEvent::Failed { reason } => {
                let why = format!("the network layer failed: {reason}");
                let _ = inboxes.client.send(Inbound::Lost(why));
            }
        });
        let net = Net::start(cfg, deliver)?;
        Ok(TcpTransport {
            rank,
            world,
            local,
            net: RwLock::new(net),
            kinds,
        })
    }

    /// The process holding `to`.
    fn rank_of(&self, to: Endpoint) -> Result<ProcessId, TransportError> {
        match to {
            Endpoint::Shard(s) if (s as usize) < self.world.total_shards() => {
                Ok(s / self.world.shards as u32)
            }
            Endpoint::Client(p) if (p as usize) < self.world.processes => Ok(p),
            _ => Err(TransportError::UnknownEndpoint(to)),
        }
    }

    fn send_with(&self, to: Endpoint, msg: Msg, blocking: bool) -> Result<(), TransportError> {
        let rank = self.rank_of(to)?;
        if rank == self.rank {
            return deliver_local(&self.local, self.world, self.rank, to, Inbound::Msg(msg))
                .map_err(|_| TransportError::Closed(to));
        }
        let net = self.net.read().unwrap_or_else(PoisonError::into_inner);
        let kind = &self.kinds[msg.kind()];
        let envelope = Envelope { to, msg };
        let sent = if blocking {
            net.send(rank, &envelope)
        } else {
            net.send_nonblocking(rank, &envelope)
        };
        let bytes = sent.map_err(|e| TransportError::Network(to, describe(&e)))?;
        kind.messages_sent.fetch_add(1, Ordering::Relaxed);
        kind.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Transport for TcpTransport {
    fn send(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError> {
        self.send_with(to, msg, true)
    }

    fn reply(&self, to: Endpoint, msg: Msg) -> Result<(), TransportError> {
        self.send_with(to, msg, false)
    }

    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError> {
        deliver_local(&self.local, self.world, self.rank, to, Inbound::Stop)
            .map_err(|_| TransportError::Closed(to))
    }

    fn traffic_by_kind(&self) -> Vec<super::KindTraffic> {
        Msg::KINDS
            .iter()
            .zip(self.kinds.iter())
            .map(|(&kind, k)| super::KindTraffic {
                kind,
                messages_sent: k.messages_sent.load(Ordering::Relaxed),
                bytes_sent: k.bytes_sent.load(Ordering::Relaxed),
                messages_received: k.messages_received.load(Ordering::Relaxed),
                bytes_received: k.bytes_received.load(Ordering::Relaxed),
            })
            .filter(|t| t.messages_sent + t.messages_received > 0)
            .collect()
    }

    fn traffic(&self) -> crate::net::NetCounters {
        self.net
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .counters()
    }

    fn peer_traffic(&self) -> Vec<crate::net::shared::PeerTraffic> {
        self.net
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .peer_traffic()
    }

    fn close(&self) -> Result<(), TransportError> {
        let mut net = self.net.write().unwrap_or_else(PoisonError::into_inner);
        net.shutdown()
            .map_err(|e| TransportError::Network(Endpoint::Client(self.rank), e.to_string()))
    }
}

/// A network error in the protocol's words: a lost peer is named as the process it is,
/// with the same wording as a loss the network layer reports by itself.
fn describe(e: &NetError) -> String {
    match e {
        NetError::PeerLost { rank, addr, reason } => {
            format!("process {rank} at {addr} was lost: {reason}")
        }
        NetError::PeerClosed { rank, addr } => {
            format!("process {rank} at {addr} was lost: it has shut down")
        }
        other => other.to_string(),
    }
}

/// Puts `what` into the inbox of `to`, one of this process's endpoints.
fn deliver_local(
    local: &LocalInboxes,
    world: World,
    rank: ProcessId,
    to: Endpoint,
    what: Inbound,
) -> Result<(), String> {
    let tx = match to {
        Endpoint::Client(p) if p == rank => Some(&local.client),
        Endpoint::Shard(s) => world
            .shards_of(rank)
            .position(|g| g == s)
            .and_then(|i| local.shards.get(i)),
        Endpoint::Client(_) => None,
    };
    let tx = tx.ok_or_else(|| format!("a message for {to:?} reached process {rank}"))?;
    tx.send(what)
        .map_err(|_| format!("{to:?} of process {rank} is closed"))
}

/// Checks that a message from the connection of process `from` is for this process and
/// speaks only for `from`.
fn check(
    world: World,
    rank: ProcessId,
    from: ProcessId,
    envelope: &Envelope,
) -> Result<(), String> {
    let local = match envelope.to {
        Endpoint::Client(p) => p == rank,
        Endpoint::Shard(s) => world.shards_of(rank).contains(&s),
    };
    if !local {
        return Err(format!(
            "process {from} sent a message for {:?}, which is not on process {rank}",
            envelope.to
        ));
    }
    if let Msg::Pass { to, .. } = &envelope.msg {
        if world.process_of_worker(*to) != Some(rank) {
            return Err(format!(
                "process {from} sent a message for worker {to}, which is not on process {rank}"
            ));
        }
    }
    let claimed = match &envelope.msg {
        Msg::Clock { worker, .. }
        | Msg::Finish { worker }
        | Msg::Pass { from: worker, .. }
        | Msg::WorkerStopped { worker, .. } => world.process_of_worker(*worker),
        Msg::Adopt { shard, .. } => world.process_of_shard(*shard),
        other => other.sender(),
    };
    match claimed {
        Some(p) if p != from => Err(format!(
            "process {from} sent a message claiming to come from process {p}"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_cannot_speak_for_another() {
        let world = World {
            processes: 3,
            workers: 2,
            shards: 1,
        };
        let env = |to, msg| Envelope { to, msg };
        let leave = |from| Msg::Leave { from };
        assert!(check(world, 0, 1, &env(Endpoint::Shard(0), leave(1))).is_ok());
        let e = check(world, 0, 1, &env(Endpoint::Shard(0), leave(2))).unwrap_err();
        assert!(e.contains("claiming to come from process 2"), "{e}");
        // Worker 5 belongs to process 2.
        let finish = Msg::Finish { worker: 5 };
        assert!(check(world, 0, 1, &env(Endpoint::Shard(0), finish.clone())).is_err());
        assert!(check(world, 0, 2, &env(Endpoint::Shard(0), finish)).is_ok());
        let e = check(world, 0, 1, &env(Endpoint::Shard(1), leave(1))).unwrap_err();
        assert!(e.contains("not on process 0"), "{e}");
        let e = check(world, 0, 1, &env(Endpoint::Client(2), leave(1))).unwrap_err();
        assert!(e.contains("not on process 0"), "{e}");
        // A worker's message: from one of the sender's workers to one of ours.
        let pass = |from, to| Msg::Pass {
            from,
            to,
            tag: 0,
            round: 1,
            elem: crate::element::ElemType::F32,
            values: crate::buf::AlignedBuf::zeroed(4),
        };
        assert!(check(world, 0, 1, &env(Endpoint::Client(0), pass(2, 1))).is_ok());
        let e = check(world, 0, 1, &env(Endpoint::Client(0), pass(4, 1))).unwrap_err();
        assert!(e.contains("claiming to come from process 2"), "{e}");
        let e = check(world, 0, 1, &env(Endpoint::Client(0), pass(2, 3))).unwrap_err();
        assert!(e.contains("worker 3, which is not on process 0"), "{e}");
        let stopped = Msg::WorkerStopped {
            worker: 5,
            round: 1,
        };
        assert!(check(world, 0, 1, &env(Endpoint::Client(0), stopped.clone())).is_err());
        assert!(check(world, 0, 2, &env(Endpoint::Client(0), stopped)).is_ok());
    }
}
