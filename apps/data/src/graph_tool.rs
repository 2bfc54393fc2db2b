//! Reading the graph structure out of graph-tool's binary `.gt` format (optionally
//! gzip-compressed, as in graph-tool's `collection` module).
//!
//! Layout, per graph-tool's "The gt file format": the 6-byte magic `⛾ gt`
//! (`e2 9b be 20 67 74`), a version byte (1), an endianness byte (0 little, 1 big), a
//! comment string (u64 length + bytes), a directed flag byte, the vertex count `N` (u64),
//! then for each vertex its out-neighbour list: a u64 length followed by that many vertex
//! indices, each 1, 2, 4 or 8 bytes wide — the narrowest unsigned type whose maximum is
//! at least `N`. Property maps follow; this reader stops before them, so it knows nothing
//! of their encoding.

use std::io::Read;
use std::path::Path;

use super::input::{self, read_exact_or_eof};
use super::{DataError, Graph};

/// The magic string `⛾ gt` in UTF-8.
pub const MAGIC: [u8; 6] = [0xe2, 0x9b, 0xbe, 0x20, 0x67, 0x74];

/// The only format version graph-tool has written.
pub const VERSION: u8 = 1;

/// Bytes decoded per read of a neighbour list.
const CHUNK: usize = 1 << 16;

/// Loads the graph structure of a graph-tool binary file (`.gt`, or gzip-compressed).
///
/// A directed graph's edges are kept as they are. An undirected graph stores each edge
/// once; it is returned as two directed edges, one each way (a self-loop stays one edge).
/// Property maps are ignored. Truncated or inconsistent files give
/// [`DataError::Invalid`] naming the byte offset and what was being read.
pub fn load_graph_tool(path: &Path) -> Result<Graph, DataError> {
    let mut reader = GtReader {
        inner: input::open(path)?,
        path,
        offset: 0,
        big_endian: false,
    };
    reader.read_header()?;
    let directed = match reader.u8("directed flag")? {
        0 => false,
        1 => true,
        other => return Err(reader.bad(format!("directed flag is {other}, expected 0 or 1"))),
    };
    let n = reader.u64("vertex count")?;
    let num_vertices = u32::try_from(n)
        .map_err(|_| reader.bad(format!("{n} vertices do not fit 32-bit vertex ids")))?;
    let width = index_width(n);
    let mut edges = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    for v in 0..num_vertices {
        let degree = reader.u64("out-degree")?;
        let mut left = degree;
        while left > 0 {
            let take = left.min((CHUNK / width) as u64) as usize;
            let bytes = &mut chunk[..take * width];
            reader.fill(bytes, || format!("neighbours of vertex {v}"))?;
            for raw in bytes.chunks_exact(width) {
                let u = decode(raw, reader.big_endian);
                if u >= n {
                    return Err(reader.bad(format!("vertex {v} has neighbour {u}, outside 0..{n}")));
                }
                // u < n <= u32::MAX was checked above.
                let u = u as u32;
                edges.push((v, u));
                if !directed && u != v {
                    edges.push((u, v));
                }
            }
            left -= take as u64;
        }
    }
    Ok(Graph {
        num_vertices,
        edges,
    })
}

/// Bytes per vertex index in the adjacency of a graph with `n` vertices.
fn index_width(n: u64) -> usize {
    if n <= u64::from(u8::MAX) {
        1
    } else if n <= u64::from(u16::MAX) {
        2
    } else if n <= u64::from(u32::MAX) {
        4
    } else {
        8
    }
}

/// Decodes an unsigned integer of `raw.len()` (1, 2, 4 or 8) bytes.
fn decode(raw: &[u8], big_endian: bool) -> u64 {
    let mut value = 0u64;
    if big_endian {
        for &b in raw {
            value = (value << 8) | u64::from(b);
        }
    } else {
        for &b in raw.iter().rev() {
            value = (value << 8) | u64::from(b);
        }
    }
    value
}

/// A byte reader that tracks its offset so errors can say where a file went wrong.
struct GtReader<'p> {
    inner: Box<dyn std::io::BufRead>,
    path: &'p Path,
    offset: u64,
    big_endian: bool,
}

