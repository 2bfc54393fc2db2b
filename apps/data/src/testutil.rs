//! Test-only helpers for the loaders: a self-deleting scratch directory that tests write
//! small generated input files into.

use crate::DataError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a unique directory whose name contains `tag`.
    pub(crate) fn new(tag: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("iterstore-data-{tag}-{}-{n}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `contents` to `name` inside the directory and returns its path.
    pub(crate) fn write(&self, name: &str, contents: &str) -> PathBuf {
        self.write_bytes(name, contents.as_bytes())
    }

    /// Writes raw `contents` to `name` inside the directory and returns its path.
    pub(crate) fn write_bytes(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.path.join(name);
        std::fs::write(&path, contents).expect("write temp file");
        path
    }

    /// Writes `contents` gzip-compressed to `name` and returns its path.
    pub(crate) fn write_gz(&self, name: &str, contents: &str) -> PathBuf {
        self.write_gz_bytes(name, contents.as_bytes())
    }

    /// Writes raw `contents` gzip-compressed to `name` and returns its path.
    pub(crate) fn write_gz_bytes(&self, name: &str, contents: &[u8]) -> PathBuf {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(contents).expect("compress");
        let bytes = enc.finish().expect("compress");
        self.write_bytes(name, &bytes)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A loader error's 1-based line and its text; panics unless it is `Malformed`.
pub(crate) fn malformed_line(err: DataError) -> (usize, String) {
    let text = err.to_string();
    match err {
        DataError::Malformed { line, .. } => (line, text),
        other => panic!("expected Malformed, got {other:?}"),
    }
}
