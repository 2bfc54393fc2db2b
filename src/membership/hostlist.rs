//! Slurm's compressed lists, expanded: host lists (`node[01-04,07],gpu-a[1-2]`) and task
//! counts per node (`2(x3),1`), as Slurm writes them into `SLURM_JOB_NODELIST` and
//! `SLURM_TASKS_PER_NODE`.
//!
//! Pure text work: nothing is resolved or bound here, and nothing here knows which
//! environment variable the text came from (the caller names it in its errors). Sizes are
//! counted before anything is allocated, so a hostile list cannot make a huge one.

use crate::error::{Error, Result};

/// The most hosts a host list may expand to, and the most tasks a task list may describe
/// (the most processes a cluster may have, as in a hosts file).
pub const MAX_HOSTLIST_HOSTS: usize = 65_536;

/// Digits of the longest number accepted in a bracket range (fits a `u64`).
const MAX_DIGITS: usize = 18;

/// The host names of a Slurm host list, in order: comma-separated names, each with any
/// number of bracket groups of numbers and ranges (`node[01-04,07]`, `rack[1-2]-n[1-3]`,
/// the first group varying slowest). A range keeps its first number's zero padding
/// (`[08-10]` is `08 09 10`). Refused, naming the bad part: empty names, unbalanced or
/// nested brackets, a decreasing range, anything but letters, digits, `-`, `.` and `_`
/// outside brackets, and a list of more than [`MAX_HOSTLIST_HOSTS`] hosts (counted before
/// any is made).
///
/// ```
/// let hosts = iterstore::deploy::expand_hostlist("node[01-03,07],gpu-a[1-2]")?;
/// assert_eq!(hosts, ["node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2"]);
/// # Ok::<(), iterstore::Error>(())
/// ```
pub fn expand_hostlist(text: &str) -> Result<Vec<String>> {
    expand(text).map_err(|why| Error::config("hostlist", why))
}

/// The number of tasks on each node, in node order, from Slurm's compressed form:
/// comma-separated counts, each optionally repeated (`2(x3),1` is `[2, 2, 2, 1]`). Refused,
/// naming the bad item: a count or repetition of 0, a malformed item, and more than
/// [`MAX_HOSTLIST_HOSTS`] nodes or tasks in all (counted before any is made).
///
/// ```
/// assert_eq!(iterstore::deploy::parse_tasks_per_node("2(x3),1")?, [2, 2, 2, 1]);
/// # Ok::<(), iterstore::Error>(())
/// ```
pub fn parse_tasks_per_node(text: &str) -> Result<Vec<usize>> {
    tasks_per_node(text).map_err(|why| Error::config("tasks_per_node", why))
}

/// One comma-separated piece of a host list: literal text and bracket groups.
#[derive(Debug)]
enum Part<'a> {
    /// Text copied into every name.
    Literal(&'a str),
    /// One of these numbers in each name.
    Group(Vec<Range>),
}

/// `lo-hi` (or one number, `lo == hi`), printed at least `width` digits wide.
#[derive(Debug, Clone, Copy)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(self) -> u64 {
        self.hi - self.lo + 1
    }
}

/// Longest piece of input quoted in full in an error; longer ones are cut.
const MAX_QUOTED: usize = 60;

/// `text` quoted for an error message, cut after [`MAX_QUOTED`] characters.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

/// [`expand_hostlist`] with the reason as text.
pub(crate) fn expand(text: &str) -> std::result::Result<Vec<String>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("an empty host list".into());
    }
    let names = split_outside_brackets(text)?
        .into_iter()
        .map(|name| parse_name(name).map(|parts| (name, parts)))
        .collect::<std::result::Result<Vec<_>, String>>()?;
    let mut total: u64 = 0;
    for (name, parts) in &names {
        total = total.saturating_add(count(parts));
        if total > MAX_HOSTLIST_HOSTS as u64 {
            return Err(format!(
                "more than {MAX_HOSTLIST_HOSTS} hosts (by {})",
                quoted(name)
            ));
        }
    }
    let mut hosts = Vec::with_capacity(total as usize);
    for (_, parts) in &names {
        let mut names = vec![String::new()];
        for part in parts {
            names = match part {
                Part::Literal(text) => names.into_iter().map(|n| n + text).collect(),
                Part::Group(ranges) => names
                    .iter()
                    .flat_map(|n| {
                        ranges.iter().flat_map(move |r| {
                            (r.lo..=r.hi).map(move |i| format!("{n}{i:0w$}", w = r.width))
                        })
                    })
                    .collect(),
            };
        }
        hosts.extend(names);
    }
    Ok(hosts)
}

