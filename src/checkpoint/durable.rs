//! [`DurableFile`]: one file written under a temporary name, checksummed as it streams,
//! then flushed, fsynced and renamed into place — and [`sync_dir`], which makes renames
//! and new entries of a directory durable.
//!
//! Until `finish` returns, the destination name is untouched: a failed or abandoned write
//! leaves at most the temporary file, which is removed when the `DurableFile` is dropped.
//!
//! Nothing is followed through a symbolic link: the destination's directory is opened
//! once without following a link ([`open_dir`]), and the temporary file is created in it
//! exclusively and without following one (a stale temporary name is unlinked first, so
//! a link planted there is removed, never written through), renamed and removed
//! relative to that directory handle, so swapping the directory for a link meanwhile
//! changes nothing.
//! Errors name the destination file, so a full disk reads "D/ckpt-00000040/shard-1.rows:
//! write failed: No space left on device". In tests a `DiskBudget` shared by the files
//! of a checkpoint makes the disk "fill up" after a number of bytes.

use super::layout::tmp_path;
use super::CheckpointError;
use rustix::fs::{AtFlags, Mode, OFlags};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Buffer between the caller's writes and the file.
const BUFFER: usize = 256 << 10;

/// What a finished file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its SHA-256, lowercase hex.
    pub(crate) sha256: String,
}

/// A file being written to a temporary name; see the module docs.
pub(crate) struct DurableFile {
    dest: PathBuf,
    /// The destination's directory, opened without following a link.
    dir: OwnedFd,
    /// The destination's and the temporary file's names in `dir`.
    name: OsString,
    tmp: OsString,
    out: BufWriter<Sink>,
    hasher: Sha256,
    size: u64,
    /// Set by the first failed write: later writes and `finish` fail too.
    failed: Option<io::Error>,
    /// Set once renamed: the temporary name no longer exists.
    done: bool,
}

impl DurableFile {
    /// Creates the temporary file for `dest` (removing a stale one, or a link in its
    /// place), in `dest`'s directory, which must not be a link.
    pub(crate) fn create(dest: PathBuf) -> Result<Self, CheckpointError> {
        let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(CheckpointError::io(
                &dest,
                "create",
                io::Error::new(io::ErrorKind::InvalidInput, "not a file in a directory"),
            ));
        };
        let dir = open_dir(parent)?;
        let name = name.to_os_string();
        let tmp = tmp_path(&dest)
            .file_name()
            .expect("a temporary name is a file name")
            .to_os_string();
        match rustix::fs::unlinkat(&dir, tmp.as_os_str(), AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                return Err(CheckpointError::io(
                    &dest,
                    "remove a stale temporary",
                    e.into(),
                ))
            }
        }
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )
        .map_err(|e| CheckpointError::io(&dest, "create", e.into()))?;
        let file = File::from(fd);
        Ok(DurableFile {
            dest,
            dir,
            name,
            tmp,
            out: BufWriter::with_capacity(
                BUFFER,
                Sink {
                    file,
                    discard: false,
                    #[cfg(test)]
                    budget: None,
                },
            ),
            hasher: Sha256::new(),
            size: 0,
            failed: None,
            done: false,
        })
    }

    /// The name the file gets when finished.
    pub(crate) fn dest(&self) -> &Path {
        &self.dest
    }

    /// Makes this file's writes draw on `budget`, failing with `ENOSPC` once it is spent.
    #[cfg(test)]
    pub(crate) fn with_budget(mut self, budget: Option<DiskBudget>) -> Self {
        self.out.get_mut().budget = budget;
        self
    }

    /// Flushes, fsyncs and renames the file to its destination name. The rename is made
    /// durable by the caller's [`sync_dir`] of the directory.
    pub(crate) fn finish(mut self) -> Result<Written, CheckpointError> {
        if let Some(e) = self.failed.take() {
            return Err(CheckpointError::io(&self.dest, "write", e));
        }
        self.out
            .flush()
            .map_err(|e| CheckpointError::io(&self.dest, "write", e))?;
        self.out
            .get_ref()
            .file
            .sync_all()
            .map_err(|e| CheckpointError::io(&self.dest, "sync", e))?;
        rustix::fs::renameat(
            &self.dir,
            self.tmp.as_os_str(),
            &self.dir,
            self.name.as_os_str(),
        )
        .map_err(|e| CheckpointError::io(&self.dest, "rename", e.into()))?;
        self.done = true;
        let hasher = std::mem::take(&mut self.hasher);
        Ok(Written {
            size: self.size,
            sha256: super::manifest::hex(hasher),
        })
    }
}

