//! Loading bag-of-words corpora (LDA input) from LDA-C (`.ldac`) and UCI `docword.*.txt`
//! files, either optionally gzip-compressed, expanding each `word:count` into `count`
//! tokens.
//!
//! The format is chosen from the file name and, failing that, by sniffing the first line;
//! see [`CorpusFormat::detect`]. This module knows nothing of topic models.

use std::io::BufRead;
use std::path::Path;

use super::input::{self, LineReader};
use super::{Corpus, DataError};

/// Largest `count` accepted for one word in one document, and largest number of tokens in
/// one document: a guard against a corrupt file asking for billions of tokens.
pub const MAX_COUNT: u32 = 1 << 24;

/// Largest vocabulary a corpus may have (word ids below it; a UCI header's `W` at most
/// it): 16.8 M words, far above any real corpus (NYT: 102,660; PubMed: 141,043), and a
/// guard against one word id (`1 100000000:1`, 14 bytes) asking for a model of billions of
/// values.
pub const MAX_VOCAB: u32 = 1 << 24;

/// Most empty documents a UCI file may imply in a row (between two documents with
/// entries, or after the last one up to the header's `D`): a guard against a corrupt `D`
/// or docID asking for billions of empty documents.
const MAX_TRAILING_EMPTY_DOCS: usize = 1 << 20;

/// A bag-of-words layout that [`load_corpus`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorpusFormat {
    /// One document per line: `N id:count id:count …` with `N` distinct 0-based word ids.
    Ldac,
    /// UCI bag of words: lines `D`, `W`, `NNZ`, then `NNZ` lines `docID wordID count`
    /// (both ids 1-based).
    UciDocword,
}

impl CorpusFormat {
    /// Picks the format for `path` whose first line is `first_line`: a `.ldac` name is
    /// LDA-C, a name starting with `docword` is UCI; otherwise a first line containing `:`
    /// is LDA-C and a lone number is UCI. A trailing `.gz` is ignored.
    pub fn detect(path: &Path, first_line: &str) -> CorpusFormat {
        let name = input::lower_file_name(path);
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        let lone_number =
            !first_line.contains(':') && first_line.split_ascii_whitespace().count() == 1;
        if name.ends_with(".ldac") {
            CorpusFormat::Ldac
        } else if name.starts_with("docword") || lone_number {
            CorpusFormat::UciDocword
        } else {
            CorpusFormat::Ldac
        }
    }
}

/// Loads a corpus from `path` (optionally gzip-compressed), choosing the format with
/// [`CorpusFormat::detect`].
pub fn load_corpus(path: &Path) -> Result<Corpus, DataError> {
    let mut reader = input::open(path)?;
    let first_line = input::peek_first_line(path, &mut reader)?;
    let format = CorpusFormat::detect(path, &first_line);
    load_corpus_as(path, reader, format)
}

/// Loads a corpus from `path` in the given `format` (optionally gzip-compressed).
pub fn load_corpus_with_format(path: &Path, format: CorpusFormat) -> Result<Corpus, DataError> {
    let reader = input::open(path)?;
    load_corpus_as(path, reader, format)
}

fn load_corpus_as(
    path: &Path,
    reader: Box<dyn BufRead>,
    format: CorpusFormat,
) -> Result<Corpus, DataError> {
    let lines = LineReader::new(path, reader);
    let corpus = match format {
        CorpusFormat::Ldac => read_ldac(path, lines)?,
        CorpusFormat::UciDocword => read_docword(path, lines)?,
    };
    if corpus.docs.is_empty() {
        return Err(input::invalid(path, "no documents found"));
    }
    Ok(corpus)
}

/// Parses `text` as a `u32`, naming `what` in the error.
fn parse_u32(path: &Path, line: usize, what: &str, text: &str) -> Result<u32, DataError> {
    text.parse().map_err(|_| {
        input::malformed(
            path,
            line,
            format!(
                "{what} '{}' is not a non-negative integer",
                input::excerpt(text)
            ),
        )
    })
}