impl GtReader<'_> {
    /// An [`DataError::Invalid`] at the current offset.
    fn bad(&self, message: String) -> DataError {
        input::invalid(
            self.path,
            format!("graph-tool file, byte {}: {message}", self.offset),
        )
    }

    /// Fills `buf` completely or reports truncation while reading `what`.
    fn fill(&mut self, buf: &mut [u8], what: impl FnOnce() -> String) -> Result<(), DataError> {
        match read_exact_or_eof(&mut self.inner, buf) {
            Ok(true) => {
                self.offset += buf.len() as u64;
                Ok(())
            }
            Ok(false) => Err(self.bad(format!("file truncated while reading {}", what()))),
            Err(e) => Err(input::io_error(self.path, e)),
        }
    }

    fn u8(&mut self, what: &str) -> Result<u8, DataError> {
        let mut b = [0u8; 1];
        self.fill(&mut b, || what.to_string())?;
        Ok(b[0])
    }

    fn u64(&mut self, what: &str) -> Result<u64, DataError> {
        let mut b = [0u8; 8];
        self.fill(&mut b, || what.to_string())?;
        Ok(decode(&b, self.big_endian))
    }

    /// Checks magic, version and endianness, and skips the comment.
    fn read_header(&mut self) -> Result<(), DataError> {
        let mut magic = [0u8; 6];
        self.fill(&mut magic, || "magic bytes".to_string())?;
        if magic != MAGIC {
            return Err(input::invalid(
                self.path,
                "not a graph-tool binary file (magic bytes are not '⛾ gt')",
            ));
        }
        let version = self.u8("version")?;
        if version != VERSION {
            return Err(self.bad(format!("unsupported gt format version {version}")));
        }
        self.big_endian = match self.u8("endianness flag")? {
            0 => false,
            1 => true,
            other => return Err(self.bad(format!("endianness flag is {other}, expected 0 or 1"))),
        };
        let len = self.u64("comment length")?;
        let skipped = std::io::copy(&mut (&mut self.inner).take(len), &mut std::io::sink())
            .map_err(|e| input::io_error(self.path, e))?;
        self.offset += skipped;
        if skipped < len {
            return Err(self.bad(format!("file truncated inside the {len}-byte comment")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    /// Serialises a graph the way graph-tool does (no property maps), with `n` vertices
    /// and `adjacency[v]` the out-neighbours of `v`.
    fn gt_bytes(directed: bool, big_endian: bool, n: u64, adjacency: &[Vec<u64>]) -> Vec<u8> {
        let u64_bytes = |x: u64| {
            if big_endian {
                x.to_be_bytes().to_vec()
            } else {
                x.to_le_bytes().to_vec()
            }
        };
        let mut out = MAGIC.to_vec();
        out.push(VERSION);
        out.push(u8::from(big_endian));
        let comment = b"written by the iterstore test";
        out.extend(u64_bytes(comment.len() as u64));
        out.extend(comment);
        out.push(u8::from(directed));
        out.extend(u64_bytes(n));
        let width = index_width(n);
        for v in 0..n as usize {
            let list = adjacency.get(v).cloned().unwrap_or_default();
            out.extend(u64_bytes(list.len() as u64));
            for u in list {
                let full = u64_bytes(u);
                if big_endian {
                    out.extend(&full[8 - width..]);
                } else {
                    out.extend(&full[..width]);
                }
            }
        }
        // One graph property map, which the reader must not need: an int32 named "x".
        out.extend(u64_bytes(1));
        out.push(0);
        out.extend(u64_bytes(1));
        out.push(b'x');
        out.push(0x02);
        out.extend(7i32.to_le_bytes());
        out
    }

    #[test]
    fn directed_little_endian() {
        let dir = TempDir::new("gt-directed");
        let bytes = gt_bytes(true, false, 4, &[vec![1, 2], vec![2], vec![0], vec![]]);
        let path = dir.write_bytes("g.gt", &bytes);
        let g = load_graph_tool(&path).unwrap();
        assert_eq!(g.num_vertices, 4);
        assert_eq!(g.edges, vec![(0, 1), (0, 2), (1, 2), (2, 0)]);
    }

    #[test]
    fn undirected_becomes_both_directions_and_gz_works() {
        let dir = TempDir::new("gt-undirected");
        let bytes = gt_bytes(false, false, 3, &[vec![1, 0], vec![2]]);
        let path = dir.write_gz_bytes("g.gt.gz", &bytes);
        let g = load_graph_tool(&path).unwrap();
        assert_eq!(g.edges, vec![(0, 1), (1, 0), (0, 0), (1, 2), (2, 1)]);
    }

    #[test]
    fn wide_indices_and_big_endian() {
        // 300 vertices need 2-byte indices; 70_000 need 4-byte ones.
        for (n, big_endian) in [(300u64, true), (300, false), (70_000, true)] {
            let dir = TempDir::new("gt-wide");
            let mut adjacency = vec![Vec::new(); 2];
            adjacency[0] = vec![n - 1, 1];
            adjacency[1] = vec![n - 2];
            let path = dir.write_bytes("w.gt", &gt_bytes(true, big_endian, n, &adjacency));
            let g = load_graph_tool(&path).unwrap();
            assert_eq!(g.num_vertices as u64, n);
            let (a, b) = ((n - 1) as u32, (n - 2) as u32);
            assert_eq!(g.edges, vec![(0, a), (0, 1), (1, b)]);
        }
    }

    #[test]
    fn width_boundaries_follow_graph_tool() {
        assert_eq!(index_width(255), 1);
        assert_eq!(index_width(256), 2);
        assert_eq!(index_width(65_535), 2);
        assert_eq!(index_width(65_536), 4);
        assert_eq!(index_width(u64::from(u32::MAX) + 1), 8);
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let dir = TempDir::new("gt-truncated");
        let bytes = gt_bytes(true, false, 4, &[vec![1, 2], vec![2], vec![0], vec![3]]);
        let adjacency_end = bytes.len() - (8 + 1 + 8 + 1 + 1 + 4);
        for cut in 0..adjacency_end {
            let path = dir.write_bytes("t.gt", &bytes[..cut]);
            let err = load_graph_tool(&path).unwrap_err();
            assert!(
                matches!(err, DataError::Invalid { .. }),
                "cut {cut}: {err:?}"
            );
            assert!(err.to_string().contains("t.gt"), "{err}");
        }
        let path = dir.write_bytes("t.gt", &bytes[..adjacency_end - 1]);
        let text = load_graph_tool(&path).unwrap_err().to_string();
        assert!(
            text.contains("truncated while reading neighbours of vertex 3"),
            "{text}"
        );
    }

    #[test]
    fn bad_magic_version_and_out_of_range_neighbour() {
        let dir = TempDir::new("gt-bad");
        let path = dir.write_bytes("m.gt", b"hello world, not a graph");
        assert!(load_graph_tool(&path)
            .unwrap_err()
            .to_string()
            .contains("magic"));

        let mut bytes = gt_bytes(true, false, 2, &[vec![1]]);
        bytes[6] = 9;
        let path = dir.write_bytes("v.gt", &bytes);
        assert!(load_graph_tool(&path)
            .unwrap_err()
            .to_string()
            .contains("version 9"));

        let path = dir.write_bytes("r.gt", &gt_bytes(true, false, 2, &[vec![5]]));
        let text = load_graph_tool(&path).unwrap_err().to_string();
        assert!(text.contains("neighbour 5, outside 0..2"), "{text}");
    }

    #[test]
    fn load_graph_dispatches_and_labels_by_index() {
        let dir = TempDir::new("gt-dispatch");
        let path = dir.write_bytes("d.gt", &gt_bytes(true, false, 3, &[vec![2]]));
        let g = crate::load_graph(&path).unwrap();
        assert_eq!(g.labels, vec!["0", "1", "2"]);
        assert_eq!(g.graph.edges, vec![(0, 2)]);
    }
}
