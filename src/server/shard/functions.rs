//! A server function's call on this shard (`crate::server::functions`): between runs,
//! with every update applied, the shard runs the function its own process names on its
//! rows and answers that process with its result, or why there is none (the function's
//! error or panic, named; the cluster goes on). A function that wrote rows makes every
//! subscription's next refresh whole, as a set does: every process drops its copies
//! once the call is over.
//!
//! Only the shard's own process calls it (each process calls its own shards and the
//! processes then combine their shards' results), so the call needs no barrier of its
//! own; work of the next run, or another collective, arriving before it means the
//! processes called different collectives, and fails the cluster.

use super::Shard;
use crate::error::panic_message;
use crate::ids::ProcessId;
use crate::msg::{Called, Envelope, ToClient};
use crate::server::functions::{Functions, ShardRows};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

impl Shard {
    /// This shard, running the server functions registered in `functions` (its
    /// process's registry).
    pub(crate) fn with_functions(mut self, functions: Arc<Functions>) -> Self {
        self.functions = Some(functions);
        self
    }

    /// A call of function `function` with `args` from process `from` (see the module
    /// docs): answers `from` with [`ToClient::Called`], or fails the cluster.
    pub(super) fn call(
        &mut self,
        from: ProcessId,
        function: u32,
        args: &[f64],
        out: &mut Vec<Envelope>,
    ) {
        match self.run_function(from, function, args) {
            Ok((result, wrote)) => out.push(Envelope::Client(
                from,
                ToClient::Called {
                    called: Called {
                        shard: self.id,
                        result,
                        wrote,
                    },
                },
            )),
            Err(reason) => self.reject_everyone(reason, out),
        }
    }

    /// Runs function `function` with `args` on this shard's rows for process `from`:
    /// its result or the error that names what failed, and whether it wrote a row;
    /// `Err` when the call must fail the cluster instead (a protocol breach).
    fn run_function(
        &mut self,
        from: ProcessId,
        function: u32,
        args: &[f64],
    ) -> Result<(Result<Vec<f64>, String>, bool), String> {
        if self.local.as_ref().is_none_or(|(p, _)| *p != from) {
            return Err(format!(
                "process {from} called a server function on shard {}, which is not its own \
                 (a process calls only its own shards)",
                self.id
            ));
        }
        if let Some(reason) = self.busy_for_call(from) {
            return Err(reason);
        }
        let Some(functions) = self.functions.clone() else {
            return Ok((Err("this shard runs no server functions".into()), false));
        };
        let Some(f) = functions.get(function) else {
            return Ok((
                Err(format!("no server function #{function} is registered")),
                false,
            ));
        };
        let Some(placement) = functions.placement() else {
            return Ok((Err("no placement was given for the call".into()), false));
        };
        let mut view = ShardRows {
            shard: self.id,
            tables: &self.tables,
            rows: &self.rows,
            arena: &mut self.arena,
            placement: &placement,
            now: self.clocks.min_clock(),
            wrote: false,
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| (f.body)(&mut view, args)));
        let wrote = view.wrote;
        if wrote {
            self.arena.forget_sent();
        }
        let result = match outcome {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(e.to_string()),
            Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
        };
        Ok((result, wrote))
    }

    /// Why `from` cannot call a function here now, if it cannot: work of the next run
    /// has begun somewhere, updates wait, or another collective is open.
    fn busy_for_call(&self, from: ProcessId) -> Option<String> {
        if let Some(p) = (0..self.world.processes).find(|&p| self.working[p]) {
            return Some(format!(
                "process {from} calls a server function while process {p} went on to run {} \
                 (the processes called different collectives)",
                self.run + 1
            ));
        }
        if !self.pending.is_empty()
            || self.migration.is_some()
            || self.restore.is_some()
            || self.setting.is_some()
        {
            return Some(format!(
                "process {from} calls a server function while updates, a migration, a resume \
                 or a set are under way (functions run only between runs)"
            ));
        }
        None
    }
}
