//! [`Membership::from_launcher_env`]: joining a cluster with no hosts file, from what a
//! launcher put in the environment. This module only decides which launcher's description
//! applies and reads its settings; the Slurm layout is `slurm`'s, the meeting at
//! `MASTER_ADDR` is `rendezvous`'s.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::rendezvous::{
    rendezvous, RendezvousConfig, RENDEZVOUS_PORT_ENV, RENDEZVOUS_TIMEOUT_ENV,
};
use super::{slurm, Membership, Secret};
use crate::error::{Error, Result};

/// The rank and world-size variables of the launchers that give `MASTER_ADDR`, innermost
/// first (`torchrun` inside `srun` numbers its own workers).
const RANK_VARS: [(&str, &str); 3] = [
    ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Longest rendezvous timeout accepted from the environment, in seconds.
const MAX_TIMEOUT_SECS: u64 = 24 * 3600;

/// How the environment is read: a variable's value, if set (the process's environment, or
/// a table in tests).
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

impl Membership {
    /// This process's membership of the cluster its launcher started, read from the
    /// environment, with no hosts file:
    ///
    /// - **Slurm** (`srun`): the nodes from `SLURM_JOB_NODELIST` (or the step's
    ///   `SLURM_STEP_NODELIST`, or `SLURM_NODELIST`), the tasks on each from
    ///   `SLURM_TASKS_PER_NODE`, the rank from `SLURM_PROCID`; tasks laid out as Slurm's
    ///   default block distribution places them, each listening on its node at port
    ///   `ITERSTORE_PORT` (default 29600) plus its index on the node. Taken when
    ///   `SLURM_PROCID` is set and no launcher inside the step (`torchrun`, `mpirun`)
    ///   numbered this process otherwise.
    /// - **A rendezvous** (`torchrun`, or `mpirun` with `MASTER_ADDR` exported): rank 0's
    ///   address from `MASTER_ADDR` and `MASTER_PORT`, the rank and world size from `RANK`
    ///   and `WORLD_SIZE` (else `OMPI_COMM_WORLD_RANK` and `OMPI_COMM_WORLD_SIZE`, else
    ///   `SLURM_PROCID` and `SLURM_NTASKS`); the processes meet there ([`rendezvous`]) and
    ///   rank 0 tells each every address, each rank listening on a free port. The
    ///   rendezvous listens on `MASTER_PORT`, or on the port after it under `torchrun`
    ///   (`TORCHELASTIC_USE_AGENT_STORE=True`: its own store holds `MASTER_PORT`), or on
    ///   [`RENDEZVOUS_PORT_ENV`]; it waits [`RENDEZVOUS_TIMEOUT_ENV`] seconds (default
    ///   120) for every rank.
    ///
    /// Fails, saying what is missing, when the environment describes no cluster, and
    /// names the variable and the bad text when a value is malformed.
    ///
    /// ```no_run
    /// use iterstore::{Cluster, Config};
    /// use iterstore::deploy::{Membership, Secret};
    ///
    /// # fn main() -> iterstore::Result<()> {
    /// // Under `srun` or `torchrun`, every process runs the same program.
    /// let membership = Membership::from_launcher_env(Secret::from_env("ITERSTORE_SECRET")?)?;
    /// let mut cluster = Cluster::start(Config::new(4).with_membership(membership))?;
    /// // ... the same tables and runs in every process ...
    /// cluster.shutdown()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_launcher_env(secret: Secret) -> Result<Membership> {
        from_env(&|k: &str| std::env::var(k).ok(), &resolve_host, secret)
    }
}

/// [`Membership::from_launcher_env`] over `env`, resolving node names with `resolve`.
pub(crate) fn from_env(
    env: Env<'_>,
    resolve: &dyn Fn(&str) -> std::result::Result<IpAddr, String>,
    secret: Secret,
) -> Result<Membership> {
    if slurm_applies(env)? {
        return slurm::membership(env, resolve, secret);
    }
    if env("MASTER_ADDR").is_some() {
        return rendezvous(&rendezvous_config(env, resolve, secret)?);
    }
    Err(Error::config(
        "join",
        "the environment describes no cluster: run under srun (SLURM_JOB_NODELIST and SLURM_PROCID) or torchrun (MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE), or give a hosts file",
    ))
}

