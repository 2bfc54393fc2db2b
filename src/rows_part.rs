//! The `shard-<id>.rows` part of a checkpoint: the encoding of one shard's rows and of
//! their update-rule states.
//!
//! Version 2, all integers little-endian:
//!
//! ```text
//! header  b"ISROWS\0\0"  u32 version (2)  u32 shard  u64 clock  u64 rows  u64 states
//! row     u32 table  u32 length in bytes  u64 row  [length bytes: the row's elements]
//! state   u32 table  u32 length in bytes  u64 row  u64 steps  [length bytes: the state]
//! ```
//!
//! The rows come first, then the states: one per row of a table with an update rule
//! that has stepped (a [`RuleState`]: its step count and the rule's state elements). Each
//! list is sorted by `(table, row)`, so a shard's part is the same bytes whatever order
//! its rows were created in; rows that are all zeros are left out (a missing row reads as
//! zeros, so nothing is lost), states never are. The length of every row must be its
//! table's row size, of every state its table's state size, a state only of a table with
//! a rule, and the file must end right after the last state. Version 1 (written before
//! rules had state in checkpoints) is the same without `states` in the header and
//! without states, and is still read. Reading trusts nothing: it allocates one row at a
//! time, never from a count read in the file, and every inconsistency is an error saying
//! what is wrong (the caller names the file).
//!
//! This module knows the bytes of a part, not where the part is stored (that is
//! `checkpoint`), which shard holds which row, or how rows travel.

use crate::buf::AlignedBuf;
use crate::ids::{Clock, RowKey};
use crate::msg::RuleState;
use std::io::{self, Read, Write};

/// The first bytes of every rows part.
const MAGIC: [u8; 8] = *b"ISROWS\0\0";

/// The version this build writes (it reads this one and [`VERSION_1`]).
pub(crate) const VERSION: u32 = 2;

/// The version without rule states, still read.
pub(crate) const VERSION_1: u32 = 1;

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
    /// How many rule states follow the rows (0 in version 1).
    pub(crate) states: u64,
}

/// What a rows part holds, handed to [`read`]'s caller one at a time.
#[derive(Debug)]
pub(crate) enum Item {
    /// A row and its value.
    Row(RowKey, AlignedBuf),
    /// A row's update-rule state.
    State(RowKey, RuleState),
}

/// The sizes of a table's records in a rows part: its rows' bytes, and its rule states'
/// (`None` for a table whose rule is a sum, which has none).
pub(crate) type Sizes = (usize, Option<usize>);

/// Writes the header of a rows part of `header.rows` rows and `header.states` rule
/// states; [`write_row`] then writes each row, in key order, leaving out all-zero rows
/// (see [`keep`]), and [`write_state`] each state, in key order.
pub(crate) fn write_header(out: &mut impl Write, header: Header) -> io::Result<()> {
    out.write_all(&MAGIC)?;
    out.write_all(&VERSION.to_le_bytes())?;
    out.write_all(&header.shard.to_le_bytes())?;
    out.write_all(&header.clock.to_le_bytes())?;
    out.write_all(&header.rows.to_le_bytes())?;
    out.write_all(&header.states.to_le_bytes())
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

/// Writes one rule state of a rows part: row `key`'s `steps` and `state` bytes.
pub(crate) fn write_state(
    out: &mut impl Write,
    key: RowKey,
    steps: u64,
    state: &[u8],
) -> io::Result<()> {
    let len = u32::try_from(state.len())
        .map_err(|_| io::Error::other(format!("{key:?} has {} bytes of state", state.len())))?;
    out.write_all(&key.table.to_le_bytes())?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(&key.row.to_le_bytes())?;
    out.write_all(&steps.to_le_bytes())?;
    out.write_all(state)
}

/// Whether a row with these bytes is written (all-zero rows are not).
pub(crate) fn keep(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b != 0)
}

