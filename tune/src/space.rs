//! What the tuner searches: [`Tunable`]s with their [`Domain`]s, gathered in a checked
//! [`Space`], and the [`Setting`]s (one value per tunable) that the searchers propose.
//!
//! Every domain maps to one real *coordinate* that the searchers work in: the logarithm
//! of a log-uniform value, a uniform value itself, a choice's index. A coordinate maps
//! back to a value of the domain ([`Domain::value`]), so no searcher can propose a value
//! outside it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The values one tunable may take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Domain {
    /// Uniform in log space between `lo` and `hi` (`0 < lo < hi`): a learning rate.
    LogUniform {
        /// The smallest value.
        lo: f64,
        /// The largest value.
        hi: f64,
    },
    /// Uniform between `lo` and `hi` (`lo < hi`): a momentum.
    Uniform {
        /// The smallest value.
        lo: f64,
        /// The largest value.
        hi: f64,
    },
    /// One of a list of values: a batch size, a staleness.
    Choice(Vec<f64>),
}

impl Domain {
    /// The range of the coordinate the searchers draw in: `[ln lo, ln hi]`, `[lo, hi]`,
    /// or `[0, n)` for a choice of `n` values.
    pub fn coordinates(&self) -> (f64, f64) {
        match self {
            Domain::LogUniform { lo, hi } => (lo.ln(), hi.ln()),
            Domain::Uniform { lo, hi } => (*lo, *hi),
            Domain::Choice(values) => (0.0, values.len() as f64),
        }
    }

    /// The domain's value at coordinate `c`, clamped into the domain.
    pub fn value(&self, c: f64) -> f64 {
        match self {
            Domain::LogUniform { lo, hi } => c.exp().clamp(*lo, *hi),
            Domain::Uniform { lo, hi } => c.clamp(*lo, *hi),
            Domain::Choice(values) => {
                let i = if c.is_finite() && c > 0.0 {
                    c as usize
                } else {
                    0
                };
                values[i.min(values.len() - 1)]
            }
        }
    }

    /// The coordinate of `value` (the inverse of [`value`](Self::value) inside the
    /// domain); `None` for a value outside it.
    pub fn coordinate(&self, value: f64) -> Option<f64> {
        match self {
            Domain::LogUniform { lo, hi } => (*lo <= value && value <= *hi).then(|| value.ln()),
            Domain::Uniform { lo, hi } => (*lo <= value && value <= *hi).then_some(value),
            Domain::Choice(values) => values
                .iter()
                .position(|v| v.to_bits() == value.to_bits())
                .map(|i| i as f64 + 0.5),
        }
    }

    /// `points` values spread evenly over the domain, ends included (in log space for
    /// [`LogUniform`](Domain::LogUniform)); every value of a choice, whatever `points`.
    pub fn grid(&self, points: usize) -> Vec<f64> {
        match self {
            Domain::Choice(values) => values.clone(),
            _ => {
                let (a, b) = self.coordinates();
                if points <= 1 {
                    return vec![self.value((a + b) / 2.0)];
                }
                (0..points)
                    .map(|i| self.value(a + (b - a) * i as f64 / (points - 1) as f64))
                    .collect()
            }
        }
    }
}

/// One setting the training takes, with the values it may take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tunable {
    name: String,
    domain: Domain,
}

impl Tunable {
    /// A tunable drawn uniformly in log space between `lo` and `hi`.
    pub fn log_uniform(name: impl Into<String>, lo: f64, hi: f64) -> Self {
        Self::new(name, Domain::LogUniform { lo, hi })
    }

    /// A tunable drawn uniformly between `lo` and `hi`.
    pub fn uniform(name: impl Into<String>, lo: f64, hi: f64) -> Self {
        Self::new(name, Domain::Uniform { lo, hi })
    }

    /// A tunable taking one of `values`.
    pub fn choice(name: impl Into<String>, values: impl Into<Vec<f64>>) -> Self {
        Self::new(name, Domain::Choice(values.into()))
    }

    /// A tunable over `domain`.
    pub fn new(name: impl Into<String>, domain: Domain) -> Self {
        Self {
            name: name.into(),
            domain,
        }
    }

