//! [`Rule`]: how a table's server shards turn the updates they receive into new values.
//!
//! [`Rule::Sum`] (the default) adds every update as it is applied: an UPDATE is a delta.
//! Every other rule is an **optimizer step on the servers** (DistBelief's Downpour SGD
//! applies AdaGrad at each parameter shard; ps-lite's server handle, MXNet's
//! `kv.set_optimizer`, Multiverso's updaters do the same): an UPDATE is a gradient, the
//! shard sums a clock's gradients of a row — every worker's, in worker order — and, once
//! that clock is complete, steps the row once with the sum, keeping the rule's state
//! (velocity, accumulators, moments, the step count) per row beside it.
//!
//! So under BSP a run equals this sequential reference, bit for bit, whatever the number
//! of processes and the mode: for each clock `c` in order, for each row updated in `c`,
//! `g = 0 + Σ_w delta(c, w)` in worker order, then [`Rule::step`] on the row with `g`. A
//! row no worker updated in a clock (or updated only with all-zero deltas) is not stepped
//! in it: sparse, "lazy" semantics, as sparse optimizers on parameter servers have.
//!
//! **Asynchronous runs** (`Staleness::Unbounded`) step each worker's push on its own as
//! it arrives at the shard instead, and a READ of such a row fetches the shard's current
//! value (no cached copy, planned row or not): DistBelief's Downpour SGD, where replicas
//! see each other's progress without waiting for the slowest. (Under SSP the per-clock
//! step stays.)
//!
//! **The specializations keep working**: a plan holds a rule table's rows like any
//! other's, a worker's updates of them travel in its slabs, and the shard folds a slab's
//! deltas of them into the rows' gradients where it adds a sum row's (in the same
//! `(clock, worker)` order as rows sent the generic way), so every mode computes the same
//! bits. `Stats::planned_rule_rows` counts them.
//!
//! **READ of a table with a rule** returns the servers' value only: a worker's own
//! gradients are not values and are not added to what it reads (under a rule that is not
//! a sum they could not be). They show once their clock is complete and the staleness
//! bound lets a read see it — under BSP, from the next clock on.
//!
//! **A rule of the application's own** ([`Rule::Custom`], `custom.rs`) is registered by
//! name on every process ([`UpdateRule`], `Config::with_rule`) and is stepped like the
//! built-in ones, with its state kept alike.

mod custom;

pub use self::custom::{
    CustomRule, UpdateRule, UpdateRules, MAX_RULE_NAME, MAX_RULE_PARAMS, MAX_RULE_STATE,
};

use crate::element::ElemType;
use serde::{Deserialize, Serialize};

/// How a table's servers apply its updates (see the module docs). Parameters are plain
/// `f64`s, used in the table's element type.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub enum Rule {
    /// Add each update: an UPDATE is a delta (the default; every element type).
    #[default]
    Sum,
    /// `w -= lr · g`.
    Sgd {
        /// Learning rate.
        lr: f64,
    },
    /// `v = momentum · v + g; w -= lr · v`.
    Momentum {
        /// Learning rate.
        lr: f64,
        /// The velocity's decay, in `[0, 1)`.
        momentum: f64,
    },
    /// `a += g²; w -= lr · g / (√a + eps)`, `a` starting at `initial` (Duchi et al.;
    /// DistBelief's Downpour SGD; TensorFlow's `initial_accumulator_value`, 0.1 there,
    /// damps the first steps, which with `a = 0` move every weight by about `lr`).
    AdaGrad {
        /// Learning rate.
        lr: f64,
        /// Added to the denominator, `> 0`.
        eps: f64,
        /// The accumulator's initial value, `>= 0`.
        initial: f64,
    },
    /// `a = decay · a + (1 − decay) · g²; w -= lr · g / (√a + eps)`.
    RmsProp {
        /// Learning rate.
        lr: f64,
        /// The average's decay, in `[0, 1)`.
        decay: f64,
        /// Added to the denominator, `> 0`.
        eps: f64,
    },
    /// Adam (Kingma & Ba) with a step count per row: `t += 1; m = β1·m + (1 − β1)·g;
    /// v = β2·v + (1 − β2)·g²; w -= lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)`.
    Adam {
        /// Learning rate.
        lr: f64,
        /// First moment's decay, in `[0, 1)`.
        beta1: f64,
        /// Second moment's decay, in `[0, 1)`.
        beta2: f64,
        /// Added to the denominator, `> 0`.
        eps: f64,
    },
    /// A rule of the application's own, registered by name on every process
    /// ([`UpdateRule`], [`Config::with_rule`](crate::Config::with_rule)); made, checked
    /// against its registration, by [`Config::rule`](crate::Config::rule) or
    /// [`Cluster::rule`](crate::Cluster::rule).
    Custom(CustomRule),
}

