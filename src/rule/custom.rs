//! Update rules of the application's own: the [`UpdateRule`] trait, the registry of a
//! process's rules by name ([`UpdateRules`], filled by `Config::with_rule`), and
//! [`CustomRule`], what a [`Rule::Custom`] holds (the name, the parameters and the state's
//! width — no code, so a rule stays `Copy` and travels in messages and manifests).
//!
//! The code stays in each process's registry: a shard looks a table's custom rule up by
//! name when it steps a row. Every process must register the same rules (names, parameter
//! names and state widths, [`UpdateRules::declarations`]): the processes agree on them right
//! after joining, before any table, as on the other store settings. The code itself cannot
//! be compared: give a changed rule a new name.
//!
//! Pure, like the rest of `rule`: it knows nothing of shards or clocks.

use super::{Real, Rule};
use crate::element::ElemType;
use bytemuck::{cast_slice, cast_slice_mut};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most bytes in a custom rule's name.
pub const MAX_RULE_NAME: usize = 32;
/// Most parameters of a custom rule.
pub const MAX_RULE_PARAMS: usize = 8;
/// Most elements of state per element of a row a custom rule keeps.
pub const MAX_RULE_STATE: usize = 8;

/// An update rule of the application's own, applied by the servers like the built-in ones
/// (see [`Rule`]): per clock each row's summed gradient is stepped through
/// [`step`](Self::step) once, with the row's state kept beside it on its shard, in
/// checkpoints and in migrations. Register it under a name on every process with
/// [`Config::with_rule`](crate::Config::with_rule), make a [`Rule`] of it with parameters
/// ([`Config::rule`](crate::Config::rule), [`Cluster::rule`](crate::Cluster::rule)), and
/// create tables with that rule or change a table's parameters with
/// [`Cluster::set_rule`](crate::Cluster::set_rule).
///
/// `step` runs on the shard threads, so it must be `Send + Sync`; it should be a pure
/// function of its arguments (it runs once per row and clock, in `(clock, worker)` order,
/// so under BSP a run equals a sequential reference that calls it the same way). A panic
/// in it fails the cluster with an error naming the rule.
///
/// ```
/// use iterstore::{Cluster, Config, Real, UpdateRule};
///
/// /// SGD with each gradient element clipped to `[-limit, limit]`: `w -= lr · clip(g)`.
/// struct ClippedSgd;
///
/// impl UpdateRule for ClippedSgd {
///     fn params(&self) -> &'static [&'static str] {
///         &["lr", "limit"]
///     }
///     fn check(&self, params: &[f64]) -> Result<(), String> {
///         match params.iter().all(|p| p.is_finite() && *p > 0.0) {
///             true => Ok(()),
///             false => Err("lr and limit must be finite and > 0".into()),
///         }
///     }
///     fn step<F: Real>(&self, p: &[f64], value: &mut [F], grad: &[F], _: &mut [F], _: u64) {
///         let (lr, limit) = (F::of(p[0]), F::of(p[1]));
///         for (w, &g) in value.iter_mut().zip(grad) {
///             let g = if g > limit { limit } else if g < -limit { -limit } else { g };
///             *w = *w - lr * g;
///         }
///     }
/// }
///
/// # fn main() -> iterstore::Result<()> {
/// let mut cluster = Cluster::start(Config::new(2).with_rule("clipped_sgd", ClippedSgd))?;
/// let rule = cluster.rule("clipped_sgd", &[0.5, 1.0])?;
/// let w = cluster.create_table_with_rule::<f64>("w", 1, Some(1), rule)?;
/// cluster.run(|worker| {
///     worker.update(&w, 0, &[3.0])?; // each worker's gradient: summed to 6, clipped to 1
///     worker.clock()
/// })?;
/// assert_eq!(cluster.snapshot(&w)?, vec![(0, vec![-0.5])]);
/// # Ok(())
/// # }
/// ```
pub trait UpdateRule: Send + Sync + 'static {
    /// The names of its parameters, in the order a [`Rule`] of it gives them (at most
    /// [`MAX_RULE_PARAMS`]). Part of its declaration, which every process must agree on.
    fn params(&self) -> &'static [&'static str];

    /// Elements of state it keeps per element of a row (velocity: 1; two moments: 2; at
    /// most [`MAX_RULE_STATE`]). A row's state starts as zeros. Part of its declaration.
    fn state_per_element(&self) -> usize {
        0
    }

    /// Why `params` (as many as [`params`](Self::params) names) cannot be used, if they
    /// cannot. Checked when a [`Rule`] is made of them.
    fn check(&self, params: &[f64]) -> Result<(), String> {
        let _ = params;
        Ok(())
    }

    /// One step of row `value` with its summed gradient `grad`: `params` as the rule was
    /// given them, the row's `state` ([`state_per_element`](Self::state_per_element) × the
    /// width elements, zeros at first) and `t`, the number of this step counted from 1.
    fn step<F: Real>(&self, params: &[f64], value: &mut [F], grad: &[F], state: &mut [F], t: u64);
}

