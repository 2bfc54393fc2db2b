//! The `shard-<id>.rows` part of a checkpoint: the encoding of one shard's rows.
//!
//! Version 1, all integers little-endian:
//!
//! ```text
//! header  b"ISROWS\0\0"  u32 version (1)  u32 shard  u64 clock  u64 rows
//! row     u32 table  u32 length in bytes  u64 row  [length bytes: the row's elements]
//! ```
//!
//! Rows come sorted by `(table, row)`, so a shard's part is the same bytes whatever order
//! its rows were created in; rows that are all zeros are left out (a missing row reads
//! as zeros, so nothing is lost). The length of every row must be its table's row size,
//! and the file must end right after the last row. Reading trusts nothing: it allocates
//! one row at a time, never from a count read in the file, and every inconsistency is an
//! error saying what is wrong (the caller names the file).
//!
//! This module knows the bytes of a part, not where the part is stored (that is
//! `checkpoint`), which shard holds which row, or how rows travel.

use crate::buf::AlignedBuf;
use crate::ids::{Clock, RowKey};
use std::io::{self, Read, Write};

/// The first bytes of every rows part.
const MAGIC: [u8; 8] = *b"ISROWS\0\0";

/// The version this build writes and reads.
pub(crate) const VERSION: u32 = 1;

/// The part name of global shard `shard`'s rows.
pub(crate) fn part_name(shard: u32) -> String {
    format!("shard-{shard}.rows")
}

/// The shard number of a rows part's name, or `None` if `name` is not one.
pub(crate) fn parse_part_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("shard-")?.strip_suffix(".rows")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What a rows part says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The shard that wrote it.
    pub(crate) shard: u32,
    /// The clock its rows hold.
    pub(crate) clock: Clock,
    /// How many rows follow.
    pub(crate) rows: u64,
}

/// Writes the header of a rows part of `rows` rows; [`write_row`] then writes each, in
/// key order, leaving out all-zero rows (see [`keep`]).
pub(crate) fn write_header(
    out: &mut impl Write,
    shard: u32,
    clock: Clock,
    rows: u64,
) -> io::Result<()> {
    out.write_all(&MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&shard.to_le_bytes())?;
    out.write_all(&clock.to_le_bytes())?;
    out.write_all(&rows.to_le_bytes())
}

/// Writes one row of a rows part.
pub(crate) fn write_row(out: &mut impl Write, key: RowKey, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| io::Error::other(format!("{key:?} has {} bytes", bytes.len())))?;
    out.write_all(&key.table.to_le_bytes())?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&key.row.to_le_bytes())?;
    out.write_all(bytes)
}

/// Whether a row with these bytes is written (all-zero rows are not).
pub(crate) fn keep(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b != 0)
}

/// Reads a rows part from `input`, handing each row to `each`. `row_bytes(table)` is the
/// row size of a table of the run, or `None` if it has no such table. Returns the header,
/// or why the bytes are not a valid rows part.
pub(crate) fn read(
    mut input: impl Read,
    row_bytes: impl Fn(u32) -> Option<usize>,
    mut each: impl FnMut(RowKey, AlignedBuf),
) -> Result<Header, String> {
    let mut magic = [0u8; 8];
    read_exact(&mut input, &mut magic, "the header")?;
    if magic != MAGIC {
        return Err("not a rows part (bad magic bytes)".into());
    }
    let version = u32::from_le_bytes(take(&mut input, "the header")?);
    if version != VERSION {
        return Err(format!(
            "rows format version {version}, this build reads version {VERSION}"
        ));
    }
    let header = Header {
        shard: u32::from_le_bytes(take(&mut input, "the header")?),
        clock: u64::from_le_bytes(take(&mut input, "the header")?),
        rows: u64::from_le_bytes(take(&mut input, "the header")?),
    };
    let mut last: Option<RowKey> = None;
    for i in 0..header.rows {
        let what = format!("row {i} of {}", header.rows);
        let table = u32::from_le_bytes(take(&mut input, &what)?);
        let len = u32::from_le_bytes(take(&mut input, &what)?) as usize;
        let row = u64::from_le_bytes(take(&mut input, &what)?);
        let key = RowKey::new(table, row);
        let Some(expected) = row_bytes(table) else {
            return Err(format!(
                "{what} is of table #{table}, which the run does not have"
            ));
        };
        if len != expected {
            return Err(format!(
                "{what} (table #{table} row {row}) has {len} bytes, the table's rows {expected}"
            ));
        }
        if last.is_some_and(|l| l >= key) {
            return Err(format!("{what} (table #{table} row {row}) is out of order"));
        }
        last = Some(key);
        let mut buf = AlignedBuf::zeroed(len);
        read_exact(&mut input, buf.as_bytes_mut(), &what)?;
        each(key, buf);
    }
    let mut extra = [0u8; 1];
    match input.read(&mut extra) {
        Ok(0) => Ok(header),
        Ok(_) => Err(format!("trailing bytes after its {} rows", header.rows)),
        Err(e) => Err(e.to_string()),
    }
}

