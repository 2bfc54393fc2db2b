//! [`Meta`]: what a checkpoint says about the run that wrote it — the app, the tables'
//! shapes and update rules, and the cluster's shape — and the check that a resuming run
//! matches it.
//!
//! The caller builds the expected `Meta` from its own run; this module only compares. It
//! does not decide whether an app can resume on a different cluster: the caller says so
//! with a [`ClusterRule`].

use crate::element::ElemType;
use crate::rule::Rule;
use crate::table::TableMeta;
use serde::{Deserialize, Serialize};

/// The run a checkpoint belongs to. Two runs with equal `Meta` (up to the
/// [`ClusterRule`]) can resume each other's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Meta {
    /// The application's name, e.g. `lda`.
    pub(crate) app: String,
    /// Every table, in creation order (a table's id is its position).
    pub(crate) tables: Vec<TableShape>,
    /// The cluster that wrote the checkpoint.
    pub(crate) cluster: ClusterShape,
}

/// The shape of one table: what its rows' bytes mean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TableShape {
    /// The table's name.
    pub(crate) name: String,
    /// Elements per row.
    pub(crate) width: usize,
    /// Element type.
    pub(crate) elem: ElemType,
    /// Its update rule, with the parameters it had when the checkpoint was written (a
    /// resume takes them back); absent for a sum, and in a version 1 manifest (which
    /// never held another rule).
    #[serde(default, skip_serializing_if = "Rule::is_sum", with = "rule_record")]
    pub(crate) rule: Rule,
}

impl From<&TableMeta> for TableShape {
    fn from(t: &TableMeta) -> Self {
        TableShape {
            name: t.name.clone(),
            width: t.width,
            elem: t.elem,
            rule: t.rule,
        }
    }
}

/// How a manifest writes a table's [`Rule`]: `{"kind": "adagrad", "param_bits": [...],
/// "text": "adagrad(lr=0.01, ...)"}`, each parameter as the bits of its `f64` (a JSON
/// number would not bring every `f64` back exactly, and a resume must step with the very
/// same parameters); `text` is for people and is not read back. A custom rule's record
/// is of kind `custom` and adds its `name` and `state` (elements per element of a row).
mod rule_record {
    use super::Rule;
    use crate::rule::CustomRule;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Record {
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<usize>,
        param_bits: Vec<u64>,
        #[serde(default)]
        text: String,
    }

    pub(super) fn serialize<S: Serializer>(rule: &Rule, s: S) -> Result<S::Ok, S::Error> {
        let custom = matches!(rule, Rule::Custom(_));
        Record {
            kind: rule.kind().to_string(),
            name: custom.then(|| rule.name().to_string()),
            state: custom.then(|| rule.state_per_element()),
            param_bits: rule.params().iter().map(|p| p.to_bits()).collect(),
            text: rule.to_string(),
        }
        .serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Rule, D::Error> {
        let r = Record::deserialize(d)?;
        let params: Vec<f64> = r.param_bits.iter().map(|b| f64::from_bits(*b)).collect();
        if let ("custom", Some(name), Some(state)) = (r.kind.as_str(), &r.name, r.state) {
            let custom = CustomRule::new(name, &params, state).map_err(D::Error::custom)?;
            return Ok(Rule::Custom(custom));
        }
        Rule::from_params(&r.kind, &params).ok_or_else(|| {
            D::Error::custom(format!(
                "no rule '{}' of {} parameters",
                r.kind,
                params.len()
            ))
        })
    }
}

/// The shape of a cluster, as the caller describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClusterShape {
    /// Processes.
    pub(crate) processes: usize,
    /// Worker threads per process.
    pub(crate) workers: usize,
    /// Server shards per process.
    pub(crate) shards: usize,
}

/// Whether a checkpoint written by a cluster of another shape may be resumed
/// ([`Cluster::resume`](crate::Cluster::resume)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterRule {
    /// The cluster must have the same shape (processes, workers and shards).
    Same,
    /// Any cluster shape: the store redistributes the rows by key; the application's
    /// per-process states are the application's to redistribute.
    Any,
}

impl Meta {
    /// Why a checkpoint written with meta `found` cannot be resumed by this run, whose meta
    /// is `self`, or `None` if it can. Names the first difference.
    pub(crate) fn mismatch(&self, found: &Meta, rule: ClusterRule) -> Option<String> {
        if self.app != found.app {
            return Some(format!(
                "written by app {}, this run is {}",
                found.app, self.app
            ));
        }
        if let Some(reason) = tables_mismatch(&self.tables, &found.tables) {
            return Some(reason);
        }
        let (here, there) = (self.cluster, found.cluster);
        if rule == ClusterRule::Same && here != there {
            return Some(format!(
                "written by a cluster of {}, this run has {}",
                describe(there),
                describe(here)
            ));
        }
        None
    }
}

