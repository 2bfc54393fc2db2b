//! The applications bundled with iterstore — matrix factorization (SGD), LDA (collapsed
//! Gibbs sampling) and PageRank — together with their input data and the hand-written
//! in-memory implementations ("the limit") they are benchmarked against.
//!
//! Everything here uses only the public API of the `iterstore` crate.

pub mod algo;
pub mod apps;
pub mod bench;
pub mod calibrate;
pub mod data;
pub mod dnn;
#[doc(hidden)]
pub mod fuzzing;
pub mod limit;
pub mod validate;
