//! [`Membership::from_launcher_env`]: joining a cluster with no hosts file, from what a
//! launcher put in the environment. This module only decides which launcher's description
//! applies and reads the settings common to them; the Slurm layout is `slurm`'s.

use std::net::{IpAddr, ToSocketAddrs};

use super::{slurm, Membership, Secret};
use crate::error::{Error, Result};

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
    ///   `ITERSTORE_PORT` (default 29600) plus its index on the node.
    ///
    /// Fails, saying what is missing, when the environment describes no cluster, and
    /// names the variable and the bad text when a value is malformed.
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
    Err(Error::config(
        "join",
        "the environment describes no cluster: run under srun (SLURM_JOB_NODELIST and SLURM_PROCID), or give a hosts file",
    ))
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

    fn secret() -> Secret {
        Secret::new(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap()
    }

    fn join(pairs: &[(&str, &str)]) -> Result<Membership> {
        let env = |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
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

    #[test]
    fn no_launcher_is_refused_saying_what_is_missing() {
        let e = join(&[]).unwrap_err().to_string();
        assert!(
            e.contains("describes no cluster") && e.contains("srun"),
            "{e}"
        );
        // A Slurm allocation without srun's task numbering is not a Slurm step.
        let e = join(&STEP[..2]).unwrap_err().to_string();
        assert!(e.contains("describes no cluster"), "{e}");
        // torchrun inside srun numbers its workers otherwise: Slurm's list is not theirs.
        let mut inner = STEP.to_vec();
        inner.extend([("RANK", "3"), ("WORLD_SIZE", "8")]);
        let e = join(&inner).unwrap_err().to_string();
        assert!(e.contains("describes no cluster"), "{e}");
    }
}