impl PartialEq for Rule {
    /// Equal kinds with bit-identical parameters (what every process must agree on).
    fn eq(&self, other: &Rule) -> bool {
        let (mine, theirs) = (self.params(), other.params());
        self.same_kind(other)
            && mine.len() == theirs.len()
            && mine
                .iter()
                .zip(&theirs)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

impl Eq for Rule {}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Rule::Custom(c) = self {
            let params: Vec<String> = c.params().iter().map(f64::to_string).collect();
            return write!(f, "{}({})", c.name(), params.join(", "));
        }
        write!(f, "{}", self.kind())?;
        let names = self.param_names();
        if !names.is_empty() {
            let params: Vec<String> = names
                .iter()
                .zip(self.params())
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            write!(f, "({})", params.join(", "))?;
        }
        Ok(())
    }
}

impl Rule {
    /// The built-in rules' [`kind`](Self::kind)s (names a custom rule cannot take).
    pub const BUILT_IN: [&'static str; 6] =
        ["sum", "sgd", "momentum", "adagrad", "rmsprop", "adam"];

    /// The rule's kind: `sum`, `sgd`, `momentum`, `adagrad`, `rmsprop`, `adam`, or
    /// `custom` (whose [`name`](Self::name) is its own).
    pub fn kind(&self) -> &'static str {
        match self {
            Rule::Sum => "sum",
            Rule::Sgd { .. } => "sgd",
            Rule::Momentum { .. } => "momentum",
            Rule::AdaGrad { .. } => "adagrad",
            Rule::RmsProp { .. } => "rmsprop",
            Rule::Adam { .. } => "adam",
            Rule::Custom(_) => "custom",
        }
    }

    /// The rule's name: its [`kind`](Self::kind), or a custom rule's registered name.
    pub fn name(&self) -> &str {
        match self {
            Rule::Custom(c) => c.name(),
            _ => self.kind(),
        }
    }

    /// Whether `other` is the same rule with other parameters, or none: the same name and
    /// state width, so a row's state under one fits the other.
    pub fn same_kind(&self, other: &Rule) -> bool {
        self.name() == other.name() && self.state_per_element() == other.state_per_element()
    }

    /// The rule's parameters, in the order [`Display`](std::fmt::Display) names them.
    pub(crate) fn params(&self) -> Vec<f64> {
        match *self {
            Rule::Sum => vec![],
            Rule::Sgd { lr } => vec![lr],
            Rule::Momentum { lr, momentum } => vec![lr, momentum],
            Rule::AdaGrad { lr, eps, initial } => vec![lr, eps, initial],
            Rule::RmsProp { lr, decay, eps } => vec![lr, decay, eps],
            Rule::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => vec![lr, beta1, beta2, eps],
            Rule::Custom(c) => c.params().to_vec(),
        }
    }

    /// The rule of kind `kind` (a [`kind`](Self::kind) name) with parameters `params`, in
    /// the order [`params`](Self::params) gives them; `None` if `kind` names no rule or
    /// `params` are not as many as it has. The parameters are not [`check`](Self::check)ed.
    pub(crate) fn from_params(kind: &str, params: &[f64]) -> Option<Rule> {
        let rule = match (kind, params) {
            ("sum", []) => Rule::Sum,
            ("sgd", &[lr]) => Rule::Sgd { lr },
            ("momentum", &[lr, momentum]) => Rule::Momentum { lr, momentum },
            ("adagrad", &[lr, eps, initial]) => Rule::AdaGrad { lr, eps, initial },
            ("rmsprop", &[lr, decay, eps]) => Rule::RmsProp { lr, decay, eps },
            ("adam", &[lr, beta1, beta2, eps]) => Rule::Adam {
                lr,
                beta1,
                beta2,
                eps,
            },
            _ => return None,
        };
        Some(rule)
    }

