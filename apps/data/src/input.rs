//! Shared plumbing for the text loaders: opening a file (transparently gunzipping it),
//! peeking at its first line for format sniffing, reading it line by line into one reused
//! buffer, remapping arbitrary tokens to dense ids, and building [`DataError`]s.
//!
//! This module knows no file format; the per-format loaders own the parsing rules.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use rustc_hash::FxHashMap;

use super::DataError;

/// Read buffer size: large enough that per-syscall overhead vanishes on big files.
const BUF_CAPACITY: usize = 1 << 16;

/// Longest line a text loader reads, line ending included: 16 MiB, far above any real
/// line (a document of 100,000 distinct words in LDA-C is about 1.3 MB), and a guard
/// against input without line breaks (`/dev/zero`, a gzip of zeros, a CR-only file) being
/// read into memory whole.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// How much of a line an error message quotes (see [`excerpt`]).
const EXCERPT_CHARS: usize = 80;

/// The first `chars` characters of `text`, and whether that cut anything off.
pub(crate) fn head(text: &str, chars: usize) -> (&str, bool) {
    match text.char_indices().nth(chars) {
        None => (text, false),
        Some((end, _)) => (&text[..end], true),
    }
}

/// `text` cut to its first [`EXCERPT_CHARS`] characters (with `…` and the full length if
/// cut), for quoting input in an error message without echoing megabytes of it.
pub(crate) fn excerpt(text: &str) -> String {
    match head(text, EXCERPT_CHARS) {
        (all, false) => all.to_string(),
        (start, true) => format!("{start}… ({} bytes)", text.len()),
    }
}

