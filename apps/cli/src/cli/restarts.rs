//! `--restarts N`: a run that survives the loss of one of its processes by starting its
//! cluster again, at most N times.
//!
//! Every process of the cluster loops inside itself ([`Restarts`], driven by
//! [`run::execute`](super::run::execute)): when an attempt fails because another process
//! was lost ([`iterstore::Error::lost_process`]), this process has already ended its
//! cluster (its waits are bounded, its listener closed); it logs the loss, waits a backoff
//! (1 s, 2 s, 4 s... at most [`MAX_BACKOFF`]) and runs the app again on the same
//! membership. The new cluster forms only once every process has rejoined — the launcher
//! (`--processes`) starts a lost child again, by hand or under Slurm an operator does,
//! within `--connect-timeout` — and then continues from the newest complete checkpoint in
//! `--checkpoint-dir` (the processes agree on which; from the beginning if there is none),
//! or with `--shard-replicas` above 1 from the end of the last iteration the replicated
//! shards kept, which the survivors hold in memory (`iterstore::Recovery`; no checkpoint
//! is read, and the lost process is given its share).
//! Any other error (configuration, disagreement, data, a failed checkpoint write) ends the
//! run at once, as does a loss after N restarts, with an error saying they were exhausted.
//!
//! The input is loaded once; `--output` and `--json` are written only after the attempt
//! that succeeds.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Result};
use iterstore_apps::{AppConfig, AppError, RestartReport};

/// The longest wait between a loss and the next attempt.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before restart `k` (1-based): 1 s, 2 s, 4 s... at most [`MAX_BACKOFF`].
pub(crate) fn backoff(k: u32) -> Duration {
    let doubled = 1u64.checked_shl(k.saturating_sub(1)).unwrap_or(u64::MAX);
    Duration::from_secs(doubled).min(MAX_BACKOFF)
}

/// The rank of the process whose loss ended an attempt with `e`, if that is what ended
/// it: the only errors a restart can cure.
pub(crate) fn lost_process(e: &AppError) -> Option<usize> {
    match e {
        AppError::Store(e) => e.lost_process(),
        // A loss in the middle of a checkpoint fails the checkpoint's all-gather.
        AppError::Checkpoint { source, .. } => source.lost_process(),
        AppError::In { source, .. } => lost_process(source),
        _ => None,
    }
}

/// The restarts of one process's run: how many are allowed, where the checkpoints are,
/// and those done so far.
#[derive(Debug)]
pub(crate) struct Restarts {
    /// Restarts allowed (`--restarts N`).
    allowed: u32,
    /// The checkpoint directory the cluster continues from (`--checkpoint-dir`).
    dir: Option<PathBuf>,
    /// Whether the shards are replicated (`--shard-replicas` above 1): the cluster then
    /// continues from what the processes kept, not from a checkpoint.
    replicated: bool,
    /// This process's rank, for the log.
    rank: usize,
    /// The restarts done, in order.
    done: Vec<RestartReport>,
}

impl Restarts {
    /// The restarts of a run under `cfg` (its checkpoint directory and rank), `allowed`
    /// of them at most.
    pub(crate) fn new(allowed: u32, cfg: &AppConfig) -> Restarts {
        Restarts {
            allowed,
            dir: cfg.checkpoint.as_ref().map(|c| c.dir.clone()),
            replicated: cfg.shard_replicas > 1,
            rank: cfg.rank(),
            done: Vec::new(),
        }
    }