/// Appends `count` copies of `word` to `doc`, rejecting implausible counts.
fn push_tokens(
    path: &Path,
    line: usize,
    doc: &mut Vec<u32>,
    word: u32,
    count: u32,
) -> Result<(), DataError> {
    if count > MAX_COUNT {
        return Err(input::malformed(
            path,
            line,
            format!("count {count} exceeds the limit of {MAX_COUNT}"),
        ));
    }
    if doc.len() + count as usize > MAX_COUNT as usize {
        return Err(input::malformed(
            path,
            line,
            format!("the document exceeds the limit of {MAX_COUNT} tokens"),
        ));
    }
    doc.resize(doc.len() + count as usize, word);
    Ok(())
}

fn read_ldac(path: &Path, mut lines: LineReader<'_>) -> Result<Corpus, DataError> {
    let mut docs = Vec::new();
    let mut max_word: Option<u32> = None;
    while let Some((line_no, line)) = lines.next_line()? {
        let mut fields = line.split_ascii_whitespace();
        let Some(first) = fields.next() else {
            continue; // blank line
        };
        let declared = parse_u32(path, line_no, "term count", first)?;
        let mut doc = Vec::new();
        let mut pairs = 0u32;
        for pair in fields {
            let Some((word, count)) = pair.split_once(':') else {
                return Err(input::malformed(
                    path,
                    line_no,
                    format!("expected id:count, found '{}'", input::excerpt(pair)),
                ));
            };
            let word = parse_u32(path, line_no, "word id", word)?;
            if word >= MAX_VOCAB {
                return Err(input::malformed(
                    path,
                    line_no,
                    format!("word id {word} is over the limit of {MAX_VOCAB} words"),
                ));
            }
            let count = parse_u32(path, line_no, "count", count)?;
            push_tokens(path, line_no, &mut doc, word, count)?;
            max_word = max_word.max(Some(word));
            pairs += 1;
        }
        if pairs != declared {
            return Err(input::malformed(
                path,
                line_no,
                format!("line declares {declared} terms but has {pairs} id:count pairs"),
            ));
        }
        docs.push(doc);
    }
    // Every word id is below MAX_VOCAB, so this does not overflow.
    let vocab_size = max_word.map_or(0, |w| w + 1);
    Ok(Corpus { docs, vocab_size })
}

/// Reads one UCI header line holding a single integer named `what`.
fn docword_header(path: &Path, lines: &mut LineReader<'_>, what: &str) -> Result<u32, DataError> {
    let Some((line_no, line)) = lines.next_line()? else {
        return Err(input::invalid(
            path,
            format!("file ends before the {what} header line"),
        ));
    };
    let mut fields = line.split_ascii_whitespace();
    match (fields.next(), fields.next()) {
        (Some(value), None) => parse_u32(path, line_no, what, value),
        _ => Err(input::malformed(
            path,
            line_no,
            format!(
                "expected the {what} header (one integer), found '{}'",
                input::excerpt(line)
            ),
        )),
    }
}

