//! The TCP transport: the same protocol messages as the in-process transport, carried
//! between processes by the network layer ([`Net`]), and between a process's own
//! endpoints by channels.
//!
//! A message for another rank travels as the [`Envelope`] it was sent in, which names its
//! endpoint and whose type is its direction: a frame that decodes holds a message for a
//! shard or one for a communication thread, never one going the wrong way. What arrives
//! is checked before it reaches a shard or the communication thread: the endpoint must be
//! this process's, and a message naming its sending process or worker must come from that
//! process's connection (the handshake authenticated the connection's rank, so a process
//! cannot speak for another). A peer that breaks this, is lost, or a network layer that
//! fails, fails this process's cluster with an error naming the peer.

use super::{Inbound, Transport, TransportError};
use crate::ids::{ProcessId, ShardId};
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};
use crate::net::{Net, NetConfig, NetError, NetEvent};
use crate::world::World;
use crossbeam::channel::Sender;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// This process's endpoints' inboxes.
#[derive(Clone)]
pub(crate) struct LocalInboxes {
    /// Per local shard (in global shard order).
    pub(crate) shards: Vec<Sender<Inbound<ToShard>>>,
    /// The communication thread.
    pub(crate) client: Sender<Inbound<ToClient>>,
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
    /// Per kind of message ([`Envelope::KINDS`]).
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
            (0..Envelope::KINDS.len())
                .map(|_| KindCounter::default())
                .collect(),
        );
        let counted = kinds.clone();
        let deliver = Box::new(move |event: NetEvent<Envelope>| match event {
            NetEvent::Msg { from, msg, bytes } => {
                let k = &counted[msg.kind()];
                k.messages_received.fetch_add(1, Ordering::Relaxed);
                k.bytes_received.fetch_add(bytes as u64, Ordering::Relaxed);
                let delivered = match check(world, rank, from, &msg) {
                    Ok(()) => deliver_local(&inboxes, world, rank, msg),
                    Err(why) => Err(why),
                };
                if let Err(why) = delivered {
                    let _ = inboxes.client.send(Inbound::Lost(why));
                }
            }
            NetEvent::PeerLost { rank, addr, reason } => {
                let why = crate::error::lost_message(rank, addr, &reason);
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

    fn send_with(&self, msg: Envelope, blocking: bool) -> Result<(), TransportError> {
        let to = msg.to();
        let rank = self.rank_of(to)?;
        if rank == self.rank {
            return deliver_local(&self.local, self.world, self.rank, msg)
                .map_err(|_| TransportError::Closed(to));
        }
        let net = self.net.read().unwrap_or_else(PoisonError::into_inner);
        let kind = &self.kinds[msg.kind()];
        let sent = if blocking {
            net.send(rank, &msg)
        } else {
            net.send_nonblocking(rank, &msg)
        };
        let bytes = sent.map_err(|e| {
            let why = describe(&e);
            if matches!(e, NetError::PeerLost { .. } | NetError::PeerClosed { .. }) {
                // Queued behind whatever the peer sent before it left (the network loop
                // delivered that before marking it gone): the communication thread
                // reports a reason the peer gave, such as a shard's refusal, before
                // its leaving (see `ClientShared::sent`).
                let _ = self.local.client.send(Inbound::Lost(why.clone()));
            }
            TransportError::Network(to, why)
        })?;
        kind.messages_sent.fetch_add(1, Ordering::Relaxed);
        kind.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Transport for TcpTransport {
    fn send(&self, msg: Envelope) -> Result<(), TransportError> {
        self.send_with(msg, true)
    }

    fn reply(&self, msg: Envelope) -> Result<(), TransportError> {
        self.send_with(msg, false)
    }

    fn stop_local(&self, to: Endpoint) -> Result<(), TransportError> {
        let stopped = match to {
            Endpoint::Shard(s) => local_shard(&self.local, self.world, self.rank, s)
                .and_then(|tx| put(tx, to, self.rank, Inbound::Stop)),
            Endpoint::Client(p) => local_client(&self.local, self.rank, p)
                .and_then(|tx| put(tx, to, self.rank, Inbound::Stop)),
        };
        stopped.map_err(|_| TransportError::Closed(to))
    }

    fn traffic_by_kind(&self) -> Vec<super::KindTraffic> {
        Envelope::KINDS
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
            crate::error::lost_message(*rank, addr, reason)
        }
        NetError::PeerClosed { rank, addr } => {
            crate::error::lost_message(*rank, addr, "it has shut down")
        }
        other => other.to_string(),
    }
}

/// The inbox of shard `s` if it is one of this process's (`rank`'s).
fn local_shard(
    local: &LocalInboxes,
    world: World,
    rank: ProcessId,
    s: ShardId,
) -> Result<&Sender<Inbound<ToShard>>, String> {
    world
        .shards_of(rank)
        .position(|g| g == s)
        .and_then(|i| local.shards.get(i))
        .ok_or_else(|| {
            format!(
                "a message for {:?} reached process {rank}",
                Endpoint::Shard(s)
            )
        })
}

/// The communication thread's inbox if `p` is this process (`rank`).
fn local_client(
    local: &LocalInboxes,
    rank: ProcessId,
    p: ProcessId,
) -> Result<&Sender<Inbound<ToClient>>, String> {
    if p == rank {
        Ok(&local.client)
    } else {
        Err(format!(
            "a message for {:?} reached process {rank}",
            Endpoint::Client(p)
        ))
    }
}

/// Puts `what` into `tx`, the inbox of `to` on process `rank`.
fn put<M>(
    tx: &Sender<Inbound<M>>,
    to: Endpoint,
    rank: ProcessId,
    what: Inbound<M>,
) -> Result<(), String> {
    tx.send(what)
        .map_err(|_| format!("{to:?} of process {rank} is closed"))
}

/// Puts `msg` into the inbox of the endpoint it is for, one of this process's (`rank`'s).
fn deliver_local(
    local: &LocalInboxes,
    world: World,
    rank: ProcessId,
    msg: Envelope,
) -> Result<(), String> {
    let to = msg.to();
    match msg {
        Envelope::Shard(s, msg) => {
            let tx = local_shard(local, world, rank, s)?;
            put(tx, to, rank, Inbound::Msg(msg))
        }
        Envelope::Client(p, msg) => {
            let tx = local_client(local, rank, p)?;
            put(tx, to, rank, Inbound::Msg(msg))
        }
    }
}

/// Checks that a message from the connection of process `from` is for this process and
/// speaks only for `from`.
fn check(
    world: World,
    rank: ProcessId,
    from: ProcessId,
    envelope: &Envelope,
) -> Result<(), String> {
    let local = match envelope {
        Envelope::Client(p, _) => *p == rank,
        Envelope::Shard(s, _) => world.shards_of(rank).contains(s),
    };
    if !local {
        return Err(format!(
            "process {from} sent a message for {:?}, which is not on process {rank}",
            envelope.to()
        ));
    }
    if let Envelope::Client(_, ToClient::Pass { to, .. }) = envelope {
        if world.process_of_worker(*to) != Some(rank) {
            return Err(format!(
                "process {from} sent a message for worker {to}, which is not on process {rank}"
            ));
        }
    }
    let claimed = match envelope {
        Envelope::Shard(_, ToShard::Clock { worker, .. } | ToShard::Finish { worker })
        | Envelope::Client(
            _,
            ToClient::Pass { from: worker, .. } | ToClient::WorkerStopped { worker, .. },
        ) => world.process_of_worker(*worker),
        Envelope::Shard(
            _,
            ToShard::Adopt { shard, .. }
            | ToShard::Replicate { primary: shard, .. }
            | ToShard::ReplicaAck { backup: shard, .. },
        ) => world.process_of_shard(*shard),
        Envelope::Shard(_, other) => other.sender(),
        // A shard's answer comes from the process holding the shard it names.
        Envelope::Client(_, answer) => match answer.sending_shard() {
            Some(shard) => Some(world.process_of_shard(shard).ok_or_else(|| {
                format!("process {from} sent an answer from shard {shard}, which the cluster does not have")
            })?),
            None => None,
        },
    };
    match claimed {
        Some(p) if p != from => Err(format!(
            "process {from} sent a message ({}) claiming to come from process {p}",
            Envelope::KINDS[envelope.kind()]
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
        let leave = |from| ToShard::Leave { from };
        let shard = Envelope::Shard;
        let client = Envelope::Client;
        assert!(check(world, 0, 1, &shard(0, leave(1))).is_ok());
        let e = check(world, 0, 1, &shard(0, leave(2))).unwrap_err();
        assert!(e.contains("claiming to come from process 2"), "{e}");
        // Worker 5 belongs to process 2.
        let finish = ToShard::Finish { worker: 5 };
        assert!(check(world, 0, 1, &shard(0, finish.clone())).is_err());
        assert!(check(world, 0, 2, &shard(0, finish)).is_ok());
        let e = check(world, 0, 1, &shard(1, leave(1))).unwrap_err();
        assert!(e.contains("not on process 0"), "{e}");
        let e = check(
            world,
            0,
            1,
            &client(2, ToClient::MinClock { shard: 0, clock: 1 }),
        )
        .unwrap_err();
        assert!(e.contains("not on process 0"), "{e}");
        // A worker's message: from one of the sender's workers to one of ours.
        let pass = |from, to| ToClient::Pass {
            from,
            to,
            tag: 0,
            round: 1,
            elem: crate::element::ElemType::F32,
            values: crate::buf::AlignedBuf::zeroed(4),
        };
        assert!(check(world, 0, 1, &client(0, pass(2, 1))).is_ok());
        let e = check(world, 0, 1, &client(0, pass(4, 1))).unwrap_err();
        assert!(e.contains("claiming to come from process 2"), "{e}");
        let e = check(world, 0, 1, &client(0, pass(2, 3))).unwrap_err();
        assert!(e.contains("worker 3, which is not on process 0"), "{e}");
        let stopped = ToClient::WorkerStopped {
            worker: 5,
            round: 1,
        };
        assert!(check(world, 0, 1, &client(0, stopped.clone())).is_err());
        assert!(check(world, 0, 2, &client(0, stopped)).is_ok());
        // A shard's answer: from the process holding the shard it names (one shard a
        // process: shard s is on process s).
        let rows = |shard| ToClient::Rows {
            shard,
            data_clock: 1,
            rows: Vec::new(),
        };
        assert!(check(world, 0, 1, &client(0, rows(1))).is_ok());
        let e = check(world, 0, 1, &client(0, rows(2))).unwrap_err();
        assert!(e.contains("claiming to come from process 2"), "{e}");
        let e = check(world, 0, 1, &client(0, rows(3))).unwrap_err();
        assert!(
            e.contains("shard 3, which the cluster does not have"),
            "{e}"
        );
        let rejected = ToClient::Rejected {
            shard: 0,
            reason: String::new(),
        };
        assert!(check(world, 0, 1, &client(0, rejected)).is_err());
    }
}
