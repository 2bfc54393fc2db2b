//! [`Cluster::agree`]: a collective check that every process of a cluster was given the
//! same description of what it computes — the app, its parameters, a digest of its input —
//! so that processes started with other data or flags fail at once, naming the field and
//! the ranks, instead of computing a wrong model together.

use super::Cluster;
use crate::error::{Error, Result};

/// Longest value quoted in a disagreement (longer ones are cut).
const QUOTE_CHARS: usize = 60;

impl Cluster {
    /// Checks that every process of the cluster calls this with the same `fields`
    /// (`(name, value)` pairs, in the same order): a collective, like
    /// [`all_gather`](Self::all_gather), so every process must call it at the same point.
    /// One process is trivially in agreement.
    ///
    /// On a difference every process fails with [`Error::Disagreement`] naming the first
    /// field that differs and the value each rank holds (`rank 0: 0.85; rank 1: 0.9`), or,
    /// when the processes list different fields, the first name that differs. The bundled
    /// apps agree on the app, its parameters, the iterations and a digest of the input
    /// before they create a table.
    ///
    /// ```
    /// use iterstore::{Cluster, Config, Error};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let results = Cluster::run_local_processes(Config::new(1), 2, |cluster| {
    ///     let lr = if cluster.rank() == 0 { "0.1" } else { "0.2" };
    ///     cluster.agree(&[("app", "mine"), ("lr", lr)])
    /// });
    /// let Err(Error::Disagreement { field, detail }) = results else { panic!() };
    /// assert_eq!(field, "lr");
    /// assert_eq!(detail, "rank 0: 0.1; rank 1: 0.2");
    /// # Ok(())
    /// # }
    /// ```
    pub fn agree(&mut self, fields: &[(&str, &str)]) -> Result<()> {
        if self.processes() == 1 {
            return Ok(());
        }
        let all = self.all_gather_bytes(&encode(fields))?;
        let decoded = all
            .iter()
            .enumerate()
            .map(|(rank, bytes)| {
                decode(bytes).ok_or_else(|| Error::Disagreement {
                    field: "the fields themselves".into(),
                    detail: format!("rank {rank} sent fields that do not decode"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        match first_difference(&decoded) {
            None => Ok(()),
            Some((field, detail)) => Err(Error::Disagreement { field, detail }),
        }
    }
}

/// The first field on which `per_rank` differ, and each rank's value (ranks with equal
/// values grouped: `ranks 0, 2: x; rank 1: y`); `None` if they all agree.
fn first_difference(per_rank: &[Vec<(String, String)>]) -> Option<(String, String)> {
    let longest = per_rank.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        let names: Vec<Option<&str>> = per_rank
            .iter()
            .map(|f| f.get(i).map(|(n, _)| n.as_str()))
            .collect();
        if names.iter().any(|n| *n != names[0]) {
            let shown = names.iter().map(|n| n.unwrap_or("(no more fields)"));
            return Some(("which fields they check".into(), group(shown)));
        }
        let values = per_rank.iter().map(|f| f[i].1.as_str());
        if per_rank.iter().any(|f| f[i].1 != per_rank[0][i].1) {
            return Some((per_rank[0][i].0.clone(), group(values)));
        }
    }
    None
}

/// `rank r: value` for each distinct value in order of first appearance, ranks with the
/// same value listed together.
fn group<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (rank, v) in values.enumerate() {
        match groups.iter_mut().find(|(g, _)| *g == v) {
            Some((_, ranks)) => ranks.push(rank),
            None => groups.push((v, vec![rank])),
        }
    }
    groups
        .iter()
        .map(|(v, ranks)| {
            let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
            let who = if ranks.len() == 1 { "rank" } else { "ranks" };
            format!("{who} {}: {}", list.join(", "), quote(v))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `v` cut to [`QUOTE_CHARS`] characters.
fn quote(v: &str) -> String {
    match v.char_indices().nth(QUOTE_CHARS) {
        None => v.to_string(),
        Some((end, _)) => format!("{}…", &v[..end]),
    }
}

/// `u32` count, then each name and value as a `u32` length and its bytes (little-endian).
fn encode(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for (name, value) in fields {
        for s in [name, value] {
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// [`encode`]'s fields back; `None` if `bytes` are not such an encoding.
fn decode(mut bytes: &[u8]) -> Option<Vec<(String, String)>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(head)
    }
    fn string(bytes: &mut &[u8]) -> Option<String> {
        let len = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize;
        String::from_utf8(take(bytes, len)?.to_vec()).ok()
    }
    let count = u32::from_le_bytes(take(&mut bytes, 4)?.try_into().ok()?) as usize;
    // Each field takes at least 8 bytes: a count beyond that is not believed.
    let mut fields = Vec::with_capacity(count.min(bytes.len() / 8));
    for _ in 0..count {
        fields.push((string(&mut bytes)?, string(&mut bytes)?));
    }
    bytes.is_empty().then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fields_round_trip_and_garbage_does_not_decode() {
        let f = [("app", "mf"), ("", ""), ("digest", "é")];
        assert_eq!(decode(&encode(&f)), Some(fields(&f)));
        let bytes = encode(&f);
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode(&[0xff; 4]), None);
    }

    #[test]
    fn the_first_difference_names_the_field_and_groups_the_ranks() {
        let a = fields(&[("app", "mf"), ("lr", "0.1"), ("seed", "1")]);
        let b = fields(&[("app", "mf"), ("lr", "0.2"), ("seed", "2")]);
        assert_eq!(first_difference(&[a.clone(), a.clone()]), None);
        assert_eq!(
            first_difference(&[a.clone(), b.clone(), a.clone()]),
            Some(("lr".into(), "ranks 0, 2: 0.1; rank 1: 0.2".into()))
        );
        let other_app = fields(&[("app", "lda"), ("topics", "100")]);
        assert_eq!(first_difference(&[a.clone(), other_app]).unwrap().0, "app");
        let fewer = fields(&[("app", "mf"), ("lr", "0.1")]);
        assert_eq!(
            first_difference(&[a, fewer]),
            Some((
                "which fields they check".into(),
                "rank 0: seed; rank 1: (no more fields)".into()
            ))
        );
        assert!(quote(&"x".repeat(100)).ends_with('…'));
    }
}