fn read_docword(path: &Path, mut lines: LineReader<'_>) -> Result<Corpus, DataError> {
    let num_docs = docword_header(path, &mut lines, "document count D")?;
    let vocab_size = docword_header(path, &mut lines, "vocabulary size W")?;
    if vocab_size > MAX_VOCAB {
        return Err(input::malformed(
            path,
            2,
            format!("vocabulary size W = {vocab_size} is over the limit of {MAX_VOCAB} words"),
        ));
    }
    let nnz = docword_header(path, &mut lines, "entry count NNZ")?;
    let mut docs: Vec<Vec<u32>> = Vec::new();
    let mut entries: u64 = 0;
    while let Some((line_no, line)) = lines.next_line()? {
        let mut fields = [""; 3];
        let mut n = 0;
        for field in line.split_ascii_whitespace() {
            if let Some(slot) = fields.get_mut(n) {
                *slot = field;
            }
            n += 1;
        }
        if n == 0 {
            continue;
        }
        if n != 3 {
            return Err(input::malformed(
                path,
                line_no,
                format!("expected 3 fields (docID wordID count), found {n}"),
            ));
        }
        let doc = parse_u32(path, line_no, "docID", fields[0])?;
        let word = parse_u32(path, line_no, "wordID", fields[1])?;
        let count = parse_u32(path, line_no, "count", fields[2])?;
        if doc == 0 || doc > num_docs {
            return Err(input::malformed(
                path,
                line_no,
                format!("docID {doc} outside 1..={num_docs} (header D)"),
            ));
        }
        if word == 0 || word > vocab_size {
            return Err(input::malformed(
                path,
                line_no,
                format!("wordID {word} outside 1..={vocab_size} (header W)"),
            ));
        }
        let index = (doc - 1) as usize;
        if index > docs.len() + MAX_TRAILING_EMPTY_DOCS {
            return Err(input::malformed(
                path,
                line_no,
                format!(
                    "docID {doc} leaves more than {MAX_TRAILING_EMPTY_DOCS} empty documents \
                     after document {}",
                    docs.len()
                ),
            ));
        }
        if docs.len() <= index {
            docs.resize_with(index + 1, Vec::new);
        }
        push_tokens(path, line_no, &mut docs[index], word - 1, count)?;
        entries += 1;
    }
    if entries != u64::from(nnz) {
        return Err(input::invalid(
            path,
            format!("header says NNZ = {nnz} entries, file has {entries}"),
        ));
    }
    let trailing_empty = num_docs as usize - docs.len();
    if trailing_empty > MAX_TRAILING_EMPTY_DOCS {
        return Err(input::invalid(
            path,
            format!(
                "header says D = {num_docs} documents but entries stop at document {}",
                docs.len()
            ),
        ));
    }
    docs.resize_with(num_docs as usize, Vec::new);
    Ok(Corpus { docs, vocab_size })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{malformed_line, TempDir};

    const LDAC: &str = "2 0:2 3:1\n0\n1 1:3\n";
    const DOCWORD: &str = "3\n4\n3\n1 1 2\n1 4 1\n3 2 3\n";

    fn expected() -> Corpus {
        Corpus {
            docs: vec![vec![0, 0, 3], vec![], vec![1, 1, 1]],
            vocab_size: 4,
        }
    }

    #[test]
    fn ldac_expands_counts() {
        let dir = TempDir::new("bow-ldac");
        let path = dir.write("c.ldac", LDAC);
        assert_eq!(load_corpus(&path).unwrap(), expected());
    }

    #[test]
    fn docword_matches_ldac() {
        let dir = TempDir::new("bow-docword");
        let path = dir.write("docword.test.txt", DOCWORD);
        assert_eq!(load_corpus(&path).unwrap(), expected());
    }

    #[test]
    fn gzip_versions_and_sniffing() {
        let dir = TempDir::new("bow-gz");
        let ldac = dir.write_gz("c.ldac.gz", LDAC);
        let docword = dir.write_gz("docword.test.txt.gz", DOCWORD);
        let sniffed = dir.write("corpus.txt", DOCWORD);
        for path in [ldac, docword, sniffed] {
            assert_eq!(
                load_corpus(&path).unwrap(),
                expected(),
                "{}",
                path.display()
            );
        }
    }

    #[test]
    fn ldac_bad_pair_and_bad_count() {
        let dir = TempDir::new("bow-ldac-bad");
        let path = dir.write("bad.ldac", "1 0:1\n2 1:1 2-1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 2);
        assert!(
            text.contains("bad.ldac:2: expected id:count, found '2-1'"),
            "{text}"
        );

        let path = dir.write("count.ldac", "1 0:1\n1 0:1\n3 1:1 2:x 3:1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 3);
        assert!(text.contains("count 'x'"), "{text}");
    }

    #[test]
    fn ldac_term_count_must_match() {
        let dir = TempDir::new("bow-ldac-n");
        let path = dir.write("n.ldac", "3 0:1 1:1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 1);
        assert!(text.contains("declares 3 terms but has 2"), "{text}");
    }

    #[test]
    fn docword_validates_against_header() {
        let dir = TempDir::new("bow-docword-bad");
        let path = dir.write("docword.a.txt", "2\n3\n1\n1 4 1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 4);
        assert!(
            text.contains("docword.a.txt:4: wordID 4 outside 1..=3"),
            "{text}"
        );

        let path = dir.write("docword.b.txt", "2\n3\n1\n3 1 1\n");
        let (line, _) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 4);

        let path = dir.write("docword.c.txt", "2\n3\n2\n1 1 1\n");
        let err = load_corpus(&path).unwrap_err();
        assert!(matches!(err, DataError::Invalid { .. }));
        assert!(err.to_string().contains("NNZ = 2"), "{err}");

        let path = dir.write("docword.d.txt", "2\n3\n1\n1 1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 4);
        assert!(text.contains("expected 3 fields"), "{text}");

        let path = dir.write("docword.e.txt", "2\nthree\n");
        let (line, _) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 2);
    }

    #[test]
    fn huge_count_is_rejected_not_allocated() {
        let dir = TempDir::new("bow-huge");
        let path = dir.write("h.ldac", "1 0:4000000000\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 1);
        assert!(text.contains("exceeds the limit"), "{text}");
    }

    #[test]
    fn huge_document_is_rejected_not_allocated() {
        // Each count is under the limit, their sum is not: before the per-document limit a
        // short line could ask for gigabytes (the load_corpus fuzz target's bound).
        let dir = TempDir::new("bow-huge-doc");
        let max = MAX_COUNT;
        let path = dir.write("h.ldac", &format!("1 0:{max}\n2 0:{max} 1:1\n"));
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 2);
        assert!(text.contains("document exceeds the limit"), "{text}");
    }

    #[test]
    fn huge_docid_gap_is_rejected_not_allocated() {
        // docID 4e9 under D = 4e9 used to ask for 96 GB of empty documents before the NNZ
        // check (an abort, not an error, past the load_corpus fuzz target's bound).
        let dir = TempDir::new("bow-gap");
        let path = dir.write("docword.g.txt", "4000000000\n1\n1\n4000000000 1 1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 4);
        assert!(text.contains("empty documents"), "{text}");
        // A gap of exactly the limit is fine.
        let gap = MAX_TRAILING_EMPTY_DOCS + 2;
        let path = dir.write(
            "docword.ok.txt",
            &format!("{gap}\n1\n2\n1 1 1\n{gap} 1 1\n"),
        );
        assert_eq!(load_corpus(&path).unwrap().docs.len(), gap);
    }

    #[test]
    fn a_vocabulary_over_the_limit_is_rejected_not_allocated() {
        // 14 bytes that asked LDA for a 40 GB word-topic table (issue 45).
        let dir = TempDir::new("bow-vocab");
        let path = dir.write("v.ldac", "1 100000000:1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 1);
        assert!(
            text.contains("word id 100000000 is over the limit"),
            "{text}"
        );
        let path = dir.write("docword.v.txt", "1\n100000000\n1\n1 1 1\n");
        let (line, text) = malformed_line(load_corpus(&path).unwrap_err());
        assert_eq!(line, 2);
        assert!(text.contains("W = 100000000 is over the limit"), "{text}");
        // The largest word id allowed loads.
        let path = dir.write("ok.ldac", &format!("1 {}:1\n", MAX_VOCAB - 1));
        assert_eq!(load_corpus(&path).unwrap().vocab_size, MAX_VOCAB);
    }

    #[test]
    fn empty_corpus_is_invalid() {
        let dir = TempDir::new("bow-empty");
        let path = dir.write("e.ldac", "");
        assert!(matches!(load_corpus(&path), Err(DataError::Invalid { .. })));
    }
}
