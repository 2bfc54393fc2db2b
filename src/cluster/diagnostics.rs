//! What the store noticed it could not do as asked — a virtual iteration that specializes
//! nothing, a virtual mode run without one, a recorded iteration without a CLOCK — said
//! once per kind, where a library user sees it: in [`Stats::diagnostics`], through
//! `tracing` when the program installed a subscriber, and otherwise on standard error
//! (a library's `tracing` warnings are invisible without a subscriber).
//!
//! [`Stats::diagnostics`]: super::Stats::diagnostics

use super::Cluster;
use crate::error::warn_visible;

/// A kind of diagnostic (each is said once per cluster).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Diagnostic {
    /// `virtual_iteration` in a mode that does not specialize from it.
    VirtualNotSpecialized,
    /// A run in virtual mode before any virtual iteration.
    VirtualModeWithoutPattern,
    /// A recorded iteration (virtual or first real) with accesses and no CLOCK.
    NoClock,
}

/// The diagnostics said so far.
#[derive(Debug, Default)]
pub(super) struct Diagnostics {
    said: Vec<(Diagnostic, String)>,
}

impl Diagnostics {
    /// Every message said, in order.
    pub(super) fn messages(&self) -> Vec<String> {
        self.said.iter().map(|(_, m)| m.clone()).collect()
    }
}

impl Cluster {
    /// Says `message` of kind `kind`, unless one of that kind was said already.
    pub(super) fn diagnose(&mut self, kind: Diagnostic, message: impl FnOnce() -> String) {
        if self.diagnostics.said.iter().any(|(k, _)| *k == kind) {
            return;
        }
        let message = message();
        warn_visible(&message);
        self.diagnostics.said.push((kind, message));
    }
}
