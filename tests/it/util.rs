//! Helpers shared by the integration tests.

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on its own thread and fails the test if it has not returned within `secs`:
/// a hang becomes a test failure instead of a stuck CI run.
pub fn within<R: Send + 'static>(secs: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {secs} s (hang)"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test body panicked"),
    }
}

/// Runs `body` on `processes` processes' clusters joined over TCP on loopback (each
/// started by `Cluster::start` with a `Membership`, on its own thread); returns the
/// results in rank order. Panics (naming the rank) if any fails.
pub fn over_tcp<R: Send>(
    config: iterstore::Config,
    processes: usize,
    body: impl Fn(&mut iterstore::Cluster) -> iterstore::Result<R> + Sync,
) -> Vec<R> {
    over_tcp_results(config, processes, body)
        .into_iter()
        .enumerate()
        .map(|(rank, r)| r.unwrap_or_else(|e| panic!("process {rank}: {e}")))
        .collect()
}

/// [`over_tcp`] returning each process's result (start, `body`, shutdown) in rank order
/// instead of panicking on an error; panics only if a process's thread panicked.
pub fn over_tcp_results<R: Send>(
    config: iterstore::Config,
    processes: usize,
    body: impl Fn(&mut iterstore::Cluster) -> iterstore::Result<R> + Sync,
) -> Vec<iterstore::Result<R>> {
    over_tcp_each(|_| config.clone(), processes, body)
}

/// [`over_tcp_results`] with process `rank` started with `config(rank)`.
pub fn over_tcp_each<R: Send>(
    config: impl Fn(usize) -> iterstore::Config,
    processes: usize,
    body: impl Fn(&mut iterstore::Cluster) -> iterstore::Result<R> + Sync,
) -> Vec<iterstore::Result<R>> {
    let hosts = free_addrs(processes);
    let secret = iterstore::deploy::Secret::new(b"a test secret of enough bytes".to_vec()).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..processes)
            .map(|rank| {
                let m = iterstore::deploy::Membership::new(rank, hosts.clone(), secret.clone());
                let config = config(rank).with_membership(m);
                let body = &body;
                s.spawn(move || {
                    let mut cluster = iterstore::Cluster::start(config)?;
                    let r = body(&mut cluster)?;
                    cluster.shutdown()?;
                    Ok::<R, iterstore::Error>(r)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| match h.join() {
                Ok(r) => r,
                Err(_) => panic!("process {rank} panicked"),
            })
            .collect()
    })
}

/// `n` distinct loopback addresses with ports free right now.
pub fn free_addrs(n: usize) -> Vec<std::net::SocketAddr> {
    iterstore::deploy::loopback_hosts(n).unwrap()
}

/// A fresh directory under the system's temporary directory, removed when dropped.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// A fresh directory whose name contains `name`.
    pub fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("iterstore-it-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