    fn param_names(&self) -> &'static [&'static str] {
        match self {
            Rule::Sum => &[],
            Rule::Sgd { .. } => &["lr"],
            Rule::Momentum { .. } => &["lr", "momentum"],
            Rule::AdaGrad { .. } => &["lr", "eps", "initial"],
            Rule::RmsProp { .. } => &["lr", "decay", "eps"],
            Rule::Adam { .. } => &["lr", "beta1", "beta2", "eps"],
            Rule::Custom(_) => &[],
        }
    }

    /// Whether updates are added as they come (`Sum`): no per-clock step, no state.
    pub fn is_sum(&self) -> bool {
        matches!(self, Rule::Sum)
    }

    /// Elements of state the rule keeps per element of a row (velocity: 1, Adam's two
    /// moments: 2).
    pub fn state_per_element(&self) -> usize {
        match self {
            Rule::Sum | Rule::Sgd { .. } => 0,
            Rule::Momentum { .. } | Rule::AdaGrad { .. } | Rule::RmsProp { .. } => 1,
            Rule::Adam { .. } => 2,
            Rule::Custom(c) => c.state_per_element(),
        }
    }

    /// Why this rule cannot apply to a table of `elem`s, if it cannot: a step needs
    /// floats, and each parameter has its range (a learning rate finite and positive, a
    /// decay in `[0, 1)`, an epsilon positive; a custom rule's are checked against its
    /// registration, [`UpdateRules::rule`]).
    pub fn check(&self, elem: ElemType) -> Result<(), String> {
        if self.is_sum() {
            return Ok(());
        }
        if !matches!(elem, ElemType::F32 | ElemType::F64) {
            return Err(format!(
                "rule {self} needs a table of f32 or f64 (this one holds {})",
                elem.name()
            ));
        }
        for (name, v) in self.param_names().iter().zip(self.params()) {
            let ok = match *name {
                "lr" | "eps" => v.is_finite() && v > 0.0,
                "initial" => v.is_finite() && v >= 0.0,
                _ => (0.0..1.0).contains(&v),
            };
            if !ok {
                let range = match *name {
                    "lr" | "eps" => "finite and > 0",
                    "initial" => "finite and >= 0",
                    _ => "in [0, 1)",
                };
                return Err(format!("rule {self}: {name} = {v} must be {range}"));
            }
        }
        Ok(())
    }

    /// One step of row `value` with the summed gradient `grad`, the row's `state`
    /// ([`state_per_element`](Self::state_per_element) × the width, zeros at first) and
    /// `t`, the number of this step counted from 1. `Sum` adds `grad`. This is what the
    /// shards run; a sequential reference may call it too.
    ///
    /// # Panics
    ///
    /// On a [`Rule::Custom`], whose code a `Rule` does not hold: step it through the
    /// registry, [`UpdateRules::step`] (`Config::rules`).
    pub fn step<F: Real>(&self, value: &mut [F], grad: &[F], state: &mut [F], t: u64) {
        let p = |x: f64| F::of(x);
        match *self {
            Rule::Sum => {
                for (w, g) in value.iter_mut().zip(grad) {
                    *w = *w + *g;
                }
            }
            Rule::Sgd { lr } => {
                for (w, g) in value.iter_mut().zip(grad) {
                    *w = *w - p(lr) * *g;
                }
            }
            Rule::Momentum { lr, momentum } => {
                for ((w, g), v) in value.iter_mut().zip(grad).zip(state.iter_mut()) {
                    *v = p(momentum) * *v + *g;
                    *w = *w - p(lr) * *v;
                }
            }
            Rule::AdaGrad { lr, eps, initial } => {
                for ((w, g), a) in value.iter_mut().zip(grad).zip(state.iter_mut()) {
                    if t == 1 {
                        *a = p(initial); // state starts at zeros
                    }
                    *a = *a + *g * *g;
                    *w = *w - p(lr) * *g / (a.root() + p(eps));
                }
            }
            Rule::RmsProp { lr, decay, eps } => {
                for ((w, g), a) in value.iter_mut().zip(grad).zip(state.iter_mut()) {
                    *a = p(decay) * *a + p(1.0 - decay) * *g * *g;
                    *w = *w - p(lr) * *g / (a.root() + p(eps));
                }
            }
            Rule::Adam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                let t = i32::try_from(t).unwrap_or(i32::MAX);
                let (c1, c2) = (p(1.0 - beta1.powi(t)), p(1.0 - beta2.powi(t)));
                let (m, v) = state.split_at_mut(value.len().min(state.len()));
                for (((w, g), m), v) in value.iter_mut().zip(grad).zip(m).zip(v) {
                    *m = p(beta1) * *m + p(1.0 - beta1) * *g;
                    *v = p(beta2) * *v + p(1.0 - beta2) * *g * *g;
                    *w = *w - p(lr) * (*m / c1) / ((*v / c2).root() + p(eps));
                }
            }
            Rule::Custom(c) => panic!(
                "Rule::step of custom rule {:?}: step it with UpdateRules::step",
                c.name()
            ),
        }
    }
}