/// The next `N` bytes of `input`, which are part of `what`.
fn take<const N: usize>(input: &mut impl Read, what: &str) -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    read_exact(input, &mut bytes, what)?;
    Ok(bytes)
}

fn read_exact(input: &mut impl Read, buf: &mut [u8], what: &str) -> Result<(), String> {
    input.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => format!("ends in the middle of {what}"),
        _ => e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(rows: &[(RowKey, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, 3, 40, rows.len() as u64).unwrap();
        for (key, bytes) in rows {
            write_row(&mut out, *key, bytes).unwrap();
        }
        out
    }

    type Decoded = (Header, Vec<(RowKey, Vec<u8>)>);

    fn decode(bytes: &[u8]) -> Result<Decoded, String> {
        let mut rows = Vec::new();
        let sizes = |t| (t < 2).then_some(if t == 0 { 8 } else { 4 });
        let header = read(bytes, sizes, |k, b| rows.push((k, b.as_bytes().to_vec())))?;
        Ok((header, rows))
    }

    #[test]
    fn rows_round_trip_with_their_header() {
        let a = 7i64.to_le_bytes();
        let b = (-1.5f32).to_le_bytes();
        let rows: Vec<(RowKey, &[u8])> = vec![(RowKey::new(0, 5), &a), (RowKey::new(1, 2), &b)];
        let (header, back) = decode(&encoded(&rows)).unwrap();
        assert_eq!(
            header,
            Header {
                shard: 3,
                clock: 40,
                rows: 2
            }
        );
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], (RowKey::new(0, 5), a.to_vec()));
        assert_eq!(back[1], (RowKey::new(1, 2), b.to_vec()));
        assert!(!keep(&[0, 0, 0]) && keep(&[0, 1]));
        assert_eq!(parse_part_name(&part_name(12)), Some(12));
        for bad in [
            "shard-.rows",
            "shard-1.app",
            "shard-x.rows",
            "process-1.rows",
        ] {
            assert_eq!(parse_part_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_damage_is_an_error_that_says_what_is_wrong() {
        let a = 7i64.to_le_bytes();
        let good = encoded(&[(RowKey::new(0, 5), &a), (RowKey::new(0, 9), &a)]);
        // Every truncation is refused, none panics.
        for cut in 0..good.len() {
            let err = decode(&good[..cut]).unwrap_err();
            assert!(err.contains("ends in the middle"), "cut at {cut}: {err}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&long).unwrap_err().contains("trailing bytes"));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(decode(&magic).unwrap_err().contains("magic"));
        let mut version = good.clone();
        version[8] = 2;
        assert!(decode(&version).unwrap_err().contains("version 2"));
        // A count far beyond the file: refused at the end of the file, nothing allocated.
        let mut count = good.clone();
        count[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&count)
            .unwrap_err()
            .contains("ends in the middle of row 2"));
        let unknown = encoded(&[(RowKey::new(5, 0), &a)]);
        assert!(decode(&unknown).unwrap_err().contains("table #5"));
        let wide = encoded(&[(RowKey::new(1, 0), &a)]);
        assert!(decode(&wide)
            .unwrap_err()
            .contains("has 8 bytes, the table's rows 4"));
        let unsorted = encoded(&[(RowKey::new(0, 9), &a), (RowKey::new(0, 5), &a)]);
        assert!(decode(&unsorted).unwrap_err().contains("out of order"));
    }
}