/// The rendezvous the environment describes (`MASTER_ADDR` is set).
pub(crate) fn rendezvous_config(
    env: Env<'_>,
    resolve: &dyn Fn(&str) -> std::result::Result<IpAddr, String>,
    secret: Secret,
) -> Result<RendezvousConfig> {
    let bad = |why: String| Error::config("rendezvous", why);
    let host = env("MASTER_ADDR").unwrap_or_default();
    let port = env("MASTER_PORT")
        .ok_or_else(|| bad("MASTER_ADDR is set but MASTER_PORT is not".into()))?;
    let port = port_number("MASTER_PORT", &port)?;
    let port = match env(RENDEZVOUS_PORT_ENV) {
        Some(p) => port_number(RENDEZVOUS_PORT_ENV, &p)?,
        None if env("TORCHELASTIC_USE_AGENT_STORE").as_deref() == Some("True") => {
            port.checked_add(1).ok_or_else(|| {
                bad(format!(
                    "MASTER_PORT=65535 is torchrun's; set {RENDEZVOUS_PORT_ENV} to a free port for the rendezvous"
                ))
            })?
        }
        None => port,
    };
    let ip = resolve(host.trim()).map_err(|e| bad(format!("MASTER_ADDR={host:?}: {e}")))?;
    let mut pair = None;
    for (rank, size) in RANK_VARS {
        if let Some(found) = rank_pair(env, rank, size)? {
            pair = Some(found);
            break;
        }
    }
    let (rank, world) = pair.ok_or_else(|| {
        bad("MASTER_ADDR is set but no rank is: set RANK and WORLD_SIZE (torchrun does), or run under mpirun or srun".into())
    })?;
    let mut cfg = RendezvousConfig::new(SocketAddr::new(ip, port), rank, world, secret);
    if let Some(t) = env(RENDEZVOUS_TIMEOUT_ENV) {
        cfg.timeout = match t.trim().parse::<u64>() {
            Ok(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => Duration::from_secs(s),
            _ => {
                return Err(bad(format!(
                    "{RENDEZVOUS_TIMEOUT_ENV}={t:?} is not a number of seconds from 1 to {MAX_TIMEOUT_SECS}"
                )))
            }
        };
    }
    Ok(cfg)
}

/// `value`, the variable `var`'s, as a port (1 to 65535).
fn port_number(var: &str, value: &str) -> Result<u16> {
    match value.trim().parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(Error::config(
            "rendezvous",
            format!("{var}={value:?} is not a port (1 to 65535)"),
        )),
    }
}

