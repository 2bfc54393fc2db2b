//! Entry points for the loader fuzz targets in `fuzz/` and for the test that replays their
//! corpora: each writes the input to a scratch file, runs one public loader of
//! this crate on it, and **panics** when the loader panics or returns data that
//! breaks the invariants the apps rely on (dense ids below the counts it reports, sizes
//! within the limits that keep a model's allocation bounded). Rejecting the input with a
//! [`DataError`] is always fine, if it names the file and quotes at most an excerpt of it.
//!
//! **Not a stable API.** Hidden from the docs; it may change in any release. It knows
//! the loaders only through their public functions.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{
    load_corpus, load_graph, load_idx_images, load_idx_labels, load_ratings, load_svmlight, Corpus,
    DataError, LabeledGraph, Ratings, SparseSet, MAX_CLASSES, MAX_FEATURES, MAX_VOCAB,
};

/// The longest error message a loader may give beyond the file's path: input is quoted
/// by excerpt, never whole.
const MAX_ERROR_CHARS: usize = 600;

/// A file in the temp dir holding the fuzz input, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    /// Writes `data` to a fresh file whose name ends in `name` (loaders sniff names).
    fn new(name: &str, data: &[u8]) -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let file = format!("iterstore-fuzz-{}-{n}-{name}", std::process::id());
        let path = std::env::temp_dir().join(file);
        std::fs::write(&path, data).expect("write the scratch file");
        Scratch(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `load` on `data` written to a file named after the choice the first byte makes
/// among `names` (the rest of the input is the file).
fn with_file<T>(
    data: &[u8],
    names: &[&str],
    load: impl FnOnce(&Path) -> Result<T, DataError>,
) -> Option<T> {
    let (&pick, contents) = data.split_first()?;
    let file = Scratch::new(names[usize::from(pick) % names.len()], contents);
    match load(file.path()) {
        Ok(loaded) => Some(loaded),
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains("iterstore-fuzz-"),
                "error does not name the file: {text}"
            );
            let path_len = file.path().as_os_str().len();
            assert!(
                text.chars().count() <= path_len + MAX_ERROR_CHARS,
                "an error of {} characters quotes too much of the input: {}…",
                text.chars().count(),
                text.chars().take(200).collect::<String>()
            );
            None
        }
    }
}

/// Ratings ([`load_ratings`]) under every name the format detection looks at. Panics
/// unless a successful load is non-empty with finite values and user and item ids below
/// `num_users` / `num_items`, each of which is no more than the number of ratings.
pub fn ratings(data: &[u8]) {
    let names = ["u.data", "r.csv", "r.inter", "ratings.dat", "r.data.gz"];
    let Some(Ratings {
        ratings,
        num_users,
        num_items,
    }) = with_file(data, &names, load_ratings)
    else {
        return;
    };
    assert!(!ratings.is_empty());
    assert!(num_users as usize <= ratings.len() && num_items as usize <= ratings.len());
    for r in &ratings {
        assert!(
            r.user < num_users && r.item < num_items,
            "{r:?} out of range"
        );
        assert!(r.value.is_finite());
    }
}

/// Bag-of-words corpora ([`load_corpus`]), LDA-C and UCI. Panics unless every word id of
/// a successful load is below `vocab_size`, which is at most [`MAX_VOCAB`] (a word id or
/// a header may not ask for a larger model).
pub fn corpus(data: &[u8]) {
    let names = ["c.ldac", "docword.c.txt", "c.txt", "c.ldac.gz"];
    let Some(Corpus { docs, vocab_size }) = with_file(data, &names, load_corpus) else {
        return;
    };
    assert!(vocab_size <= MAX_VOCAB, "vocabulary of {vocab_size} words");
    for doc in &docs {
        assert!(
            doc.iter().all(|&w| w < vocab_size),
            "word id over {vocab_size}"
        );
    }
}

/// Text edge lists ([`load_graph`] on a non-`.gt` name). Panics unless a successful load
/// has edges, a label per vertex, no more vertices than edge ends and every end below
/// `num_vertices`.
pub fn edges(data: &[u8]) {
    let names = ["g.txt", "g.edges.gz"];
    let Some(graph) = with_file(data, &names, load_graph) else {
        return;
    };
    assert!(!graph.graph.edges.is_empty());
    assert!(graph.graph.num_vertices as usize <= 2 * graph.graph.edges.len());
    check_graph(&graph);
}

