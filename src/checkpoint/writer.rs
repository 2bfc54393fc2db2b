//! [`CheckpointWriter`]: writes one checkpoint — its parts, then its manifest — and prunes
//! the checkpoints it supersedes.
//!
//! ```text
//! let w = CheckpointWriter::begin(root, clock, meta)?;   // creates root/ckpt-<clock>/
//! let mut part = w.part("shard-3.rows")?;                // any thread; impl Write
//! shard.encode_part(write, &mut part)?;                // the shard's bytes
//! part.finish()?;                                        // fsync + rename: listed
//! w.record(entry_from_another_process)?;                 // parts written elsewhere
//! w.commit()?;                                           // MANIFEST.json, then prune
//! ```
//!
//! Nothing written before `commit` renames the manifest into place is visible to a
//! reader, and nothing of an older checkpoint is touched before that: a failure at any
//! step (a full disk, a crash) leaves the previous complete checkpoint valid and returns
//! an error naming the file being written. The writer does not know what parts hold,
//! which process writes which, or how entries travel between processes.
//!
//! A checkpoint root may be shared with other users, so nothing here follows a link: a
//! `ckpt-<clock>` that is a link is refused (not written into, not reused), files are
//! created exclusively relative to their directory's handle (`durable.rs`), and pruning
//! removes only the files the store writes — a complete checkpoint's listed parts and
//! manifest, temporary files, and in an abandoned one files named as parts are — never
//! following a link or entering a subdirectory, and only in directories and of files
//! this user owns; a directory holding anything else is left in place and reported.

use super::durable::{open_dir, sync_dir, DurableFile};
use super::layout::{self, check_part_name, dir_name, Found, MANIFEST};
use super::manifest::is_hex_digest;
use super::{CheckpointError, Manifest, Meta, PartEntry};
use crate::ids::Clock;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(test)]
use super::durable::DiskBudget;

/// Writes the checkpoint at one clock; see the module docs.
#[derive(Debug)]
pub(crate) struct CheckpointWriter {
    root: PathBuf,
    dir: PathBuf,
    clock: Clock,
    meta: Meta,
    parts: Arc<Mutex<Parts>>,
    #[cfg(test)]
    budget: Option<DiskBudget>,
}

/// The parts of a checkpoint being written.
#[derive(Debug, Default)]
struct Parts {
    /// Finished or recorded, in that order: what the manifest lists.
    listed: Vec<PartEntry>,
    /// Begun and not finished (an abandoned part stays here and blocks `commit`).
    begun: BTreeSet<String>,
}

impl Parts {
    /// Claims `name` for a new part, refusing a name already begun or listed.
    fn claim(&mut self, name: &str, dir: &Path) -> Result<(), CheckpointError> {
        check_part_name(name)?;
        if self.begun.contains(name) || self.listed.iter().any(|p| p.name == name) {
            return Err(CheckpointError::DuplicatePart {
                path: dir.join(name),
            });
        }
        Ok(())
    }
}

/// One part being written: bytes go through a buffer to a temporary file and are
/// checksummed as they stream. Errors of [`Write`] name the file. Dropping it without
/// [`finish`](PartWriter::finish) removes the temporary file and leaves the part
/// unfinished, so the checkpoint cannot be committed.
pub(crate) struct PartWriter {
    name: String,
    file: DurableFile,
    parts: Arc<Mutex<Parts>>,
}

impl std::fmt::Debug for PartWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartWriter")
            .field("path", &self.file.dest())
            .finish_non_exhaustive()
    }
}

/// What [`CheckpointWriter::commit`] did.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The complete checkpoint's directory.
    pub(crate) dir: PathBuf,
    /// Its clock.
    pub(crate) clock: Clock,
    /// Older checkpoint directories (complete or abandoned) removed.
    pub(crate) pruned: Vec<PathBuf>,
    /// Older checkpoints that could not be removed. The new checkpoint is complete all
    /// the same; the caller may warn.
    pub(crate) prune_failures: Vec<CheckpointError>,
}