/// The two bytes every gzip stream starts with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Wraps an IO error for `path`.
pub(crate) fn io_error(path: &Path, source: io::Error) -> DataError {
    DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A malformed-line error for `path` at 1-based `line`.
pub(crate) fn malformed(path: &Path, line: usize, message: impl Into<String>) -> DataError {
    DataError::Malformed {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

/// A whole-file error for `path`.
pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The file name of `path` in lower case (empty if it has none), for extension checks.
pub(crate) fn lower_file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Opens `path` for buffered reading, decompressing it if it is gzip (detected by its magic
/// bytes, so a `.gz` name is neither required nor trusted).
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead>, DataError> {
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    let mut raw = BufReader::with_capacity(BUF_CAPACITY, file);
    let head = raw.fill_buf().map_err(|e| io_error(path, e))?;
    if head.starts_with(&GZIP_MAGIC) {
        let decoder = flate2::bufread::MultiGzDecoder::new(raw);
        Ok(Box::new(BufReader::with_capacity(BUF_CAPACITY, decoder)))
    } else {
        Ok(Box::new(raw))
    }
}

/// The first line of whatever `reader` has buffered, without consuming anything (lossy
/// UTF-8, line ending stripped). Empty if the input is empty.
pub(crate) fn peek_first_line(path: &Path, reader: &mut dyn BufRead) -> Result<String, DataError> {
    let buf = reader.fill_buf().map_err(|e| io_error(path, e))?;
    let end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = String::from_utf8_lossy(&buf[..end]);
    Ok(line.trim_end_matches('\r').to_string())
}

/// Reads a text file line by line into one reused buffer, counting lines from 1.
pub(crate) struct LineReader<'p> {
    reader: Box<dyn BufRead>,
    path: &'p Path,
    buf: String,
    line_no: usize,
}

impl<'p> LineReader<'p> {
    /// Reads lines from `reader`; errors name `path`.
    pub(crate) fn new(path: &'p Path, reader: Box<dyn BufRead>) -> Self {
        LineReader {
            reader,
            path,
            buf: String::new(),
            line_no: 0,
        }
    }

    /// The next line as `(line number, text without line ending)`, or `None` at the end.
    /// Invalid UTF-8 is a malformed-line error rather than an IO error, and so is a line
    /// longer than [`MAX_LINE_BYTES`] (read no further than that).
    pub(crate) fn next_line(&mut self) -> Result<Option<(usize, &str)>, DataError> {
        self.buf.clear();
        self.line_no += 1;
        let limit = MAX_LINE_BYTES as u64 + 1;
        match (&mut self.reader).take(limit).read_line(&mut self.buf) {
            Ok(0) => Ok(None),
            Ok(n) if n > MAX_LINE_BYTES => {
                Err(malformed(
                    self.path,
                    self.line_no,
                    format!(
                        "line is longer than {} MiB (is this a text file of this format? a file without line breaks?)",
                        MAX_LINE_BYTES >> 20
                    ),
                ))
            }
            Ok(_) => {
                let line = self.buf.trim_end_matches(['\n', '\r']);
                Ok(Some((self.line_no, line)))
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Err(malformed(
                self.path,
                self.line_no,
                "line is not valid UTF-8",
            )),
            Err(e) => Err(io_error(self.path, e)),
        }
    }
}

/// Tokens that are canonical decimal numbers below this are looked up in a flat table.
const DIRECT_LIMIT: u64 = 1 << 24;

/// No id assigned (also the one id value never handed out).
const NO_ID: u32 = u32::MAX;

/// Assigns dense ids `0, 1, 2, …` to tokens in order of first appearance.
///
/// Canonical decimal tokens (no sign, no leading zeros) are looked up by value — in a flat
/// table when small, in an integer-keyed map otherwise — so the common numeric-id files
/// never hash or compare strings; other tokens go through a string map. Either way a
/// token is copied only the first time it is seen.
#[derive(Debug, Default)]
pub(crate) struct IdMap {
    direct: Vec<u32>,
    numbers: FxHashMap<u64, u32>,
    tokens: FxHashMap<String, u32>,
    labels: Vec<String>,
}

impl IdMap {
    /// The dense id of `token`, assigning the next free one if it is new. `None` once
    /// `u32::MAX` ids are in use.
    pub(crate) fn id(&mut self, token: &str) -> Option<u32> {
        match canonical_number(token) {
            Some(value) if value < DIRECT_LIMIT => {
                let slot = value as usize;
                if slot >= self.direct.len() {
                    let len = (slot + 1)
                        .max(self.direct.len() * 2)
                        .min(DIRECT_LIMIT as usize);
                    self.direct.resize(len, NO_ID);
                }
                if self.direct[slot] == NO_ID {
                    self.direct[slot] = self.next_id(token)?;
                }
                Some(self.direct[slot])
            }
            Some(value) => match self.numbers.get(&value) {
                Some(&id) => Some(id),
                None => {
                    let id = self.next_id(token)?;
                    self.numbers.insert(value, id);
                    Some(id)
                }
            },
            None => match self.tokens.get(token) {
                Some(&id) => Some(id),
                None => {
                    let id = self.next_id(token)?;
                    self.tokens.insert(token.to_string(), id);
                    Some(id)
                }
            },
        }
    }

    /// Records `token` as the label of a new id.
    fn next_id(&mut self, token: &str) -> Option<u32> {
        let id = u32::try_from(self.labels.len())
            .ok()
            .filter(|&id| id != NO_ID)?;
        self.labels.push(token.to_string());
        Some(id)
    }

    /// Number of distinct tokens seen.
    pub(crate) fn len(&self) -> u32 {
        // `next_id` never hands out more than u32::MAX ids.
        self.labels.len() as u32
    }

    /// The tokens, indexed by dense id.
    pub(crate) fn into_labels(self) -> Vec<String> {
        self.labels
    }
}

/// The value of `token` if it is a decimal number written canonically (digits only, no
/// leading zero unless it is `0`, fits in `u64`), so that equal values mean equal tokens.
fn canonical_number(token: &str) -> Option<u64> {
    let bytes = token.as_bytes();
    if bytes.is_empty() || bytes.len() > 19 || (bytes.len() > 1 && bytes[0] == b'0') {
        return None;
    }
    let mut value: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value * 10 + u64::from(b - b'0');
    }
    Some(value)
}

/// Reads exactly `buf.len()` bytes, mapping a short read to `Ok(false)`.
pub(crate) fn read_exact_or_eof(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Input without line breaks (`/dev/zero`) is read no further than the line limit and
    /// refused naming the file and line; a line just under the limit is read whole.
    #[test]
    fn a_line_longer_than_the_limit_is_malformed_and_read_no_further() {
        let path = Path::new("zeros.txt");
        let endless = BufReader::new(io::repeat(0).take(4 * MAX_LINE_BYTES as u64));
        let mut lines = LineReader::new(path, Box::new(endless));
        let err = lines.next_line().unwrap_err().to_string();
        assert!(
            err.starts_with("zeros.txt:1: line is longer than 16 MiB"),
            "{err}"
        );

        let mut text = "a".repeat(MAX_LINE_BYTES - 1);
        text.push('\n');
        text.push_str("b\n");
        let mut lines = LineReader::new(path, Box::new(io::Cursor::new(text.into_bytes())));
        let (n, line) = lines.next_line().unwrap().unwrap();
        assert_eq!((n, line.len()), (1, MAX_LINE_BYTES - 1));
        assert_eq!(lines.next_line().unwrap(), Some((2, "b")));
        assert_eq!(lines.next_line().unwrap(), None);
    }

    #[test]
    fn excerpts_cut_long_text_and_keep_short_text() {
        assert_eq!(excerpt("short"), "short");
        let long = "é".repeat(1000);
        let cut = excerpt(&long);
        assert!(cut.starts_with(&"é".repeat(EXCERPT_CHARS)), "{cut}");
        assert!(cut.ends_with("… (2000 bytes)"), "{cut}");
    }

    #[test]
    fn id_map_keeps_distinct_spellings_apart() {
        let mut ids = IdMap::default();
        let tokens = [
            "7",
            "007",
            "x",
            "7",
            "99999999999",
            "+7",
            "0",
            "x",
            "99999999999",
        ];
        let got: Vec<u32> = tokens.iter().map(|t| ids.id(t).unwrap()).collect();
        assert_eq!(got, vec![0, 1, 2, 0, 3, 4, 5, 2, 3]);
        assert_eq!(ids.len(), 6);
        assert_eq!(
            ids.into_labels(),
            vec!["7", "007", "x", "99999999999", "+7", "0"]
        );
    }

    #[test]
    fn canonical_numbers() {
        assert_eq!(canonical_number("0"), Some(0));
        assert_eq!(
            canonical_number("18446744073709551"),
            Some(18_446_744_073_709_551)
        );
        assert_eq!(canonical_number("01"), None);
        assert_eq!(canonical_number("1e3"), None);
        assert_eq!(canonical_number(""), None);
        assert_eq!(canonical_number("99999999999999999999"), None);
    }
}
