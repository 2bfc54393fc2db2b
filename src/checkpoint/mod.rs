//! Checkpoints on disk: the storage layer under checkpoint and resume.
//!
//! A checkpoint root `D` holds one directory per checkpoint, `D/ckpt-<clock>/`
//! (`layout`). In it are **parts** — opaque byte files such as `shard-3.rows` or
//! `process-0.app`, each written by whoever owns that state — and `MANIFEST.json`
//! ([`Manifest`]), which lists every part with its size and SHA-256, the clock, the
//! format version and the [`Meta`] of the run that wrote it (app, table shapes, cluster
//! shape). Every file is written under a temporary name, fsynced and renamed; the
//! manifest is written last and its directory fsynced, so **a checkpoint is complete
//! exactly when its manifest exists**, and a crash or a full disk at any point leaves the
//! previous complete checkpoint as it was.
//!
//! This module knows files, bytes and checksums. It does not know what a part holds (rows,
//! topic assignments and RNG positions are the callers' formats), nor shards, processes,
//! clocks' meaning or the command line: the caller decides when to write, which parts to
//! write and how to read them back. It does not log.

mod durable;
mod layout;
mod manifest;
mod meta;
mod reader;
mod writer;

#[cfg(test)]
mod tests;

pub use self::meta::ClusterRule;

use std::path::{Path, PathBuf};

/// The newest complete checkpoint (one whose manifest exists) in the checkpoint
/// directory `root`, or `None` if `root` holds none or does not exist.
///
/// Only names and manifests' presence are looked at, so it is cheap and never fails on
/// a corrupt checkpoint: [`Cluster::resume`](crate::Cluster::resume) verifies the
/// contents. Useful before a run (is there something to resume from?) and after a failed
/// checkpoint (which one is still there?). An unreadable `root` is an
/// [`Error::Checkpoint`](crate::Error::Checkpoint) naming it.
pub fn newest_checkpoint(root: &Path) -> crate::error::Result<Option<PathBuf>> {
    if !layout::exists(root)? {
        return Ok(None);
    }
    Ok(layout::list(root)?
        .into_iter()
        .find(|f| f.complete)
        .map(|f| f.dir))
}

#[allow(unused_imports)]
pub(crate) use self::{
    layout::dir_name,
    manifest::{Manifest, PartEntry},
    meta::{ClusterShape, Meta, TableShape},
    reader::{Checkpoint, PartReader},
    writer::{CheckpointWriter, Committed, PartWriter},
};
pub(crate) use crate::error::checkpoint::CheckpointError;
