//! Update rules of the application's own (issue 41), registered by name with
//! `Config::with_rule`: the rules here join the built-in ones in `rules.rs` and
//! `rule_state.rs` (`rules()`), so they are held to the sequential reference bit for bit
//! in every mode, over TCP, across checkpoints, resumes onto other process counts and
//! migrations. This file checks what is theirs alone: processes that register them
//! differently are refused when they join, naming the rule and the ranks; an unregistered
//! or misused rule is refused naming it; a resume without the rule is refused naming it;
//! a step that panics fails the run naming the rule instead of hanging.

use crate::rules::{body, initial, ROWS, WIDTH};
use crate::util::{over_tcp_each, within, TempDir};
use iterstore::checkpoints::ClusterRule;
use iterstore::{Cluster, Config, Error, Mode, Real, Rule, Staleness, UpdateRule, UpdateRules};

/// SGD with each gradient element clipped to `[-limit, limit]`: `w -= lr · clip(g)`.
pub(crate) struct ClippedSgd;

impl UpdateRule for ClippedSgd {
    fn params(&self) -> &'static [&'static str] {
        &["lr", "limit"]
    }
    fn check(&self, params: &[f64]) -> Result<(), String> {
        match params.iter().all(|p| p.is_finite() && *p > 0.0) {
            true => Ok(()),
            false => Err(format!(
                "lr and limit must be finite and > 0, not {params:?}"
            )),
        }
    }
    fn step<F: Real>(&self, p: &[f64], value: &mut [F], grad: &[F], _: &mut [F], _: u64) {
        let (lr, limit) = (F::of(p[0]), F::of(p[1]));
        for (w, &g) in value.iter_mut().zip(grad) {
            let g = if g > limit {
                limit
            } else if g < -limit {
                -limit
            } else {
                g
            };
            *w = *w - lr * g;
        }
    }
}

/// Nesterov momentum with a learning rate decayed by the step count:
/// `v = μ·v + g; w -= (lr / √t) · (g + μ·v)`. Its state (the velocity) and step count
/// must survive checkpoints and migrations for it to equal its reference.
pub(crate) struct DecayedNesterov;

impl UpdateRule for DecayedNesterov {
    fn params(&self) -> &'static [&'static str] {
        &["lr", "momentum"]
    }
    fn state_per_element(&self) -> usize {
        1
    }
    fn step<F: Real>(&self, p: &[f64], value: &mut [F], grad: &[F], state: &mut [F], t: u64) {
        let (lr, mu) = (F::of(p[0] / (t as f64).sqrt()), F::of(p[1]));
        for ((w, &g), v) in value.iter_mut().zip(grad).zip(state.iter_mut()) {
            *v = mu * *v + g;
            *w = *w - lr * (g + mu * *v);
        }
    }
}

/// `config` with this file's rules registered.
pub(crate) fn registered(config: Config) -> Config {
    config
        .with_rule("clipped_sgd", ClippedSgd)
        .with_rule("decayed_nesterov", DecayedNesterov)
}

/// The registry of this file's rules, for sequential references.
pub(crate) fn registry() -> UpdateRules {
    registered(Config::default()).rules
}

/// This file's rules with parameters, as `rules.rs` runs them.
pub(crate) fn custom_rules() -> Vec<Rule> {
    let c = registered(Config::default());
    vec![
        c.rule("clipped_sgd", &[0.1, 0.3]).unwrap(),
        c.rule("decayed_nesterov", &[0.05, 0.9]).unwrap(),
    ]
}

/// Each process's error message.
fn errors<R>(results: Vec<iterstore::Result<R>>) -> Vec<String> {
    results
        .into_iter()
        .map(|r| r.err().expect("refused").to_string())
        .collect()
}