    /// After an attempt that ran for `ran` failed with `e`: returns once the next attempt
    /// may start (the loss logged and recorded, the backoff waited), or the error that
    /// ends the run — `e` itself when no restart can cure it, or one saying the restarts
    /// were exhausted.
    pub(crate) fn after_failure(&mut self, e: AppError, ran: Duration) -> Result<()> {
        let Some(lost) = lost_process(&e).filter(|_| self.allowed > 0) else {
            return Err(match self.done.last() {
                // Rejoining failed (the lost rank never came back), or the run after it.
                Some(last) => anyhow::Error::from(e).context(format!(
                    "restart {} of {} (after process {} was lost)",
                    self.done.len(),
                    self.allowed,
                    last.lost
                )),
                None => e.into(),
            });
        };
        let k = self.done.len() as u32 + 1;
        if k > self.allowed {
            return Err(anyhow!(
                "process {lost} was lost and the {} restart(s) of --restarts {} are exhausted \
                 (restarted after losing process {}): {e}",
                self.allowed,
                self.allowed,
                self.done
                    .iter()
                    .map(|r| r.lost.to_string())
                    .collect::<Vec<_>>()
                    .join(", then ")
            ));
        }
        let wait = backoff(k);
        tracing::warn!(
            "process {} lost process {lost} after {:.1} s ({e}); restart {k} of {} in {} s",
            self.rank,
            ran.as_secs_f64(),
            self.allowed,
            wait.as_secs()
        );
        std::thread::sleep(wait);
        let resumed_from_clock = self.newest_clock();
        match (&self.dir, resumed_from_clock) {
            _ if self.replicated => tracing::warn!(
                "restart {k} of {}: rejoining the cluster; it continues from the last \
                 iteration its replicated shards kept (no checkpoint is read)",
                self.allowed
            ),
            (Some(dir), Some(clock)) => tracing::warn!(
                "restart {k} of {}: rejoining the cluster; it continues from checkpoint clock \
                 {clock} in {}",
                self.allowed,
                dir.display()
            ),
            (Some(dir), None) => tracing::warn!(
                "restart {k} of {}: rejoining the cluster; {} holds no complete checkpoint yet, \
                 so the run starts again from the beginning",
                self.allowed,
                dir.display()
            ),
            (None, _) => tracing::warn!(
                "restart {k} of {}: rejoining the cluster; without --checkpoint-dir the run \
                 starts again from the beginning",
                self.allowed
            ),
        }
        self.done.push(RestartReport {
            lost,
            error: e.to_string(),
            resumed_from_clock,
            seconds: ran.as_secs_f64(),
            backoff_s: wait.as_secs_f64(),
        });
        Ok(())
    }

    /// The clock of the newest complete checkpoint in the checkpoint directory, if any
    /// (what the next attempt continues from; an unreadable directory is left to it).
    fn newest_clock(&self) -> Option<u64> {
        let newest = iterstore::checkpoints::newest_checkpoint(self.dir.as_ref()?).ok()??;
        let name = newest.file_name()?.to_str()?.to_owned();
        name.strip_prefix("ckpt-")?.parse().ok()
    }

    /// The restarts done, for the run report.
    pub(crate) fn into_reports(self) -> Vec<RestartReport> {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let waits: Vec<u64> = (1..=7).map(|k| backoff(k).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(backoff(200), MAX_BACKOFF);
    }

    fn lost(rank: u32) -> AppError {
        AppError::Store(iterstore::Error::Failed {
            component: "cluster".into(),
            message: format!("process {rank} at 127.0.0.1:7000 was lost: connection reset"),
        })
    }

    #[test]
    fn only_a_lost_process_is_restarted() {
        assert_eq!(lost_process(&lost(2)), Some(2));
        assert_eq!(lost_process(&lost(1).context("mf")), Some(1));
        let disagreement = AppError::Store(iterstore::Error::Disagreement {
            field: "seed".into(),
            detail: "rank 0: 1; rank 1: 2".into(),
        });
        assert_eq!(lost_process(&disagreement), None);
        assert_eq!(lost_process(&AppError::Invalid("bad".into())), None);
        let shard = AppError::Store(iterstore::Error::Failed {
            component: "server shard 1".into(),
            message: "process 2 at 127.0.0.1:7000 was lost: x".into(),
        });
        assert_eq!(lost_process(&shard), None);
        // Another survivor that left first, seen by a shard mid-collective.
        let left = AppError::Store(iterstore::Error::Failed {
            component: "server shard 0".into(),
            message: "process 0 left the cluster during all-gather round 11".into(),
        });
        assert_eq!(lost_process(&left), Some(0));
    }

    #[test]
    fn a_loss_past_the_allowed_restarts_fails_saying_so() {
        let cfg = AppConfig::default();
        let mut r = Restarts::new(0, &cfg);
        let e = r.after_failure(lost(2), Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains("process 2 at"), "{e}");
        assert!(!e.to_string().contains("exhausted"), "{e}");
        // One allowed and used: the next loss is refused without waiting.
        let mut r = Restarts::new(1, &cfg);
        r.done.push(RestartReport {
            lost: 1,
            error: String::new(),
            resumed_from_clock: None,
            seconds: 0.0,
            backoff_s: 0.0,
        });
        let e = r.after_failure(lost(2), Duration::ZERO).unwrap_err();
        assert!(
            e.to_string().contains(
                "restart(s) of --restarts 1 are exhausted (restarted after losing process 1)"
            ),
            "{e}"
        );
        // Errors of another kind are never restarted.
        let mut r = Restarts::new(3, &cfg);
        let e = r
            .after_failure(AppError::Invalid("bad seed".into()), Duration::ZERO)
            .unwrap_err();
        assert_eq!(e.to_string(), "bad seed");
        assert!(r.into_reports().is_empty());
    }
}
