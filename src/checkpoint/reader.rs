//! [`Checkpoint`]: finds the newest complete checkpoint of a directory, verifies it
//! entirely — manifest, run metadata, and every listed part's existence, size and
//! SHA-256 — and only then hands out readers of its parts.
//!
//! A checkpoint that is missing, incomplete, corrupt or written by another run is refused
//! with an error naming the file and the reason; nothing is returned that has not been
//! verified, so a bad path can never resume an empty table. The newest complete
//! checkpoint is the one used: if it is corrupt, the error says so rather than quietly
//! falling back to an older one. Incomplete ones (no manifest) are skipped.

use super::layout::{self, MANIFEST};
use super::manifest::{hex, MAX_MANIFEST_BYTES};
use super::{CheckpointError, ClusterRule, Manifest, Meta, PartEntry};
use crate::ids::Clock;
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{self, BufReader, Read, Take};
use std::path::{Path, PathBuf};

/// A complete, verified checkpoint.
#[derive(Debug)]
pub(crate) struct Checkpoint {
    dir: PathBuf,
    manifest: Manifest,
}

/// Reads one verified part. Its [`Read`] errors name the file; it fails rather than ends
/// early if the file shrank since it was verified.
#[derive(Debug)]
pub(crate) struct PartReader {
    path: PathBuf,
    inner: BufReader<Take<File>>,
    size: u64,
    read: u64,
}

impl Checkpoint {
    /// Opens the newest complete checkpoint in `root` and verifies it against this run's
    /// `expected` meta (the cluster compared as `rule` says). Incomplete checkpoints are
    /// skipped; an error says when there is no complete one and why.
    pub(crate) fn open_newest(
        root: &Path,
        expected: &Meta,
        rule: ClusterRule,
    ) -> Result<Checkpoint, CheckpointError> {
        if !layout::exists(root)? {
            return Err(CheckpointError::MissingDir {
                dir: root.to_path_buf(),
            });
        }
        let found = layout::list(root)?;
        if let Some(newest) = found.iter().find(|f| f.complete) {
            return Checkpoint::open(&newest.dir, expected, rule);
        }
        let names: Vec<String> = found.iter().map(|f| layout::dir_name(f.clock)).collect();
        let reason = match names.len() {
            0 => "it holds no ckpt-* directory".to_string(),
            1 => format!("{} has no {MANIFEST}: it was never completed", names[0]),
            _ => format!(
                "{} have no {MANIFEST}: they were never completed",
                names.join(", ")
            ),
        };
        Err(CheckpointError::NoCheckpoint {
            dir: root.to_path_buf(),
            reason,
        })
    }
    /// The names of the parts the manifest in checkpoint directory `dir` lists (the
    /// manifest parsed, nothing verified): what pruning may remove.
    pub(crate) fn listed_parts(
        dir: &Path,
    ) -> Result<std::collections::BTreeSet<String>, CheckpointError> {
        let path = dir.join(MANIFEST);
        let manifest = Manifest::parse(&read_manifest(dir, &path)?, &path)?;
        Ok(manifest.parts.into_iter().map(|p| p.name).collect())
    }

    /// Opens the checkpoint in directory `dir` (one `ckpt-<clock>` directory) and
    /// verifies it as [`open_newest`](Checkpoint::open_newest) does.
    pub(crate) fn open(
        dir: &Path,
        expected: &Meta,
        rule: ClusterRule,
    ) -> Result<Checkpoint, CheckpointError> {
        let path = dir.join(MANIFEST);
        let manifest = Manifest::parse(&read_manifest(dir, &path)?, &path)?;
        let named = dir
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(layout::parse_dir_name);
        if let Some(named) = named.filter(|&c| c != manifest.clock) {
            return Err(CheckpointError::CorruptManifest {
                path,
                reason: format!(
                    "it holds clock {}, its directory is named for clock {named}",
                    manifest.clock
                ),
            });
        }
        if let Some(reason) = expected.mismatch(&manifest.meta, rule) {
            return Err(CheckpointError::MetaMismatch { path, reason });
        }
        for part in &manifest.parts {
            verify(&dir.join(&part.name), part)?;
        }
        Ok(Checkpoint {
            dir: dir.to_path_buf(),
            manifest,
        })
    }