/// An [`UpdateRule`] behind a pointer: its step per element type.
trait Stepper: Send + Sync {
    fn params(&self) -> &'static [&'static str];
    fn state_per_element(&self) -> usize;
    fn check(&self, params: &[f64]) -> Result<(), String>;
    fn step_f32(&self, p: &[f64], value: &mut [f32], grad: &[f32], state: &mut [f32], t: u64);
    fn step_f64(&self, p: &[f64], value: &mut [f64], grad: &[f64], state: &mut [f64], t: u64);
}

impl<R: UpdateRule> Stepper for R {
    fn params(&self) -> &'static [&'static str] {
        UpdateRule::params(self)
    }
    fn state_per_element(&self) -> usize {
        UpdateRule::state_per_element(self)
    }
    fn check(&self, params: &[f64]) -> Result<(), String> {
        UpdateRule::check(self, params)
    }
    fn step_f32(&self, p: &[f64], value: &mut [f32], grad: &[f32], state: &mut [f32], t: u64) {
        self.step(p, value, grad, state, t);
    }
    fn step_f64(&self, p: &[f64], value: &mut [f64], grad: &[f64], state: &mut [f64], t: u64) {
        self.step(p, value, grad, state, t);
    }
}

/// The update rules of a process's own, by name ([`Config::with_rule`]): shared by its
/// shards, which step the rows of tables with such a rule through them.
///
/// [`Config::with_rule`]: crate::Config::with_rule
#[derive(Clone, Default)]
pub struct UpdateRules {
    rules: BTreeMap<String, Arc<dyn Stepper>>,
    /// Why a registration was refused (reported by `Config::validate`).
    refused: Option<String>,
}

impl UpdateRules {
    /// Registers `rule` under `name`; a name that is empty, longer than
    /// [`MAX_RULE_NAME`] bytes, a built-in rule's or already taken, or a declaration beyond
    /// the limits, is refused ([`refused`](Self::refused)).
    pub(crate) fn register(&mut self, name: &str, rule: impl UpdateRule) {
        let why = if name.is_empty() || name.len() > MAX_RULE_NAME {
            Some(format!("name of 1 to {MAX_RULE_NAME} bytes"))
        } else if Rule::BUILT_IN.contains(&name) {
            Some("the name of a built-in rule".to_string())
        } else if self.rules.contains_key(name) {
            Some("registered twice".to_string())
        } else if rule.params().len() > MAX_RULE_PARAMS {
            Some(format!("more than {MAX_RULE_PARAMS} parameters"))
        } else if UpdateRule::state_per_element(&rule) > MAX_RULE_STATE {
            Some(format!("more than {MAX_RULE_STATE} elements of state"))
        } else {
            None
        };
        match why {
            Some(why) if self.refused.is_none() => {
                self.refused = Some(format!("update rule {name:?}: {why}"));
            }
            Some(_) => {}
            None => {
                self.rules.insert(name.to_string(), Arc::new(rule));
            }
        }
    }

    /// Why a registration was refused, if one was.
    pub(crate) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The [`Rule`] of the rule registered as `name` with `params`: `Err` saying why if no
    /// rule has that name, `params` are not as many as it names or it refuses them.
    pub fn rule(&self, name: &str, params: &[f64]) -> Result<Rule, String> {
        let Some(r) = self.rules.get(name) else {
            return Err(format!(
                "update rule {name:?} is not registered (Config::with_rule)"
            ));
        };
        if params.len() != r.params().len() {
            return Err(format!(
                "update rule {name:?} takes {} parameters ({}), given {}",
                r.params().len(),
                r.params().join(", "),
                params.len()
            ));
        }
        r.check(params)
            .map_err(|e| format!("update rule {name:?}: {e}"))?;
        Ok(Rule::Custom(CustomRule::new(
            name,
            params,
            r.state_per_element(),
        )?))
    }

    /// What every process must register alike: each rule's name, parameter names and
    /// state width, in name order (`clipped(lr, limit) state 0; ...`), or `none`.
    pub fn declarations(&self) -> String {
        if self.rules.is_empty() {
            return "none".to_string();
        }
        let each: Vec<String> = (self.rules.iter())
            .map(|(name, r)| {
                let params = r.params().join(", ");
                format!("{name}({params}) state {}", r.state_per_element())
            })
            .collect();
        each.join("; ")
    }

