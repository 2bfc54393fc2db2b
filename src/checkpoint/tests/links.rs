//! A checkpoint root shared with other users (issue 45): links planted where the store
//! writes or prunes are never followed, and pruning removes only what the store wrote.

use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};

/// A file outside the checkpoint root that an attacker wants overwritten or removed.
fn victim(d: &TestDir) -> PathBuf {
    let v = d.path().join("victim");
    fs::write(&v, b"secret").unwrap();
    fs::set_permissions(&v, fs::Permissions::from_mode(0o600)).unwrap();
    v
}

#[test]
fn a_link_planted_at_a_temporary_name_is_removed_not_written_through() {
    let d = TestDir::new("tmp-link");
    let root = d.path().join("root");
    let victim = victim(&d);
    let w = CheckpointWriter::begin(&root, 10, meta("lda")).unwrap();
    let dir = root.join("ckpt-00000010");
    for name in ["shard-0.rows", "MANIFEST.json"] {
        symlink(&victim, dir.join(format!(".{name}.tmp"))).unwrap();
    }
    write_parts(&w, 10).unwrap();
    w.commit().unwrap();
    assert_eq!(fs::read(&victim).unwrap(), b"secret");
    assert_holds(&root, 10);
}

#[test]
fn a_checkpoint_directory_that_is_a_link_is_refused_and_nothing_is_pruned() {
    let d = TestDir::new("dir-link");
    let root = d.path().join("root");
    write(&root, 10);
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, root.join("ckpt-00000020")).unwrap();
    let e = CheckpointWriter::begin(&root, 20, meta("lda")).unwrap_err();
    assert!(matches!(e, CheckpointError::Link { .. }), "{e}");
    assert!(e.to_string().contains("ckpt-00000020"), "{e}");
    let e = PartWriter::standalone(&root, 20, "shard-0.rows").unwrap_err();
    assert!(matches!(e, CheckpointError::Link { .. }), "{e}");
    assert!(
        files(&elsewhere).is_empty(),
        "nothing written through the link"
    );
    assert_holds(&root, 10);
}

#[test]
fn a_directory_swapped_for_a_link_after_begin_is_not_written_through() {
    let d = TestDir::new("swap");
    let root = d.path().join("root");
    let w = CheckpointWriter::begin(&root, 10, meta("lda")).unwrap();
    let dir = root.join("ckpt-00000010");
    let elsewhere = d.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::remove_dir(&dir).unwrap();
    symlink(&elsewhere, &dir).unwrap();
    let e = w.part("shard-0.rows").unwrap_err();
    assert!(matches!(e, CheckpointError::Link { .. }), "{e}");
    assert!(files(&elsewhere).is_empty());
}

#[test]
fn pruning_removes_only_what_the_store_wrote() {
    let d = TestDir::new("prune-foreign");
    let root = d.path().join("root");
    let victim = victim(&d);
    write(&root, 10);
    let old = root.join("ckpt-00000010");
    // Beside the store's files: a file it did not list, a link named as a listed part
    // would be, and a subdirectory.
    fs::write(old.join("notes.txt"), b"mine").unwrap();
    fs::remove_file(old.join("shard-1.rows")).unwrap();
    symlink(&victim, old.join("shard-1.rows")).unwrap();
    fs::create_dir(old.join("sub")).unwrap();
    // An abandoned attempt, whose part-named files are taken for its own.
    let w = CheckpointWriter::begin(&root, 15, meta("lda")).unwrap();
    w.write_part("shard-0.rows", |out| out.write_all(b"partial"))
        .unwrap();
    let done = write(&root, 20);
    assert_eq!(done.pruned, [root.join("ckpt-00000015")]);
    assert_eq!(done.prune_failures.len(), 1, "{:?}", done.prune_failures);
    let e = done.prune_failures[0].to_string();
    for name in ["notes.txt", "shard-1.rows", "sub", "ckpt-00000010"] {
        assert!(e.contains(name), "{name} in {e}");
    }
    // The store's own files went; the rest, and the directory, stayed.
    assert_eq!(files(&old), ["notes.txt", "shard-1.rows", "sub"]);
    assert_eq!(fs::read(&victim).unwrap(), b"secret");
    assert_eq!(fs::read(old.join("notes.txt")).unwrap(), b"mine");
    assert_holds(&root, 20);
}