/// The float types a [`Rule`] steps (`f32`, `f64`): their arithmetic, comparisons, a
/// square root and a parameter's conversion.
pub trait Real:
    Copy
    + bytemuck::Pod
    + PartialOrd
    + std::ops::Neg<Output = Self>
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + sealed::Sealed
{
    /// A parameter in this type.
    fn of(x: f64) -> Self;
    /// The square root.
    fn root(self) -> Self;
}

impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn root(self) -> Self {
        self.sqrt()
    }
}

impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn root(self) -> Self {
        self.sqrt()
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_their_formulas() {
        let mut w = [1.0f64, -2.0];
        Rule::Sgd { lr: 0.5 }.step(&mut w, &[2.0, -2.0], &mut [], 1);
        assert_eq!(w, [0.0, -1.0]);
        let (mut w, mut s) = ([0.0f64], [0.0f64]);
        let adagrad = Rule::AdaGrad {
            lr: 1.0,
            eps: 1e-300,
            initial: 0.0,
        };
        adagrad.step(&mut w, &[3.0], &mut s, 1);
        assert_eq!((w, s), ([-1.0], [9.0]));
        adagrad.step(&mut w, &[4.0], &mut s, 2);
        assert_eq!(s, [25.0]);
        assert!((w[0] + 1.8).abs() < 1e-12, "{w:?}");
        let (mut w, mut s) = ([0.0f64], [0.0f64]);
        let momentum = Rule::Momentum {
            lr: 1.0,
            momentum: 0.5,
        };
        momentum.step(&mut w, &[2.0], &mut s, 1);
        momentum.step(&mut w, &[2.0], &mut s, 2);
        assert_eq!((w, s), ([-5.0], [3.0]));
        // Adam's first step moves every element by about lr against its gradient's sign.
        let (mut w, mut s) = ([0.0f32, 0.0], [0.0f32; 4]);
        let adam = Rule::Adam {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        };
        adam.step(&mut w, &[0.3, -7.0], &mut s, 1);
        assert!(
            (w[0] + 0.1).abs() < 1e-6 && (w[1] - 0.1).abs() < 1e-6,
            "{w:?}"
        );
        let (mut w, mut s) = ([0.0f64], [0.0f64]);
        let rms = Rule::RmsProp {
            lr: 1.0,
            decay: 0.75,
            eps: 1e-300,
        };
        rms.step(&mut w, &[2.0], &mut s, 1);
        assert_eq!((w, s), ([-2.0], [1.0]));
    }

    #[test]
    fn bad_rules_are_named() {
        assert!(Rule::Sum.check(ElemType::I64).is_ok());
        let e = Rule::Sgd { lr: 0.1 }.check(ElemType::I32).unwrap_err();
        assert!(e.contains("needs a table of f32 or f64"), "{e}");
        let e = Rule::Sgd { lr: -1.0 }.check(ElemType::F32).unwrap_err();
        assert!(e.contains("lr = -1 must be finite and > 0"), "{e}");
        let e = Rule::Adam {
            lr: 0.1,
            beta1: 1.0,
            beta2: 0.9,
            eps: 1e-8,
        }
        .check(ElemType::F32)
        .unwrap_err();
        assert!(e.contains("beta1 = 1 must be in [0, 1)"), "{e}");
        let adagrad = Rule::AdaGrad {
            lr: 0.1,
            eps: 1e-8,
            initial: 0.1,
        };
        assert_eq!(
            adagrad.to_string(),
            "adagrad(lr=0.1, eps=0.00000001, initial=0.1)"
        );
        let (mut w, mut s) = ([0.0f64], [0.0f64]);
        adagrad.step(&mut w, &[0.3], &mut s, 1);
        assert_eq!(s, [0.1 + 0.3 * 0.3], "the accumulator starts at initial");
        assert_ne!(Rule::Sgd { lr: 0.1 }, Rule::Sgd { lr: 0.2 });
    }

    #[test]
    fn a_rule_comes_back_from_its_kind_and_parameters() {
        let rules = [
            Rule::Sum,
            Rule::Sgd { lr: 0.1 },
            Rule::Momentum {
                lr: 0.1,
                momentum: 0.9,
            },
            Rule::AdaGrad {
                lr: 0.1,
                eps: 1e-8,
                initial: 0.1,
            },
            Rule::RmsProp {
                lr: 0.1,
                decay: 0.9,
                eps: 1e-8,
            },
            Rule::Adam {
                lr: 0.1,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
            },
        ];
        for rule in rules {
            assert_eq!(Rule::from_params(rule.kind(), &rule.params()), Some(rule));
        }
        assert_eq!(Rule::from_params("sgd", &[]), None);
        assert_eq!(Rule::from_params("lion", &[0.1]), None);
    }
}
