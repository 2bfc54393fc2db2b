//! Loading sparse labeled samples (multinomial logistic regression input) from LIBSVM /
//! svmlight text files, optionally gzip-compressed, into a [`SparseSet`]: one sample per
//! line, `<label> [qid:<n>] <index>:<value> <index>:<value> … [# comment]`.
//!
//! Labels are integers (`-1`, `+1`, `3`, or an integral float such as `2.0`) remapped to
//! dense classes `0..classes` in increasing numeric order; indices are 1-based and strictly
//! increasing within a line and become 0-based feature ids; values are finite `f32`s.
//! Blank lines and `#` comments are skipped; a `qid:` token right after the label (ranking
//! files) is checked and dropped. This module knows nothing of models.

use std::collections::BTreeMap;
use std::path::Path;

use super::input::{self, LineReader};
use super::{DataError, SparseSet};

/// Largest feature count a file may have or be declared with (indices `1..=MAX_FEATURES`):
/// 67 M features, far above real LIBSVM sets (news20: 1.36 M, url: 3.2 M), and a guard
/// against one index (`1 999999999:1`, 14 bytes) asking for a model of billions of weights.
pub const MAX_FEATURES: u32 = 1 << 26;

/// Most distinct labels a file may have: 65,536 classes, a guard against a file of distinct
/// labels asking for a `features × classes` model.
pub const MAX_CLASSES: u32 = 1 << 16;

/// Loads the samples of a LIBSVM / svmlight file at `path` (optionally gzip-compressed).
///
/// `features` is a declared feature count: a test file must be read with its training
/// file's count, so that feature ids and the model agree; an index above it is an error
/// naming the file and line. Without it the count is the largest index in the file. Either
/// way it is at most [`MAX_FEATURES`].
///
/// Every malformed line is a [`DataError::Malformed`] naming the file and the 1-based line:
/// a label that is not an integer, a token that is not `index:value`, index 0, indices
/// not strictly increasing, a value that is not a finite `f32`, an index over the limit or
/// the declared count, more than [`MAX_CLASSES`] distinct labels. A file without samples
/// is a [`DataError::Invalid`].
pub fn load_svmlight(path: &Path, features: Option<u32>) -> Result<SparseSet, DataError> {
    if let Some(declared) = features.filter(|&f| f > MAX_FEATURES) {
        return Err(input::invalid(
            path,
            format!("declared feature count {declared} is over the limit of {MAX_FEATURES}"),
        ));
    }
    let limit = features.unwrap_or(MAX_FEATURES);
    let mut lines = LineReader::new(path, input::open(path)?);
    let mut set = SparseSet {
        row_starts: vec![0],
        ..SparseSet::default()
    };
    // Raw label of each sample until the classes are known; distinct labels → class.
    let mut raw_labels: Vec<i64> = Vec::new();
    let mut classes: BTreeMap<i64, u32> = BTreeMap::new();
    let mut max_index = 0u32;
    while let Some((line_no, line)) = lines.next_line()? {
        let content = line.split_once('#').map_or(line, |(data, _comment)| data);
        let mut tokens = content.split_ascii_whitespace().peekable();
        let Some(label) = tokens.next() else {
            continue; // blank or comment line
        };
        let label = parse_label(path, line_no, label)?;
        if !classes.contains_key(&label) {
            if classes.len() >= MAX_CLASSES as usize {
                return Err(input::malformed(
                    path,
                    line_no,
                    format!("label {label} is a class over the limit of {MAX_CLASSES} classes"),
                ));
            }
            classes.insert(label, 0);
        }
        raw_labels.push(label);
        if let Some(qid) = tokens.peek().and_then(|t| t.strip_prefix("qid:")) {
            if qid.parse::<u64>().is_err() {
                return Err(input::malformed(
                    path,
                    line_no,
                    format!(
                        "qid '{}' is not a non-negative integer",
                        input::excerpt(qid)
                    ),
                ));
            }
            tokens.next();
        }
        let mut previous = 0u32;
        for token in tokens {
            let (index, value) = parse_entry(path, line_no, token)?;
            if index > u64::from(limit) {
                let why = match features {
                    Some(declared) => format!("the declared {declared} features"),
                    None => format!("the limit of {MAX_FEATURES} features"),
                };
                return Err(input::malformed(
                    path,
                    line_no,
                    format!("feature index {index} is over {why}"),
                ));
            }
            // At most `limit`, itself at most MAX_FEATURES.
            let index = index as u32;
            if index <= previous {
                return Err(input::malformed(
                    path,
                    line_no,
                    format!("feature index {index} does not increase (after {previous})"),
                ));
            }
            previous = index;
            set.indices.push(index - 1);
            set.values.push(value);
        }
        max_index = max_index.max(previous);
        set.row_starts.push(set.indices.len() as u64);
    }
    if raw_labels.is_empty() {
        return Err(input::invalid(path, "no samples found"));
    }
    // At most MAX_CLASSES entries, so the ids fit u32.
    for (class, id) in classes.values_mut().enumerate() {
        *id = class as u32;
    }
    set.labels = raw_labels.iter().map(|label| classes[label]).collect();
    set.classes = classes.len() as u32;
    set.class_labels = classes.into_keys().collect();
    set.features = features.unwrap_or(max_index);
    Ok(set)
}