impl Write for DurableFile {
    /// Writes through the buffer, hashing exactly the bytes accepted. An error names the
    /// file; after one (other than `Interrupted`), every write fails.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.earlier_failure()?;
        match self.out.write(buf) {
            Ok(n) => {
                self.hasher.update(&buf[..n]);
                self.size += n as u64;
                Ok(n)
            }
            // Nothing was written; `write_all` retries.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Flushes the buffer to the file (not to the disk: `finish` fsyncs).
    fn flush(&mut self) -> io::Result<()> {
        self.earlier_failure()?;
        self.out.flush().map_err(|e| self.fail(e))
    }
}

impl DurableFile {
    /// The error of the write that failed, if one did (once).
    pub(crate) fn take_failure(&mut self) -> Option<io::Error> {
        self.failed.take()
    }

    /// An error naming the file if an earlier write failed.
    fn earlier_failure(&self) -> io::Result<()> {
        match &self.failed {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("{}: an earlier write failed: {e}", self.dest.display()),
            )),
            None => Ok(()),
        }
    }

    /// Records `e` as the failure and returns an error of the same kind naming the file.
    fn fail(&mut self, e: io::Error) -> io::Error {
        let named = io::Error::new(
            e.kind(),
            format!("{}: write failed: {e}", self.dest.display()),
        );
        self.failed = Some(e);
        named
    }
}

impl Drop for DurableFile {
    /// Removes the temporary file of an unfinished write (best effort: it is hidden and
    /// its checkpoint can never list it).
    fn drop(&mut self) {
        if !self.done {
            // The buffer flushes itself when dropped: into nothing.
            self.out.get_mut().discard = true;
            let _ = rustix::fs::unlinkat(&self.dir, self.tmp.as_os_str(), AtFlags::empty());
        }
    }
}

/// Fsyncs directory `dir`, making its new entries and renames durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), CheckpointError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| CheckpointError::io(dir, "sync", e))
}

/// Opens directory `dir` without following a link: a link (or anything but a
/// directory) there is a [`CheckpointError::Link`], nothing there a
/// [`CheckpointError::MissingDir`].
pub(crate) fn open_dir(dir: &Path) -> Result<OwnedFd, CheckpointError> {
    rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => CheckpointError::Link {
            path: dir.to_path_buf(),
        },
        rustix::io::Errno::NOENT => CheckpointError::MissingDir {
            dir: dir.to_path_buf(),
        },
        e => CheckpointError::io(dir, "open", e.into()),
    })
}

/// The file under a [`DurableFile`]'s buffer, with the test-only disk budget.
struct Sink {
    file: File,
    /// Set when the file is abandoned: writes succeed without writing.
    discard: bool,
    #[cfg(test)]
    budget: Option<DiskBudget>,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.discard {
            return Ok(buf.len());
        }
        #[cfg(test)]
        if let Some(budget) = &self.budget {
            let n = budget.take(buf.len())?;
            return self.file.write(&buf[..n]);
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// A simulated disk size: the bytes all files sharing it may still write before writes
/// fail with `ENOSPC`, as on a full disk.
#[cfg(test)]
#[derive(Debug, Clone)]
pub(crate) struct DiskBudget(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[cfg(test)]
impl DiskBudget {
    /// A disk with `bytes` free.
    pub(crate) fn new(bytes: u64) -> Self {
        DiskBudget(std::sync::Arc::new(bytes.into()))
    }

    /// Takes up to `want` bytes: how many may be written, or `ENOSPC` if none.
    fn take(&self, want: usize) -> io::Result<usize> {
        use std::sync::atomic::Ordering;
        let mut left = self.0.load(Ordering::Relaxed);
        loop {
            if want > 0 && left == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = (want as u64).min(left);
            match self
                .0
                .compare_exchange(left, left - n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(n as usize),
                Err(now) => left = now,
            }
        }
    }
}
