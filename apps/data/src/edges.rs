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

/// How much of an offending line an error message quotes.
const QUOTE_CHARS: usize = 60;

/// Loads an edge list from `path` (optionally gzip-compressed).
///
/// Each line is `source target`: exactly two vertex ids, each a non-negative decimal
/// integer, separated by whitespace. Lines whose first non-blank character is `#` or `%`
/// are comments, and blank lines are skipped. Any other line (a header, a third column
/// such as a weight or a timestamp, a non-numeric name) is rejected as
/// `file:line: expected two vertex ids, found "…"`, so that a file of another format is
/// not read as a graph. Vertex ids keep their spelling as labels and get dense ids in
/// order of first appearance.
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
        let (Some(src), Some(dst), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(not_an_edge(path, line_no, line));
        };
        if !is_vertex_id(src) || !is_vertex_id(dst) {
            return Err(not_an_edge(path, line_no, line));
        }
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

/// Whether `token` is a vertex id: a non-empty run of ASCII digits.
fn is_vertex_id(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit())
}

/// The error for a line that is not an edge, quoting (the start of) the line.
fn not_an_edge(path: &Path, line_no: usize, line: &str) -> DataError {
    let (quoted, cut) = input::head(line.trim_end(), QUOTE_CHARS);
    let more = if cut { "…" } else { "" };
    input::malformed(
        path,
        line_no,
        format!(
            "expected two vertex ids, found \"{}{more}\"",
            quoted.trim_end()
        ),
    )
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
    use crate::testutil::TempDir;

    #[test]
    fn comments_and_blank_lines() {
        let dir = TempDir::new("edges-basic");
        let path = dir.write(
            "g.txt",
            "# SNAP style header\n% matrix-market style comment\n\n10 20\n20\t30  \r\n  # indented\n10 10\n",
        );
        let g = load_edges(&path).unwrap();
        assert_eq!(g.labels, vec!["10", "20", "30"]);
        assert_eq!(g.graph.num_vertices, 3);
        assert_eq!(g.graph.edges, vec![(0, 1), (1, 2), (0, 0)]);
    }

    #[test]
    fn labels_keep_their_spelling_and_gzip() {
        let dir = TempDir::new("edges-gz");
        let path = dir.write_gz("g.tsv.gz", "7 007\n007 99999999999999999999\n7 7\n");
        let g = load_graph(&path).unwrap();
        assert_eq!(g.labels, vec!["7", "007", "99999999999999999999"]);
        assert_eq!(g.graph.edges, vec![(0, 1), (1, 2), (0, 0)]);
    }

    /// The error of loading `text` as an edge list.
    fn error_of(name: &str, text: &str) -> (DataError, String) {
        let dir = TempDir::new("edges-bad");
        let err = load_edges(&dir.write(name, text)).unwrap_err();
        let message = err.to_string();
        (err, message)
    }

    #[test]
    fn lines_that_are_not_two_vertex_ids_name_file_line_and_text() {
        for (text, line, found) in [
            ("1 2\n# c\n3\n", 3, "3"),
            ("1 2\n2 3 0.5\n", 2, "2 3 0.5"),
            ("alice bob\n", 1, "alice bob"),
            ("1 -2\n", 1, "1 -2"),
            ("1 2.0\n", 1, "1 2.0"),
            // An LDA-C corpus and a RecBole ratings file are not graphs.
            ("3 0:1 5:2 7:1\n", 1, "3 0:1 5:2 7:1"),
            (
                "user_id:token\titem_id:token\trating:float\n1\t2\t3\n",
                1,
                "user_id:token\titem_id:token\trating:float",
            ),
        ] {
            let (err, message) = error_of("bad.edges", text);
            assert!(
                matches!(err, DataError::Malformed { line: l, .. } if l == line),
                "{text:?}: {err:?}"
            );
            let want = format!("bad.edges:{line}: expected two vertex ids, found \"{found}\"");
            assert!(message.ends_with(&want), "{text:?}: {message}");
        }
    }

    #[test]
    fn long_lines_are_quoted_in_part() {
        let long = format!("{}\n", "1 ".repeat(100));
        let (_, message) = error_of("long.edges", &long);
        assert!(
            message.ends_with(&format!("found \"{}…\"", "1 ".repeat(30).trim_end())),
            "{message}"
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