/// graph-tool binaries ([`load_graph`] on a `.gt` name). Panics unless every edge end of
/// a successful load is below `num_vertices`, with one label per vertex.
pub fn graph_tool(data: &[u8]) {
    let names = ["g.gt", "g.gt.gz"];
    if let Some(graph) = with_file(data, &names, load_graph) {
        check_graph(&graph);
    }
}

/// IDX files ([`load_idx_images`] on an `idx3` name, [`load_idx_labels`] on an `idx1`
/// name, plain or gzipped). Panics unless a successful image load holds whole images
/// (a multiple of `rows × cols` pixels, both at least 1) and no labels.
pub fn idx(data: &[u8]) {
    let names = [
        "i.idx3-ubyte",
        "i.idx3-ubyte.gz",
        "l.idx1-ubyte",
        "l.idx1-ubyte.gz",
    ];
    let loaded = with_file(data, &names, |path| {
        if path.to_string_lossy().contains("idx3") {
            load_idx_images(path).map(Some)
        } else {
            load_idx_labels(path).map(|_| None)
        }
    });
    if let Some(Some(images)) = loaded {
        let per = images.pixels_per_image();
        assert!(
            images.rows >= 1 && images.cols >= 1,
            "{} x {}",
            images.rows,
            images.cols
        );
        assert_eq!(images.pixels.len() % per, 0, "a partial image");
        assert!(images.labels.is_empty());
    }
}

/// The feature count [`svmlight`] declares for a file named like a test file.
const DECLARED_FEATURES: u32 = 16;

/// LIBSVM / svmlight files ([`load_svmlight`]): a `train` name without a declared feature
/// count, a `test` name with 16 declared features, plain or gzipped. Panics unless a
/// successful load is a well-formed CSR matrix (`len() + 1` non-decreasing offsets from 0
/// to the entry count, strictly increasing feature ids per sample, all below `features`,
/// finite values) with at most [`MAX_FEATURES`] features (exactly the declared count when
/// given) and every label below `classes`, which is at most [`MAX_CLASSES`] and at most the
/// sample count, with one increasing original label per class and every class used.
pub fn svmlight(data: &[u8]) {
    let names = ["train.svm", "test.svm", "train.svm.gz", "test.svm.gz"];
    let declared = |path: &Path| {
        let test = path.to_string_lossy().contains("test");
        test.then_some(DECLARED_FEATURES)
    };
    let Some(set) = with_file(data, &names, |path| load_svmlight(path, declared(path))) else {
        return;
    };
    let SparseSet {
        row_starts,
        indices,
        values,
        labels,
        classes,
        class_labels,
        features,
    } = &set;
    assert!(!labels.is_empty());
    assert!(*features <= MAX_FEATURES, "{features} features");
    // `with_file` named the file after the first byte.
    if let Some(declared) = declared(Path::new(names[usize::from(data[0]) % names.len()])) {
        assert_eq!(*features, declared);
    }
    assert_eq!(row_starts.len(), labels.len() + 1);
    assert_eq!(row_starts.first(), Some(&0));
    assert_eq!(row_starts.last(), Some(&(indices.len() as u64)));
    assert_eq!(indices.len(), values.len());
    assert!(
        row_starts.windows(2).all(|w| w[0] <= w[1]),
        "offsets decrease"
    );
    for i in 0..set.len() {
        let (ids, vals) = set.row(i);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "sample {i}: {ids:?}");
        assert!(
            ids.iter().all(|&j| j < *features),
            "sample {i}: id over {features}"
        );
        assert!(vals.iter().all(|v| v.is_finite()), "sample {i}: {vals:?}");
    }
    assert!(*classes <= MAX_CLASSES && *classes as usize <= labels.len());
    assert_eq!(class_labels.len(), *classes as usize);
    assert!(
        class_labels.windows(2).all(|w| w[0] < w[1]),
        "{class_labels:?}"
    );
    let mut used = vec![false; *classes as usize];
    for &label in labels {
        assert!(label < *classes, "label {label} of {classes} classes");
        used[label as usize] = true;
    }
    assert!(used.iter().all(|&u| u), "a class without samples");
}

fn check_graph(g: &LabeledGraph) {
    let n = g.graph.num_vertices;
    assert_eq!(g.labels.len(), n as usize);
    for &(s, t) in &g.graph.edges {
        assert!(s < n && t < n, "edge ({s}, {t}) outside 0..{n}");
    }
}
