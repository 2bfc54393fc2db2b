//! Seeded synthetic inputs with realistic skew, at sizes from "tiny" (milliseconds) to
//! "xlarge" (tens of millions of records), one generator per app:
//!
//! - [`planted_ratings`] / [`RatingsSpec`]: ratings from planted low-rank factors with
//!   Zipf-skewed item popularity and log-normal user activity (MF).
//! - [`zipf_corpus`] / [`CorpusSpec`]: documents from the LDA generative process with
//!   planted topics on disjoint, Zipf-shaped word sets, returned as [`PlantedTopics`] (LDA).
//! - [`power_law_graph`] / [`GraphSpec`]: a directed Chung–Lu-style graph with power-law
//!   out- and in-degrees and dangling vertices (PageRank).
//! - [`prototype_images`] / [`ImageSpec`]: labeled images, each its class's planted
//!   prototype at a random contrast plus Gaussian noise (DNN).
//!
//! Every generator is a pure function of its parameters: the same spec and seed give the
//! same output on every platform (`StdRng::seed_from_u64`). Each spec has a `preset(size)`
//! accepting one of [`SIZES`]. This module knows nothing of files or the store.

mod corpus;
mod graph;
mod images;
mod ratings;
mod sampling;

pub use corpus::{zipf_corpus, CorpusSpec, PlantedTopics};
pub use graph::{power_law_graph, GraphSpec};
pub use images::{prototype_images, ImageSpec};
pub use ratings::{planted_ratings, RatingsSpec};

/// The preset size names, smallest first; consecutive sizes differ by roughly 3–10×.
pub const SIZES: [&str; 5] = ["tiny", "small", "medium", "large", "xlarge"];

/// The position of `size` in [`SIZES`] (case-insensitive), or an error listing them.
pub(crate) fn size_index(size: &str) -> Result<usize, String> {
    SIZES
        .iter()
        .position(|s| s.eq_ignore_ascii_case(size))
        .ok_or_else(|| {
            format!(
                "unknown size '{size}', expected one of {}",
                SIZES.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_names() {
        assert_eq!(size_index("tiny"), Ok(0));
        assert_eq!(size_index("XLarge"), Ok(4));
        let err = size_index("huge").unwrap_err();
        assert!(err.contains("huge") && err.contains("tiny, small"), "{err}");
    }

    #[test]
    fn every_preset_exists_and_validates() {
        for size in SIZES {
            RatingsSpec::preset(size).unwrap().validate().unwrap();
            CorpusSpec::preset(size).unwrap().validate().unwrap();
            GraphSpec::preset(size).unwrap().validate().unwrap();
            ImageSpec::preset(size).unwrap().validate().unwrap();
        }
        assert!(GraphSpec::preset("nope").is_err());
    }
}