#[test]
fn processes_registering_rules_differently_are_refused_naming_the_rule_and_the_ranks() {
    within(60, || {
        // Process 1 lacks the rule.
        let lacking = over_tcp_each(
            |rank| match rank {
                0 => Config::new(1).with_rule("clipped_sgd", ClippedSgd),
                _ => Config::new(1),
            },
            2,
            |_| Ok(()),
        );
        for e in errors(lacking) {
            assert!(
                e.contains("update rules differs")
                    && e.contains("rank 0: clipped_sgd(lr, limit) state 0")
                    && e.contains("rank 1: none"),
                "{e}"
            );
        }
        // Process 1 declares it otherwise (other parameters, a state).
        let other = over_tcp_each(
            |rank| match rank {
                0 => Config::new(1).with_rule("clipped_sgd", ClippedSgd),
                _ => Config::new(1).with_rule("clipped_sgd", DecayedNesterov),
            },
            2,
            |_| Ok(()),
        );
        for e in errors(other) {
            assert!(
                e.contains("rank 1: clipped_sgd(lr, momentum) state 1"),
                "{e}"
            );
        }
    });
}

#[test]
fn a_custom_rule_misused_is_refused_naming_it() {
    within(60, || {
        let e = Config::new(1)
            .with_rule("sgd", ClippedSgd)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"sgd\": the name of a built-in rule"), "{e}");
        let twice = registered(Config::new(1)).with_rule("clipped_sgd", ClippedSgd);
        let e = Cluster::start(twice).unwrap_err().to_string();
        assert!(e.contains("\"clipped_sgd\": registered twice"), "{e}");
        let long = "a".repeat(iterstore::MAX_RULE_NAME + 1);
        let e = Config::new(1).with_rule(&long, ClippedSgd).validate();
        assert!(e.unwrap_err().to_string().contains("name of 1 to 32 bytes"));

        let mut c = Cluster::start(registered(Config::new(1))).unwrap();
        let e = c.rule("lion", &[0.1]).unwrap_err().to_string();
        assert!(e.contains("update rule \"lion\" is not registered"), "{e}");
        let e = c.rule("clipped_sgd", &[0.1]).unwrap_err().to_string();
        assert!(e.contains("takes 2 parameters (lr, limit), given 1"), "{e}");
        let e = c.rule("clipped_sgd", &[0.1, -1.0]).unwrap_err().to_string();
        assert!(e.contains("lr and limit must be finite and > 0"), "{e}");
        let clipped = c.rule("clipped_sgd", &[0.1, 1.0]).unwrap();
        assert_eq!(clipped.to_string(), "clipped_sgd(0.1, 1)");
        let e = c
            .create_table_with_rule::<i32>("i", 1, None, clipped)
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs a table of f32 or f64"), "{e}");
        // A rule made by another registry is checked against this cluster's.
        let foreign = Config::new(1)
            .with_rule("decayed_nesterov", ClippedSgd)
            .rule("decayed_nesterov", &[0.1, 1.0])
            .unwrap();
        let e = c
            .create_table_with_rule::<f32>("f", 1, None, foreign)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"decayed_nesterov\" is registered here with another declaration"),
            "{e}"
        );
        // Another rule, even of the same state width, is another kind.
        let t = c
            .create_table_with_rule::<f32>("w", 1, None, clipped)
            .unwrap();
        let e = c
            .set_rule(&t, Rule::Sgd { lr: 0.1 })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("clipped_sgd(0.1, 1) cannot become sgd(lr=0.1)"),
            "{e}"
        );
        c.shutdown().unwrap();
    });
}

