//! Checks the loaders against the real datasets that `tools/fetch-data` caches outside the
//! repository (`$ITERSTORE_DATA`, default `~/.cache/iterstore-data`).
//!
//! The tests are `#[ignore]`d because the data is not in the repository; run them with
//! `cargo test -p iterstore-data real_data -- --ignored --nocapture` after fetching.
//! A dataset that has not been fetched is reported and skipped, not failed.

use std::path::PathBuf;

use super::{load_corpus, load_fashion_mnist, load_graph, load_ratings};

/// The data directory `tools/fetch-data` writes to.
fn data_dir() -> PathBuf {
    match std::env::var_os("ITERSTORE_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/iterstore-data")
        }
    }
}

/// `relative` under the data directory, or `None` (with a note) if it was not fetched.
fn fetched(relative: &str) -> Option<PathBuf> {
    let path = data_dir().join(relative);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipping {}: run tools/fetch-data first", path.display());
        None
    }
}

#[test]
#[ignore = "needs tools/fetch-data movielens"]
fn movielens_100k() {
    let Some(path) = fetched("movielens/ml-100k.inter") else {
        return;
    };
    let r = load_ratings(&path).unwrap();
    println!(
        "{}: {} users, {} items, {} ratings",
        path.display(),
        r.num_users,
        r.num_items,
        r.ratings.len()
    );
    assert_eq!(
        (r.num_users, r.num_items, r.ratings.len()),
        (943, 1682, 100_000)
    );
    assert!(r.ratings.iter().all(|x| (1.0..=5.0).contains(&x.value)));
}

#[test]
#[ignore = "needs tools/fetch-data nyt reuters"]
fn bag_of_words_corpora() {
    for name in ["nyt/nyt.ldac", "reuters/reuters.ldac"] {
        let Some(path) = fetched(name) else {
            continue;
        };
        let c = load_corpus(&path).unwrap();
        let tokens: usize = c.docs.iter().map(Vec::len).sum();
        println!(
            "{}: {} docs, vocab {}, {} tokens",
            path.display(),
            c.docs.len(),
            c.vocab_size,
            tokens
        );
        assert!(!c.docs.is_empty() && c.vocab_size > 0 && tokens > 0);
        // The vocabulary files list one word per id.
        let vocab = path.with_extension("tokens");
        if let Ok(words) = std::fs::read_to_string(&vocab) {
            assert_eq!(
                words.lines().count(),
                c.vocab_size as usize,
                "{}",
                vocab.display()
            );
        }
    }
}

#[test]
#[ignore = "needs tools/fetch-data graphs"]
fn graph_tool_collection() {
    let Some(dir) = fetched("graphs") else {
        return;
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| super::is_graph_tool_path(p))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no .gt.gz files in {}", dir.display());
    for path in paths {
        let g = load_graph(&path).unwrap();
        let n = g.graph.num_vertices;
        assert!(g.graph.edges.iter().all(|&(s, t)| s < n && t < n));
        println!(
            "{}: {} vertices, {} directed edges",
            path.display(),
            g.graph.num_vertices,
            g.graph.edges.len()
        );
    }
}

#[test]
#[ignore = "needs tools/fetch-data fashion-mnist"]
fn fashion_mnist() {
    let Some(dir) = fetched("fashion-mnist") else {
        return;
    };
    let set = load_fashion_mnist(&dir).unwrap();
    assert_eq!((set.train.rows, set.train.cols), (28, 28));
    assert_eq!((set.train.len(), set.test.len()), (60_000, 10_000));
    // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
    for c in 0..10u8 {
        assert_eq!(set.train.labels.iter().filter(|&&l| l == c).count(), 6_000);
        assert_eq!(set.test.labels.iter().filter(|&&l| l == c).count(), 1_000);
    }
}