    /// The tunable's name, as settings and the timeline print it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The values it may take.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    fn check(&self) -> Result<(), SpaceError> {
        let name = || self.name.clone();
        if self.name.is_empty() {
            return Err(SpaceError::Unnamed);
        }
        match &self.domain {
            Domain::LogUniform { lo, hi } | Domain::Uniform { lo, hi } => {
                if !lo.is_finite() || !hi.is_finite() || lo >= hi {
                    return Err(SpaceError::Range {
                        name: name(),
                        lo: *lo,
                        hi: *hi,
                    });
                }
                if matches!(self.domain, Domain::LogUniform { .. }) && *lo <= 0.0 {
                    return Err(SpaceError::NotPositive {
                        name: name(),
                        lo: *lo,
                    });
                }
            }
            Domain::Choice(values) => {
                if values.is_empty() {
                    return Err(SpaceError::NoChoice { name: name() });
                }
                if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                    return Err(SpaceError::NotFinite {
                        name: name(),
                        value: *v,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The tunables of one tuning, checked: at least one, names unique, every domain sound.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Space {
    tunables: Vec<Tunable>,
}

impl Space {
    /// Checks `tunables` and gathers them; the error names the first that is wrong.
    pub fn new(tunables: Vec<Tunable>) -> Result<Self, SpaceError> {
        if tunables.is_empty() {
            return Err(SpaceError::Empty);
        }
        for (i, t) in tunables.iter().enumerate() {
            t.check()?;
            if tunables[..i].iter().any(|u| u.name == t.name) {
                return Err(SpaceError::Duplicate {
                    name: t.name.clone(),
                });
            }
        }
        Ok(Self { tunables })
    }

    /// The tunables, in declaration order (the order of every [`Setting`]'s values).
    pub fn tunables(&self) -> &[Tunable] {
        &self.tunables
    }

    /// The setting of these tunables at `coordinates` (one per tunable, in order).
    pub fn setting(&self, coordinates: &[f64]) -> Setting {
        Setting {
            values: self
                .tunables
                .iter()
                .zip(coordinates)
                .map(|(t, c)| (t.name.clone(), t.domain.value(*c)))
                .collect(),
        }
    }

    /// The coordinates of `setting`, `None` if it is not a setting of this space.
    pub fn coordinates(&self, setting: &Setting) -> Option<Vec<f64>> {
        if setting.values.len() != self.tunables.len() {
            return None;
        }
        self.tunables
            .iter()
            .zip(&setting.values)
            .map(|(t, (name, v))| (t.name == *name).then(|| t.domain.coordinate(*v))?)
            .collect()
    }
}

/// One value for each tunable of a [`Space`], in its order; in JSON an object
/// `{"lr": 0.01, "momentum": 0.9}` in that order.
#[derive(Clone, Debug, PartialEq)]
pub struct Setting {
    values: Vec<(String, f64)>,
}

impl Serialize for Setting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(self.values.len()))?;
        for (name, value) in &self.values {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Setting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Setting;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of tunable names and numbers")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut m: M,
            ) -> Result<Setting, M::Error> {
                let mut values = Vec::new();
                while let Some(entry) = m.next_entry::<String, f64>()? {
                    values.push(entry);
                }
                Ok(Setting { values })
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Setting {
    /// A setting of the given `(name, value)` pairs (for a fixed setting given by hand;
    /// [`Space::coordinates`] tells whether it belongs to a space).
    pub fn new(values: Vec<(String, f64)>) -> Self {
        Self { values }
    }

    /// The value of the tunable `name`, if the setting has one.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The `(name, value)` pairs, in the space's order.
    pub fn values(&self) -> &[(String, f64)] {
        &self.values
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.values.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

/// Why a [`Space`] was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpaceError {
    /// No tunable was declared.
    #[error("nothing to tune: declare at least one tunable")]
    Empty,
    /// A tunable without a name.
    #[error("a tunable has an empty name")]
    Unnamed,
    /// Two tunables of one name.
    #[error("tunable {name:?} is declared twice")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A range that is empty or not finite.
    #[error("tunable {name:?}: range [{lo}, {hi}] is empty or not finite (needs lo < hi)")]
    Range {
        /// The tunable.
        name: String,
        /// Its lower end.
        lo: f64,
        /// Its upper end.
        hi: f64,
    },
    /// A log-uniform range reaching zero or below.
    #[error("tunable {name:?}: a log-uniform range must be positive, and starts at {lo}")]
    NotPositive {
        /// The tunable.
        name: String,
        /// Its lower end.
        lo: f64,
    },
    /// A choice among no values.
    #[error("tunable {name:?}: a choice needs at least one value")]
    NoChoice {
        /// The tunable.
        name: String,
    },
    /// A choice of a value that is not a finite number.
    #[error("tunable {name:?}: choice {value} is not a finite number")]
    NotFinite {
        /// The tunable.
        name: String,
        /// The value.
        value: f64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_that_cannot_be_searched_are_refused_naming_the_tunable() {
        assert_eq!(Space::new(vec![]), Err(SpaceError::Empty));
        let lr = || Tunable::log_uniform("lr", 1e-3, 1.0);
        assert!(matches!(
            Space::new(vec![lr(), lr()]),
            Err(SpaceError::Duplicate { name }) if name == "lr"
        ));
        assert!(matches!(
            Space::new(vec![Tunable::log_uniform("lr", 0.0, 1.0)]),
            Err(SpaceError::NotPositive { .. })
        ));
        assert!(matches!(
            Space::new(vec![Tunable::uniform("m", 0.9, 0.1)]),
            Err(SpaceError::Range { .. })
        ));
        assert!(matches!(
            Space::new(vec![Tunable::choice("batch", vec![])]),
            Err(SpaceError::NoChoice { .. })
        ));
        assert!(matches!(
            Space::new(vec![Tunable::choice("s", vec![1.0, f64::NAN])]),
            Err(SpaceError::NotFinite { .. })
        ));
        let e = Space::new(vec![Tunable::uniform("m", 1.0, f64::INFINITY)]).unwrap_err();
        assert!(e.to_string().contains("\"m\""), "{e}");
    }

    #[test]
    fn coordinates_map_back_to_values_of_the_domain() {
        let space = Space::new(vec![
            Tunable::log_uniform("lr", 1e-3, 1.0),
            Tunable::uniform("momentum", 0.0, 0.99),
            Tunable::choice("batch", vec![16.0, 32.0, 64.0]),
        ])
        .unwrap();
        let s = Setting::new(vec![
            ("lr".into(), 0.01),
            ("momentum".into(), 0.9),
            ("batch".into(), 32.0),
        ]);
        let c = space.coordinates(&s).unwrap();
        let back = space.setting(&c);
        assert!((back.get("lr").unwrap() - 0.01).abs() < 1e-12);
        assert_eq!(back.get("momentum"), Some(0.9));
        assert_eq!(back.get("batch"), Some(32.0));
        // Outside the domain: no coordinates; any coordinate: a value inside.
        let wrong = Setting::new(vec![
            ("lr".into(), 5.0),
            ("momentum".into(), 0.9),
            ("batch".into(), 32.0),
        ]);
        assert_eq!(space.coordinates(&wrong), None);
        let far = space.setting(&[100.0, -3.0, 17.0]);
        assert_eq!(far.get("lr"), Some(1.0));
        assert_eq!(far.get("momentum"), Some(0.0));
        assert_eq!(far.get("batch"), Some(64.0));
        assert_eq!(far.to_string(), "lr=1 momentum=0 batch=64");
        let json = serde_json::to_string(&far).unwrap();
        assert_eq!(json, r#"{"lr":1.0,"momentum":0.0,"batch":64.0}"#);
        assert_eq!(serde_json::from_str::<Setting>(&json).unwrap(), far);
    }

    #[test]
    fn grids_span_the_domain_in_its_own_scale() {
        let lr = Domain::LogUniform { lo: 1e-3, hi: 1e-1 };
        let g = lr.grid(3);
        assert_eq!(g.len(), 3);
        assert!((g[0] - 1e-3).abs() < 1e-15 && (g[1] - 1e-2).abs() < 1e-12);
        assert!((g[2] - 1e-1).abs() < 1e-12);
        assert_eq!(Domain::Uniform { lo: 0.0, hi: 1.0 }.grid(5)[1], 0.25);
        assert_eq!(Domain::Choice(vec![1.0, 2.0]).grid(7), vec![1.0, 2.0]);
    }
}
