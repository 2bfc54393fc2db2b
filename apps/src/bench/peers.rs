//! Peer systems timed on the same data: LIBMF (the `libmf` crate) for MF, and Python
//! scripts in `tools/` for LDA and PageRank, skipped with a message when unavailable.
