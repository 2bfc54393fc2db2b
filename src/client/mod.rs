//! The client side of one process: the state its worker threads share (process cache,
//! outstanding fetches, table list, health) and the communication thread that turns
//! server replies into cache entries.
//!
//! It knows the protocol and the SSP rules; it does not know how messages travel, nor what
//! a server does with them.

mod arena;
mod cache;
mod fetch;

pub(crate) use arena::{ArenaWords, ProcessArena};
pub(crate) use cache::{CacheRef, ProcessCache};
pub(crate) use fetch::Fetcher;

use crate::consistency::Clock;
use crate::msg::{Msg, ProcessId};
use crate::transport::{Inbox, Transport};
use crate::{AlignedBuf, Config, Error, Result, RowKey, TableMeta};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a waiting worker sleeps before re-checking the cluster's health.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(50);

/// State shared by a process's worker threads and its communication thread.
pub(crate) struct ClientShared {
    pub(crate) process: ProcessId,
    pub(crate) config: Config,
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) tables: RwLock<Vec<TableMeta>>,
    pub(crate) cache: ProcessCache,
    pub(crate) fetcher: Fetcher,
    /// The newest data clock any reply has carried (the servers' minimum clock as far as
    /// this process knows). Asynchronous reads require at least this.
    pub(crate) known_min: AtomicU64,
    /// The specialized process cache, once the store has a plan.
    arena: RwLock<Option<Arc<ProcessArena>>>,
    failure: Mutex<Option<Error>>,
    failed: AtomicBool,
    dumps: Mutex<Vec<Vec<(RowKey, AlignedBuf)>>>,
}

impl ClientShared {
    pub(crate) fn new(process: ProcessId, config: Config, transport: Arc<dyn Transport>) -> Self {
        ClientShared {
            process,
            cache: ProcessCache::new(config.cache_capacity),
            config,
            transport,
            tables: RwLock::new(Vec::new()),
            fetcher: Fetcher::default(),
            known_min: AtomicU64::new(0),
            arena: RwLock::new(None),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            dumps: Mutex::new(Vec::new()),
        }
    }

    /// The specialized process cache, if any.
    pub(crate) fn arena(&self) -> Option<Arc<ProcessArena>> {
        self.arena
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Installs (or removes) the specialized process cache; the generic cache is emptied.
    pub(crate) fn set_arena(&self, arena: Option<Arc<ProcessArena>>) {
        *self.arena.write().unwrap_or_else(PoisonError::into_inner) = arena;
        self.cache.clear();
    }

    /// Records the first failure; every later wait returns it.
    pub(crate) fn fail(&self, error: Error) {
        let mut f = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if f.is_none() {
            *f = Some(error);
        }
        self.failed.store(true, Ordering::Release);
        self.fetcher.notify();
    }

    /// `Err` if the cluster has failed or shut down.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let f = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        Err(match &*f {
            Some(Error::Failed { component, message }) => Error::failed(component, message),
            _ => Error::ShutDown,
        })
    }

    /// Collects `shards` answers to `Dump` requests already sent.
    pub(crate) fn collect_dumps(&self, shards: usize) -> Result<Vec<(RowKey, AlignedBuf)>> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let generation = self.fetcher.generation();
            {
                let mut d = self.dumps.lock().unwrap_or_else(PoisonError::into_inner);
                if d.len() >= shards {
                    return Ok(d.drain(..).flatten().collect());
                }
            }
            self.check()?;
            if Instant::now() > deadline {
                return Err(Error::failed(
                    "table snapshot",
                    "servers did not answer in 60 s",
                ));
            }
            self.fetcher.wait(generation, WAIT_SLICE);
        }
    }

    fn on_rows(&self, data_clock: Clock, rows: Vec<(RowKey, AlignedBuf)>) {
        self.known_min.fetch_max(data_clock, Ordering::AcqRel);
        let keys: Vec<RowKey> = rows.iter().map(|(k, _)| *k).collect();
        for (key, data) in rows {
            self.cache.install(key, data, data_clock);
        }
        self.fetcher.answered(keys.into_iter(), data_clock);
        self.fetcher.notify();
    }
}

/// Runs the communication thread of `shared`'s process, bound to the CPUs `pus` when
/// given, until `Shutdown` or a closed inbox.
pub(crate) fn spawn_comm(
    shared: Arc<ClientShared>,
    inbox: Inbox,
    pus: Option<Vec<u32>>,
) -> std::io::Result<JoinHandle<()>> {
    let name = format!("iterstore-client-{}", shared.process);
    crate::topology::bind::spawn_bound(name, pus, move || {
        loop {
            match inbox.recv() {
                Ok(Msg::Rows {
                    data_clock, rows, ..
                }) => shared.on_rows(data_clock, rows),
                Ok(Msg::SlabRows {
                    shard,
                    plan,
                    chunk,
                    data_clock,
                    bytes,
                }) => {
                    shared.known_min.fetch_max(data_clock, Ordering::AcqRel);
                    // Bytes laid out for another plan than the current one are stale
                    // replies to requests made before a re-plan: drop them.
                    let written = match shared.arena() {
                        Some(arena) if arena.id == plan => {
                            arena.write_chunk(shard, chunk, data_clock, bytes.as_bytes())
                        }
                        _ => Ok(()),
                    };
                    if let Err(e) = written {
                        shared.fail(e);
                    }
                    shared.fetcher.notify();
                }
                Ok(Msg::MinClock { clock, .. }) => {
                    shared.known_min.fetch_max(clock, Ordering::AcqRel);
                }
                Ok(Msg::DumpRows { rows, .. }) => {
                    shared
                        .dumps
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(rows);
                    shared.fetcher.notify();
                }
                Ok(Msg::Rejected { shard, reason }) => {
                    shared.fail(Error::failed(format!("server shard {shard}"), reason));
                }
                Ok(Msg::Shutdown) => break,
                Ok(other) => shared.fail(Error::failed(
                    "client communication",
                    format!("unexpected message {other:?}"),
                )),
                Err(_) => {
                    shared.fail(Error::failed("client communication", "inbox closed"));
                    break;
                }
            }
        }
        shared.fail(Error::ShutDown);
    })
}