impl CheckpointWriter {
    /// Starts the checkpoint at `clock` in `root` (created if missing): creates
    /// `root/ckpt-<clock>/`, or reuses it if an earlier attempt left it incomplete.
    ///
    /// Refuses if `root` already holds a complete checkpoint at `clock` or later: the
    /// newest checkpoint would not be this one. Every process writing parts of the
    /// checkpoint calls `begin` with the same arguments; one of them commits.
    pub(crate) fn begin(root: &Path, clock: Clock, meta: Meta) -> Result<Self, CheckpointError> {
        fs::create_dir_all(root).map_err(|e| CheckpointError::io(root, "create", e))?;
        if let Some(newer) = layout::list(root)?
            .into_iter()
            .find(|f| f.complete && f.clock >= clock)
        {
            return Err(CheckpointError::NotNewer {
                path: newer.dir,
                existing: newer.clock,
                clock,
            });
        }
        let dir = root.join(dir_name(clock));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            // An earlier attempt's, or another process's of this checkpoint: reused if
            // it is a directory and not a link.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => drop(open_dir(&dir)?),
            Err(e) => return Err(CheckpointError::io(&dir, "create", e)),
        }
        sync_dir(root)?;
        Ok(CheckpointWriter {
            root: root.to_path_buf(),
            dir,
            clock,
            meta,
            parts: Arc::default(),
            #[cfg(test)]
            budget: None,
        })
    }

    /// Makes every file of this checkpoint draw on `budget`, as on a disk that fills up.
    #[cfg(test)]
    pub(crate) fn with_budget(mut self, budget: DiskBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The checkpoint's directory.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Begins part `name` (a plain file name such as `shard-3.rows`, not used before in
    /// this checkpoint). The returned writer is independent of `self` and may move to
    /// another thread.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn part(&self, name: &str) -> Result<PartWriter, CheckpointError> {
        let mut parts = lock(&self.parts);
        parts.claim(name, &self.dir)?;
        let file = self.create(self.dir.join(name))?;
        parts.begun.insert(name.to_string());
        Ok(PartWriter {
            name: name.to_string(),
            file,
            parts: Arc::clone(&self.parts),
        })
    }

    /// Writes part `name` with `write` and finishes it. An error of `write` (its own or
    /// the file's) is returned naming the part's file; the part is then left unfinished.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn write_part(
        &self,
        name: &str,
        write: impl FnOnce(&mut PartWriter) -> io::Result<()>,
    ) -> Result<PartEntry, CheckpointError> {
        self.part(name)?.write_all_with(write)
    }

    /// Lists a part written elsewhere (by another process into this directory), as its
    /// [`PartWriter::finish`] returned it. It is not read back here.
    pub(crate) fn record(&self, entry: PartEntry) -> Result<(), CheckpointError> {
        let mut parts = lock(&self.parts);
        parts.claim(&entry.name, &self.dir)?;
        if !is_hex_digest(&entry.sha256) {
            return Err(CheckpointError::BadEntry {
                path: self.dir.join(&entry.name),
                reason: "sha256 is not 64 lowercase hex digits",
            });
        }
        parts.listed.push(entry);
        Ok(())
    }

    /// Completes the checkpoint: makes the parts' renames durable, writes the manifest
    /// (temporary name, fsync, rename, fsync of the directory), then removes every older
    /// checkpoint directory, complete or abandoned. Refuses while a part is unfinished.
    ///
    /// On an error the checkpoint stays incomplete (no manifest) and nothing older is
    /// touched — except when only the last directory sync fails: the manifest may then be
    /// in place, and a later commit prunes it like any older checkpoint.
    pub(crate) fn commit(self) -> Result<Committed, CheckpointError> {
        let listed = {
            let parts = lock(&self.parts);
            if let Some(name) = parts.begun.first() {
                return Err(CheckpointError::Unfinished {
                    path: self.dir.join(name),
                });
            }
            parts.listed.clone()
        };
        sync_dir(&self.dir)?;
        let manifest = Manifest::new(self.clock, self.meta.clone(), listed);
        let mut file = self.create(self.dir.join(MANIFEST))?;
        if let Err(e) = file.write_all(&manifest.to_bytes()) {
            let e = file.take_failure().unwrap_or(e);
            return Err(CheckpointError::io(file.dest(), "write", e));
        }
        file.finish()?;
        sync_dir(&self.dir)?;
        let (pruned, prune_failures) = prune(&self.root, self.clock);
        Ok(Committed {
            dir: self.dir,
            clock: self.clock,
            pruned,
            prune_failures,
        })
    }

    /// Gives up on this checkpoint and removes its directory (with every part in it,
    /// whoever wrote them). Without `abort`, an abandoned checkpoint stays until a newer
    /// one commits; on a full disk, removing it frees the space for the next attempt.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn abort(self) -> Result<(), CheckpointError> {
        fs::remove_dir_all(&self.dir).map_err(|e| CheckpointError::io(&self.dir, "remove", e))?;
        sync_dir(&self.root)
    }

    /// Creates the temporary file for `dest`.
    fn create(&self, dest: PathBuf) -> Result<DurableFile, CheckpointError> {
        let file = DurableFile::create(dest)?;
        #[cfg(test)]
        let file = file.with_budget(self.budget.clone());
        Ok(file)
    }
}

impl PartWriter {
    /// Begins part `name` of the checkpoint at `clock` in `root` that a
    /// [`CheckpointWriter`] elsewhere (another thread or process, which called
    /// [`begin`](CheckpointWriter::begin)) writes: its directory must exist. Nothing here
    /// lists the part; [`finish`](PartWriter::finish) returns its entry for that writer's
    /// [`record`](CheckpointWriter::record).
    pub(crate) fn standalone(
        root: &Path,
        clock: Clock,
        name: &str,
    ) -> Result<PartWriter, CheckpointError> {
        let dir = root.join(dir_name(clock));
        drop(open_dir(&dir)?);
        let parts: Arc<Mutex<Parts>> = Arc::default();
        lock(&parts).claim(name, &dir)?;
        let file = DurableFile::create(dir.join(name))?;
        lock(&parts).begun.insert(name.to_string());
        Ok(PartWriter {
            name: name.to_string(),
            file,
            parts,
        })
    }

