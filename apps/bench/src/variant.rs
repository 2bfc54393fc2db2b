//! [`Variant`]: one store configuration the benchmark compares — a mode, and for the
//! ablations the specialized mode with one specialization switched off.

use iterstore::{Mode, Specializations};
use serde::Serialize;

/// A named store configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    /// The name in tables and charts, e.g. `generic` or `virtual-no-static-cache`.
    pub name: String,
    /// How the store gathers the pattern.
    #[serde(serialize_with = "mode_name")]
    pub mode: Mode,
    /// Which specializations apply (ignored in generic mode).
    #[serde(skip)]
    pub specializations: Specializations,
    /// The specialization switched off, for an ablation.
    pub without: Option<&'static str>,
}

fn mode_name<S: serde::Serializer>(mode: &Mode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(mode.name())
}

/// The specializations an ablation can switch off, by name.
pub const SPECIALIZATIONS: [&str; 5] = [
    "static-cache",
    "thread-caches",
    "contiguous-index",
    "prefetch-batching",
    "numa",
];

impl Variant {
    /// `mode` with every specialization on.
    pub fn mode(mode: Mode) -> Self {
        Variant {
            name: mode.name().to_string(),
            mode,
            specializations: Specializations::ALL,
            without: None,
        }
    }

    /// Virtual mode with the specialization `name` (one of [`SPECIALIZATIONS`]) off.
    pub fn ablation(name: &str) -> Result<Self, String> {
        let mut specs = Specializations::ALL;
        let (flag, name) = match name {
            "static-cache" => (&mut specs.static_cache, "static-cache"),
            "thread-caches" => (&mut specs.thread_caches, "thread-caches"),
            "contiguous-index" => (&mut specs.contiguous_index, "contiguous-index"),
            "prefetch-batching" => (&mut specs.prefetch_batching, "prefetch-batching"),
            "numa" => (&mut specs.numa, "numa"),
            other => {
                return Err(format!(
                    "unknown specialization '{other}', expected one of {}",
                    SPECIALIZATIONS.join(", ")
                ))
            }
        };
        *flag = false;
        Ok(Variant {
            name: format!("virtual-no-{name}"),
            mode: Mode::Virtual,
            specializations: specs,
            without: Some(name),
        })
    }

    /// Every variant the benchmark runs by default: the three modes, then each ablation.
    pub fn all() -> Vec<Variant> {
        let mut all: Vec<Variant> = [Mode::Generic, Mode::FirstIter, Mode::Virtual]
            .into_iter()
            .map(Variant::mode)
            .collect();
        all.extend(
            SPECIALIZATIONS
                .iter()
                .map(|s| Variant::ablation(s).expect("listed specializations parse")),
        );
        all
    }

    /// Looks a variant up by its name (as [`all`](Self::all) names them).
    pub fn by_name(name: &str) -> Result<Self, String> {
        Variant::all()
            .into_iter()
            .find(|v| v.name == name)
            .ok_or_else(|| {
                let names: Vec<String> = Variant::all().into_iter().map(|v| v.name).collect();
                format!(
                    "unknown variant '{name}', expected one of {}",
                    names.join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_is_distinct_and_found_by_name() {
        let all = Variant::all();
        assert_eq!(all.len(), 8);
        for v in &all {
            assert_eq!(&Variant::by_name(&v.name).unwrap(), v);
        }
        let ablations: Vec<_> = all.iter().filter(|v| v.without.is_some()).collect();
        assert_eq!(ablations.len(), 5);
        for v in ablations {
            assert_eq!(v.mode, Mode::Virtual);
            assert_ne!(v.specializations, Specializations::ALL, "{}", v.name);
        }
        assert!(
            !Variant::ablation("static-cache")
                .unwrap()
                .specializations
                .static_cache
        );
        assert!(!Variant::ablation("numa").unwrap().specializations.numa);
        assert!(Variant::by_name("fast").unwrap_err().contains("generic"));
        assert!(Variant::ablation("placement").is_err());
    }
}
