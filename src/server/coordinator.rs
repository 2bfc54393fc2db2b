//! [`Coordinator`]: what shard 0 (on rank 0) decides for the whole cluster — table ids,
//! assigned once by name, so that every process agrees on them — and the all-gathers it
//! collects.

use crate::buf::AlignedBuf;
use crate::element::ElemType;
use crate::ids::ProcessId;
use crate::rule::Rule;
use crate::table::TableMeta;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The cluster's table registry and open all-gather rounds.
#[derive(Debug)]
pub(crate) struct Coordinator {
    processes: usize,
    tables: FxHashMap<String, TableMeta>,
    /// Per round: each process's part so far.
    gathers: BTreeMap<u64, Vec<Option<AlignedBuf>>>,
    /// Per process: its last round.
    rounds: Vec<u64>,
    /// Per process: whether it has left the cluster.
    left: Vec<bool>,
}

impl Coordinator {
    /// The coordinator of a cluster of `processes` processes.
    pub(crate) fn new(processes: usize) -> Self {
        Coordinator {
            processes,
            tables: FxHashMap::default(),
            gathers: BTreeMap::new(),
            rounds: vec![0; processes],
            left: vec![false; processes],
        }
    }

    /// Files `from`'s part of round `round`; once every process's part is in, returns
    /// them in rank order. Rounds must follow each other one by one per process.
    pub(crate) fn gather(
        &mut self,
        from: ProcessId,
        round: u64,
        values: AlignedBuf,
    ) -> Result<Option<Vec<AlignedBuf>>, String> {
        let last = self.rounds[from as usize];
        if round != last + 1 {
            return Err(format!(
                "process {from} sent all-gather round {round} after round {last}"
            ));
        }
        self.rounds[from as usize] = round;
        let parts = self
            .gathers
            .entry(round)
            .or_insert_with(|| vec![None; self.processes]);
        parts[from as usize] = Some(values);
        if let Some(gone) = (0..self.processes).find(|&p| self.left[p] && parts[p].is_none()) {
            return Err(format!(
                "process {gone} left the cluster before all-gather round {round}"
            ));
        }
        if parts.iter().any(Option::is_none) {
            return Ok(None);
        }
        let parts = self.gathers.remove(&round).unwrap_or_default();
        Ok(Some(parts.into_iter().flatten().collect()))
    }

    /// An all-gather round some process has begun and not every process has joined, if
    /// any: a collective of another kind begun meanwhile means the processes called
    /// different collectives.
    pub(crate) fn open_round(&self) -> Option<u64> {
        self.gathers.keys().next().copied()
    }

    /// Process `from` has left the cluster: if an all-gather round waits for its part,
    /// the round can never complete, and this says why (the cluster must fail rather
    /// than leave the others waiting). A round begun later fails in
    /// [`gather`](Self::gather).
    pub(crate) fn left(&mut self, from: ProcessId) -> Option<String> {
        *self.left.get_mut(from as usize)? = true;
        let (round, _) = self
            .gathers
            .iter()
            .find(|(_, parts)| parts.get(from as usize).is_some_and(Option::is_none))?;
        Some(format!(
            "process {from} left the cluster during all-gather round {round}"
        ))
    }

    /// The table `name`: assigned the next id on its first declaration; a later one must
    /// have the same shape and row count.
    pub(crate) fn declare(
        &mut self,
        name: String,
        width: usize,
        elem: ElemType,
        rows: Option<u64>,
        rule: Rule,
    ) -> Result<TableMeta, String> {
        let next = self.tables.len() as u32;
        let meta = self.tables.entry(name.clone()).or_insert(TableMeta {
            id: next,
            name,
            width,
            elem,
            rows,
            rule,
        });
        if meta.rule != rule {
            return Err(format!(
                "table '{}' declared with rule {} by one process and {rule} by another",
                meta.name, meta.rule
            ));
        }
        if meta.rows != rows {
            let count =
                |r: Option<u64>| r.map_or("no row count".to_string(), |r| format!("{r} rows"));
            return Err(format!(
                "table '{}' declared with {} by one process and {} by another",
                meta.name,
                count(meta.rows),
                count(rows)
            ));
        }
        if meta.width != width || meta.elem != elem {
            return Err(format!(
                "table '{}' declared as {} x {} by one process and {} x {} by another",
                meta.name,
                meta.width,
                meta.elem.name(),
                width,
                elem.name()
            ));
        }
        Ok(meta.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_assigned_once_by_name() {
        let mut c = Coordinator::new(1);
        let a = c
            .declare("a".into(), 2, ElemType::F32, None, Rule::Sum)
            .unwrap();
        let b = c
            .declare("b".into(), 1, ElemType::I64, Some(10), Rule::Sum)
            .unwrap();
        assert_eq!((a.id, b.id), (0, 1));
        assert_eq!(
            c.declare("a".into(), 2, ElemType::F32, None, Rule::Sum)
                .unwrap(),
            a
        );
        let err = c
            .declare("a".into(), 3, ElemType::F32, None, Rule::Sum)
            .unwrap_err();
        assert!(err.contains("'a'"), "{err}");
        // The row count must agree too.
        let err = c
            .declare("b".into(), 1, ElemType::I64, Some(11), Rule::Sum)
            .unwrap_err();
        assert!(err.contains("10 rows") && err.contains("11 rows"), "{err}");
        let err = c
            .declare("a".into(), 2, ElemType::F32, Some(2), Rule::Sum)
            .unwrap_err();
        assert!(err.contains("no row count"), "{err}");
    }

    #[test]
    fn a_gather_completes_when_every_process_sent_its_part() {
        let mut c = Coordinator::new(2);
        let part = |v: i64| AlignedBuf::from_slice(&[v]);
        assert_eq!(c.gather(1, 1, part(10)).unwrap(), None);
        let all = c.gather(0, 1, part(5)).unwrap().unwrap();
        assert_eq!(
            all.iter().map(|b| b.cast::<i64>()[0]).collect::<Vec<_>>(),
            vec![5, 10]
        );
        assert!(c
            .gather(0, 3, part(1))
            .unwrap_err()
            .contains("round 3 after round 1"));
    }

    #[test]
    fn a_process_that_leaves_fails_the_rounds_it_never_joins_in_either_order() {
        let part = || AlignedBuf::from_slice(&[1i64]);
        // Leaves while a round waits for it.
        let mut c = Coordinator::new(2);
        assert_eq!(c.gather(0, 1, part()).unwrap(), None);
        let why = c.left(1).unwrap();
        assert!(
            why.contains("process 1 left") && why.contains("round 1"),
            "{why}"
        );
        // Leaves before the others begin a round.
        let mut c = Coordinator::new(2);
        assert_eq!(c.left(1), None);
        let why = c.gather(0, 1, part()).unwrap_err();
        assert!(why.contains("process 1 left"), "{why}");
        // Leaves after its part of every round: nothing fails.
        let mut c = Coordinator::new(2);
        assert_eq!(c.gather(1, 1, part()).unwrap(), None);
        assert_eq!(c.left(1), None);
        assert!(c.gather(0, 1, part()).unwrap().is_some());
    }
}
