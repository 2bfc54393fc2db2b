//! [`Manifest`]: the `MANIFEST.json` of a checkpoint — format and version, clock, the
//! run's [`Meta`], and every part with its size and SHA-256 — and its strict parsing.
//!
//! Version 2 adds each table's update rule ([`Meta`]); a version 1 manifest (written
//! before checkpoints held rule state, when every table summed) is still read.
//!
//! Parsing trusts nothing: unknown fields, trailing bytes, a wrong format tag, a part
//! name that is not a plain file name, a duplicate part, a malformed checksum or a rule
//! out of its range are all refused with the reason. Checking the parts against the disk
//! is the reader's job.

use super::layout::check_part_name;
use super::{CheckpointError, Meta};
use crate::ids::Clock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;

/// The `format` tag every manifest carries.
pub(crate) const FORMAT: &str = "iterstore-checkpoint";

/// The manifest version this build writes; it reads every version from 1 to this one.
pub(crate) const VERSION: u32 = 2;

/// Largest manifest read, in bytes (it lists file names and checksums, not data).
pub(crate) const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// One file of a checkpoint, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PartEntry {
    /// The file's name within the checkpoint's directory, e.g. `shard-3.rows`.
    pub(crate) name: String,
    /// Its size in bytes.
    pub(crate) size: u64,
    /// Its SHA-256, 64 lowercase hex digits.
    pub(crate) sha256: String,
}

/// The contents of `MANIFEST.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    /// Always [`FORMAT`].
    pub(crate) format: String,
    /// The format version, [`VERSION`] when written by this build.
    pub(crate) version: u32,
    /// The clock the checkpoint holds: every update of clocks before it, none after.
    pub(crate) clock: Clock,
    /// The run that wrote it.
    pub(crate) meta: Meta,
    /// Every part, in the order they were finished.
    pub(crate) parts: Vec<PartEntry>,
}

/// The fields read first, so that a manifest of another version is named as such rather
/// than as corrupt.
#[derive(Deserialize)]
struct Header {
    format: String,
    version: u32,
}

impl Manifest {
    /// A manifest of this build's version.
    pub(crate) fn new(clock: Clock, meta: Meta, parts: Vec<PartEntry>) -> Self {
        Manifest {
            format: FORMAT.to_string(),
            version: VERSION,
            clock,
            meta,
            parts,
        }
    }

    /// The manifest as pretty-printed JSON (it is small, and people read it).
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes =
            serde_json::to_vec_pretty(self).expect("a manifest always serializes to JSON");
        bytes.push(b'\n');
        bytes
    }

    /// Parses the manifest read from `path`, refusing anything malformed.
    pub(crate) fn parse(bytes: &[u8], path: &Path) -> Result<Manifest, CheckpointError> {
        let corrupt = |reason: String| CheckpointError::CorruptManifest {
            path: path.to_path_buf(),
            reason,
        };
        let header: Header = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if header.format != FORMAT {
            return Err(corrupt(format!(
                "format is '{}', not '{FORMAT}'",
                header.format
            )));
        }
        if !(1..=VERSION).contains(&header.version) {
            return Err(CheckpointError::Version {
                path: path.to_path_buf(),
                found: header.version,
                supported: VERSION,
            });
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        for t in &manifest.meta.tables {
            if let Err(reason) = t.rule.check(t.elem) {
                return Err(corrupt(format!("table {}: {reason}", t.name)));
            }
        }
        let mut names = HashSet::new();
        for part in &manifest.parts {
            check_part_name(&part.name).map_err(|e| corrupt(e.to_string()))?;
            if !names.insert(part.name.as_str()) {
                return Err(corrupt(format!("part {} is listed twice", part.name)));
            }
            if !is_hex_digest(&part.sha256) {
                return Err(corrupt(format!(
                    "part {}: sha256 '{}' is not 64 lowercase hex digits",
                    part.name, part.sha256
                )));
            }
        }
        Ok(manifest)
    }

    /// The entry of part `name`, if listed.
    pub(crate) fn part(&self, name: &str) -> Option<&PartEntry> {
        self.parts.iter().find(|p| p.name == name)
    }
}

