//! How PageRank's edges and vertices are laid out over the workers and the rank table's
//! rows: which worker holds which edges, which worker owns each vertex (propagates it if it
//! is dangling, initialises its block if no edge points into it), and the order of the
//! vertices in the rank table. Built once per run, the same on every process.

use super::GraphPartition;
use iterstore_algo::graph_partition::partition_vertices;
use iterstore_algo::pagerank::out_degrees;
use iterstore_algo::partition;
use iterstore_data::Graph;

/// The layout of one run: everything in *table ids* (a vertex's position in the rank
/// table), which are the graph's ids for [`GraphPartition::Edges`].
pub(super) struct Layout {
    /// The table id of each graph vertex.
    pub(super) table_id: Vec<u32>,
    /// Per worker: its edges `(u, v)` in table ids, in the graph's order.
    pub(super) edges: Vec<Vec<(u32, u32)>>,
    /// Per table id: the worker that owns the vertex.
    pub(super) owner: Vec<u32>,
    /// Per table id: the vertex's out-degree.
    pub(super) degrees: Vec<u32>,
    /// Edges between vertices of different workers ([`GraphPartition::Communities`]).
    pub(super) cut_edges: Option<usize>,
}

impl Layout {
    /// The layout `how` gives `graph` over `workers` workers with blocks of `block`.
    pub(super) fn new(graph: &Graph, how: GraphPartition, workers: usize, block: usize) -> Self {
        match how {
            GraphPartition::Edges => Self::by_edges(graph, workers, block),
            GraphPartition::Communities => Self::by_communities(graph, workers),
        }
    }

    /// Worker `w` holds the edges `partition(E, W, w)` and owns the vertices of the blocks
    /// `partition(⌈N/B⌉, W, w)`; table ids are graph ids.
    fn by_edges(graph: &Graph, workers: usize, block: usize) -> Self {
        let n = graph.num_vertices as usize;
        let blocks = n.div_ceil(block);
        let mut owner = vec![0u32; n];
        for w in 0..workers {
            let owned = partition(blocks, workers, w);
            owner[owned.start * block..(owned.end * block).min(n)].fill(w as u32);
        }
        Self {
            table_id: (0..n as u32).collect(),
            edges: (0..workers)
                .map(|w| graph.edges[partition(graph.edges.len(), workers, w)].to_vec())
                .collect(),
            owner,
            degrees: out_degrees(graph),
            cut_edges: None,
        }
    }

    /// Vertices split by [`partition_vertices`] (weighted by the in-edges a worker sums,
    /// plus one); worker `w` owns its part's vertices and holds their in-edges. Table ids
    /// put each worker's vertices together, and within a worker group them by the set of
    /// workers that read them (their own and their out-neighbours' owners), so that a
    /// block of the rank table is read by as few workers as the vertices in it.
    fn by_communities(graph: &Graph, workers: usize) -> Self {
        let n = graph.num_vertices as usize;
        let mut weight = vec![1.0; n];
        for &(_, v) in &graph.edges {
            weight[v as usize] += 1.0;
        }
        let split = partition_vertices(graph, workers, &weight);
        let part = &split.part;
        // The readers of a vertex as a bit set (worker mod 64: past 64 workers vertices of
        // different reader sets may share a bit, which only loosens the grouping).
        let bit = |w: u32| 1u64 << (w % 64);
        let mut readers: Vec<u64> = part.iter().map(|&p| bit(p)).collect();
        for &(u, v) in &graph.edges {
            readers[u as usize] |= bit(part[v as usize]);
        }
        let mut by_table: Vec<u32> = (0..n as u32).collect();
        by_table.sort_by_key(|&v| (part[v as usize], readers[v as usize], v));
        let mut table_id = vec![0u32; n];
        for (id, &v) in by_table.iter().enumerate() {
            table_id[v as usize] = id as u32;
        }
        let mut edges = vec![Vec::new(); workers];
        for &(u, v) in &graph.edges {
            edges[part[v as usize] as usize].push((table_id[u as usize], table_id[v as usize]));
        }
        let degrees = out_degrees(graph);
        Self {
            owner: by_table.iter().map(|&v| part[v as usize]).collect(),
            degrees: by_table.iter().map(|&v| degrees[v as usize]).collect(),
            table_id,
            edges,
            cut_edges: Some(split.cut_edges),
        }
    }

    /// `ranks` by table id, rearranged by graph id.
    pub(super) fn to_graph_order(&self, ranks: &[f64]) -> Vec<f64> {
        self.table_id.iter().map(|&id| ranks[id as usize]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn communities_hold_in_edges_and_relabel_consistently() {
        // Two triangles joined by 2→3, ids interleaved so contiguous ids split both.
        let g = Graph {
            num_vertices: 6,
            edges: vec![(0, 2), (2, 4), (4, 0), (1, 3), (3, 5), (5, 1), (2, 3)],
        };
        let l = Layout::new(&g, GraphPartition::Communities, 2, 2);
        assert_eq!(l.cut_edges, Some(1));
        let mut ids = l.table_id.clone();
        ids.sort_unstable();
        assert_eq!(ids, (0..6).collect::<Vec<u32>>(), "a permutation");
        for (w, edges) in l.edges.iter().enumerate() {
            for &(_, v) in edges {
                assert_eq!(
                    l.owner[v as usize], w as u32,
                    "worker {w} holds in-edges only"
                );
            }
        }
        assert_eq!(l.edges.iter().map(Vec::len).sum::<usize>(), g.edges.len());
        let ranks: Vec<f64> = (0..6).map(f64::from).collect();
        let back = l.to_graph_order(&ranks);
        for (v, &rank) in back.iter().enumerate() {
            assert_eq!(rank, f64::from(l.table_id[v]));
        }
        // Each worker's vertices are contiguous in the table.
        let first_of_1 = l.owner.iter().position(|&o| o == 1).unwrap();
        assert!(
            l.owner[first_of_1..].iter().all(|&o| o == 1),
            "{:?}",
            l.owner
        );
    }

    #[test]
    fn edge_ranges_keep_graph_ids_and_block_owners() {
        let g = Graph {
            num_vertices: 5,
            edges: vec![(0, 1), (1, 2), (2, 3), (3, 4)],
        };
        let l = Layout::new(&g, GraphPartition::Edges, 2, 2);
        assert_eq!(l.table_id, [0, 1, 2, 3, 4]);
        assert_eq!(l.edges, [vec![(0, 1), (1, 2)], vec![(2, 3), (3, 4)]]);
        // Blocks {0,1} {2,3} {4}: worker 0 owns block 0, worker 1 blocks 1 and 2.
        assert_eq!(l.owner, [0, 0, 1, 1, 1]);
        assert_eq!(l.degrees, [1, 1, 1, 1, 0]);
    }
}
