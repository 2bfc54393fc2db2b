//! Small synchronisation pieces shared by the process's threads: [`lock`] (a mutex guard
//! that survives poisoning) and [`Signal`] (a wake-up signal with a generation).

mod signal;

pub(crate) use signal::Signal;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`; a poisoned lock (a thread panicked while holding it, which is reported
/// where it happened: a worker's run, a shard's rejection) still yields the value.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
