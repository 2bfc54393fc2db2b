//! What a run computes, agreed by every process before any table exists: the app, its
//! parameters, the iterations and a digest of its input ([`input_digest`], recorded in the
//! report's `dataset.input_digest`, so a checkpoint records it too and a resume with other
//! data of the same shape is refused). Processes given another graph, a truncated copy or
//! another `--lr` fail at once naming the field and the ranks
//! ([`iterstore::Error::Disagreement`]) instead of writing a wrong model together.

use iterstore::Cluster;
use xxhash_rust::xxh3::Xxh3;

use super::{AppConfig, AppError, RunReport};

/// Streams values into an XXH3-64 digest through a small buffer (the digest of the bytes
/// of every value in turn, little-endian).
pub(crate) struct Digest {
    hasher: Xxh3,
    buf: Vec<u8>,
}

impl Digest {
    /// An empty digest.
    pub(crate) fn new() -> Digest {
        Digest {
            hasher: Xxh3::new(),
            buf: Vec::with_capacity(BUF),
        }
    }

    /// Adds `bytes`.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        if self.buf.len() + bytes.len() > BUF {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
        if bytes.len() > BUF {
            self.hasher.update(bytes);
        } else {
            self.buf.extend_from_slice(bytes);
        }
        self
    }

    /// Adds a `u32`.
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Adds a `u64`.
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// The digest of everything added.
    pub(crate) fn finish(&mut self) -> u64 {
        self.hasher.update(&self.buf);
        self.buf.clear();
        self.hasher.digest()
    }
}

/// The digest of ratings sets (users, items, values' bits, in order).
pub(crate) fn ratings(sets: &[&[iterstore_data::Rating]]) -> u64 {
    let mut d = Digest::new();
    for set in sets {
        d.u64(set.len() as u64);
        for r in *set {
            d.u32(r.user).u32(r.item).u32(r.value.to_bits());
        }
    }
    d.finish()
}

/// The digest of a corpus (vocabulary size, then each document's length and word ids).
pub(crate) fn corpus(c: &iterstore_data::Corpus) -> u64 {
    let mut d = Digest::new();
    d.u32(c.vocab_size).u64(c.docs.len() as u64);
    for doc in &c.docs {
        d.u64(doc.len() as u64);
        for &w in doc {
            d.u32(w);
        }
    }
    d.finish()
}

/// The digest of a graph (vertices, then its edges in order).
pub(crate) fn graph(g: &iterstore_data::Graph) -> u64 {
    let mut d = Digest::new();
    d.u32(g.num_vertices).u64(g.edges.len() as u64);
    for &(s, t) in &g.edges {
        d.u32(s).u32(t);
    }
    d.finish()
}

/// The digest of a labelled image set (classes; each part's shape, pixels and labels).
pub(crate) fn images(set: &iterstore_data::ImageSet) -> u64 {
    let mut d = Digest::new();
    d.u64(set.classes as u64);
    for part in [&set.train, &set.test] {
        d.u64(part.rows as u64).u64(part.cols as u64);
        d.u64(part.pixels.len() as u64).bytes(&part.pixels);
        d.u64(part.labels.len() as u64).bytes(&part.labels);
    }
    d.finish()
}

/// Bytes buffered before they go to the hasher.
const BUF: usize = 64 << 10;

/// Records `digest` as the run's `dataset.input_digest`.
pub(crate) fn input_digest(report: &mut RunReport, digest: u64) {
    report.dataset.insert("input_digest", digest);
}

/// Checks, as a collective of every process of `cluster`, that they all run the same
/// app with the same parameters, iterations and input (`report`'s app, params and
/// dataset, which holds the input's digest). One process agrees with itself.
pub(crate) fn agree(
    cluster: &mut Cluster,
    cfg: &AppConfig,
    report: &RunReport,
) -> Result<(), AppError> {
    let mut fields: Vec<(String, String)> = vec![
        ("app".into(), report.app.to_string()),
        ("--iters".into(), cfg.iterations.to_string()),
    ];
    // The input's sizes first and its digest last: a difference is named by the most
    // telling field (a seed changes the split, hence the digest, too).
    for (name, value) in &report.dataset {
        if *name != "input_digest" {
            fields.push((format!("the input's {name}"), value.to_string()));
        }
    }
    for (name, value) in &report.params {
        fields.push((format!("parameter {name}"), value.to_string()));
    }
    if let Some(digest) = report.dataset.get("input_digest") {
        fields.push(("the input (its digest)".into(), format!("{digest:016x}")));
    }
    let pairs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    cluster.agree(&pairs).map_err(|e| match e {
        iterstore::Error::Disagreement { field, detail } => AppError::Invalid(format!(
            "the processes were given different runs: {field} differs ({detail}); every process must run the same app with the same options on the same data"
        )),
        other => other.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_depends_on_every_byte_and_their_order_not_the_chunking() {
        let whole = Digest::new().bytes(b"abcdef").finish();
        assert_eq!(Digest::new().bytes(b"abc").bytes(b"def").finish(), whole);
        assert_ne!(Digest::new().bytes(b"abcdeg").finish(), whole);
        assert_ne!(Digest::new().bytes(b"bacdef").finish(), whole);
        let big: Vec<u8> = (0..3 * BUF).map(|i| i as u8).collect();
        let one = Digest::new().bytes(&big).finish();
        let mut d = Digest::new();
        for chunk in big.chunks(1000) {
            d.bytes(chunk);
        }
        assert_eq!(d.finish(), one);
    }
}
