//! Training that tunes itself (MLtuner; the IterStore thesis proposal's §5): instead of a
//! person rerunning with one learning rate after another, the training forks
//! **branches** of its state with different settings, trains each for a short, equal
//! time, keeps the one whose loss falls fastest, and searches again when validation
//! stalls.
//!
//! - [`space`]: the [`Tunable`]s an application declares (log-uniform learning rate,
//!   uniform momentum, batch size or staleness from a list) and the [`Setting`]s tried.
//! - [`search`]: who proposes settings — TPE (the default, through the `tpe` crate),
//!   grid, random — and MLtuner's rule for when a search is over.
//! - [`progress`]: a trial's loss trace summarized as a slope with a penalty for rises,
//!   robust to noise; divergence; plateaus of validation results.
//! - [`tuner`]: the loop, over any [`Trainer`] — something that can fork, train,
//!   measure, validate and free branches of one training state. `iterstore::Cluster`'s
//!   branches are meant to be one; so is an application's own copy of its model.
//! - [`timeline`]: everything the loop did (fork, train, score, kill, choose, evaluate,
//!   re-tune) as JSON, and every branch's loss against time as an SVG.
//!
//! The crate knows nothing of the store: it depends only on `serde`, `tpe` and `rand`.
//!
//! # Example
//!
//! A model of one number, its branches kept in memory, tuned for its learning rate:
//!
//! ```
//! use iterstore_tune::{BranchId, Measured, Options, Setting, Space, Stop, Trainer, Tunable, Tuner};
//! use std::collections::HashMap;
//!
//! /// Gradient descent on (x - 3)²; a branch is (x, learning rate).
//! struct Quadratic {
//!     branches: HashMap<BranchId, (f64, f64)>,
//!     next: BranchId,
//! }
//!
//! impl Quadratic {
//!     fn x(&self, b: BranchId) -> Result<f64, String> {
//!         self.branches.get(&b).map(|s| s.0).ok_or(format!("no branch {b}"))
//!     }
//! }
//!
//! impl Trainer for Quadratic {
//!     type Error = String;
//!     fn root(&self) -> BranchId {
//!         0
//!     }
//!     fn fork(&mut self, parent: BranchId, setting: &Setting) -> Result<BranchId, String> {
//!         let x = self.x(parent)?;
//!         self.next += 1;
//!         self.branches.insert(self.next, (x, setting.get("lr").unwrap()));
//!         Ok(self.next)
//!     }
//!     fn train(&mut self, b: BranchId, clocks: u64) -> Result<Vec<Measured>, String> {
//!         let (x, lr) = self.branches.get_mut(&b).ok_or("no branch")?;
//!         let step = |x: &mut f64| *x -= *lr * 2.0 * (*x - 3.0);
//!         Ok((0..clocks)
//!             .map(|_| {
//!                 step(x);
//!                 Measured { seconds: 0.01, value: (*x - 3.0).powi(2) }
//!             })
//!             .collect())
//!     }
//!     fn loss(&mut self, b: BranchId) -> Result<Measured, String> {
//!         Ok(Measured { seconds: 0.0, value: (self.x(b)? - 3.0).powi(2) })
//!     }
//!     fn evaluate(&mut self, b: BranchId) -> Result<Measured, String> {
//!         Ok(Measured { seconds: 0.0, value: -(self.x(b)? - 3.0).abs() })
//!     }
//!     fn free(&mut self, b: BranchId) -> Result<(), String> {
//!         self.branches.remove(&b).map(|_| ()).ok_or(format!("branch {b} freed twice"))
//!     }
//! }
//!
//! let space = Space::new(vec![Tunable::log_uniform("lr", 1e-4, 2.0)]).unwrap();
//! let options = Options { target: Some(-1e-6), epoch_clocks: 10, ..Options::default() };
//! let mut model = Quadratic { branches: HashMap::from([(0, (0.0, 0.0))]), next: 0 };
//! let outcome = Tuner::new(space, options)
//!     .unwrap()
//!     .observe(|event| eprintln!("{}", event.name()))
//!     .run(&mut model)
//!     .unwrap();
//! assert_eq!(outcome.stop, Stop::Target);
//! let lr = outcome.setting.unwrap().get("lr").unwrap();
//! assert!(lr < 1.0, "rates from 1 up diverge; chose {lr}");
//! ```
#![warn(missing_docs)]

pub mod progress;
pub mod search;
pub mod space;
mod svg;
pub mod timeline;
pub mod tuner;

pub use search::{SearchOptions, Searcher, SearcherKind};
pub use space::{Domain, Setting, Space, SpaceError, Tunable};
pub use timeline::{BranchId, Curve, Event, Stop, Timeline};
pub use tuner::{Measured, Options, Outcome, Trainer, Tuner};