    /// Writes the whole part with `write` and finishes it, as
    /// [`CheckpointWriter::write_part`] does: an error names the part's file.
    pub(crate) fn write_all_with(
        mut self,
        write: impl FnOnce(&mut PartWriter) -> io::Result<()>,
    ) -> Result<PartEntry, CheckpointError> {
        match write(&mut self) {
            Ok(()) => self.finish(),
            Err(e) => {
                // The file's own error if a write failed, else the caller's.
                let e = self.file.take_failure().unwrap_or(e);
                Err(CheckpointError::io(self.file.dest(), "write", e))
            }
        }
    }

    /// The part's name.
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The file the part is written to (under a temporary name until finished).
    #[cfg_attr(not(test), allow(dead_code))] // for callers to come; the tests use it
    pub(crate) fn path(&self) -> &Path {
        self.file.dest()
    }

    /// Flushes, fsyncs and renames the part into place and lists it in the checkpoint.
    /// Returns its entry, which another process's writer can [`record`].
    ///
    /// [`record`]: CheckpointWriter::record
    pub(crate) fn finish(self) -> Result<PartEntry, CheckpointError> {
        let PartWriter { name, file, parts } = self;
        let written = file.finish()?;
        let entry = PartEntry {
            name,
            size: written.size,
            sha256: written.sha256,
        };
        let mut parts = lock(&parts);
        parts.begun.remove(&entry.name);
        parts.listed.push(entry.clone());
        Ok(entry)
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Removes every checkpoint directory in `root` older than `clock`: what was removed, and
/// what could not be.
fn prune(root: &Path, clock: Clock) -> (Vec<PathBuf>, Vec<CheckpointError>) {
    let (mut pruned, mut failures) = (Vec::new(), Vec::new());
    let found = match layout::list(root) {
        Ok(found) => found,
        Err(e) => return (pruned, vec![e]),
    };
    for old in found.into_iter().filter(|f| f.clock < clock) {
        match remove_checkpoint(&old) {
            Ok(()) => pruned.push(old.dir),
            Err(e) => failures.push(e),
        }
    }
    if !pruned.is_empty() {
        if let Err(e) = sync_dir(root) {
            failures.push(e);
        }
    }
    (pruned, failures)
}

/// Removes checkpoint directory `old` and the files the store wrote in it (see the
/// module docs), relative to its directory handle; a directory that holds anything
/// else is left, with an error naming what.
fn remove_checkpoint(old: &Found) -> Result<(), CheckpointError> {
    use rustix::fs::{AtFlags, FileType};
    let dir = open_dir(&old.dir)?;
    // A complete checkpoint lists its parts; an abandoned one has no list, so any file
    // named as a part is taken for one.
    let listed: Option<BTreeSet<String>> = if old.complete {
        super::Checkpoint::listed_parts(&old.dir).ok()
    } else {
        None
    };
    let ours = |name: &str| {
        let plain = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .unwrap_or(name);
        plain == MANIFEST
            || match &listed {
                Some(parts) => parts.contains(plain),
                None => check_part_name(plain).is_ok(),
            }
    };
    let io_err = |action, e: rustix::io::Errno| CheckpointError::io(&old.dir, action, e.into());
    // Another user's directory (a shared root) was not written by this store.
    let me = rustix::process::geteuid().as_raw();
    let owner = rustix::fs::fstat(&dir)
        .map_err(|e| io_err("stat", e))?
        .st_uid;
    if owner != me {
        return Err(CheckpointError::Foreign {
            dir: old.dir.clone(),
            names: vec![format!("the directory itself, owned by uid {owner}")],
        });
    }
    let mut foreign = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(&dir).map_err(|e| io_err("list", e))?;
    let mut names = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(|e| io_err("list", e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        let stat = rustix::fs::statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err("stat", e))?;
        if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
            && stat.st_uid == me
            && ours(&name)
        {
            names.push(entry.file_name().to_owned());
        } else {
            foreign.push(name);
        }
    }
    for name in names {
        rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty())
            .map_err(|e| io_err("remove", e))?;
    }
    if !foreign.is_empty() {
        foreign.sort();
        return Err(CheckpointError::Foreign {
            dir: old.dir.clone(),
            names: foreign,
        });
    }
    fs::remove_dir(&old.dir).map_err(|e| CheckpointError::io(&old.dir, "remove", e))
}

/// Locks the parts list. Nothing panics while holding it, so a poisoned lock still holds
/// a consistent list.
fn lock(parts: &Mutex<Parts>) -> MutexGuard<'_, Parts> {
    parts.lock().unwrap_or_else(|e| e.into_inner())
}