/// Reads a rows part from `input`, handing each row and rule state to `each`.
/// `sizes(table)` is the [`Sizes`] of a table of the run, or `None` if it has no such
/// table. Returns the header, or why the bytes are not a valid rows part.
pub(crate) fn read(
    mut input: impl Read,
    sizes: impl Fn(u32) -> Option<Sizes>,
    mut each: impl FnMut(Item),
) -> Result<Header, String> {
    let mut magic = [0u8; 8];
    read_exact(&mut input, &mut magic, "the header")?;
    if magic != MAGIC {
        return Err("not a rows part (bad magic bytes)".into());
    }
    let version = u32::from_le_bytes(take(&mut input, "the header")?);
    if version != VERSION && version != VERSION_1 {
        return Err(format!(
            "rows format version {version}, this build reads versions {VERSION_1} and {VERSION}"
        ));
    }
    let header = Header {
        shard: u32::from_le_bytes(take(&mut input, "the header")?),
        clock: u64::from_le_bytes(take(&mut input, "the header")?),
        rows: u64::from_le_bytes(take(&mut input, "the header")?),
        states: match version {
            VERSION_1 => 0,
            _ => u64::from_le_bytes(take(&mut input, "the header")?),
        },
    };
    let mut last: Option<RowKey> = None;
    for i in 0..header.rows {
        let what = format!("row {i} of {}", header.rows);
        let (key, len) = record_head(&mut input, &what, &sizes, ("rows", |(row, _)| Some(row)))?;
        check_order(&mut last, key, &what)?;
        let mut buf = AlignedBuf::zeroed(len);
        read_exact(&mut input, buf.as_bytes_mut(), &what)?;
        each(Item::Row(key, buf));
    }
    let mut last: Option<RowKey> = None;
    for i in 0..header.states {
        let what = format!("rule state {i} of {}", header.states);
        let (key, len) = record_head(&mut input, &what, &sizes, ("rule states", |(_, s)| s))?;
        let steps = u64::from_le_bytes(take(&mut input, &what)?);
        check_order(&mut last, key, &what)?;
        let mut state = AlignedBuf::zeroed(len);
        read_exact(&mut input, state.as_bytes_mut(), &what)?;
        each(Item::State(key, RuleState { steps, state }));
    }
    let mut extra = [0u8; 1];
    let records = if header.states == 0 {
        format!("{} rows", header.rows)
    } else {
        format!("{} rows and {} rule states", header.rows, header.states)
    };
    match input.read(&mut extra) {
        Ok(0) => Ok(header),
        Ok(_) => Err(format!("trailing bytes after its {records}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The key and length of the record `what` (a row or a state), its length checked
/// against the size `size` picks from its table's [`Sizes`] (`None`: the table has no
/// such records); `kind` names the records in an error.
fn record_head(
    input: &mut impl Read,
    what: &str,
    sizes: &impl Fn(u32) -> Option<Sizes>,
    (kind, size): (&str, impl Fn(Sizes) -> Option<usize>),
) -> Result<(RowKey, usize), String> {
    let table = u32::from_le_bytes(take(input, what)?);
    let len = u32::from_le_bytes(take(input, what)?) as usize;
    let row = u64::from_le_bytes(take(input, what)?);
    let Some(sizes) = sizes(table) else {
        return Err(format!(
            "{what} is of table #{table}, which the run does not have"
        ));
    };
    let Some(expected) = size(sizes) else {
        return Err(format!(
            "{what} is of table #{table}, whose rule is a sum (it keeps no state)"
        ));
    };
    if len != expected {
        return Err(format!(
            "{what} (table #{table} row {row}) has {len} bytes, the table's {kind} {expected}"
        ));
    }
    Ok((RowKey::new(table, row), len))
}

/// `Err` unless `key` comes after the `last` record of its list; it becomes the last.
fn check_order(last: &mut Option<RowKey>, key: RowKey, what: &str) -> Result<(), String> {
    if last.is_some_and(|l| l >= key) {
        return Err(format!(
            "{what} (table #{} row {}) is out of order",
            key.table, key.row
        ));
    }
    *last = Some(key);
    Ok(())
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

    /// Table 0: one `i64` per row, no rule; table 1: one `f32`, a rule keeping two
    /// elements of state (8 bytes).
    fn sizes(t: u32) -> Option<Sizes> {
        match t {
            0 => Some((8, None)),
            1 => Some((4, Some(8))),
            _ => None,
        }
    }

    fn encoded(rows: &[(RowKey, &[u8])], states: &[(RowKey, u64, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        let header = Header {
            shard: 3,
            clock: 40,
            rows: rows.len() as u64,
            states: states.len() as u64,
        };
        write_header(&mut out, header).unwrap();
        for (key, bytes) in rows {
            write_row(&mut out, *key, bytes).unwrap();
        }
        for (key, steps, bytes) in states {
            write_state(&mut out, *key, *steps, bytes).unwrap();
        }
        out
    }

    /// A header, the rows and the states `(key, steps, bytes)`.
    type Decoded = (Header, Vec<(RowKey, Vec<u8>)>, Vec<(RowKey, u64, Vec<u8>)>);

    fn decode(bytes: &[u8]) -> Result<Decoded, String> {
        let (mut rows, mut states) = (Vec::new(), Vec::new());
        let header = read(bytes, sizes, |item| match item {
            Item::Row(k, b) => rows.push((k, b.as_bytes().to_vec())),
            Item::State(k, s) => states.push((k, s.steps, s.state.as_bytes().to_vec())),
        })?;
        Ok((header, rows, states))
    }

    #[test]
    fn rows_and_states_round_trip_with_their_header() {
        let a = 7i64.to_le_bytes();
        let b = (-1.5f32).to_le_bytes();
        let s = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let rows: Vec<(RowKey, &[u8])> = vec![(RowKey::new(0, 5), &a), (RowKey::new(1, 2), &b)];
        // Row 1 of table 1 has a state and no value (it stepped back to zeros).
        let states: Vec<(RowKey, u64, &[u8])> =
            vec![(RowKey::new(1, 1), 3, &s), (RowKey::new(1, 2), 9, &s)];
        let (header, back, back_states) = decode(&encoded(&rows, &states)).unwrap();
        assert_eq!(
            header,
            Header {
                shard: 3,
                clock: 40,
                rows: 2,
                states: 2
            }
        );
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], (RowKey::new(0, 5), a.to_vec()));
        assert_eq!(back[1], (RowKey::new(1, 2), b.to_vec()));
        assert_eq!(
            back_states,
            vec![
                (RowKey::new(1, 1), 3, s.to_vec()),
                (RowKey::new(1, 2), 9, s.to_vec())
            ]
        );
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
    fn a_version_1_part_is_still_read() {
        // Version 1: no states count in the header, no states.
        let a = 7i64.to_le_bytes();
        let mut old = Vec::new();
        old.extend_from_slice(&MAGIC);
        old.extend_from_slice(&VERSION_1.to_le_bytes());
        old.extend_from_slice(&3u32.to_le_bytes());
        old.extend_from_slice(&40u64.to_le_bytes());
        old.extend_from_slice(&1u64.to_le_bytes());
        write_row(&mut old, RowKey::new(0, 5), &a).unwrap();
        let (header, rows, states) = decode(&old).unwrap();
        assert_eq!((header.rows, header.states, header.clock), (1, 0, 40));
        assert_eq!(rows, vec![(RowKey::new(0, 5), a.to_vec())]);
        assert!(states.is_empty());
    }

    #[test]
    fn every_damage_is_an_error_that_says_what_is_wrong() {
        let a = 7i64.to_le_bytes();
        let s = [0u8; 8];
        let good = encoded(
            &[(RowKey::new(0, 5), &a), (RowKey::new(0, 9), &a)],
            &[(RowKey::new(1, 0), 1, &s)],
        );
        // Every truncation is refused, none panics.
        for cut in 0..good.len() {
            let err = decode(&good[..cut]).unwrap_err();
            assert!(err.contains("ends in the middle"), "cut at {cut}: {err}");
        }
        let mut long = good.clone();
        long.push(0);
        assert!(decode(&long)
            .unwrap_err()
            .contains("trailing bytes after its 2 rows and 1 rule states"));
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(decode(&magic).unwrap_err().contains("magic"));
        let mut version = good.clone();
        version[8] = 3;
        let err = decode(&version).unwrap_err();
        assert!(
            err.contains("version 3, this build reads versions 1 and 2"),
            "{err}"
        );
        // A count far beyond the file: refused at the end of the file, nothing allocated.
        let mut count = encoded(&[(RowKey::new(0, 5), &a), (RowKey::new(0, 9), &a)], &[]);
        count[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&count)
            .unwrap_err()
            .contains("ends in the middle of row 2"));
        let mut count = good.clone();
        count[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&count)
            .unwrap_err()
            .contains("ends in the middle of rule state 1"));
        let unknown = encoded(&[(RowKey::new(5, 0), &a)], &[]);
        assert!(decode(&unknown).unwrap_err().contains("table #5"));
        let wide = encoded(&[(RowKey::new(1, 0), &a)], &[]);
        assert!(decode(&wide)
            .unwrap_err()
            .contains("has 8 bytes, the table's rows 4"));
        let unsorted = encoded(&[(RowKey::new(0, 9), &a), (RowKey::new(0, 5), &a)], &[]);
        assert!(decode(&unsorted).unwrap_err().contains("out of order"));
        let summed = encoded(&[], &[(RowKey::new(0, 1), 1, &s)]);
        assert!(decode(&summed)
            .unwrap_err()
            .contains("rule state 0 of 1 is of table #0, whose rule is a sum"));
        let short = encoded(&[], &[(RowKey::new(1, 1), 1, &s[..4])]);
        assert!(decode(&short)
            .unwrap_err()
            .contains("has 4 bytes, the table's rule states 8"));
        let unsorted = encoded(
            &[],
            &[(RowKey::new(1, 2), 1, &s), (RowKey::new(1, 2), 1, &s)],
        );
        assert!(decode(&unsorted)
            .unwrap_err()
            .contains("rule state 1 of 2 (table #1 row 2) is out of order"));
    }
}
