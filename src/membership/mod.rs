//! [`Membership`]: how a process joins a cluster of processes over TCP — its rank, every
//! rank's address, the shared secret and the time limits — read from a hosts file, from
//! the environment of a common launcher, or built directly.
//!
//! A hosts file has one `rank host:port` line per process (ranks `0..N`, each once; `#`
//! starts a comment). The rank and world size can come from Slurm (`SLURM_PROCID`,
//! `SLURM_NTASKS`), Open MPI (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`) or the
//! `RANK`/`WORLD_SIZE` convention. Without a hosts file,
//! [`Membership::from_launcher_env`] reads every rank's address from the launcher's
//! environment too (`launcher`; Slurm's node lists: `hostlist`, `slurm`). The secret
//! comes from a file or an environment variable — never a command-line argument, where
//! other users of the machine could read it — and is never printed.

mod hostlist;
mod launcher;
mod rendezvous;
mod slurm;

pub use hostlist::{expand_hostlist, parse_tasks_per_node, MAX_HOSTLIST_HOSTS};
pub use rendezvous::{
    rendezvous, RendezvousConfig, RENDEZVOUS_PORT_ENV, RENDEZVOUS_TIMEOUT, RENDEZVOUS_TIMEOUT_ENV,
};
pub use slurm::{BASE_PORT_ENV, DEFAULT_BASE_PORT};

use crate::error::{warn_visible, Error, Result};
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

/// How long a process waits at shutdown for the others to leave its shards, unless
/// [`Membership::shutdown_timeout`] says otherwise.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(60);

/// The environment variable [`Secret::from_env`] reads by default.
pub const SECRET_ENV: &str = "ITERSTORE_SECRET";

/// The least [`Membership::send_queue_bytes`] accepted: below it, the ordinary burst of a
/// shard's replies to a healthy peer can pass the hard bound (four times the queue) and
/// that peer is declared lost as too slow (a 1 KiB queue failed a two-process MF run).
pub const MIN_SEND_QUEUE_BYTES: usize = 1 << 20;

/// Largest secret file read: a secret is a line of a few dozen bytes.
const MAX_SECRET_FILE_BYTES: u64 = 4 << 10;

/// Largest hosts file read: a line per process, 1 MiB is tens of thousands of them.
const MAX_HOSTS_FILE_BYTES: u64 = 1 << 20;

