//! Where things are on disk: the names of checkpoint directories, parts, temporary files
//! and the manifest, and listing the checkpoints of a directory.
//!
//! `D/ckpt-<clock>/` holds one checkpoint; the clock is zero-padded to at least 8 digits
//! so that names sort like clocks in a directory listing (the code itself sorts by the
//! parsed number). Part names are plain file names, checked here, so that no name — from
//! a caller or from a manifest on disk — can reach outside its checkpoint's directory.

use super::CheckpointError;
use crate::ids::Clock;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The manifest's file name; a checkpoint is complete exactly when it exists.
pub(crate) const MANIFEST: &str = "MANIFEST.json";

/// Prefix of a checkpoint directory's name.
const PREFIX: &str = "ckpt-";

/// Suffix of a file being written, before it is renamed.
const TMP_SUFFIX: &str = ".tmp";

/// Longest accepted part name, in bytes.
const MAX_PART_NAME: usize = 128;

/// The directory name of the checkpoint at `clock`: `ckpt-00000040`.
pub(crate) fn dir_name(clock: Clock) -> String {
    format!("{PREFIX}{clock:08}")
}

/// The clock of a checkpoint directory named `name`, or `None` if `name` is not one.
pub(crate) fn parse_dir_name(name: &str) -> Option<Clock> {
    let digits = name.strip_prefix(PREFIX)?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The temporary name `file` is written under before it is renamed to `file`: a hidden
/// sibling, `.shard-3.rows.tmp`.
pub(crate) fn tmp_path(file: &Path) -> PathBuf {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    file.with_file_name(format!(".{name}{TMP_SUFFIX}"))
}

/// Checks that `name` is a part name: a plain file name of ASCII letters, digits, `.`,
/// `_` and `-`, not hidden, not a temporary name and not the manifest's.
pub(crate) fn check_part_name(name: &str) -> Result<(), CheckpointError> {
    let bad = |reason| {
        Err(CheckpointError::BadPartName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_PART_NAME {
        return bad("longer than 128 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    if name.starts_with('.') {
        return bad("must not start with '.'");
    }
    if name.ends_with(TMP_SUFFIX) {
        return bad("must not end with '.tmp'");
    }
    if name == MANIFEST {
        return bad("reserved for the manifest");
    }
    Ok(())
}

/// One checkpoint directory found in a checkpoint root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The clock its name holds.
    pub(crate) clock: Clock,
    /// Its path.
    pub(crate) dir: PathBuf,
    /// Whether its manifest exists (whether it was completed).
    pub(crate) complete: bool,
}

/// The checkpoint directories in `root`, newest first. Entries that are not directories
/// named `ckpt-<clock>` (symbolic links included) are ignored.
pub(crate) fn list(root: &Path) -> Result<Vec<Found>, CheckpointError> {
    let entries = fs::read_dir(root).map_err(|e| CheckpointError::io(root, "list", e))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CheckpointError::io(root, "list", e))?;
        let Some(clock) = entry.file_name().to_str().and_then(parse_dir_name) else {
            continue;
        };
        let dir = entry.path();
        let is_dir = entry
            .file_type()
            .map_err(|e| CheckpointError::io(&dir, "stat", e))?
            .is_dir();
        if !is_dir {
            continue;
        }
        let complete = exists(&dir.join(MANIFEST))?;
        found.push(Found {
            clock,
            dir,
            complete,
        });
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.clock));
    Ok(found)
}

/// Whether something exists at `path` (without following a final symbolic link).
pub(crate) fn exists(path: &Path) -> Result<bool, CheckpointError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(CheckpointError::io(path, "stat", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names_round_trip_and_pad() {
        assert_eq!(dir_name(40), "ckpt-00000040");
        assert_eq!(dir_name(123_456_789), "ckpt-123456789");
        for clock in [0, 40, 99_999_999, 123_456_789, u64::MAX] {
            assert_eq!(parse_dir_name(&dir_name(clock)), Some(clock));
        }
    }

    #[test]
    fn other_names_are_not_checkpoints() {
        for name in [
            "ckpt-40",
            "ckpt-0000004a",
            "ckpt-00000040.old",
            "xckpt-00000040",
            "ckpt-",
            "ckpt-+0000040",
            "ckpt-99999999999999999999999",
        ] {
            assert_eq!(parse_dir_name(name), None, "{name}");
        }
    }

    #[test]
    fn part_names_cannot_escape_or_collide() {
        for ok in ["shard-3.rows", "process-0.app", "a", "x_y.z-1"] {
            assert!(check_part_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "/etc/passwd",
            "..",
            ".hidden",
            "x.tmp",
            "MANIFEST.json",
            "sp ace",
            "é",
            &"x".repeat(129),
        ] {
            let err = check_part_name(bad).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid checkpoint part name"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn tmp_names_are_hidden_siblings() {
        assert_eq!(
            tmp_path(Path::new("/d/ckpt-00000001/shard-0.rows")),
            Path::new("/d/ckpt-00000001/.shard-0.rows.tmp")
        );
    }
}
