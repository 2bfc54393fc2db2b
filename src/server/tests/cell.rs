//! The driver's cell: a shard driven by its senders or its own thread.

use super::*;
use crate::buf::AlignedBuf;
use crate::msg::{Endpoint, Envelope, ToClient, ToShard};
use crate::transport::{ClientInbox, InProcTransport};
use crate::world::World;

fn gather(round: u64) -> ToShard {
    ToShard::Gather {
        from: 0,
        round,
        values: AlignedBuf::zeroed(8),
    }
}

fn gathered(inbox: &ClientInbox) -> Option<u64> {
    match inbox.try_recv() {
        Ok(Inbound::Msg(ToClient::Gathered { round, .. })) => Some(round),
        _ => None,
    }
}

#[test]
fn an_attached_shard_is_driven_by_its_senders_or_left_to_its_thread() {
    let (t, mut shards, clients) = InProcTransport::new(1, 1);
    let t: Arc<dyn Transport> = Arc::new(t);
    let shard = Shard::new(0, World::single(1, 1));
    let (cell, attached) = attached_cell(shard, shards.remove(0), t.clone());
    assert!(attached);
    // No thread drives it: the sender handled it, the reply is there already.
    t.send(Envelope::Shard(0, gather(1))).unwrap();
    assert_eq!(gathered(&clients[0]), Some(1));
    // Held elsewhere: the message waits and the thread is kicked, and it takes it.
    let held = cell.lock();
    let seen = cell.kick.generation();
    t.send(Envelope::Shard(0, gather(2))).unwrap();
    assert_eq!(gathered(&clients[0]), None);
    drop(held);
    assert_ne!(cell.kick.generation(), seen, "the thread was kicked");
    assert!(!cell.drain(&mut cell.lock()));
    assert_eq!(gathered(&clients[0]), Some(2));
    // A local stop ends it, from the sender's thread, and kicks the thread to end.
    let seen = cell.kick.generation();
    t.stop_local(Endpoint::Shard(0)).unwrap();
    assert!(cell.done.load(Ordering::Acquire));
    assert_ne!(cell.kick.generation(), seen, "the thread was kicked to end");
    t.send(Envelope::Shard(0, gather(3))).unwrap();
    assert_eq!(gathered(&clients[0]), None);
}

/// A queued message waits for a helper; a helper takes it unless another thread
/// holds the shard, and never waits for that thread.
#[test]
fn a_helper_takes_what_waits_unless_the_shard_is_held() {
    let (t, mut shards, clients) = InProcTransport::new(1, 1);
    let t: Arc<dyn Transport> = Arc::new(t);
    let shard = Shard::new(0, World::single(1, 1));
    let (cell, _) = attached_cell(shard, shards.remove(0), t.clone());
    let d = t
        .local_drive()
        .expect("the in-process transport drives shards");
    assert!(!d.help(), "nothing waits");
    d.enqueue(0, gather(1)).unwrap();
    assert_eq!(gathered(&clients[0]), None, "only queued");
    let held = cell.lock();
    assert!(!d.help(), "held elsewhere: not waited for");
    drop(held);
    assert!(d.help());
    assert_eq!(gathered(&clients[0]), Some(1));
    d.enqueue(0, gather(2)).unwrap();
    d.drive(0);
    assert_eq!(gathered(&clients[0]), Some(2), "driven by its sender");
}

/// A shard that cannot send to another shard (here a backup's, whose inbox is gone; over
/// TCP, a frame past the cap) fails the cluster instead of waiting for its answer.
#[test]
fn a_failed_send_to_another_shard_fails_the_cluster() {
    let world = World {
        processes: 2,
        workers: 1,
        shards: 1,
    };
    let (t, mut shards, clients) = InProcTransport::new(2, 2);
    let t: Arc<dyn Transport> = Arc::new(t);
    drop(shards.pop()); // shard 1, keeping shard 0's backup
    let shard = Shard::new(0, world).with_replicas(2);
    let (_cell, attached) = attached_cell(shard, shards.remove(0), t.clone());
    assert!(attached);
    // Clock 1 completes and the run ends: what it changed goes to the backup, which is
    // not there.
    for worker in 0..2 {
        let clock = crate::server::shard::tests::clock(worker, 1, &[]);
        t.send(Envelope::Shard(0, clock)).unwrap();
    }
    for from in 0..2 {
        t.send(Envelope::Shard(0, ToShard::RunEnd { from, run: 1 }))
            .unwrap();
    }
    let reasons: Vec<String> = clients[0]
        .try_iter()
        .filter_map(|m| match m {
            Inbound::Msg(ToClient::Rejected { reason, .. }) => Some(reason),
            _ => None,
        })
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("could not send to shard 1")),
        "{reasons:?}"
    );
}
