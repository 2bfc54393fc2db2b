//! Checkpoints on disk: the storage layer under checkpoint and resume.
//!
//! A checkpoint root `D` holds one directory per checkpoint, `D/ckpt-<clock>/`
//! (`layout`). In it are **parts** — opaque byte files such as `shard-3.rows` or
//! `process-0.app`, each written by whoever owns that state — and `MANIFEST.json`
//! ([`Manifest`]), which lists every part with its size and SHA-256, the clock, the
//! format version and the [`Meta`] of the run that wrote it (app, table shapes, cluster
//! shape). A checkpoint is complete exactly when its manifest exists.
//!
//! So far this holds the on-disk format only: the writer and the reader come next.
//!
//! This module knows files, bytes and checksums. It does not know what a part holds (rows,
//! topic assignments and RNG positions are the callers' formats), nor shards, processes,
//! clocks' meaning or the command line: the caller decides when to write, which parts to
//! write and how to read them back. It does not log.

// Not wired into the shards and the CLI yet: until it is, nothing outside the tests
// uses it. Remove this and the `allow(unused_imports)` below when wiring it.
#![allow(dead_code)]

mod error;
mod layout;
mod manifest;
mod meta;

#[allow(unused_imports)]
pub(crate) use self::{
    error::CheckpointError,
    manifest::{Manifest, PartEntry},
    meta::{ClusterRule, ClusterShape, Meta, TableShape},
};
