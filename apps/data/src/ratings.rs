//! Loading user–item ratings (MF input) from MovieLens `u.data`-style whitespace files,
//! CSV files and RecBole `.inter` files, remapping raw user and item tokens to dense ids.
//!
//! The format is chosen from the file name and, failing that, by sniffing the first line;
//! see [`RatingsFormat::detect`]. This module knows nothing of how ratings are used.

use std::io::BufRead;
use std::path::Path;

use super::input::{self, IdMap, LineReader};
use super::{DataError, Rating, Ratings};

/// A text layout of ratings that [`load_ratings`] understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RatingsFormat {
    /// Whitespace separated `user item rating [timestamp]` (MovieLens `u.data`).
    Whitespace,
    /// Comma separated `user,item,rating[,timestamp]`, with an optional header line.
    Csv,
    /// `user::item::rating[::timestamp]` (MovieLens 1M/10M `ratings.dat`).
    DoubleColon,
    /// RecBole atomic file: tab separated with a typed header such as
    /// `user_id:token  item_id:token  rating:float  timestamp:float`.
    RecBoleInter,
}

impl RatingsFormat {
    /// Picks the format for `path` whose first line is `first_line`: `.inter` is RecBole,
    /// `.csv` is CSV; otherwise a first line with a `user_id:`-style typed header is
    /// RecBole, one with `::` is MovieLens-1M style, one with a comma is CSV, and anything
    /// else is whitespace separated.
    /// A trailing `.gz` is ignored.
    pub fn detect(path: &Path, first_line: &str) -> RatingsFormat {
        let name = input::lower_file_name(path);
        let name = name.strip_suffix(".gz").unwrap_or(&name);
        if name.ends_with(".inter") {
            RatingsFormat::RecBoleInter
        } else if name.ends_with(".csv") {
            RatingsFormat::Csv
        } else if first_line
            .split('\t')
            .any(|f| f.starts_with("user_id:") || f.starts_with("item_id:"))
        {
            RatingsFormat::RecBoleInter
        } else if first_line.contains("::") {
            RatingsFormat::DoubleColon
        } else if first_line.contains(',') {
            RatingsFormat::Csv
        } else {
            RatingsFormat::Whitespace
        }
    }
}

/// Loads ratings from `path` (optionally gzip-compressed), choosing the format with
/// [`RatingsFormat::detect`]. User and item tokens get dense ids in order of first
/// appearance.
pub fn load_ratings(path: &Path) -> Result<Ratings, DataError> {
    let mut reader = input::open(path)?;
    let first_line = input::peek_first_line(path, &mut reader)?;
    let format = RatingsFormat::detect(path, &first_line);
    load_ratings_as(path, reader, format)
}

/// Loads ratings from `path` in the given `format` (optionally gzip-compressed).
pub fn load_ratings_with_format(path: &Path, format: RatingsFormat) -> Result<Ratings, DataError> {
    let reader = input::open(path)?;
    load_ratings_as(path, reader, format)
}

/// Where the user, item and rating fields sit in a line, and how many fields are allowed.
#[derive(Debug, Clone, Copy)]
struct Columns {
    user: usize,
    item: usize,
    rating: usize,
    min_fields: usize,
    max_fields: usize,
}

/// Positional `user item rating [timestamp]`.
const POSITIONAL: Columns = Columns {
    user: 0,
    item: 1,
    rating: 2,
    min_fields: 3,
    max_fields: 4,
};

fn load_ratings_as(
    path: &Path,
    reader: Box<dyn BufRead>,
    format: RatingsFormat,
) -> Result<Ratings, DataError> {
    let mut lines = LineReader::new(path, reader);
    let mut builder = Builder::default();
    let (separator, columns) = match format {
        RatingsFormat::Whitespace => (None, POSITIONAL),
        RatingsFormat::Csv => (Some(","), POSITIONAL),
        RatingsFormat::DoubleColon => (Some("::"), POSITIONAL),
        RatingsFormat::RecBoleInter => match lines.next_line()? {
            Some((line_no, header)) => (Some("\t"), inter_columns(path, line_no, header)?),
            None => return Err(input::invalid(path, "empty file: no header line")),
        },
    };
    let mut first = true;
    while let Some((line_no, line)) = lines.next_line()? {
        if line.trim().is_empty() {
            continue;
        }
        let fields = match separator {
            None => pick(line.split_ascii_whitespace(), columns),
            Some(sep) => pick(line.split(sep).map(str::trim), columns),
        };
        if std::mem::take(&mut first) && format == RatingsFormat::Csv && is_csv_header(&fields) {
            continue;
        }
        builder.push(path, line_no, &fields, columns)?;
    }
    builder.finish(path)
}