/// The host names of `parts`, counted without making them (saturating).
fn count(parts: &[Part<'_>]) -> u64 {
    parts.iter().fold(1u64, |n, part| match part {
        Part::Literal(_) => n,
        Part::Group(ranges) => {
            n.saturating_mul(ranges.iter().fold(0u64, |s, r| s.saturating_add(r.len())))
        }
    })
}

/// `text` cut at the commas outside brackets; every piece non-empty.
fn split_outside_brackets(text: &str) -> std::result::Result<Vec<&str>, String> {
    let mut pieces = Vec::new();
    let (mut start, mut depth) = (0, 0u32);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return Err(format!("a ']' without '[' in {}", quoted(text))),
            ']' => depth -= 1,
            ',' if depth == 0 => {
                pieces.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("a '[' without ']' in {}", quoted(text)));
    }
    pieces.push(&text[start..]);
    match pieces.iter().position(|p| p.is_empty()) {
        Some(i) => Err(format!("host name {} of {} is empty", i + 1, quoted(text))),
        None => Ok(pieces),
    }
}

/// One host name's literal text and bracket groups (its brackets balanced, not nested).
fn parse_name(name: &str) -> std::result::Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        match rest.find('[') {
            Some(0) => {
                let end = rest
                    .find(']')
                    .ok_or_else(|| format!("a '[' without ']' in {}", quoted(name)))?;
                let inside = &rest[1..end];
                if inside.contains('[') {
                    return Err(format!("nested '[' in {}", quoted(name)));
                }
                parts.push(Part::Group(parse_ranges(inside, name)?));
                rest = &rest[end + 1..];
            }
            found => {
                let end = found.unwrap_or(rest.len());
                let literal = &rest[..end];
                if let Some(c) = literal
                    .chars()
                    .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
                {
                    return Err(format!("{c:?} in host name {}", quoted(name)));
                }
                parts.push(Part::Literal(literal));
                rest = &rest[end..];
            }
        }
    }
    Ok(parts)
}

/// The comma-separated numbers and `lo-hi` ranges inside one pair of brackets of `name`.
fn parse_ranges(inside: &str, name: &str) -> std::result::Result<Vec<Range>, String> {
    inside
        .split(',')
        .map(|item| {
            let number = |digits: &str| {
                if digits.is_empty()
                    || digits.len() > MAX_DIGITS
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(format!(
                        "{} in {} is not a number or a range lo-hi",
                        quoted(item),
                        quoted(name)
                    ));
                }
                digits
                    .parse::<u64>()
                    .map_err(|e| format!("{}: {e}", quoted(digits)))
            };
            let (lo, hi) = item.split_once('-').unwrap_or((item, item));
            let range = Range {
                lo: number(lo)?,
                hi: number(hi)?,
                width: lo.len(),
            };
            if range.lo > range.hi {
                return Err(format!(
                    "the range {} in {} decreases",
                    quoted(item),
                    quoted(name)
                ));
            }
            Ok(range)
        })
        .collect()
}