#[test]
fn resuming_without_the_rule_registered_is_refused_naming_it() {
    within(60, || {
        let dir = TempDir::new("custom-rule");
        let rule = custom_rules()[1];
        let mut c = Cluster::start(registered(Config::new(2))).unwrap();
        let t = c
            .create_table_with_rule::<f32>("w", WIDTH, Some(ROWS), rule)
            .unwrap();
        let rows: Vec<_> = (0..ROWS).map(|r| (r, initial(r))).collect();
        c.set_rows(&t, &rows).unwrap();
        c.run(|w| body(w, &t)).unwrap();
        let ckpt = c.checkpoint(dir.path(), "custom").unwrap();
        c.shutdown().unwrap();
        let manifest = std::fs::read_to_string(ckpt.join("MANIFEST.json")).unwrap();
        assert!(
            manifest.contains("\"name\": \"decayed_nesterov\""),
            "{manifest}"
        );

        // Without the rule, the table cannot have it; as a sum it does not match.
        let mut c = Cluster::start(Config::new(2)).unwrap();
        let e = c.rule("decayed_nesterov", &[0.05, 0.9]).unwrap_err();
        assert!(e
            .to_string()
            .contains("\"decayed_nesterov\" is not registered"));
        c.create_table::<f32>("w", WIDTH).unwrap();
        let e = c
            .resume(dir.path(), "custom", ClusterRule::Same)
            .unwrap_err();
        assert!(
            e.to_string().contains(
                "table w has update rule sum here and decayed_nesterov(0.05, 0.9) in the \
                 checkpoint"
            ),
            "{e}"
        );
        let _ = c.shutdown();
    });
}

/// Panics on its second step of a row.
struct PanicsOnSecondStep;

impl UpdateRule for PanicsOnSecondStep {
    fn params(&self) -> &'static [&'static str] {
        &[]
    }
    fn step<F: Real>(&self, _: &[f64], value: &mut [F], grad: &[F], _: &mut [F], t: u64) {
        assert!(t < 2, "no second step");
        for (w, &g) in value.iter_mut().zip(grad) {
            *w = *w - g;
        }
    }
}

/// Two runs of two clocks each on a table of [`PanicsOnSecondStep`]: the first error.
fn panicking_program(c: &mut Cluster) -> iterstore::Result<()> {
    let rule = c.rule("panics", &[])?;
    let t = c.create_table_with_rule::<f64>("p", 1, Some(2), rule)?;
    let step = |w: &mut iterstore::Worker<'_>| {
        for _ in 0..2 {
            w.update(&t, 0, &[1.0])?;
            w.clock()?;
        }
        Ok(())
    };
    if c.config().mode == Mode::Virtual {
        c.virtual_iteration(step)?;
    }
    c.run(step)?;
    c.run(step)?;
    Ok(())
}

#[test]
fn a_panicking_custom_rule_fails_the_run_naming_the_rule() {
    within(120, || {
        let config = |mode| {
            Config::new(2)
                .with_mode(mode)
                .with_rule("panics", PanicsOnSecondStep)
        };
        let named = |e: &Error| {
            let e = e.to_string();
            assert!(
                e.contains("update rule panics() panicked stepping row 0 of table 'p'")
                    && e.contains("no second step"),
                "{e}"
            );
        };
        for mode in [Mode::Generic, Mode::Virtual] {
            let mut c = Cluster::start(config(mode)).unwrap();
            named(&panicking_program(&mut c).unwrap_err());
            drop(c);
        }
        let asynchronous = config(Mode::Generic).with_staleness(Staleness::Unbounded);
        let mut c = Cluster::start(asynchronous).unwrap();
        named(&panicking_program(&mut c).unwrap_err());
        drop(c);
        for e in crate::util::over_tcp_results(config(Mode::Virtual), 2, panicking_program) {
            named(&e.unwrap_err());
        }
    });
}

#[test]
fn the_registry_steps_built_in_rules_as_rule_step_does() {
    let (mut a, mut b) = ([1.0f32, 2.0], [1.0f32, 2.0]);
    let (mut sa, mut sb) = ([0.0f32; 2], [0.0f32; 2]);
    let momentum = Rule::Momentum {
        lr: 0.5,
        momentum: 0.9,
    };
    momentum.step(&mut a, &[0.5, -1.0], &mut sa, 1);
    registry().step(&momentum, &mut b, &[0.5, -1.0], &mut sb, 1);
    assert_eq!((a, sa), (b, sb));
    let clipped = custom_rules()[0];
    let mut w = [0.0f64, 0.0];
    registry().step(&clipped, &mut w, &[5.0, -0.2], &mut [], 1);
    assert_eq!(w, [-0.1 * 0.3, 0.1 * 0.2]);
}