    /// `Ok` if `rule` is a built-in rule or a custom one registered here with its state
    /// width and parameter count, which it accepts; else why not.
    pub(crate) fn check(&self, rule: &Rule) -> Result<(), String> {
        let Rule::Custom(c) = rule else {
            return Ok(());
        };
        (self.code(c)?.check(c.params())).map_err(|e| format!("update rule {:?}: {e}", c.name()))
    }

    /// The code of `c`, registered here with its state width and parameter count; else why
    /// not.
    fn code(&self, c: &CustomRule) -> Result<&dyn Stepper, String> {
        match self.rules.get(c.name()) {
            Some(r)
                if r.state_per_element() == c.state_per_element()
                    && r.params().len() == c.params().len() =>
            {
                Ok(r.as_ref())
            }
            Some(_) => Err(format!(
                "update rule {:?} is registered here with another declaration ({})",
                c.name(),
                self.declarations()
            )),
            None => Err(format!(
                "update rule {:?} is not registered (Config::with_rule)",
                c.name()
            )),
        }
    }

    /// One step of `rule` (built in, or custom and registered here), as the shards take
    /// it: [`Rule::step`] for a built-in rule, the registered [`UpdateRule::step`] for a
    /// custom one. A sequential reference may call it too.
    ///
    /// # Panics
    ///
    /// If `rule` is custom and not registered here (or with another state width or
    /// parameter count), or its step panics.
    pub fn step<F: Real>(&self, rule: &Rule, value: &mut [F], grad: &[F], state: &mut [F], t: u64) {
        let Rule::Custom(c) = rule else {
            return rule.step(value, grad, state, t);
        };
        let r = self.code(c).unwrap_or_else(|why| panic!("{why}"));
        let p = c.params();
        // `Real` is sealed: a 4-byte one is `f32`, any other `f64`.
        if std::mem::size_of::<F>() == 4 {
            let (v, g, s) = (
                cast_slice_mut(value),
                cast_slice(grad),
                cast_slice_mut(state),
            );
            r.step_f32(p, v, g, s, t);
        } else {
            let (v, g, s) = (
                cast_slice_mut(value),
                cast_slice(grad),
                cast_slice_mut(state),
            );
            r.step_f64(p, v, g, s, t);
        }
    }

    /// [`step`](Self::step) of a row of `elem`s given as bytes (the shards' form); rows of
    /// integers are left as they are (no rule but a sum applies to them).
    pub(crate) fn step_bytes(
        &self,
        rule: &Rule,
        elem: ElemType,
        value: &mut [u8],
        grad: &[u8],
        state: &mut [u8],
        t: u64,
    ) {
        let (v, g, s) = (value, grad, state);
        match elem {
            ElemType::F32 => self.step::<f32>(
                rule,
                bytemuck::cast_slice_mut(v),
                bytemuck::cast_slice(g),
                bytemuck::cast_slice_mut(s),
                t,
            ),
            ElemType::F64 => self.step::<f64>(
                rule,
                bytemuck::cast_slice_mut(v),
                bytemuck::cast_slice(g),
                bytemuck::cast_slice_mut(s),
                t,
            ),
            ElemType::I32 | ElemType::I64 => {}
        }
    }
}

impl std::fmt::Debug for UpdateRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.declarations())
    }
}

impl PartialEq for UpdateRules {
    /// Equal declarations (the code cannot be compared).
    fn eq(&self, other: &UpdateRules) -> bool {
        self.declarations() == other.declarations() && self.refused == other.refused
    }
}

/// A [`Rule::Custom`]: the name of a rule registered on every process
/// ([`Config::with_rule`](crate::Config::with_rule)), its parameters and its state's width.
/// Made by [`Config::rule`](crate::Config::rule) or [`Cluster::rule`](crate::Cluster::rule),
/// which check them against the registration.
#[derive(Clone, Copy, Serialize, Deserialize)]
#[serde(into = "Wire", try_from = "Wire")]
pub struct CustomRule {
    name: [u8; MAX_RULE_NAME],
    name_len: u8,
    params: [f64; MAX_RULE_PARAMS],
    params_len: u8,
    state: u8,
}

