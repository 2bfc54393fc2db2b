//! Input data for the bundled iterstore apps. The in-memory types every app consumes are
//! [`Ratings`] (MF), [`Corpus`] (LDA), [`Graph`] (PageRank), [`ImageSet`] (the DNN) and
//! [`SparseSet`] (logistic regression); loaders such as [`load_ratings`], [`load_corpus`],
//! [`load_graph`], [`load_fashion_mnist`] and [`load_svmlight`] read real file formats into them and fail with a [`DataError`];
//! the [`synth`] generators ([`RatingsSpec`], [`CorpusSpec`], [`GraphSpec`], [`ImageSpec`])
//! make seeded synthetic data of a preset size; [`split_ratings`] is a seeded train/test
//! split.
//!
//! This crate knows nothing of the parameter server: it turns files (or a seed) into plain
//! vectors. Loaders never panic on input; a malformed line is a [`DataError`] naming the
//! file and the 1-based line number.
//!
//! Code map (every loader reads gzip-compressed input transparently):
//!
//! - `ratings`: [`load_ratings`] for MovieLens `u.data`, CSV and RecBole `.inter` files.
//! - `bow`: [`load_corpus`] for LDA-C `.ldac` and UCI `docword.*.txt` corpora.
//! - `edges`: [`load_edges`] for text edge lists (keeping vertex labels) and
//!   [`load_graph`], which also dispatches `.gt`/`.gt.gz` files to `graph_tool`'s
//!   [`load_graph_tool`].
//! - `idx`: [`load_fashion_mnist`], [`load_idx_images`] and [`load_idx_labels`] for the
//!   (gzipped) IDX files of Fashion-MNIST (DNN input); errors name the file and what is
//!   wrong with it (magic, dimensions, truncation) instead of a line.
//! - `svmlight`: [`load_svmlight`] for LIBSVM / svmlight `label index:value …` files
//!   (logistic regression input), labels remapped to dense classes.
//! - `split`: [`split_ratings`], a seeded train/test split.
//! - [`synth`]: seeded generators with size presets.
//! - `input`: shared file opening, line reading and id remapping.
//! - `fuzzing` (feature `fuzzing`, hidden): the properties the loaders' fuzz targets in
//!   `fuzz/` check, also replayed over their corpora by this crate's tests
//!   (`tests/fuzz_corpus.rs`).
//!
//! Real datasets for these loaders are fetched by `tools/fetch-data` into
//! `${ITERSTORE_DATA:-~/.cache/iterstore-data}`, outside the repository.

#![warn(missing_docs)]

use std::path::PathBuf;

/// One observed rating of an item by a user (MF input).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rating {
    /// Dense user index in `0..num_users`.
    pub user: u32,
    /// Dense item index in `0..num_items`.
    pub item: u32,
    /// The rating value.
    pub value: f32,
}

/// A set of ratings with dense, zero-based user and item ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ratings {
    /// The observed ratings.
    pub ratings: Vec<Rating>,
    /// Number of distinct users (ids are `0..num_users`).
    pub num_users: u32,
    /// Number of distinct items (ids are `0..num_items`).
    pub num_items: u32,
}

/// A bag-of-words corpus (LDA input): each document is its token list of word ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Corpus {
    /// Documents; each is the sequence of word ids of its tokens (a word counted `n` times
    /// appears `n` times).
    pub docs: Vec<Vec<u32>>,
    /// Vocabulary size (word ids are `0..vocab_size`).
    pub vocab_size: u32,
}

/// A directed graph (PageRank input) with dense vertex ids.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Graph {
    /// Number of vertices (ids are `0..num_vertices`).
    pub num_vertices: u32,
    /// Directed edges `(source, target)`.
    pub edges: Vec<(u32, u32)>,
}

