//! [`World`]: the shape of a cluster — how many processes, and how many worker threads and
//! server shards each runs — and the global numbering of workers and shards derived from
//! it. Every process of a cluster has the same `World`; rank 0 is the coordinator.

use crate::ids::{ProcessId, ShardId, WorkerId};
use std::ops::Range;

/// The shape of a cluster. Worker `w` of process `p` is global worker `p * workers + w`;
/// shard `s` of process `p` is global shard `p * shards + s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct World {
    /// Processes in the cluster.
    pub(crate) processes: usize,
    /// Worker threads per process.
    pub(crate) workers: usize,
    /// Server shards per process.
    pub(crate) shards: usize,
}

impl World {
    /// One process.
    pub(crate) fn single(workers: usize, shards: usize) -> Self {
        World {
            processes: 1,
            workers,
            shards,
        }
    }

    /// Worker threads in the cluster.
    pub(crate) fn total_workers(&self) -> usize {
        self.processes * self.workers
    }

    /// Server shards in the cluster.
    pub(crate) fn total_shards(&self) -> usize {
        self.processes * self.shards
    }

    /// The global id of process `p`'s local worker `w`.
    pub(crate) fn worker_id(&self, p: ProcessId, w: usize) -> WorkerId {
        (p as usize * self.workers + w) as WorkerId
    }

    /// The process running global worker `w`, if it exists.
    pub(crate) fn process_of_worker(&self, w: WorkerId) -> Option<ProcessId> {
        ((w as usize) < self.total_workers()).then(|| (w as usize / self.workers) as ProcessId)
    }

    /// Global worker `w`'s index among process `p`'s workers, if it runs there.
    pub(crate) fn local_worker(&self, p: ProcessId, w: WorkerId) -> Option<usize> {
        (self.process_of_worker(w) == Some(p)).then(|| w as usize % self.workers)
    }

    /// The process holding global shard `s`, if it exists.
    pub(crate) fn process_of_shard(&self, s: ShardId) -> Option<ProcessId> {
        ((s as usize) < self.total_shards()).then(|| (s as usize / self.shards) as ProcessId)
    }

    /// The global ids of process `p`'s shards.
    pub(crate) fn shards_of(&self, p: ProcessId) -> Range<ShardId> {
        let first = (p as usize * self.shards) as ShardId;
        first..first + self.shards as ShardId
    }

    /// The shards keeping backups of shard `s` when every shard has `replicas` copies
    /// (`docs/replication.md`): the shards of `s`'s local index on the `replicas - 1`
    /// processes after its own, around the ring of processes, nearest first.
    pub(crate) fn backups_of(&self, s: ShardId, replicas: usize) -> Vec<ShardId> {
        let (p, i) = (s as usize / self.shards, s as usize % self.shards);
        (1..replicas.min(self.processes))
            .map(|k| (((p + k) % self.processes) * self.shards + i) as ShardId)
            .collect()
    }

    /// The shards whose backups shard `s` keeps when every shard has `replicas` copies:
    /// those that name `s` in [`backups_of`](Self::backups_of).
    pub(crate) fn backed_up_by(&self, s: ShardId, replicas: usize) -> Vec<ShardId> {
        let (p, i) = (s as usize / self.shards, s as usize % self.shards);
        (1..replicas.min(self.processes))
            .map(|k| (((p + self.processes - k) % self.processes) * self.shards + i) as ShardId)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_number_processes_in_rank_order() {
        let w = World {
            processes: 3,
            workers: 2,
            shards: 1,
        };
        assert_eq!(w.total_workers(), 6);
        assert_eq!(w.worker_id(2, 1), 5);
        assert_eq!(w.process_of_worker(5), Some(2));
        assert_eq!(w.process_of_worker(6), None);
        assert_eq!(w.shards_of(2), 2..3);
    }

    #[test]
    fn backups_go_round_the_ring_of_processes_at_the_same_local_index() {
        let w = World {
            processes: 3,
            workers: 1,
            shards: 2,
        };
        // Shard 5 is process 2's local shard 1: backed up on processes 0 and 1.
        assert_eq!(w.backups_of(5, 3), vec![1, 3]);
        assert_eq!(w.backups_of(5, 2), vec![1]);
        assert_eq!(w.backups_of(5, 1), Vec::<ShardId>::new());
        for s in 0..6 {
            for b in w.backups_of(s, 3) {
                assert!(w.backed_up_by(b, 3).contains(&s), "{b} keeps {s}");
                assert_ne!(w.process_of_shard(b), w.process_of_shard(s));
            }
            assert_eq!(w.backed_up_by(s, 3).len(), 2);
        }
    }
}