/// Whether `s` is a SHA-256 as the manifest writes it: 64 lowercase hex digits.
pub(crate) fn is_hex_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The lowercase hex of a finished SHA-256.
pub(crate) fn hex(hasher: Sha256) -> String {
    use std::fmt::Write;
    hasher
        .finalize()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{ClusterShape, TableShape};
    use crate::element::ElemType;
    use crate::rule::Rule;

    fn manifest() -> Manifest {
        let meta = Meta {
            app: "lda".into(),
            tables: vec![
                TableShape {
                    name: "lda.topics".into(),
                    width: 8,
                    elem: ElemType::I64,
                    rule: Rule::Sum,
                },
                TableShape {
                    name: "lda.w".into(),
                    width: 2,
                    elem: ElemType::F32,
                    rule: Rule::Momentum {
                        lr: 0.1,
                        momentum: 0.9,
                    },
                },
            ],
            cluster: ClusterShape {
                processes: 1,
                workers: 2,
                shards: 1,
            },
        };
        let part = PartEntry {
            name: "shard-0.rows".into(),
            size: 3,
            sha256: hex(Sha256::new_with_prefix(b"abc")),
        };
        Manifest::new(40, meta, vec![part])
    }

    fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        Manifest::parse(bytes, Path::new("D/MANIFEST.json")).map_err(|e| e.to_string())
    }

    #[test]
    fn round_trips() {
        let m = manifest();
        assert_eq!(parse(&m.to_bytes()), Ok(m));
    }

    #[test]
    fn hex_is_the_known_sha256() {
        assert_eq!(
            hex(Sha256::new_with_prefix(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// The manifest's JSON with `edit` applied to it.
    fn edited(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v: serde_json::Value = serde_json::from_slice(&manifest().to_bytes()).unwrap();
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn malformed_manifests_are_refused_with_the_reason() {
        let mut garbage = manifest().to_bytes();
        garbage.extend_from_slice(b"{}");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "EOF while parsing"),
            (b"\xff\xfe".to_vec(), "expected value"),
            (garbage, "trailing characters"),
            (manifest().to_bytes()[..50].to_vec(), "EOF while parsing"),
            (
                edited(|v| v["format"] = "other".into()),
                "format is 'other'",
            ),
            (edited(|v| v["extra"] = 1.into()), "unknown field `extra`"),
            (
                edited(|v| v["parts"][0]["name"] = "../x".into()),
                "part name '../x'",
            ),
            (
                edited(|v| v["parts"][0]["sha256"] = "AB".into()),
                "is not 64 lowercase hex",
            ),
            (
                edited(|v| v["parts"][0]["size"] = (-1).into()),
                "invalid value",
            ),
            (
                edited(|v| {
                    v["meta"]["tables"][1]["rule"]["param_bits"][1] = 1.0f64.to_bits().into()
                }),
                "table lda.w: rule momentum(lr=0.1, momentum=1): momentum = 1 must be in [0, 1)",
            ),
            (
                edited(|v| {
                    let p = v["parts"][0].clone();
                    v["parts"].as_array_mut().unwrap().push(p);
                }),
                "part shard-0.rows is listed twice",
            ),
        ];
        for (bytes, reason) in cases {
            let err = parse(&bytes).unwrap_err();
            assert!(
                err.starts_with("D/MANIFEST.json: corrupt manifest: "),
                "{err}"
            );
            assert!(err.contains(reason), "{err} lacks {reason}");
        }
    }

    #[test]
    fn another_version_is_named() {
        let err = parse(&edited(|v| v["version"] = 3.into())).unwrap_err();
        assert_eq!(
            err,
            "D/MANIFEST.json: format version 3, this build reads versions 1 to 2"
        );
    }

    #[test]
    fn a_version_1_manifest_is_read_its_tables_summing() {
        // Version 1 had no rules: every table summed.
        let old = edited(|v| {
            v["version"] = 1.into();
            v["meta"]["tables"].as_array_mut().unwrap().pop();
        });
        let m = parse(&old).unwrap();
        assert_eq!(m.version, 1);
        assert_eq!(m.meta.tables.len(), 1);
        assert!(m.meta.tables[0].rule.is_sum());
    }
}