/// Whether Slurm's description is this process's: Slurm listed the nodes and numbered
/// this task, and no launcher started inside Slurm's task (`torchrun`, `mpirun`) numbered
/// it otherwise.
fn slurm_applies(env: Env<'_>) -> Result<bool> {
    if slurm::nodelist(env).is_none() {
        return Ok(false);
    }
    let Some(slurm) = rank_pair(env, "SLURM_PROCID", "SLURM_NTASKS")? else {
        return Ok(false);
    };
    for (rank, size) in [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("RANK", "WORLD_SIZE"),
    ] {
        if rank_pair(env, rank, size)?.is_some_and(|inner| inner != slurm) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The rank and world size in the variables `rank` and `size`, if both are set.
fn rank_pair(env: Env<'_>, rank: &str, size: &str) -> Result<Option<(usize, usize)>> {
    super::rank_from(|k| if k == rank || k == size { env(k) } else { None })
}

/// The first address `name` resolves to.
fn resolve_host(name: &str) -> std::result::Result<IpAddr, String> {
    (name, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve it: {e}"))?
        .next()
        .map(|a| a.ip())
        .ok_or_else(|| "it resolves to no address".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{env_of, test_secret as secret};

    fn join(pairs: &[(&str, &str)]) -> Result<Membership> {
        let env = env_of(pairs);
        from_env(&env, &resolve_host, secret())
    }

    const STEP: [(&str, &str); 4] = [
        ("SLURM_JOB_NODELIST", "localhost"),
        ("SLURM_TASKS_PER_NODE", "2"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
    ];

    #[test]
    fn a_slurm_step_is_joined_when_no_inner_launcher_renumbered_it() {
        let m = join(&STEP).unwrap();
        assert_eq!((m.rank, m.hosts.len()), (1, 2));
        assert_eq!(m.hosts[1].port(), slurm::DEFAULT_BASE_PORT + 1);
        // The same numbering from another launcher is no conflict.
        let mut same = STEP.to_vec();
        same.extend([("RANK", "1"), ("WORLD_SIZE", "2")]);
        assert!(join(&same).is_ok());
    }

    fn config(pairs: &[(&str, &str)]) -> Result<RendezvousConfig> {
        let env = env_of(pairs);
        rendezvous_config(&env, &resolve_host, secret())
    }

    const TORCHRUN: [(&str, &str); 4] = [
        ("MASTER_ADDR", "127.0.0.1"),
        ("MASTER_PORT", "29500"),
        ("RANK", "2"),
        ("WORLD_SIZE", "4"),
    ];

    #[test]
    fn torchrun_and_mpirun_give_a_rendezvous() {
        let c = config(&TORCHRUN).unwrap();
        assert_eq!(c.master.to_string(), "127.0.0.1:29500");
        assert_eq!((c.rank, c.world), (2, 4));
        assert_eq!(c.timeout, super::super::RENDEZVOUS_TIMEOUT);
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = TORCHRUN.to_vec();
            pairs.extend(extra);
            config(&pairs)
        };
        // torchrun's agent holds MASTER_PORT: the rendezvous takes the next one, or the
        // one asked for.
        let agent = [("TORCHELASTIC_USE_AGENT_STORE", "True")];
        assert_eq!(with(&agent).unwrap().master.port(), 29501);
        let asked = [agent[0], ("ITERSTORE_RENDEZVOUS_PORT", "4000")];
        assert_eq!(with(&asked).unwrap().master.port(), 4000);
        let t = with(&[("ITERSTORE_RENDEZVOUS_TIMEOUT", "7")]).unwrap();
        assert_eq!(t.timeout, Duration::from_secs(7));
        // Open MPI's numbering when RANK is not set; torchrun's wins over Slurm's.
        let c = config(&[
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "29500"),
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
        ])
        .unwrap();
        assert_eq!((c.rank, c.world), (1, 3));
        let both = with(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")]).unwrap();
        assert_eq!(both.rank, 2);
    }

    #[test]
    fn bad_rendezvous_settings_are_named() {
        let without = |var: &str, extra: &[(&'static str, &'static str)]| {
            let mut pairs: Vec<(&str, &str)> = TORCHRUN
                .iter()
                .filter(|(k, _)| *k != var)
                .copied()
                .collect();
            pairs.extend(extra);
            config(&pairs).unwrap_err().to_string()
        };
        let agent = ("TORCHELASTIC_USE_AGENT_STORE", "True");
        for (e, says) in [
            (without("MASTER_PORT", &[]), "MASTER_PORT is not"),
            (
                without("MASTER_PORT", &[("MASTER_PORT", "x")]),
                "MASTER_PORT=\"x\" is not a port",
            ),
            (
                without("MASTER_PORT", &[("MASTER_PORT", "0")]),
                "MASTER_PORT=\"0\"",
            ),
            (
                without("MASTER_PORT", &[("MASTER_PORT", "65535"), agent]),
                "set ITERSTORE_RENDEZVOUS_PORT",
            ),
            (
                without("", &[("ITERSTORE_RENDEZVOUS_PORT", "99999")]),
                "ITERSTORE_RENDEZVOUS_PORT=\"99999\"",
            ),
            (without("RANK", &[]), "no rank is: set RANK and WORLD_SIZE"),
            (
                without("RANK", &[("RANK", "4")]),
                "RANK=4 is not below WORLD_SIZE=4",
            ),
            (
                without("MASTER_ADDR", &[("MASTER_ADDR", "no such host!")]),
                "MASTER_ADDR=\"no such host!\"",
            ),
            (
                without("", &[("ITERSTORE_RENDEZVOUS_TIMEOUT", "0")]),
                "ITERSTORE_RENDEZVOUS_TIMEOUT=\"0\"",
            ),
            (
                without("", &[("ITERSTORE_RENDEZVOUS_TIMEOUT", "1.5")]),
                "is not a number of seconds",
            ),
        ] {
            assert!(e.contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn a_torchrun_world_of_one_joins_through_the_rendezvous() {
        let port = crate::membership::loopback_hosts(1).unwrap()[0]
            .port()
            .to_string();
        let m = join(&[
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", &port),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ])
        .unwrap();
        assert_eq!((m.rank, m.hosts.len()), (0, 1));
    }

    #[test]
    fn no_launcher_is_refused_saying_what_is_missing() {
        let e = join(&[]).unwrap_err().to_string();
        assert!(
            e.contains("describes no cluster") && e.contains("srun") && e.contains("torchrun"),
            "{e}"
        );
        // A Slurm allocation without srun's task numbering is not a Slurm step.
        let e = join(&STEP[..2]).unwrap_err().to_string();
        assert!(e.contains("describes no cluster"), "{e}");
        // torchrun inside srun numbers its workers otherwise: Slurm's list is not theirs,
        // and without MASTER_ADDR there is nothing to join.
        let mut inner = STEP.to_vec();
        inner.extend([("RANK", "3"), ("WORLD_SIZE", "8")]);
        let e = join(&inner).unwrap_err().to_string();
        assert!(e.contains("describes no cluster"), "{e}");
        // With MASTER_ADDR, torchrun's numbering meets there (nobody comes: rank 3 of 8
        // waits for rank 0 until its timeout).
        inner.extend([
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "1"),
            ("ITERSTORE_RENDEZVOUS_TIMEOUT", "1"),
        ]);
        let e = join(&inner).unwrap_err().to_string();
        assert!(
            e.contains("rendezvous at 127.0.0.1:1 failed: rank 0 did not answer"),
            "{e}"
        );
    }
}