/// The first difference between this run's tables and the checkpoint's.
fn tables_mismatch(here: &[TableShape], there: &[TableShape]) -> Option<String> {
    for t in here {
        let Some(c) = there.iter().find(|c| c.name == t.name) else {
            return Some(format!("table {} is not in the checkpoint", t.name));
        };
        if t.width != c.width {
            return Some(format!(
                "table {} has width {} here and {} in the checkpoint",
                t.name, t.width, c.width
            ));
        }
        if t.elem != c.elem {
            return Some(format!(
                "table {} holds {} here and {} in the checkpoint",
                t.name, t.elem, c.elem
            ));
        }
        if !t.rule.same_kind(&c.rule) {
            return Some(format!(
                "table {} has update rule {} here and {} in the checkpoint (a row's rule \
                 state fits its rule's kind only)",
                t.name, t.rule, c.rule
            ));
        }
    }
    if let Some(c) = there
        .iter()
        .find(|c| !here.iter().any(|t| t.name == c.name))
    {
        return Some(format!(
            "the checkpoint has table {}, this run does not",
            c.name
        ));
    }
    if here.len() != there.len() {
        // Same names, so one side repeats a name.
        return Some(format!(
            "the checkpoint has {} tables, this run has {}",
            there.len(),
            here.len()
        ));
    }
    // Same names and shapes: only the order (the tables' ids) can differ.
    for (id, (t, c)) in here.iter().zip(there).enumerate() {
        if t.name != c.name {
            return Some(format!(
                "table id {id} is {} here and {} in the checkpoint (tables must be created \
                 in the same order)",
                t.name, c.name
            ));
        }
    }
    None
}

/// A cluster shape in words: "2 processes × 4 workers × 1 shard per process".
fn describe(c: ClusterShape) -> String {
    let count =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} × {} × {} per process",
        count(c.processes, "process", "processes"),
        count(c.workers, "worker", "workers"),
        count(c.shards, "shard", "shards")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            app: "pagerank".into(),
            tables: vec![
                TableShape {
                    name: "pagerank.rank".into(),
                    width: 64,
                    elem: ElemType::F32,
                    rule: Rule::AdaGrad {
                        lr: 0.1,
                        eps: 1e-8,
                        initial: 0.1,
                    },
                },
                TableShape {
                    name: "pagerank.degree".into(),
                    width: 1,
                    elem: ElemType::I64,
                    rule: Rule::Sum,
                },
            ],
            cluster: ClusterShape {
                processes: 2,
                workers: 4,
                shards: 1,
            },
        }
    }

    #[test]
    fn equal_metas_match() {
        assert_eq!(meta().mismatch(&meta(), ClusterRule::Same), None);
    }

    /// A change to the checkpoint's meta, and the reason it is refused.
    type Case = (fn(&mut Meta), &'static str);

    #[test]
    fn each_difference_is_named() {
        let cases: Vec<Case> = vec![
            (
                |m| m.app = "mf".into(),
                "written by app mf, this run is pagerank",
            ),
            (
                |m| m.tables[0].width = 256,
                "table pagerank.rank has width 64 here and 256 in the checkpoint",
            ),
            (
                |m| m.tables[1].elem = ElemType::I32,
                "table pagerank.degree holds i64 here and i32 in the checkpoint",
            ),
            (
                |m| m.tables[0].rule = Rule::Sgd { lr: 0.1 },
                "table pagerank.rank has update rule adagrad(lr=0.1, eps=0.00000001, \
                 initial=0.1) here and sgd(lr=0.1) in the checkpoint (a row's rule state fits \
                 its rule's kind only)",
            ),
            (
                |m| m.tables[1].name = "x".into(),
                "table pagerank.degree is not in the checkpoint",
            ),
            (
                |m| m.tables.push(m.tables[0].clone()),
                "the checkpoint has 3 tables, this run has 2",
            ),
            (
                |m| m.tables.swap(0, 1),
                "table id 0 is pagerank.rank here and pagerank.degree in the checkpoint \
                 (tables must be created in the same order)",
            ),
            (
                |m| m.cluster.processes = 1,
                "written by a cluster of 1 process × 4 workers × 1 shard per process, this \
                 run has 2 processes × 4 workers × 1 shard per process",
            ),
        ];
        for (change, expected) in cases {
            let mut found = meta();
            change(&mut found);
            let reason = meta().mismatch(&found, ClusterRule::Same);
            assert_eq!(reason.as_deref(), Some(expected));
        }
    }

    #[test]
    fn extra_table_in_the_checkpoint_is_named() {
        let mut found = meta();
        found.tables.push(TableShape {
            name: "extra".into(),
            width: 1,
            elem: ElemType::F64,
            rule: Rule::Sum,
        });
        assert_eq!(
            meta().mismatch(&found, ClusterRule::Same).as_deref(),
            Some("the checkpoint has table extra, this run does not")
        );
    }

    #[test]
    fn other_parameters_of_a_rule_of_the_same_kind_match() {
        let mut found = meta();
        found.tables[0].rule = Rule::AdaGrad {
            lr: 0.05,
            eps: 1e-8,
            initial: 0.1,
        };
        assert_eq!(meta().mismatch(&found, ClusterRule::Same), None);
    }

    #[test]
    fn rules_round_trip_bit_for_bit_and_sums_are_not_written() {
        let mut m = meta();
        // Any f64 comes back exactly: its bits are written, not a decimal.
        m.tables[0].rule = Rule::Sgd {
            lr: f64::from_bits(0x3fb9_9999_9999_999b),
        };
        let json = serde_json::to_string(&m).unwrap();
        assert!(json.contains(r#""kind":"sgd""#), "{json}");
        assert_eq!(json.matches("\"rule\"").count(), 1, "{json}");
        let back: Meta = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        let bad = json.replace(r#""kind":"sgd""#, r#""kind":"lion""#);
        let e = serde_json::from_str::<Meta>(&bad).unwrap_err().to_string();
        assert!(e.contains("no rule 'lion' of 1 parameters"), "{e}");
    }

    #[test]
    fn any_cluster_rule_ignores_only_the_cluster() {
        let mut found = meta();
        found.cluster.processes = 3;
        assert_eq!(meta().mismatch(&found, ClusterRule::Any), None);
        found.app = "lda".into();
        assert!(meta().mismatch(&found, ClusterRule::Any).is_some());
    }
}