/// Parses a label: an integer (`-1`, `+1`, `7`) or an integral float (`2.0`, `1e3`) whose
/// value is exact in `f64`.
fn parse_label(path: &Path, line: usize, text: &str) -> Result<i64, DataError> {
    if let Ok(label) = text.parse::<i64>() {
        return Ok(label);
    }
    match text.parse::<f64>() {
        // Below 2^53 every integral f64 is exact and fits i64.
        Ok(v) if v.fract() == 0.0 && v.abs() < 9_007_199_254_740_992.0 => Ok(v as i64),
        _ => Err(input::malformed(
            path,
            line,
            format!(
                "label '{}' is not an integer class label",
                input::excerpt(text)
            ),
        )),
    }
}

/// Parses an `index:value` token into a 1-based index (at least 1) and a finite value.
fn parse_entry(path: &Path, line: usize, token: &str) -> Result<(u64, f32), DataError> {
    let Some((index, value)) = token.split_once(':') else {
        return Err(input::malformed(
            path,
            line,
            format!("expected index:value, found '{}'", input::excerpt(token)),
        ));
    };
    let index = match index.parse::<u64>() {
        Ok(0) => {
            return Err(input::malformed(
                path,
                line,
                "feature index 0: indices are 1-based",
            ))
        }
        Ok(i) => i,
        Err(_) => {
            return Err(input::malformed(
                path,
                line,
                format!(
                    "feature index '{}' is not a positive integer",
                    input::excerpt(index)
                ),
            ))
        }
    };
    match value.parse::<f32>() {
        Ok(v) if v.is_finite() => Ok((index, v)),
        Ok(_) => Err(input::malformed(
            path,
            line,
            format!(
                "value '{}' of feature {index} is not finite (as f32)",
                input::excerpt(value)
            ),
        )),
        Err(_) => Err(input::malformed(
            path,
            line,
            format!(
                "value '{}' of feature {index} is not a number",
                input::excerpt(value)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{malformed_line, TempDir};

    const FILE: &str = "# a header comment\n\
                        +1 1:0.5 3:-2 # trailing comment\n\
                        \n\
                        -1 qid:7 2:1e-3\n\
                        \t3 \n\
                        +1 1:1 2:2 4:4.5\n";

    fn expected(features: u32) -> SparseSet {
        SparseSet {
            row_starts: vec![0, 2, 3, 3, 6],
            indices: vec![0, 2, 1, 0, 1, 3],
            values: vec![0.5, -2.0, 1e-3, 1.0, 2.0, 4.5],
            labels: vec![1, 0, 2, 1],
            classes: 3,
            class_labels: vec![-1, 1, 3],
            features,
        }
    }

    #[test]
    fn loads_remaps_labels_and_skips_comments() {
        let dir = TempDir::new("svm");
        let path = dir.write("a.svm", FILE);
        let set = load_svmlight(&path, None).unwrap();
        assert_eq!(set, expected(4));
        assert_eq!(set.len(), 4);
        assert_eq!(set.nnz(), 6);
        assert_eq!(set.row(2), (&[][..], &[][..]));
        assert_eq!(set.row(3), (&[0, 1, 3][..], &[1.0, 2.0, 4.5][..]));
        // A declared count above the largest index is kept.
        assert_eq!(load_svmlight(&path, Some(10)).unwrap(), expected(10));
    }

    #[test]
    fn gzip_is_read_transparently() {
        let dir = TempDir::new("svm-gz");
        let path = dir.write_gz("a.svm.gz", FILE);
        assert_eq!(load_svmlight(&path, None).unwrap(), expected(4));
    }

    #[test]
    fn integral_float_labels_are_classes() {
        let dir = TempDir::new("svm-float");
        let path = dir.write("f.svm", "2.0 1:1\n1 1:1\n1e1 2:1\n2\n");
        let set = load_svmlight(&path, None).unwrap();
        assert_eq!(set.class_labels, vec![1, 2, 10]);
        assert_eq!(set.labels, vec![1, 0, 2, 1]);
    }

    /// Each bad line, at line 3 after two good ones, is refused naming file and line.
    #[test]
    fn every_malformed_line_names_file_and_line() {
        let cases = [
            ("x 1:1", "label 'x' is not an integer"),
            ("1.5 1:1", "label '1.5' is not an integer"),
            ("1,2 1:1", "label '1,2' is not an integer"),
            ("1 qid:x 1:1", "qid 'x' is not a non-negative integer"),
            ("1 1:1 2", "expected index:value, found '2'"),
            ("1 0:1", "feature index 0: indices are 1-based"),
            ("1 -3:1", "feature index '-3' is not a positive integer"),
            ("1 a:1", "feature index 'a' is not a positive integer"),
            ("1 2:1 2:1", "feature index 2 does not increase (after 2)"),
            ("1 3:1 2:1", "feature index 2 does not increase (after 3)"),
            ("1 1:nan", "value 'nan' of feature 1 is not finite"),
            ("1 1:inf", "value 'inf' of feature 1 is not finite"),
            ("1 1:1e39", "value '1e39' of feature 1 is not finite"),
            ("1 1:abc", "value 'abc' of feature 1 is not a number"),
            ("1 1:", "value '' of feature 1 is not a number"),
            (
                "1 99999999999:1",
                "feature index 99999999999 is over the limit",
            ),
            ("1 67108865:1", "feature index 67108865 is over the limit"),
        ];
        let dir = TempDir::new("svm-bad");
        for (i, (line, message)) in cases.iter().enumerate() {
            let name = format!("bad{i}.svm");
            let path = dir.write(&name, &format!("1 1:1\n# comment\n{line}\n2 2:2\n"));
            let (n, text) = malformed_line(load_svmlight(&path, None).unwrap_err());
            assert_eq!(n, 3, "{line}: {text}");
            assert!(text.contains(&format!("{name}:3: {message}")), "{text}");
        }
    }

    #[test]
    fn a_declared_feature_count_bounds_the_indices() {
        let dir = TempDir::new("svm-declared");
        let path = dir.write("test.svm", "1 1:1\n\n2 4:1 5:1\n");
        let (n, text) = malformed_line(load_svmlight(&path, Some(4)).unwrap_err());
        assert_eq!(n, 3);
        assert!(
            text.contains("test.svm:3: feature index 5 is over the declared 4 features"),
            "{text}"
        );
        assert_eq!(load_svmlight(&path, Some(5)).unwrap().features, 5);
        let err = load_svmlight(&path, Some(MAX_FEATURES + 1)).unwrap_err();
        assert!(matches!(err, DataError::Invalid { .. }), "{err:?}");
        assert!(err.to_string().contains("over the limit"), "{err}");
    }

    #[test]
    fn the_largest_index_allowed_loads() {
        let dir = TempDir::new("svm-max");
        let path = dir.write("m.svm", &format!("1 {MAX_FEATURES}:1\n"));
        let set = load_svmlight(&path, None).unwrap();
        assert_eq!(
            (set.features, set.indices[0]),
            (MAX_FEATURES, MAX_FEATURES - 1)
        );
    }

    #[test]
    fn too_many_classes_are_refused_at_the_line_that_adds_one() {
        let dir = TempDir::new("svm-classes");
        let mut text = String::new();
        for label in 0..=MAX_CLASSES {
            text.push_str(&format!("{label}\n"));
        }
        let path = dir.write("c.svm", &text);
        let (n, text) = malformed_line(load_svmlight(&path, None).unwrap_err());
        assert_eq!(n, MAX_CLASSES as usize + 1);
        assert!(text.contains("over the limit of 65536 classes"), "{text}");
    }

    #[test]
    fn a_file_without_samples_is_invalid() {
        let dir = TempDir::new("svm-empty");
        for (name, text) in [("e.svm", ""), ("c.svm", "# only\n\n   # comments\n")] {
            let path = dir.write(name, text);
            let err = load_svmlight(&path, None).unwrap_err();
            assert!(matches!(err, DataError::Invalid { .. }), "{err:?}");
            assert!(err.to_string().contains("no samples found"), "{err}");
        }
        let missing = dir.path().join("missing.svm");
        assert!(matches!(
            load_svmlight(&missing, None),
            Err(DataError::Io { .. })
        ));
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let dir = TempDir::new("svm-utf8");
        let path = dir.write_bytes("u.svm", b"1 1:1\n1 1:\xff\n");
        let (n, _) = malformed_line(load_svmlight(&path, None).unwrap_err());
        assert_eq!(n, 2);
    }
}