/// The user, item and rating fields of one line, and how many fields it has.
struct Fields<'a> {
    user: &'a str,
    item: &'a str,
    rating: &'a str,
    count: usize,
}

/// Picks the fields named by `cols` out of a line's `items`.
fn pick<'a>(items: impl Iterator<Item = &'a str>, cols: Columns) -> Fields<'a> {
    let mut fields = Fields {
        user: "",
        item: "",
        rating: "",
        count: 0,
    };
    for (i, item) in items.enumerate() {
        if i == cols.user {
            fields.user = item;
        }
        if i == cols.item {
            fields.item = item;
        }
        if i == cols.rating {
            fields.rating = item;
        }
        fields.count = i + 1;
    }
    fields
}

/// A CSV first line is a header when its rating column is present but not a number.
fn is_csv_header(fields: &Fields<'_>) -> bool {
    fields.count >= 3 && fields.rating.parse::<f32>().is_err()
}

/// Finds the user, item and rating columns of a RecBole header (`name:type` fields).
fn inter_columns(path: &Path, line_no: usize, header: &str) -> Result<Columns, DataError> {
    let names: Vec<&str> = header
        .split('\t')
        .map(|f| f.split(':').next().unwrap_or(f).trim())
        .collect();
    let find = |wanted: &str| names.iter().position(|&n| n == wanted);
    let (Some(user), Some(item), Some(rating)) = (find("user_id"), find("item_id"), find("rating"))
    else {
        return Err(input::malformed(
            path,
            line_no,
            format!(
                "header must name user_id, item_id and rating columns, found [{}]",
                input::excerpt(&names.join(", "))
            ),
        ));
    };
    Ok(Columns {
        user,
        item,
        rating,
        min_fields: user.max(item).max(rating) + 1,
        max_fields: names.len(),
    })
}

/// Accumulates ratings and the two id maps.
#[derive(Debug, Default)]
struct Builder {
    ratings: Vec<Rating>,
    users: IdMap,
    items: IdMap,
}

impl Builder {
    /// Adds the rating on line `line_no`, given its picked `fields`.
    fn push(
        &mut self,
        path: &Path,
        line_no: usize,
        fields: &Fields<'_>,
        cols: Columns,
    ) -> Result<(), DataError> {
        let count = fields.count;
        if count < cols.min_fields || count > cols.max_fields {
            let expected = if cols.min_fields == cols.max_fields {
                cols.min_fields.to_string()
            } else {
                format!("{} or {}", cols.min_fields, cols.max_fields)
            };
            return Err(input::malformed(
                path,
                line_no,
                format!("expected {expected} fields, found {count}"),
            ));
        }
        let (user, item, raw) = (fields.user, fields.item, fields.rating);
        for (what, token) in [("user", user), ("item", item)] {
            if token.is_empty() {
                return Err(input::malformed(path, line_no, format!("empty {what} id")));
            }
        }
        let value: f32 = raw.parse().map_err(|_| {
            input::malformed(
                path,
                line_no,
                format!("rating '{}' is not a number", input::excerpt(raw)),
            )
        })?;
        if !value.is_finite() {
            return Err(input::malformed(
                path,
                line_no,
                format!("rating '{}' is not finite", input::excerpt(raw)),
            ));
        }
        let too_many = || input::malformed(path, line_no, "more than u32::MAX distinct ids");
        let user = self.users.id(user).ok_or_else(too_many)?;
        let item = self.items.id(item).ok_or_else(too_many)?;
        self.ratings.push(Rating { user, item, value });
        Ok(())
    }

