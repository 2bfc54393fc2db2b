//! PageRank's table layout for one worker: which vertices it reads (grouped by block),
//! where each of its edges accumulates, and which blocks it initialises. Built once per
//! run from the [`Layout`]; it never touches the store. Vertices are table ids throughout.

use super::layout::Layout;
use iterstore_algo::in_edges::InEdges;

/// Constants every worker shares.
pub(super) struct Shape {
    /// Damping factor `d`.
    pub(super) damping: f64,
    /// Number of vertices `N`.
    pub(super) vertices: usize,
    /// Vertices per row of the rank table `B`.
    pub(super) block: usize,
}

/// One worker's fixed view of the graph, built once.
pub(super) struct Plan {
    /// Vertices whose rank the worker reads — the sources of its edges and the dangling
    /// vertices of the blocks it owns — sorted; a vertex's position here is its *slot*.
    pub(super) reads: Vec<u32>,
    /// Out-degree of each slot's vertex as an `f64`, the divisor of its share (0: an
    /// owned dangling vertex).
    pub(super) divisors: Vec<f64>,
    /// The slots of owned dangling vertices, in slot order.
    pub(super) dangling: Vec<u32>,
    /// Each slot's column in its block (`reads[s] % B`).
    pub(super) columns: Vec<u32>,
    /// The blocks holding `reads`, sorted.
    pub(super) read_blocks: Vec<u64>,
    /// Slots of `read_blocks[i]`: `block_starts[i]..block_starts[i + 1]`.
    pub(super) block_starts: Vec<usize>,
    /// The worker's edges grouped by accumulator index, each with its source's slot.
    pub(super) edges: InEdges,
    /// Blocks the worker's edges point into, sorted; accumulator `i·B..(i+1)·B` is block
    /// `target_blocks[i]`.
    pub(super) target_blocks: Vec<u64>,
    /// Blocks whose vertices the worker initialises.
    pub(super) init_blocks: Vec<u64>,
}

/// The worker that initialises each block: the first whose edges point into it, else the
/// owner of the block's first vertex.
pub(super) fn init_writers(layout: &Layout, shape: &Shape) -> Vec<u32> {
    let blocks = shape.vertices.div_ceil(shape.block);
    let mut writer = vec![u32::MAX; blocks];
    for (w, edges) in layout.edges.iter().enumerate() {
        for &(_, v) in edges {
            let block = &mut writer[v as usize / shape.block];
            if *block == u32::MAX {
                *block = w as u32;
            }
        }
    }
    for (block, writer) in writer.iter_mut().enumerate() {
        if *writer == u32::MAX {
            *writer = layout.owner[block * shape.block];
        }
    }
    writer
}

impl Plan {
    pub(super) fn new(layout: &Layout, writers: &[u32], shape: &Shape, w: usize) -> Self {
        let (n, b) = (shape.vertices, shape.block);
        let blocks = n.div_ceil(b);
        let (mine, degrees) = (&layout.edges[w], &layout.degrees);
        let mut slot = vec![u32::MAX; n];
        for &(u, _) in mine {
            slot[u as usize] = 0;
        }
        for v in 0..n {
            if degrees[v] == 0 && layout.owner[v] == w as u32 {
                slot[v] = 0;
            }
        }
        let reads: Vec<u32> = (0..n as u32).filter(|&v| slot[v as usize] == 0).collect();
        let (mut read_blocks, mut block_starts) = (Vec::new(), Vec::new());
        for (i, &v) in reads.iter().enumerate() {
            slot[v as usize] = i as u32;
            let block = (v as usize / b) as u64;
            if read_blocks.last() != Some(&block) {
                read_blocks.push(block);
                block_starts.push(i);
            }
        }
        block_starts.push(reads.len());
        let mut target_pos = vec![u32::MAX; blocks];
        for &(_, v) in mine {
            target_pos[v as usize / b] = 0;
        }
        let mut target_blocks = Vec::new();
        for (block, pos) in target_pos.iter_mut().enumerate() {
            if *pos == 0 {
                *pos = target_blocks.len() as u32;
                target_blocks.push(block as u64);
            }
        }
        let edges: Vec<(u32, u32)> = mine
            .iter()
            .map(|&(u, v)| {
                let acc = target_pos[v as usize / b] as usize * b + v as usize % b;
                let acc = u32::try_from(acc).expect("accumulator index fits u32");
                (slot[u as usize], acc)
            })
            .collect();
        let edges = InEdges::new(target_blocks.len() * b, &edges);
        Self {
            divisors: reads
                .iter()
                .map(|&v| f64::from(degrees[v as usize]))
                .collect(),
            dangling: (0..reads.len() as u32)
                .filter(|&s| degrees[reads[s as usize] as usize] == 0)
                .collect(),
            columns: reads.iter().map(|&v| (v as usize % b) as u32).collect(),
            reads,
            read_blocks,
            block_starts,
            edges,
            target_blocks,
            init_blocks: (0..blocks as u64)
                .filter(|&block| writers[block as usize] == w as u32)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pagerank::GraphPartition;
    use iterstore_data::Graph;

    #[test]
    fn plan_reads_sources_and_owned_dangling_vertices() {
        // 0→1, 1→2, 2→0, 3→2; 4 and 5 dangling; blocks of 2: {0,1} {2,3} {4,5}.
        let g = Graph {
            num_vertices: 6,
            edges: vec![(0, 1), (1, 2), (2, 0), (3, 2)],
        };
        let shape = Shape {
            damping: 0.85,
            vertices: 6,
            block: 2,
        };
        let layout = Layout::new(&g, GraphPartition::Edges, 2, 2);
        let writers = init_writers(&layout, &shape);
        // Block 0 is first targeted by worker 0 (0→1), block 1 by worker 0 (1→2); nobody
        // targets block 2, which worker 1 owns.
        assert_eq!(writers, [0, 0, 1]);
        let p = Plan::new(&layout, &writers, &shape, 1);
        // Worker 1: edges 2→0, 3→2; owns block 2 (vertices 4, 5, both dangling).
        assert_eq!(p.reads, [2, 3, 4, 5]);
        assert_eq!(p.divisors, [1.0, 1.0, 0.0, 0.0]);
        assert_eq!(p.dangling, [2, 3]);
        assert_eq!(p.read_blocks, [1, 2]);
        assert_eq!(p.block_starts, [0, 2, 4]);
        assert_eq!(p.target_blocks, [0, 1]);
        assert_eq!(p.edges, InEdges::new(4, &[(0, 0), (1, 2)]));
        assert_eq!(p.init_blocks, [2]);
    }
}
