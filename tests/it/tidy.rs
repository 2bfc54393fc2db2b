//! Tidy checks of the repository's own layout, in the manner of rust-analyzer's tidy
//! tests: conventions that a review would otherwise have to catch.
//!
//! - **Layers.** Every module of the core crate sits in one layer of [`LAYERS`]; an import
//!   (any `crate::` path outside comments, test modules included) may name its own layer
//!   or one below, never one above, and the modules' imports form no cycle.
//! - **Defining paths.** Code inside the crate imports an item from the module that
//!   defines it (`crate::table::Table`), never through the crate root's re-exports
//!   (`crate::Table`): `lib.rs` is the facade for users, and imports through it would hide
//!   the direction of a dependency.
//!
//! - **Apps as crates.** `apps/` holds at least four crates, and only the CLI's depends on
//!   clap.
//! - **Small files.** No Rust file of the libraries (`src/`, `benches/`, `apps/`, `perf/`, `tune/`) has
//!   more than [`MAX_LINES`] lines outside its test module: a longer one is two concepts.
//!
//! A new module must be placed in [`LAYERS`] (the test says so); ARCHITECTURE.md describes
//! the layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The core crate's modules, bottom layer first. A module may import from its own layer
/// and the layers below.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "ids", "error", "element", "buf", "slot", "stream", "prefetch", "sync",
        ],
    ),
    (
        "model",
        &[
            "rule",
            "rank_k",
            "table",
            "consistency",
            "gather",
            "placement",
            "world",
        ],
    ),
    ("plan", &["topology", "plan", "numa", "pinning"]),
    (
        "protocol",
        &["msg", "net", "transport", "rows_part", "checkpoint"],
    ),
    ("config", &["membership", "config", "launch"]),
    ("runtime", &["pool", "server", "client", "worker"]),
    ("cluster", &["cluster"]),
    ("entry points", &["fuzzing"]),
];

/// The most lines a Rust file may have before its `#[cfg(test)]` module.
const MAX_LINES: usize = 900;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` without its comments (line and block comments; string literals
/// are kept, and a `//` inside one is not a comment).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        if in_str {
            if b[i] == b'\\' && i + 1 < b.len() {
                out.push_str(&text[i..i + 2]);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            in_str = true;
        } else if text[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        } else if text[i..].starts_with("/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            // Keep the line count, for line numbers in messages.
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
            continue;
        }
        let c = text[i..].chars().next().expect("inside the text");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// The first segments of every path of the use tree (or plain path) that starts at
/// `rest` (just after `crate::`): `crate::a::B` gives `a`, `crate::{a::B, C}` gives `a`
/// and `C`.
fn first_segments(rest: &str) -> Vec<String> {
    let rest = rest.trim_start();
    if let Some(inner) = rest.strip_prefix('{') {
        let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.extend(first_segments(&inner[start..i]));
                    return out;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(first_segments(&inner[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        out
    } else {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            Vec::new()
        } else {
            vec![name]
        }
    }
}

/// One `crate::` reference: the file, its line and the first path segment it names.
struct Reference {
    file: PathBuf,
    line: usize,
    segment: String,
}

/// Every `crate::` reference in the code of `files`, by the top-level module of the file.
fn references(files: &[PathBuf]) -> BTreeMap<String, Vec<Reference>> {
    let mut out: BTreeMap<String, Vec<Reference>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src()).expect("under src/");
        let first = rel.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let code = strip_comments(&fs::read_to_string(file).expect("a readable source file"));
        for (at, _) in code.match_indices("crate::") {
            if at > 0 && code.as_bytes()[at - 1].is_ascii_alphanumeric() {
                continue; // `$crate::`-like or part of another word
            }
            let line = code[..at].matches('\n').count() + 1;
            for segment in first_segments(&code[at + "crate::".len()..]) {
                out.entry(module.clone()).or_default().push(Reference {
                    file: rel.to_path_buf(),
                    line,
                    segment,
                });
            }
        }
    }
    out
}

/// The modules `lib.rs` declares.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn every_module_of_the_core_crate_is_in_one_layer() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    let declared = declared_modules(&lib);
    let mut placed = BTreeSet::new();
    for (layer, modules) in LAYERS {
        for m in *modules {
            assert!(
                placed.insert(m.to_string()),
                "{m} is in two layers ({layer})"
            );
        }
    }
    let unplaced: Vec<_> = declared.difference(&placed).collect();
    assert!(
        unplaced.is_empty(),
        "modules not placed in a layer of tests/it/tidy.rs's LAYERS: {unplaced:?}"
    );
    let gone: Vec<_> = placed.difference(&declared).collect();
    assert!(
        gone.is_empty(),
        "LAYERS names modules lib.rs does not declare: {gone:?}"
    );
}

