//! [`launch_local`]: one program, run as P processes of one cluster on this machine — the
//! library's own launcher, as `torchrun` or `mpirun -np P` are for theirs.
//!
//! The first call, in the program started by the user, starts P copies of the program
//! (the same executable and arguments) with an environment that names each copy's rank,
//! every rank's loopback address (ports free at that moment) and a fresh random secret,
//! then waits for them and returns how each ended ([`Launched::Done`]). The same call in a
//! copy returns its [`Membership`] ([`Launched::Member`]), to start its [`Cluster`] with.
//! Copies die with the launcher (Linux: `PR_SET_PDEATHSIG`); once one fails, the others
//! get [`LAUNCH_GRACE`] to notice the lost peer and end on their own, then are killed. Nothing
//! is written to disk: the secret reaches the copies in their environment only.
//!
//! [`Cluster`]: crate::cluster::Cluster

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::membership::{loopback_hosts, Membership, Secret, SECRET_ENV};

/// The environment variable naming a launched copy's rank (set by [`launch_local`]).
pub const LAUNCH_RANK_ENV: &str = "ITERSTORE_LAUNCH_RANK";

/// The environment variable listing every rank's address, comma-separated, in a launched
/// copy (set by [`launch_local`]).
pub const LAUNCH_HOSTS_ENV: &str = "ITERSTORE_LAUNCH_HOSTS";

/// How long the other copies get to end on their own once one has failed.
pub const LAUNCH_GRACE: Duration = Duration::from_secs(20);

/// The most copies [`launch_local`] starts (they share this machine's cores).
pub const MAX_LOCAL_PROCESSES: usize = 64;

/// What [`launch_local`] returns where it is called.
#[derive(Debug)]
pub enum Launched {
    /// In a launched copy: its membership of the cluster (rank, hosts, secret).
    Member(Membership),
    /// In the launcher, once every copy has ended: how each ended, in rank order.
    Done(Vec<ExitStatus>),
}

impl Launched {
    /// In the launcher: whether every copy succeeded (`true` in a copy).
    pub fn succeeded(&self) -> bool {
        match self {
            Launched::Member(_) => true,
            Launched::Done(statuses) => statuses.iter().all(ExitStatus::success),
        }
    }
}

/// Runs this program as `processes` copies that form one cluster on 127.0.0.1, or, in
/// such a copy, returns its membership (see the module docs). Refuses 0 or more than
/// [`MAX_LOCAL_PROCESSES`] copies, and a launched copy's environment that does not
/// describe a cluster (naming what is wrong).
///
/// ```no_run
/// use iterstore::{Cluster, Config};
/// use iterstore::deploy::{launch_local, Launched};
///
/// # fn main() -> iterstore::Result<()> {
/// match launch_local(2)? {
///     Launched::Done(statuses) => println!("the copies ended: {statuses:?}"),
///     Launched::Member(membership) => {
///         let mut cluster = Cluster::start(Config::new(1).with_membership(membership))?;
///         // ... the same tables and runs in every copy ...
///         cluster.shutdown()?;
///     }
/// }
/// # Ok(())
/// # }
/// ```
pub fn launch_local(processes: usize) -> Result<Launched> {
    if let Some(rank) = std::env::var_os(LAUNCH_RANK_ENV) {
        let hosts = std::env::var(LAUNCH_HOSTS_ENV).ok();
        let secret = Secret::from_env(SECRET_ENV)?;
        return member(&rank.to_string_lossy(), hosts.as_deref(), processes, secret)
            .map(Launched::Member);
    }
    if processes == 0 || processes > MAX_LOCAL_PROCESSES {
        return Err(Error::config(
            "processes",
            format!("{processes}: launch 1 to {MAX_LOCAL_PROCESSES} local processes"),
        ));
    }
    let hosts = loopback_hosts(processes).map_err(|e| {
        Error::failed(
            "launching local processes",
            format!("reserving {processes} local ports: {e}"),
        )
    })?;
    let list: Vec<String> = hosts.iter().map(ToString::to_string).collect();
    let secret = fresh_secret()?;
    let exe = std::env::current_exe().map_err(|e| {
        Error::failed(
            "launching local processes",
            format!("this program's path: {e}"),
        )
    })?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let mut children = Vec::with_capacity(processes);
    for rank in 0..processes {
        let mut cmd = Command::new(&exe);
        cmd.args(&args)
            .env(LAUNCH_RANK_ENV, rank.to_string())
            .env(LAUNCH_HOSTS_ENV, list.join(","))
            .env(SECRET_ENV, &secret);
        die_with_parent(&mut cmd);
        match cmd.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                stop(&mut children);
                return Err(Error::failed(
                    "launching local processes",
                    format!("starting rank {rank} ({}): {e}", exe.display()),
                ));
            }
        }
    }
    Ok(Launched::Done(wait_all(children)))
}