impl CustomRule {
    /// The rule `name` with `params` and `state` elements of state per element; `Err` if
    /// any is beyond its limit.
    pub(crate) fn new(name: &str, params: &[f64], state: usize) -> Result<Self, String> {
        if name.is_empty()
            || name.len() > MAX_RULE_NAME
            || params.len() > MAX_RULE_PARAMS
            || state > MAX_RULE_STATE
        {
            return Err(format!(
                "update rule {name:?} of {} parameters and {state} elements of state is beyond \
                 the limits ({MAX_RULE_NAME} bytes, {MAX_RULE_PARAMS} parameters, \
                 {MAX_RULE_STATE} elements)",
                params.len()
            ));
        }
        let mut rule = CustomRule {
            name: [0; MAX_RULE_NAME],
            name_len: name.len() as u8,
            params: [0.0; MAX_RULE_PARAMS],
            params_len: params.len() as u8,
            state: state as u8,
        };
        rule.name[..name.len()].copy_from_slice(name.as_bytes());
        rule.params[..params.len()].copy_from_slice(params);
        Ok(rule)
    }

    /// The name it is registered under.
    pub fn name(&self) -> &str {
        // Made from a `&str` only (`new`), cut at a char boundary: always UTF-8.
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }

    /// Its parameters.
    pub fn params(&self) -> &[f64] {
        &self.params[..self.params_len as usize]
    }

    /// Elements of state per element of a row.
    pub fn state_per_element(&self) -> usize {
        self.state as usize
    }
}

impl std::fmt::Debug for CustomRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomRule")
            .field("name", &self.name())
            .field("params", &self.params())
            .field("state", &self.state)
            .finish()
    }
}

/// How a [`CustomRule`] travels (checked when it arrives).
#[derive(Serialize, Deserialize)]
struct Wire {
    name: String,
    params: Vec<f64>,
    state: u8,
}

impl From<CustomRule> for Wire {
    fn from(c: CustomRule) -> Wire {
        Wire {
            name: c.name().to_string(),
            params: c.params().to_vec(),
            state: c.state,
        }
    }
}

impl TryFrom<Wire> for CustomRule {
    type Error = String;
    fn try_from(w: Wire) -> Result<CustomRule, String> {
        CustomRule::new(&w.name, &w.params, w.state as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scaled;

    impl UpdateRule for Scaled {
        fn params(&self) -> &'static [&'static str] {
            &["lr"]
        }
        fn state_per_element(&self) -> usize {
            2
        }
        fn step<F: Real>(&self, p: &[f64], value: &mut [F], grad: &[F], _: &mut [F], t: u64) {
            for (w, &g) in value.iter_mut().zip(grad) {
                *w = *w - F::of(p[0] * t as f64) * g;
            }
        }
    }

    fn registry() -> UpdateRules {
        let mut rules = UpdateRules::default();
        rules.register("scaled", Scaled);
        rules
    }

    #[test]
    fn a_custom_rule_travels_and_compares_by_name_parameters_and_state() {
        let rule = registry().rule("scaled", &[0.25]).unwrap();
        assert_eq!(rule.state_per_element(), 2);
        assert_eq!((rule.kind(), rule.name()), ("custom", "scaled"));
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(rule, config).unwrap();
        let (back, _): (Rule, usize) = bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(back, rule);
        assert_ne!(rule, registry().rule("scaled", &[0.5]).unwrap());
        let other = CustomRule::new("scaled", &[0.25], 1).unwrap();
        assert_ne!(rule, Rule::Custom(other), "another state width");
        assert!(!rule.same_kind(&Rule::Custom(other)));
        // A name too long for a rule is refused when it arrives.
        let wire = Wire {
            name: "x".repeat(MAX_RULE_NAME + 1),
            params: vec![],
            state: 0,
        };
        let bytes = bincode::serde::encode_to_vec(&wire, config).unwrap();
        let refused = bincode::serde::decode_from_slice::<CustomRule, _>(&bytes, config);
        assert!(refused.is_err());
    }

    #[test]
    fn the_registry_steps_a_custom_rule_in_either_float_type() {
        let (rules, rule) = (registry(), registry().rule("scaled", &[0.25]).unwrap());
        let mut w32 = [1.0f32];
        rules.step(&rule, &mut w32, &[2.0], &mut [0.0; 2], 2);
        assert_eq!(w32, [0.0]);
        let mut w64 = [1.0f64];
        rules.step(&rule, &mut w64, &[4.0], &mut [0.0; 2], 1);
        assert_eq!(w64, [0.0]);
        assert_eq!(rules.declarations(), "scaled(lr) state 2");
        assert_eq!(UpdateRules::default().declarations(), "none");
        let e = UpdateRules::default().check(&rule).unwrap_err();
        assert!(e.contains("\"scaled\" is not registered"), "{e}");
    }
}