/// [`parse_tasks_per_node`] with the reason as text.
pub(crate) fn tasks_per_node(text: &str) -> std::result::Result<Vec<usize>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("an empty list of tasks per node".into());
    }
    let mut items = Vec::new();
    let (mut nodes, mut tasks) = (0usize, 0usize);
    for item in text.split(',') {
        let bad = || format!("{} is not a task count N or N(xM)", quoted(item));
        let (n, times) = match item.split_once('(') {
            None => (item, "1"),
            Some((n, rest)) => {
                let times = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                (n, times)
            }
        };
        let positive = |digits: &str| {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            match digits.parse::<usize>() {
                Ok(0) => Err(format!("{}: a count of 0", quoted(item))),
                Ok(v) => Ok(v),
                Err(_) => Err(bad()),
            }
        };
        let (n, times) = (positive(n)?, positive(times)?);
        nodes = nodes.saturating_add(times);
        tasks = tasks.saturating_add(n.saturating_mul(times));
        if nodes > MAX_HOSTLIST_HOSTS || tasks > MAX_HOSTLIST_HOSTS {
            return Err(format!(
                "more than {MAX_HOSTLIST_HOSTS} nodes or tasks (by {})",
                quoted(item)
            ));
        }
        items.push((n, times));
    }
    let mut counts = Vec::with_capacity(nodes);
    for (n, times) in items {
        counts.extend(std::iter::repeat_n(n, times));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(text: &str) -> Vec<String> {
        expand(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn host_lists_expand_in_slurm_order_with_padding_kept() {
        assert_eq!(hosts("node1"), ["node1"]);
        assert_eq!(
            hosts(" a,b.example.org,c_d "),
            ["a", "b.example.org", "c_d"]
        );
        assert_eq!(
            hosts("node[01-04,07],gpu-a[1-2]"),
            ["node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"]
        );
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[007]"), ["n007"]);
        assert_eq!(
            hosts("rack[1-2]-n[1,3]"),
            ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]
        );
        assert_eq!(hosts("[1-2]x"), ["1x", "2x"]);
        assert_eq!(hosts("n[1-2]-ib,login"), ["n1-ib", "n2-ib", "login"]);
        assert_eq!(hosts("n[0-65535]").len(), MAX_HOSTLIST_HOSTS);
    }

    #[test]
    fn malformed_host_lists_are_refused_naming_the_bad_part() {
        for (text, says) in [
            ("", "empty host list"),
            ("a,,b", "host name 2 of \"a,,b\" is empty"),
            ("a,", "host name 2"),
            ("node[1-", "'[' without ']'"),
            ("node1]", "']' without '['"),
            ("node[1-[2]]", "nested '['"),
            ("node[3-1]", "the range \"3-1\" in \"node[3-1]\" decreases"),
            ("node[]", "\"\" in \"node[]\" is not a number"),
            ("node[a-b]", "\"a-b\" in \"node[a-b]\" is not a number"),
            ("node[1-2-3]", "\"1-2-3\""),
            ("node[-1]", "\"-1\""),
            ("node[1,]", "\"\" in \"node[1,]\" is not a number"),
            ("node[1234567890123456789]", "is not a number"),
            ("no de", "' ' in host name \"no de\""),
            ("n/1", "'/' in host name"),
            ("n[0-65536]", "more than 65536 hosts"),
            ("a[0-99999],b[0-99999]", "more than 65536 hosts"),
            (
                "n[0-999999999999999999][0-999999999999999999]",
                "more than 65536 hosts",
            ),
            (&format!("{},", "x".repeat(10_000)), "host name 2 of \"xxx"),
        ] {
            let err = expand(text).expect_err(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
        let long = expand(&format!("{},", "x".repeat(10_000))).unwrap_err();
        assert!(long.len() < 100, "a long list is quoted in full: {long}");
        let err = expand_hostlist("x[2-1]").unwrap_err().to_string();
        assert!(err.contains("hostlist") && err.contains("x[2-1]"), "{err}");
    }

    #[test]
    fn tasks_per_node_expand_their_repetitions() {
        assert_eq!(tasks_per_node("1").unwrap(), [1]);
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(tasks_per_node("4,2(x2)").unwrap(), [4, 2, 2]);
        assert_eq!(tasks_per_node(" 1(x1) ").unwrap(), [1]);
        assert_eq!(tasks_per_node("1(x65536)").unwrap().len(), 65_536);
    }

    #[test]
    fn malformed_tasks_per_node_are_refused_naming_the_item() {
        for (text, says) in [
            ("", "empty list"),
            ("0", "\"0\": a count of 0"),
            ("2(x0)", "\"2(x0)\": a count of 0"),
            ("a", "\"a\" is not a task count"),
            ("2(3)", "\"2(3)\""),
            ("2(x3", "\"2(x3\""),
            ("2x3", "\"2x3\""),
            ("1,,2", "\"\" is not a task count"),
            ("+2", "\"+2\""),
            ("-1", "\"-1\""),
            ("1(x65537)", "more than 65536"),
            ("65537", "more than 65536"),
            (
                "2(x40000)",
                "more than 65536 nodes or tasks (by \"2(x40000)\")",
            ),
            ("1(x18446744073709551615),1", "more than 65536"),
            ("99999999999999999999999", "is not a task count"),
        ] {
            let err = tasks_per_node(text).expect_err(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
        let err = parse_tasks_per_node("0").unwrap_err().to_string();
        assert!(err.contains("tasks_per_node"), "{err}");
    }
}