/// How long a secret or hosts file that is a pipe may take to deliver its bytes.
const PIPE_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The bytes of the small file `path` (the `what` setting's) and its permission bits:
/// refused, naming the file, if larger than `limit` bytes (read no further), if it is
/// neither a regular file nor a pipe (`/dev/zero`, a directory), or if a pipe has not
/// delivered its bytes within [`PIPE_READ_TIMEOUT`]. Opened without blocking, so a FIFO
/// with no writer is an empty file, not a wait without end.
fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<(Vec<u8>, u32)> {
    use std::io::{ErrorKind, Read};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
    let fail = |why: String| Error::config(what, format!("{}: {why}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| fail(format!("cannot read it: {e}")))?;
    let kind = meta.file_type();
    if !(kind.is_file() || kind.is_fifo()) {
        return Err(fail("not a regular file or a pipe".into()));
    }
    let deadline = std::time::Instant::now() + PIPE_READ_TIMEOUT;
    let mut bytes = Vec::new();
    let mut reader = file.take(limit + 1);
    loop {
        let mut chunk = [0u8; 4096];
        match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if std::time::Instant::now() >= deadline {
                    return Err(fail(format!(
                        "the pipe sent nothing more for {} s",
                        PIPE_READ_TIMEOUT.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(fail(format!("cannot read it: {e}"))),
        }
        if bytes.len() as u64 > limit {
            return Err(fail(format!(
                "larger than {limit} bytes: is this the right file?"
            )));
        }
    }
    Ok((bytes, meta.permissions().mode()))
}

/// A shared secret that authenticates a cluster's connections (HMAC-SHA256
/// challenge–response). Its `Debug` output does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Secret {
    /// Shortest secret accepted.
    pub const MIN_LEN: usize = 16;

    /// Fewer distinct byte values than this draw a warning that the secret may be guessed
    /// (16 `a`s has one; 32 random bytes in base64 have about 28).
    pub const MIN_DISTINCT_BYTES: usize = 8;

    /// A secret of these bytes (at least [`Secret::MIN_LEN`]).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Secret> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_LEN {
            return Err(Error::config(
                "secret",
                format!(
                    "{} bytes is too short; use at least {} (e.g. `head -c 32 /dev/urandom | base64`)",
                    bytes.len(),
                    Self::MIN_LEN
                ),
            ));
        }
        let distinct = bytes
            .iter()
            .fold([false; 256], |mut seen, &b| {
                seen[usize::from(b)] = true;
                seen
            })
            .iter()
            .filter(|&&seen| seen)
            .count();
        if distinct < Self::MIN_DISTINCT_BYTES {
            warn_visible(&format!(
                "the secret has only {distinct} distinct byte values: it may be guessed (use e.g. `head -c 32 /dev/urandom | base64`)"
            ));
        }
        Ok(Secret(bytes))
    }

    /// The secret in the file `path` (surrounding whitespace removed).
    pub fn from_file(path: &Path) -> Result<Secret> {
        let (text, mode) = read_bounded(path, MAX_SECRET_FILE_BYTES, "secret")?;
        let secret = Secret::new(text.trim_ascii().to_vec())
            .map_err(|e| Error::config("secret", format!("{}: {e}", path.display())))?;
        if mode & 0o077 != 0 {
            warn_visible(&format!(
                "the secret file {} can be read by other users (mode {:o}): anyone who can read it can join the cluster; chmod 600 it",
                path.display(),
                mode & 0o777
            ));
        }
        Ok(secret)
    }

    /// The bytes (for the handshake).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The secret in the environment variable `var` ([`SECRET_ENV`] by convention).
    pub fn from_env(var: &str) -> Result<Secret> {
        let value = std::env::var_os(var).ok_or_else(|| {
            Error::config("secret", format!("environment variable {var} is not set"))
        })?;
        Secret::new(value.as_encoded_bytes().trim_ascii().to_vec())
            .map_err(|e| Error::config("secret", format!("{var}: {e}")))
    }
}

/// How this process joins a cluster of processes over TCP (see the module docs). With
/// `Config::membership` set, [`Cluster::start`](crate::Cluster::start) connects to every
/// other process, authenticates, and runs as rank `rank` of `hosts.len()` processes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Membership {
    /// This process's rank, `0..hosts.len()`.
    pub rank: usize,
    /// Every rank's address; this process listens on `hosts[rank]`.
    pub hosts: Vec<SocketAddr>,
    /// The shared secret.
    pub secret: Secret,
    /// Start-up: every other process must be connected and authenticated within this.
    pub connect_timeout: Duration,
    /// A connection that is idle this long sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// A peer silent this long is lost, and the cluster fails naming it.
    pub heartbeat_timeout: Duration,
    /// Bytes queued for one peer before this process's workers wait for it to read
    /// (backpressure): the memory a slow reader can hold here, per peer. Shards' replies
    /// never wait; a peer whose queue they push past four times this is lost. At least
    /// [`MIN_SEND_QUEUE_BYTES`].
    pub send_queue_bytes: usize,
    /// At shutdown, how long this process's shards keep serving the others before it
    /// stops them anyway and reports which processes had not left.
    pub shutdown_timeout: Duration,
}

impl Membership {
    /// Rank `rank` of a cluster at `hosts`, with default time limits (connect within
    /// 30 s; heartbeats every 500 ms; a peer silent for 5 s is lost) and 64 MiB of
    /// outbound queue per peer; shards wait [`SHUTDOWN_TIMEOUT`]
    /// at shutdown for the others to leave.
    pub fn new(rank: usize, hosts: Vec<SocketAddr>, secret: Secret) -> Membership {
        Membership {
            rank,
            hosts,
            secret,
            connect_timeout: Duration::from_secs(30),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_timeout: Duration::from_secs(5),
            send_queue_bytes: 64 << 20,
            shutdown_timeout: SHUTDOWN_TIMEOUT,
        }
    }

    /// Rank `rank` of the cluster described by the hosts file `path`.
    pub fn from_hosts_file(path: &Path, rank: usize, secret: Secret) -> Result<Membership> {
        let (bytes, _) = read_bounded(path, MAX_HOSTS_FILE_BYTES, "hosts")?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::config("hosts", format!("{}: not UTF-8 text", path.display())))?;
        let hosts = parse_hosts(&text)
            .map_err(|e| Error::config("hosts", format!("{}:{e}", path.display())))?;
        Ok(Membership::new(rank, hosts, secret))
    }

    /// Checks the membership, naming the offending field.
    pub fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::config("hosts", "no hosts"));
        }
        if self.rank >= self.hosts.len() {
            return Err(Error::config(
                "rank",
                format!(
                    "{} is outside 0..{} (the hosts)",
                    self.rank,
                    self.hosts.len()
                ),
            ));
        }
        for (i, a) in self.hosts.iter().enumerate() {
            if let Some(j) = self.hosts[..i].iter().position(|b| b == a) {
                return Err(Error::config(
                    "hosts",
                    format!("ranks {j} and {i} both have address {a}"),
                ));
            }
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_timeout <= self.heartbeat_interval {
            return Err(Error::config(
                "heartbeat_timeout",
                "must be longer than a non-zero heartbeat_interval",
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(Error::config("connect_timeout", "must not be zero"));
        }
        if self.shutdown_timeout.is_zero() {
            return Err(Error::config("shutdown_timeout", "must not be zero"));
        }
        if self.send_queue_bytes < MIN_SEND_QUEUE_BYTES {
            return Err(Error::config(
                "send_queue_bytes",
                format!(
                    "{} bytes is below the least that works, {MIN_SEND_QUEUE_BYTES} (1 MiB): a healthy peer's burst of replies would be taken for a slow reader",
                    self.send_queue_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// `n` distinct addresses on 127.0.0.1 whose ports are free now (bound together, read and
/// released), for a cluster of `n` processes on this machine: launchers, tests and
/// benchmarks. Another program may take a port before the cluster binds it.
pub fn loopback_hosts(n: usize) -> std::io::Result<Vec<SocketAddr>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(std::net::TcpListener::local_addr)
        .collect()
}

/// Parses a hosts file's text: `rank host:port` lines. Errors name the line.
pub fn parse_hosts(text: &str) -> std::result::Result<Vec<SocketAddr>, String> {
    let mut hosts: Vec<Option<SocketAddr>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(rank), Some(addr), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(format!("{n}: expected `rank host:port`, found {line:?}"));
        };
        let rank: usize = rank
            .parse()
            .map_err(|_| format!("{n}: rank {rank:?} is not a non-negative integer"))?;
        if rank >= 65_536 {
            return Err(format!("{n}: rank {rank} is too large"));
        }
        let resolved = addr
            .to_socket_addrs()
            .map_err(|e| format!("{n}: cannot resolve {addr:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("{n}: {addr:?} resolves to no address"))?;
        if hosts.len() <= rank {
            hosts.resize(rank + 1, None);
        }
        if hosts[rank].is_some() {
            return Err(format!("{n}: rank {rank} is listed twice"));
        }
        hosts[rank] = Some(resolved);
    }
    if hosts.is_empty() {
        return Err("0: no `rank host:port` lines".into());
    }
    hosts
        .iter()
        .enumerate()
        .map(|(r, a)| a.ok_or_else(|| format!("0: rank {r} is missing (ranks must be 0..N)")))
        .collect()
}

/// The rank and world size given by a launcher's environment: Slurm, Open MPI, or
/// `RANK`/`WORLD_SIZE`, in that order; `None` if none is set. A malformed value is an
/// error naming the variable.
pub fn rank_from_env() -> Result<Option<(usize, usize)>> {
    rank_from(|k| std::env::var(k).ok())
}

fn rank_from(get: impl Fn(&str) -> Option<String>) -> Result<Option<(usize, usize)>> {
    for (rank, size) in [
        ("SLURM_PROCID", "SLURM_NTASKS"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("RANK", "WORLD_SIZE"),
    ] {
        let (Some(r), Some(s)) = (get(rank), get(size)) else {
            continue;
        };
        let num = |var: &str, v: &str| {
            v.trim().parse::<usize>().map_err(|_| {
                Error::config("rank", format!("{var}={v:?} is not a non-negative integer"))
            })
        };
        let (r, s) = (num(rank, &r)?, num(size, &s)?);
        if r >= s {
            return Err(Error::config(
                "rank",
                format!("{rank}={r} is not below {size}={s}"),
            ));
        }
        return Ok(Some((r, s)));
    }
    Ok(None)
}

/// A launcher's environment given as `(variable, value)` pairs, for tests.
#[cfg(test)]
pub(crate) fn env_of<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

/// A secret for tests.
#[cfg(test)]
pub(crate) fn test_secret() -> Secret {
    Secret(b"0123456789abcdef0123456789abcdef".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_files_are_parsed_and_bad_lines_named() {
        let hosts =
            parse_hosts("# cluster\n1 127.0.0.1:7001\n0 127.0.0.1:7000  # first\n\n").unwrap();
        assert_eq!(hosts[0].port(), 7000);
        assert_eq!(hosts[1].port(), 7001);
        assert!(parse_hosts("0 127.0.0.1:1\n0 127.0.0.1:2")
            .unwrap_err()
            .starts_with("2: rank 0 is listed twice"));
        assert!(parse_hosts("1 127.0.0.1:1")
            .unwrap_err()
            .contains("rank 0 is missing"));
        assert!(parse_hosts("x 127.0.0.1:1")
            .unwrap_err()
            .starts_with("1: rank \"x\""));
        assert!(parse_hosts("0 nowhere")
            .unwrap_err()
            .starts_with("1: cannot resolve"));
        assert!(parse_hosts("0").unwrap_err().starts_with("1: expected"));
        assert!(parse_hosts("").is_err());
    }

    #[test]
    fn launcher_environments_give_rank_and_size() {
        let env = env_of;
        assert_eq!(rank_from(env(&[])).unwrap(), None);
        assert_eq!(
            rank_from(env(&[
                ("SLURM_PROCID", "2"),
                ("SLURM_NTASKS", "4"),
                ("RANK", "0"),
                ("WORLD_SIZE", "9")
            ]))
            .unwrap(),
            Some((2, 4))
        );
        assert_eq!(
            rank_from(env(&[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "2")
            ]))
            .unwrap(),
            Some((1, 2))
        );
        assert_eq!(
            rank_from(env(&[("RANK", "0"), ("WORLD_SIZE", "1")])).unwrap(),
            Some((0, 1))
        );
        let bad = rank_from(env(&[("RANK", "3"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(bad.to_string().contains("RANK=3"), "{bad}");
        assert!(rank_from(env(&[("RANK", "a"), ("WORLD_SIZE", "2")])).is_err());
    }

    #[test]
    fn secrets_are_checked_and_never_shown() {
        assert!(Secret::new(b"short".to_vec()).is_err());
        let s = Secret::new(b"0123456789abcdef-very-secret".to_vec()).unwrap();
        assert!(!format!("{s:?}").contains("secret"));
        let m = Membership::new(0, vec!["127.0.0.1:1".parse().unwrap()], s.clone());
        assert!(!format!("{m:?}").contains("very"));
        assert!(m.validate().is_ok());
        let mut bad = Membership::new(2, m.hosts.clone(), s);
        assert!(bad.validate().unwrap_err().to_string().contains("rank"));
        bad.rank = 0;
        bad.hosts.push(bad.hosts[0]);
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("both have address"));
    }

    #[test]
    fn loopback_hosts_are_distinct_free_ports() {
        let hosts = loopback_hosts(4).unwrap();
        let mut ports: Vec<u16> = hosts.iter().map(SocketAddr::port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 4);
        assert!(hosts.iter().all(|a| a.ip().is_loopback() && a.port() > 0));
    }
}
