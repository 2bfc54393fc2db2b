//! Loading directed graphs (PageRank input) from whitespace-separated edge lists, keeping
//! each vertex's label from the file so results can be written back in the file's terms;
//! and [`load_graph`], which dispatches between edge lists and graph-tool binaries.
//!
//! This module knows nothing of PageRank; the binary `.gt` format lives in
//! [`super::graph_tool`].

use std::path::Path;

use super::input::{self, IdMap, LineReader};
use super::{graph_tool, DataError, Graph};

/// A graph together with the label each dense vertex id had in its source file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabeledGraph {
    /// The graph, with dense vertex ids `0..num_vertices`.
    pub graph: Graph,
    /// `labels[v]` is vertex `v`'s name in the file (for graph-tool files, its index).
    pub labels: Vec<String>,
}

/// Loads an edge list from `path` (optionally gzip-compressed).
///
/// Each line is `source target [anything …]`, fields separated by whitespace; lines whose
/// first non-blank character is `#` or `%` are comments, and blank lines are skipped.
/// Vertex names are arbitrary tokens, given dense ids in order of first appearance.
pub fn load_edges(path: &Path) -> Result<LabeledGraph, DataError> {
    let mut lines = LineReader::new(path, input::open(path)?);
    let mut vertices = IdMap::default();
    let mut edges = Vec::new();
    while let Some((line_no, line)) = lines.next_line()? {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with('%') {
            continue;
        }
        let mut fields = line.split_ascii_whitespace();
        let (Some(src), Some(dst)) = (fields.next(), fields.next()) else {
            return Err(input::malformed(
                path,
                line_no,
                "expected at least 2 fields (source target), found 1",
            ));
        };
        let too_many = || input::malformed(path, line_no, "more than u32::MAX distinct vertices");
        let src = vertices.id(src).ok_or_else(too_many)?;
        let dst = vertices.id(dst).ok_or_else(too_many)?;
        edges.push((src, dst));
    }
    if edges.is_empty() {
        return Err(input::invalid(path, "no edges found"));
    }
    Ok(LabeledGraph {
        graph: Graph {
            num_vertices: vertices.len(),
            edges,
        },
        labels: vertices.into_labels(),
    })
}

/// Whether `path` names a graph-tool binary (`.gt` or `.gt.gz`, any case).
pub fn is_graph_tool_path(path: &Path) -> bool {
    let name = input::lower_file_name(path);
    name.ends_with(".gt") || name.ends_with(".gt.gz")
}

/// Loads a graph from `path`: a graph-tool binary if the name ends in `.gt` or `.gt.gz`
/// (see [`graph_tool::load_graph_tool`]; labels are then the vertex indices), otherwise an
/// edge list (see [`load_edges`]).
pub fn load_graph(path: &Path) -> Result<LabeledGraph, DataError> {
    if is_graph_tool_path(path) {
        let graph = graph_tool::load_graph_tool(path)?;
        let labels = (0..graph.num_vertices).map(|v| v.to_string()).collect();
        Ok(LabeledGraph { graph, labels })
    } else {
        load_edges(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::TempDir;

    #[test]
    fn comments_blank_lines_and_extra_columns() {
        let dir = TempDir::new("edges-basic");
        let path = dir.write(
            "g.txt",
            "# SNAP style header\n% matrix-market style comment\n\n10 20\n20\t30 0.5 x\n  # indented\n10 10\n",
        );
        let g = load_edges(&path).unwrap();
        assert_eq!(g.labels, vec!["10", "20", "30"]);
        assert_eq!(g.graph.num_vertices, 3);
        assert_eq!(g.graph.edges, vec![(0, 1), (1, 2), (0, 0)]);
    }

    #[test]
    fn token_labels_and_gzip() {
        let dir = TempDir::new("edges-gz");
        let path = dir.write_gz("g.tsv.gz", "alice bob\nbob carol\ncarol alice\n");
        let g = load_graph(&path).unwrap();
        assert_eq!(g.labels, vec!["alice", "bob", "carol"]);
        assert_eq!(g.graph.edges.len(), 3);
    }

    #[test]
    fn single_field_line_names_file_and_line() {
        let dir = TempDir::new("edges-bad");
        let path = dir.write("bad.edges", "1 2\n# c\n3\n");
        let err = load_edges(&path).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, DataError::Malformed { line: 3, .. }),
            "{err:?}"
        );
        assert!(
            text.contains("bad.edges:3: expected at least 2 fields"),
            "{text}"
        );
    }

    #[test]
    fn only_comments_is_invalid() {
        let dir = TempDir::new("edges-empty");
        let path = dir.write("empty.txt", "# nothing\n");
        assert!(matches!(load_edges(&path), Err(DataError::Invalid { .. })));
    }

    #[test]
    fn dispatch_by_extension() {
        assert!(is_graph_tool_path(Path::new("/x/pgp-strong-2009.gt.gz")));
        assert!(is_graph_tool_path(Path::new("a.GT")));
        assert!(!is_graph_tool_path(Path::new("a.gtx")));
        assert!(!is_graph_tool_path(Path::new("edges.txt.gz")));
    }
}
