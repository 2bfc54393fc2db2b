//! Server functions, the collective: [`Cluster::register_function`] and
//! [`Cluster::call`], with [`ServerFn`].
//!
//! **Register** (every process alike, between runs): the function's code goes into the
//! process's registry, which its shards share, under the next id; the processes agree on
//! the names and reductions so far, so a call means the same function everywhere.
//!
//! **Call** (every process alike, between runs): each process hands its shards the
//! placement of rows, asks each of them to run the function on its rows and waits for
//! their answers; the processes then all-gather the answers, so every process holds every
//! shard's result and none goes on before every shard has run (the all-gather is the
//! barrier that keeps the next run's work from reaching a shard that has not run it yet).
//! Each process folds the results in global shard order: the same value everywhere, and
//! the same as one process with as many shards. If any shard wrote a row, every process
//! drops its copies of rows (its caches, arena and workers' held rows), as after
//! [`Cluster::set_rows`].

use super::Cluster;
use crate::error::{Error, Result};
use crate::msg::{Called, ToShard};
use crate::server::functions::{Reduce, Registered, ShardRows};
use crate::sync::lock;
use crate::worker::KeptState;
use std::sync::Arc;

/// The encoding of the shards' answers the processes all-gather (bounded: a peer's
/// claimed lengths cannot make this process allocate more than 1 GiB).
const GATHER: bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<{ 1 << 30 }>,
> = bincode::config::standard().with_limit::<{ 1 << 30 }>();

/// A server function registered on every process of a cluster
/// ([`Cluster::register_function`]); [`Cluster::call`] runs it.
#[derive(Debug, Clone)]
pub struct ServerFn {
    cluster: u64,
    id: u32,
    name: String,
}

impl ServerFn {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Cluster {
    /// Registers a server function: `body` runs on each shard over that shard's rows
    /// ([`ShardRows`]) with the arguments of a [`call`](Self::call) and returns a vector
    /// of numbers; `reduce` combines the shards' vectors into the call's result.
    ///
    /// A collective between runs: every process registers the same functions (names and
    /// reductions, in the same order; refused with [`Error::Disagreement`] otherwise —
    /// the code itself cannot be compared, so give a changed function a new name). The
    /// body runs on the shard threads of its own process, so it must be `Send + Sync`;
    /// an error it returns or a panic fails the call ([`Error::ServerFunction`]), not the
    /// cluster.
    ///
    /// ```
    /// use iterstore::functions::Reduce;
    /// use iterstore::{Cluster, Config};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// let mut cluster = Cluster::start(Config::new(2).with_shards(3))?;
    /// let x = cluster.create_table_sized::<f64>("x", 4, 100)?;
    /// let ones: Vec<_> = (0..100).map(|r| (r, vec![1.0; 4])).collect();
    /// cluster.set_rows(&x, &ones)?;
    /// // x · x, each shard over its own rows.
    /// let dot = cluster.register_function("dot", Reduce::Sum, move |rows, _args| {
    ///     let (mut sum, mut v) = (0.0, [0.0; 4]);
    ///     for r in rows.rows(&x)? {
    ///         rows.read(&x, r, &mut v)?;
    ///         sum += v.iter().map(|a| a * a).sum::<f64>();
    ///     }
    ///     Ok(vec![sum])
    /// })?;
    /// assert_eq!(cluster.call(&dot, &[])?, vec![400.0]);
    /// cluster.shutdown()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn register_function(
        &mut self,
        name: &str,
        reduce: Reduce,
        body: impl Fn(&mut ShardRows<'_>, &[f64]) -> Result<Vec<f64>> + Send + Sync + 'static,
    ) -> Result<ServerFn> {
        self.check()?;
        if name.is_empty() || self.functions.has(name) {
            return Err(Error::config(
                "register_function",
                format!("server function name '{name}' is empty or already registered"),
            ));
        }
        let id = self.functions.count() as u32;
        self.agree(&[(
            &format!("server function #{id}"),
            &format!("{name} ({})", reduce.name()),
        )])?;
        let registered = self.functions.register(Registered {
            name: name.to_string(),
            reduce,
            body: Arc::new(body),
        });
        debug_assert_eq!(registered, id);
        Ok(ServerFn {
            cluster: self.id,
            id,
            name: name.to_string(),
        })
    }

    /// Runs server function `f` on every shard with `args` and returns the shards'
    /// results combined by its reduction (see [`register_function`](Self::register_function)).
    ///
    /// A collective between runs: every process calls it alike, with the same
    /// arguments, and gets the same result. Rows the function writes are what every
    /// worker reads in the next run. A shard's error or panic is an
    /// [`Error::ServerFunction`] naming the lowest such shard, on every process; the
    /// cluster goes on (rows a failed call wrote before it failed stay written).
    pub fn call(&mut self, f: &ServerFn, args: &[f64]) -> Result<Vec<f64>> {
        self.check()?;
        self.refuse_with_backups("a server function's call")?;
        let registered = match self.functions.get(f.id) {
            Some(r) if f.cluster == self.id => r,
            _ => {
                return Err(Error::config(
                    "call",
                    format!("server function '{}' is not one of this cluster's", f.name),
                ))
            }
        };
        self.functions.set_placement(self.shared.placement());
        let rank = self.shared.process;
        let shards = self.shared.world.shards_of(rank);
        for shard in shards.clone() {
            self.send(
                shard as usize,
                ToShard::Call {
                    from: rank,
                    function: f.id,
                    args: args.to_vec(),
                },
            )?;
        }
        let mine = self.shared.await_called(shards.len())?;
        let bytes = bincode::serde::encode_to_vec(&mine, GATHER)
            .map_err(|e| Error::failed("server function", e))?;
        let parts = self.all_gather_bytes(&bytes)?;
        let mut answers: Vec<Called> = Vec::with_capacity(self.shared.world.total_shards());
        for (p, part) in parts.iter().enumerate() {
            let (called, _): (Vec<Called>, usize) = bincode::serde::decode_from_slice(part, GATHER)
                .map_err(|e| Error::failed("server function", format!("process {p} sent {e}")))?;
            answers.extend(called);
        }
        answers.sort_by_key(|c| c.shard);
        if answers.iter().any(|c| c.wrote) {
            self.drop_row_copies();
        }
        let mut results = Vec::with_capacity(answers.len());
        for c in answers {
            match c.result {
                Ok(r) => results.push(r),
                Err(message) => {
                    return Err(Error::ServerFunction {
                        function: f.name.clone(),
                        shard: c.shard as usize,
                        message,
                    })
                }
            }
        }
        registered.reduce.fold(&f.name, results)
    }

    /// Drops this process's copies of rows (its caches, its arena's chunks and its
    /// workers' held rows) after rows changed between runs: the next reads fetch them.
    pub(super) fn drop_row_copies(&mut self) {
        self.shared.forget_rows();
        self.unbuild_workers();
        self.runs.sets += 1;
    }

    /// Turns the workers' built specialized state back into their tapes: the next run
    /// builds it anew (from the arena's current rows, under the current staleness).
    pub(super) fn unbuild_workers(&mut self) {
        for kept in &self.spec.kept {
            let mut kept = lock(kept);
            *kept = match std::mem::take(&mut *kept) {
                KeptState::Built(sp) => {
                    let (arena, tape) = sp.into_tape();
                    KeptState::Tape(arena, tape)
                }
                other => other,
            };
        }
    }
}
