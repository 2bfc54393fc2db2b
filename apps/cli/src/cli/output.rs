//! Files the commands write (`--output`, `--json`, `--svg`, plans and profiles): created
//! before the work starts, so that a bad path fails early, and put in place whole only when
//! the work succeeded.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// An output file (`--output`, `--json`) prepared before the run starts, so that a bad
/// path fails early, and put in place only when the run succeeds: it is written to a
/// temporary file beside its destination and renamed over it, so a failed run (or a crash
/// while writing) leaves an earlier file of that name untouched. A destination that exists
/// and is not a regular file (`/dev/stdout`, a pipe) is written directly; a link to a
/// regular file is replaced at its target, not the link itself.
pub(crate) struct Output {
    path: PathBuf,
    sink: Sink,
}

/// Where an [`Output`]'s bytes go until it is finished.
enum Sink {
    /// A temporary file renamed to the destination on success (removed if dropped).
    Staged(BufWriter<tempfile::NamedTempFile>),
    /// A destination that is not a regular file, written as the bytes come.
    Direct(BufWriter<File>),
}

impl Output {
    pub(crate) fn create(path: Option<&Path>) -> Result<Option<Output>> {
        path.map(|path| {
            let cannot = || format!("cannot create {}", path.display());
            let sink = match std::fs::metadata(path) {
                Ok(m) if !m.is_file() => {
                    if m.is_dir() {
                        bail!("cannot create {}: it is a directory", path.display());
                    }
                    Sink::Direct(BufWriter::new(
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(path)
                            .with_context(cannot)?,
                    ))
                }
                _ => {
                    // The file itself, not a link to it, is what gets replaced.
                    let dest = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
                    let dir = match dest.parent() {
                        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                        _ => PathBuf::from("."),
                    };
                    let name = dest.file_name().unwrap_or_default().to_string_lossy();
                    let file = tempfile::Builder::new()
                        .prefix(&format!(".{name}."))
                        .suffix(".tmp")
                        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
                        .tempfile_in(&dir)
                        .with_context(cannot)?;
                    Sink::Staged(BufWriter::new(file))
                }
            };
            Ok(Output {
                path: path.to_path_buf(),
                sink,
            })
        })
        .transpose()
    }

    pub(crate) fn write(self, f: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let writing = || format!("writing {}", self.path.display());
        match self.sink {
            Sink::Direct(mut w) => f(&mut w).and_then(|()| w.flush()).with_context(writing),
            Sink::Staged(mut w) => {
                f(&mut w).and_then(|()| w.flush()).with_context(writing)?;
                let file = w
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(writing)?;
                file.as_file().sync_all().with_context(writing)?;
                let dest = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
                file.persist(&dest)
                    .map_err(|e| e.error)
                    .with_context(writing)?;
                Ok(())
            }
        }
    }
}

/// Writes `bytes` to `path` as an [`Output`] does: whole, or not at all.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let out = Output::create(Some(path))?.expect("a path was given");
    out.write(|w| w.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_at_a_links_target_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("plan.json");
        let link = dir.path().join("link.json");
        std::fs::write(&target, "old, and longer than what replaces it").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_file(&link, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        let err = write_file(dir.path(), b"x").unwrap_err().to_string();
        assert!(err.contains("it is a directory"), "{err}");
    }
}