    fn finish(self, path: &Path) -> Result<Ratings, DataError> {
        if self.ratings.is_empty() {
            return Err(input::invalid(path, "no ratings found"));
        }
        Ok(Ratings {
            ratings: self.ratings,
            num_users: self.users.len(),
            num_items: self.items.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{malformed_line as malformed_at, TempDir};

    #[test]
    fn movielens_whitespace_remaps_in_first_appearance_order() {
        let dir = TempDir::new("ratings-ws");
        let path = dir.write(
            "u.data",
            "196\t242\t3\t881250949\n186 302 3.5\n196\t302\t1\t1\n",
        );
        let r = load_ratings(&path).unwrap();
        assert_eq!((r.num_users, r.num_items), (2, 2));
        let got: Vec<_> = r
            .ratings
            .iter()
            .map(|x| (x.user, x.item, x.value))
            .collect();
        assert_eq!(got, vec![(0, 0, 3.0), (1, 1, 3.5), (0, 1, 1.0)]);
    }

    #[test]
    fn csv_with_and_without_header() {
        let dir = TempDir::new("ratings-csv");
        let with = dir.write(
            "with.csv",
            "userId,movieId,rating,timestamp\r\n1,31,2.5,1260759144\r\n1,1029,3.0,1\r\n",
        );
        let without = dir.write("without.csv", "a,x,4\nb,x,5\n");
        let r = load_ratings(&with).unwrap();
        assert_eq!((r.ratings.len(), r.num_users, r.num_items), (2, 1, 2));
        let r = load_ratings(&without).unwrap();
        assert_eq!((r.ratings.len(), r.num_users, r.num_items), (2, 2, 1));
        assert_eq!(r.ratings[1].value, 5.0);
    }

    #[test]
    fn recbole_inter_finds_columns_by_name() {
        let dir = TempDir::new("ratings-inter");
        let path = dir.write(
            "x.inter",
            "timestamp:float\titem_id:token\tuser_id:token\trating:float\n\
             9\ti1\tu1\t4\n9\ti2\tu1\t2\n9\ti1\tu2\t5\n",
        );
        let r = load_ratings(&path).unwrap();
        assert_eq!((r.num_users, r.num_items), (2, 2));
        assert_eq!(
            r.ratings[2],
            Rating {
                user: 1,
                item: 0,
                value: 5.0
            }
        );
    }

    #[test]
    fn inter_header_is_sniffed_without_extension() {
        let dir = TempDir::new("ratings-sniff");
        let path = dir.write(
            "data.txt",
            "user_id:token\titem_id:token\trating:float\nu\ti\t1\n",
        );
        assert_eq!(load_ratings(&path).unwrap().ratings.len(), 1);
    }

    #[test]
    fn movielens_1m_double_colon() {
        let dir = TempDir::new("ratings-dat");
        let path = dir.write(
            "ratings.dat",
            "1::1193::5::978300760\n1::661::3::978302109\n",
        );
        let r = load_ratings(&path).unwrap();
        assert_eq!((r.num_users, r.num_items, r.ratings.len()), (1, 2, 2));
        assert_eq!(r.ratings[1].value, 3.0);
    }

    #[test]
    fn gzip_is_transparent() {
        let dir = TempDir::new("ratings-gz");
        let path = dir.write_gz("u.data.gz", "1 2 3\n4 5 6\n");
        assert_eq!(load_ratings(&path).unwrap().ratings.len(), 2);
    }

    #[test]
    fn wrong_field_count_names_file_and_line() {
        let dir = TempDir::new("ratings-bad-count");
        let path = dir.write("u.data", "1 2 3\n\n1 2\n");
        let (line, text) = malformed_at(load_ratings(&path).unwrap_err());
        assert_eq!(line, 3);
        assert!(text.contains("u.data:3"), "{text}");
        assert!(text.contains("expected 3 or 4 fields, found 2"), "{text}");
    }

    #[test]
    fn non_numeric_rating_names_the_value() {
        let dir = TempDir::new("ratings-bad-value");
        let path = dir.write("r.csv", "user,item,rating\n1,2,3\n1,3,abc\n");
        let (line, text) = malformed_at(load_ratings(&path).unwrap_err());
        assert_eq!(line, 3);
        assert!(
            text.contains("r.csv:3: rating 'abc' is not a number"),
            "{text}"
        );
    }

    #[test]
    fn inter_without_rating_column_is_an_error() {
        let dir = TempDir::new("ratings-no-rating");
        let path = dir.write("x.inter", "user_id:token\titem_id:token\nu\ti\n");
        let (line, text) = malformed_at(load_ratings(&path).unwrap_err());
        assert_eq!(line, 1);
        assert!(text.contains("rating"), "{text}");
    }

    #[test]
    fn inter_short_line_is_an_error() {
        let dir = TempDir::new("ratings-inter-short");
        let path = dir.write(
            "x.inter",
            "user_id:token\titem_id:token\trating:float\nu\ti\n",
        );
        let (line, text) = malformed_at(load_ratings(&path).unwrap_err());
        assert_eq!(line, 2);
        assert!(text.contains("expected 3 fields, found 2"), "{text}");
    }

    #[test]
    fn non_finite_and_empty_and_missing() {
        let dir = TempDir::new("ratings-misc");
        let nan = dir.write("nan.data", "1 2 NaN\n");
        assert!(load_ratings(&nan)
            .unwrap_err()
            .to_string()
            .contains("not finite"));
        let empty = dir.write("empty.data", "");
        assert!(matches!(
            load_ratings(&empty),
            Err(DataError::Invalid { .. })
        ));
        let missing = dir.path().join("missing.data");
        assert!(matches!(load_ratings(&missing), Err(DataError::Io { .. })));
    }

    #[test]
    fn invalid_utf8_is_malformed() {
        let dir = TempDir::new("ratings-utf8");
        let path = dir.write_bytes("u.data", b"1 2 3\n\xff\xfe 2 3\n");
        let (line, _) = malformed_at(load_ratings(&path).unwrap_err());
        assert_eq!(line, 2);
    }
}