    /// The clock the checkpoint holds.
    pub(crate) fn clock(&self) -> Clock {
        self.manifest.clock
    }

    /// The run that wrote it (with [`ClusterRule::Any`], its cluster may differ from
    /// this run's).
    pub(crate) fn meta(&self) -> &Meta {
        &self.manifest.meta
    }

    /// Its directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every part, as the manifest lists them.
    pub(crate) fn parts(&self) -> &[PartEntry] {
        &self.manifest.parts
    }

    /// A reader of part `name`.
    pub(crate) fn part(&self, name: &str) -> Result<PartReader, CheckpointError> {
        let entry = self
            .manifest
            .part(name)
            .ok_or_else(|| CheckpointError::UnknownPart {
                dir: self.dir.clone(),
                name: name.to_string(),
            })?;
        let path = self.dir.join(name);
        let file = File::open(&path).map_err(|e| CheckpointError::io(&path, "open", e))?;
        Ok(PartReader {
            inner: BufReader::new(file.take(entry.size)),
            path,
            size: entry.size,
            read: 0,
        })
    }

    /// The whole of part `name`.
    pub(crate) fn read_part(&self, name: &str) -> Result<Vec<u8>, CheckpointError> {
        let PartReader {
            path,
            mut inner,
            size,
            ..
        } = self.part(name)?;
        let mut bytes = Vec::new();
        inner
            .read_to_end(&mut bytes)
            .map_err(|e| CheckpointError::io(&path, "read", e))?;
        if bytes.len() as u64 != size {
            // Changed since it was verified.
            return Err(CheckpointError::SizeMismatch {
                path,
                actual: bytes.len() as u64,
                expected: size,
            });
        }
        Ok(bytes)
    }
}

impl PartReader {
    /// The part's size, as verified.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

impl Read for PartReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: read failed: {e}", self.path.display()),
            )
        })?;
        self.read += n as u64;
        if n == 0 && !buf.is_empty() && self.read != self.size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: ended after {} bytes, the manifest lists {} (changed since it was \
                     verified)",
                    self.path.display(),
                    self.read,
                    self.size
                ),
            ));
        }
        Ok(n)
    }
}

/// The bytes of the manifest at `path` in checkpoint directory `dir`.
fn read_manifest(dir: &Path, path: &Path) -> Result<Vec<u8>, CheckpointError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(if layout::exists(dir)? {
                CheckpointError::Incomplete {
                    dir: dir.to_path_buf(),
                }
            } else {
                CheckpointError::MissingDir {
                    dir: dir.to_path_buf(),
                }
            });
        }
        Err(e) => return Err(CheckpointError::io(path, "open", e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| CheckpointError::io(path, "read", e))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(CheckpointError::CorruptManifest {
            path: path.to_path_buf(),
            reason: format!("larger than {MAX_MANIFEST_BYTES} bytes"),
        });
    }
    Ok(bytes)
}

/// Checks that the part at `path` is a regular file of the entry's size and SHA-256.
fn verify(path: &Path, entry: &PartEntry) -> Result<(), CheckpointError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::MissingPart {
                path: path.to_path_buf(),
            })
        }
        Err(e) => return Err(CheckpointError::io(path, "stat", e)),
    };
    if !meta.is_file() {
        return Err(CheckpointError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let size_mismatch = |actual| CheckpointError::SizeMismatch {
        path: path.to_path_buf(),
        actual,
        expected: entry.size,
    };
    if meta.len() != entry.size {
        return Err(size_mismatch(meta.len()));
    }
    let file = File::open(path).map_err(|e| CheckpointError::io(path, "open", e))?;
    let mut hasher = Sha256::new();
    // One byte past the size: a file that grew since the stat shows as a mismatch.
    let read = io::copy(&mut file.take(entry.size.saturating_add(1)), &mut hasher)
        .map_err(|e| CheckpointError::io(path, "read", e))?;
    if read != entry.size {
        return Err(size_mismatch(read));
    }
    let actual = hex(hasher);
    if actual != entry.sha256 {
        return Err(CheckpointError::ChecksumMismatch {
            path: path.to_path_buf(),
            actual,
            expected: entry.sha256.clone(),
        });
    }
    Ok(())
}