/// A launched copy's membership from its environment's `rank` and `hosts`.
fn member(rank: &str, hosts: Option<&str>, processes: usize, secret: Secret) -> Result<Membership> {
    let bad = |why: String| Error::config("processes", format!("launched copy: {why}"));
    let rank: usize = rank
        .parse()
        .map_err(|_| bad(format!("{LAUNCH_RANK_ENV}={rank:?} is not a rank")))?;
    let hosts = hosts.ok_or_else(|| bad(format!("{LAUNCH_HOSTS_ENV} is not set")))?;
    let hosts = hosts
        .split(',')
        .map(|a| {
            a.parse()
                .map_err(|_| bad(format!("{a:?} in {LAUNCH_HOSTS_ENV} is not an address")))
        })
        .collect::<Result<Vec<std::net::SocketAddr>>>()?;
    if hosts.len() != processes {
        return Err(bad(format!(
            "launched as one of {} processes, but this call asks for {processes}",
            hosts.len()
        )));
    }
    let m = Membership::new(rank, hosts, secret);
    m.validate()?;
    Ok(m)
}

/// A fresh cluster secret as text: 32 bytes of the operating system's randomness,
/// hex-encoded (64 characters) — what [`launch_local`] hands its copies, and what a
/// launcher of one's own may write to a secret file (mode 0600) for
/// [`Secret::from_file`].
pub fn fresh_secret() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| {
        Error::failed(
            "launching local processes",
            format!("no randomness for a secret: {e}"),
        )
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Makes the process `cmd` starts receive SIGKILL when this one dies (Linux; elsewhere
/// nothing), also when this one died before the child could ask: what [`launch_local`]
/// does for its copies, for a launcher of one's own.
pub fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let launcher = std::process::id();
        // SAFETY: the closure runs in the forked child before exec, where only
        // async-signal-safe calls are allowed: prctl and getppid, no allocation.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() as u32 != launcher {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

/// Waits for every child; once one has failed, the others get [`LAUNCH_GRACE`], then are
/// killed. Their exit statuses, in rank order.
fn wait_all(mut children: Vec<Child>) -> Vec<ExitStatus> {
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut failed_at: Option<Instant> = None;
    while statuses.iter().any(Option::is_none) {
        for (child, status) in children.iter_mut().zip(statuses.iter_mut()) {
            if status.is_none() {
                if let Ok(Some(s)) = child.try_wait() {
                    if !s.success() && failed_at.is_none() {
                        failed_at = Some(Instant::now());
                    }
                    *status = Some(s);
                }
            }
        }
        if failed_at.is_some_and(|t| t.elapsed() > LAUNCH_GRACE) {
            stop(&mut children);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    statuses.into_iter().flatten().collect()
}

/// Kills and reaps every child still running.
fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap()
    }

    #[test]
    fn a_copy_reads_its_membership_and_a_bad_environment_is_named() {
        let hosts = "127.0.0.1:4000,127.0.0.1:4001";
        let m = member("1", Some(hosts), 2, secret()).unwrap();
        assert_eq!((m.rank, m.hosts.len()), (1, 2));
        let err = |r: Result<Membership>| r.unwrap_err().to_string();
        assert!(err(member("x", Some(hosts), 2, secret())).contains("is not a rank"));
        assert!(err(member("0", None, 2, secret())).contains("ITERSTORE_LAUNCH_HOSTS is not set"));
        assert!(err(member("0", Some("nowhere"), 2, secret())).contains("not an address"));
        assert!(err(member("0", Some(hosts), 3, secret())).contains("one of 2 processes"));
        assert!(err(member("2", Some(hosts), 2, secret())).contains("rank"));
    }

    #[test]
    fn the_launcher_refuses_no_processes_or_too_many() {
        for n in [0, MAX_LOCAL_PROCESSES + 1] {
            assert!(std::env::var_os(LAUNCH_RANK_ENV).is_none());
            let e = launch_local(n).unwrap_err().to_string();
            assert!(e.contains("local processes"), "{e}");
        }
        assert_eq!(fresh_secret().unwrap().len(), 64);
    }
}