#[test]
fn imports_name_the_defining_module_and_never_point_up_a_layer() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("src/lib.rs");
    let declared = declared_modules(&lib);
    let layer_of: BTreeMap<&str, (usize, &str)> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, (name, ms))| ms.iter().map(move |m| (*m, (i, *name))))
        .collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut problems = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, refs) in references(&files) {
        for r in refs {
            let at = format!("src/{}:{}", r.file.display(), r.line);
            if !declared.contains(&r.segment) {
                problems.push(format!(
                    "{at}: `crate::{}` imports through the crate root; name the module that \
                     defines it",
                    r.segment
                ));
                continue;
            }
            if r.segment == module {
                continue;
            }
            let (Some(&(from, from_name)), Some(&(to, to_name))) = (
                layer_of.get(module.as_str()),
                layer_of.get(r.segment.as_str()),
            ) else {
                continue; // reported by the placement test
            };
            if to > from {
                problems.push(format!(
                    "{at}: `{module}` ({from_name} layer) imports `{}` from the {to_name} \
                     layer above it",
                    r.segment
                ));
            }
            edges.entry(module.clone()).or_default().insert(r.segment);
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Within a layer, the imports form no cycle either.
    let cycle = find_cycle(&edges);
    assert!(cycle.is_none(), "an import cycle among modules: {cycle:?}");
}

/// A cycle of `edges`, if there is one (depth-first search).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == v) {
            let mut cycle = path[i..].to_vec();
            cycle.push(v.to_string());
            return Some(cycle);
        }
        if done.contains(v) {
            return None;
        }
        path.push(v.to_string());
        for w in edges.get(v).into_iter().flatten() {
            if let Some(c) = visit(w, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(v.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|v| visit(v, edges, &mut Vec::new(), &mut done))
}

#[test]
fn the_checks_see_what_they_check() {
    // The parsing the checks rest on: comments dropped, strings kept, use trees split.
    let code = strip_comments("a // crate::x\n/* crate::y */ \"// crate::z\" b");
    assert_eq!(code, "a \n \"// crate::z\" b");
    assert_eq!(first_segments("{a::B, c::{D, E}, F};"), ["a", "c", "F"]);
    assert_eq!(first_segments("table::Table<T>"), ["table"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    assert_eq!(find_cycle(&edges), None);
    edges.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&edges).map(|c| c.len()),
        Some(4),
        "a -> b -> c -> a"
    );
}

/// Lines of `text` before its module-level `#[cfg(test)]` item (all of them without one).
fn lines_outside_tests(text: &str) -> usize {
    text.lines()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or_else(|| text.lines().count())
}

#[test]
fn no_file_is_longer_than_the_limit_outside_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "benches", "apps", "perf", "tune"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    files.retain(|f| !f.components().any(|c| c.as_os_str() == "target"));
    assert!(files.len() > 100, "the walk found the workspace's files");
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = lines_outside_tests(&fs::read_to_string(f).expect("a readable source file"));
            (n > MAX_LINES)
                .then(|| format!("{} ({n} lines)", f.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines outside their test module (split them by concept): {long:?}"
    );
    assert_eq!(lines_outside_tests("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(lines_outside_tests("a\nb\n"), 2);
}

/// The workspace's crates under `apps/` (their directories), at least the four layers the
/// apps are cut into, and clap only in the binary's: argument parsing is the CLI's alone.
#[test]
fn the_apps_are_several_crates_and_only_the_cli_parses_arguments() {
    let apps = Path::new(env!("CARGO_MANIFEST_DIR")).join("apps");
    let mut crates: Vec<String> = fs::read_dir(&apps)
        .expect("apps/ is readable")
        .filter_map(|e| {
            let dir = e.expect("a directory entry").path();
            dir.join("Cargo.toml")
                .is_file()
                .then(|| dir.file_name().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    crates.sort();
    assert!(crates.len() >= 4, "crates under apps/: {crates:?}");
    let with_clap: Vec<&String> = crates
        .iter()
        .filter(|c| {
            let manifest = fs::read_to_string(apps.join(c).join("Cargo.toml")).unwrap();
            manifest.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("clap ") || l.starts_with("clap=") || l.starts_with("clap.")
            })
        })
        .collect();
    assert_eq!(with_clap, ["cli"], "crates that depend on clap");
}

/// ARCHITECTURE.md stays a map (at most 30 KB): detail belongs in module docs and
/// `docs/internals/`, measurements in BENCHMARKS.md.
#[test]
fn the_architecture_doc_is_a_map_of_at_most_30_kb() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let bytes = fs::metadata(&doc).expect("ARCHITECTURE.md").len();
    assert!(
        bytes <= 30_000,
        "ARCHITECTURE.md has {bytes} bytes (at most 30 000)"
    );
}