/// Labeled images (DNN input): `len()` images of `rows × cols` one-byte pixels, row-major,
/// one after the other, and one class label per image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Images {
    /// Pixel rows per image.
    pub rows: usize,
    /// Pixel columns per image.
    pub cols: usize,
    /// Every image's `rows × cols` pixels in turn (0 is background, 255 full intensity).
    pub pixels: Vec<u8>,
    /// Each image's class.
    pub labels: Vec<u8>,
}

impl Images {
    /// Pixels per image.
    pub fn pixels_per_image(&self) -> usize {
        self.rows * self.cols
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.pixels
            .len()
            .checked_div(self.pixels_per_image())
            .unwrap_or(0)
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pixels of image `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.pixels_per_image();
        &self.pixels[i * n..(i + 1) * n]
    }
}

/// A classification data set of images: training and test images of one size, labels in
/// `0..classes`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImageSet {
    /// The training images.
    pub train: Images,
    /// The held-out test images.
    pub test: Images,
    /// The number of classes.
    pub classes: usize,
}

/// Sparse labeled samples (logistic regression input) in compressed sparse row form:
/// sample `i` has the features `indices[row_starts[i]..row_starts[i + 1]]` (0-based ids,
/// strictly increasing) with the `values` at the same positions, and the class
/// `labels[i]`. Features not listed are zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SparseSet {
    /// Where each sample's entries start in `indices` and `values`, plus the total number
    /// of entries at the end: `len() + 1` non-decreasing offsets starting at 0.
    pub row_starts: Vec<u64>,
    /// The 0-based feature id of every entry, all below `features` (a file's 1-based
    /// index `j` is feature `j - 1`).
    pub indices: Vec<u32>,
    /// The value of every entry (finite).
    pub values: Vec<f32>,
    /// Each sample's dense class in `0..classes`.
    pub labels: Vec<u32>,
    /// The number of classes (distinct labels in the file, each used by some sample).
    pub classes: u32,
    /// The original label of each dense class, increasing: class `c` was written
    /// `class_labels[c]` in the file.
    pub class_labels: Vec<i64>,
    /// The number of features (ids are `0..features`): the declared count, or the largest
    /// index in the file.
    pub features: u32,
}

impl SparseSet {
    /// Number of samples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Number of stored entries (nonzero features, or explicit zeros) over all samples.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The feature ids and values of sample `i`.
    ///
    /// # Panics
    /// If `i >= len()`.
    pub fn row(&self, i: usize) -> (&[u32], &[f32]) {
        // Offsets are at most `nnz()`, which fits usize as the vectors exist.
        let range = self.row_starts[i] as usize..self.row_starts[i + 1] as usize;
        (&self.indices[range.clone()], &self.values[range])
    }
}

/// Why loading a data file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line of the file is malformed.
    #[error("{path}:{line}: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// The file is well-formed but unusable (for example empty).
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

mod bow;
mod edges;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod graph_tool;
mod idx;
mod input;
mod ratings;
#[cfg(test)]
mod real_data;
mod split;
mod svmlight;
pub mod synth;
#[cfg(test)]
mod testutil;

pub use bow::{load_corpus, load_corpus_with_format, CorpusFormat, MAX_COUNT, MAX_VOCAB};
pub use edges::{is_graph_tool_path, load_edges, load_graph, LabeledGraph};
pub use graph_tool::load_graph_tool;
pub use idx::{
    fashion_mnist_paths, load_fashion_mnist, load_idx_images, load_idx_labels, load_labeled,
    write_fashion_mnist, FASHION_MNIST_CLASSES, FASHION_MNIST_FILES,
};
pub use input::MAX_LINE_BYTES;
pub use ratings::{load_ratings, load_ratings_with_format, RatingsFormat};
pub use split::split_ratings;
pub use svmlight::{load_svmlight, MAX_CLASSES, MAX_FEATURES};
pub use synth::{
    planted_ratings, power_law_graph, prototype_images, zipf_corpus, CorpusSpec, GraphSpec,
    ImageSpec, PlantedTopics, RatingsSpec,
};
