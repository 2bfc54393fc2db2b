//! A [`Membership`] from the environment `srun` gives each task: the nodes
//! (`SLURM_STEP_NODELIST`, else `SLURM_JOB_NODELIST`, else `SLURM_NODELIST`), the tasks on
//! each (`SLURM_STEP_TASKS_PER_NODE`, else `SLURM_TASKS_PER_NODE`) and this task's rank
//! (`SLURM_PROCID`).
//!
//! Ranks are laid out as Slurm's default block distribution places tasks: the first
//! node's tasks are ranks `0..n0`, the next node's follow, and so on. A task listens on its
//! node at [`BASE_PORT_ENV`] (default [`DEFAULT_BASE_PORT`]) plus its index on the node.
//! This task's own place is checked against `SLURM_LOCALID` and `SLURMD_NODENAME`, so a
//! step distributed otherwise (`--distribution=cyclic`) is refused rather than joined
//! with wrong addresses. Host names are resolved through the caller (the system resolver
//! in use); nothing is bound or connected here.

use std::collections::HashMap;
use std::net::IpAddr;

use super::hostlist::{expand, tasks_per_node};
use super::launcher::Env;
use super::{Membership, Secret};
use crate::error::{Error, Result};

/// The environment variable with the port of each node's first task (the others take the
/// following ports).
pub const BASE_PORT_ENV: &str = "ITERSTORE_PORT";

/// The port of each node's first task when [`BASE_PORT_ENV`] is not set.
pub const DEFAULT_BASE_PORT: u16 = 29600;

/// The variables that may list a step's nodes, most specific first.
const NODELIST_VARS: [&str; 3] = [
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
];

/// The variable with the step's node list and its value, if Slurm set one.
pub(crate) fn nodelist(env: Env<'_>) -> Option<(&'static str, String)> {
    NODELIST_VARS
        .iter()
        .find_map(|&var| env(var).map(|value| (var, value)))
}

fn fail(why: impl std::fmt::Display) -> Error {
    Error::config("slurm", why)
}

/// The first set of `vars`, with its value.
fn first_set(env: Env<'_>, vars: &[&'static str]) -> Option<(&'static str, String)> {
    vars.iter().find_map(|&var| env(var).map(|v| (var, v)))
}

/// `var`'s value as a non-negative integer, if set; an error naming it otherwise.
fn number(env: Env<'_>, var: &str) -> Result<Option<usize>> {
    env(var)
        .map(|v| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| fail(format!("{var}={v:?} is not a non-negative integer")))
        })
        .transpose()
}

/// Every rank's node and index on that node, in Slurm's block distribution.
pub(crate) fn block_layout(tasks_per_node: &[usize]) -> Vec<(usize, usize)> {
    tasks_per_node
        .iter()
        .enumerate()
        .flat_map(|(node, &n)| (0..n).map(move |local| (node, local)))
        .collect()
}

/// This task's membership of its Slurm step (see the module docs); `resolve` gives a node
/// name's address.
pub(crate) fn membership(
    env: Env<'_>,
    resolve: &dyn Fn(&str) -> std::result::Result<IpAddr, String>,
    secret: Secret,
) -> Result<Membership> {
    let (list_var, list) = nodelist(env)
        .ok_or_else(|| fail(format!("none of {} is set", NODELIST_VARS.join(", "))))?;
    let nodes = expand(&list).map_err(|e| fail(format!("{list_var}: {e}")))?;
    let tasks_vars: &[&'static str] = if list_var == "SLURM_STEP_NODELIST" {
        &["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"]
    } else {
        &["SLURM_TASKS_PER_NODE"]
    };
    let (tasks_var, tasks) = first_set(env, tasks_vars)
        .ok_or_else(|| fail(format!("{list_var} is set but {} is not", tasks_vars[0])))?;
    let tasks = tasks_per_node(&tasks).map_err(|e| fail(format!("{tasks_var}: {e}")))?;
    if tasks.len() != nodes.len() {
        return Err(fail(format!(
            "{list_var} lists {} nodes but {tasks_var} gives tasks for {}",
            nodes.len(),
            tasks.len()
        )));
    }
    let mut seen = HashMap::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        if let Some(j) = seen.insert(node.as_str(), i) {
            return Err(fail(format!(
                "{list_var} lists node {node:?} twice (nodes {j} and {i})"
            )));
        }
    }
    let layout = block_layout(&tasks);
    if let Some((size_var, _)) = first_set(env, &["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"]) {
        let size = number(env, size_var)?.unwrap_or_default();
        if size != layout.len() {
            return Err(fail(format!(
                "{size_var}={size} but {tasks_var} adds up to {} tasks",
                layout.len()
            )));
        }
    }
    let rank = number(env, "SLURM_PROCID")?.ok_or_else(|| {
        fail(format!(
            "{list_var} is set but SLURM_PROCID is not: run under srun"
        ))
    })?;
    let &(node, local) = layout.get(rank).ok_or_else(|| {
        fail(format!(
            "SLURM_PROCID={rank} is not below the {} tasks of {tasks_var}",
            layout.len()
        ))
    })?;
    check_own_place(env, rank, &nodes[node], local)?;
    let base = base_port(env)?;
    let most = tasks.iter().copied().max().unwrap_or(1);
    if usize::from(base) + most - 1 > usize::from(u16::MAX) {
        return Err(fail(format!(
            "{BASE_PORT_ENV}={base}: {most} tasks on one node would need ports up to {}, past {}",
            usize::from(base) + most - 1,
            u16::MAX
        )));
    }
    let ips = nodes
        .iter()
        .map(|name| {
            let ip = resolve(name).map_err(|e| fail(format!("node {name:?} of {list_var}: {e}")))?;
            if ip.is_loopback() && nodes.len() > 1 {
                return Err(fail(format!(
                    "node {name:?} of {list_var} resolves to {ip} here, a loopback address the other nodes cannot reach (fix the resolver, e.g. /etc/hosts, or use a hosts file)"
                )));
            }
            Ok(ip)
        })
        .collect::<Result<Vec<IpAddr>>>()?;
    let hosts = layout
        .iter()
        .map(|&(node, local)| {
            // At most u16::MAX, checked above.
            let port = u16::try_from(usize::from(base) + local).unwrap_or(u16::MAX);
            std::net::SocketAddr::new(ips[node], port)
        })
        .collect();
    let m = Membership::new(rank, hosts, secret);
    m.validate()?;
    Ok(m)
}

/// Refuses a task whose `SLURM_LOCALID` or `SLURMD_NODENAME` is not where the block
/// distribution puts rank `rank` (task `local` on `node`).
fn check_own_place(env: Env<'_>, rank: usize, node: &str, local: usize) -> Result<()> {
    let elsewhere = |what: String| {
        fail(format!(
            "SLURM_PROCID={rank} would be task {local} on node {node:?} in Slurm's block distribution, but {what}: the step's tasks are distributed otherwise (run srun with --distribution=block, or use a hosts file)"
        ))
    };
    if let Some(id) = number(env, "SLURM_LOCALID")? {
        if id != local {
            return Err(elsewhere(format!("SLURM_LOCALID={id}")));
        }
    }
    if let Some(name) = env("SLURMD_NODENAME") {
        if name.trim() != node {
            return Err(elsewhere(format!("SLURMD_NODENAME={name:?}")));
        }
    }
    Ok(())
}

/// The port of each node's first task: [`BASE_PORT_ENV`], else [`DEFAULT_BASE_PORT`].
pub(crate) fn base_port(env: Env<'_>) -> Result<u16> {
    match env(BASE_PORT_ENV) {
        None => Ok(DEFAULT_BASE_PORT),
        Some(v) => match v.trim().parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(fail(format!(
                "{BASE_PORT_ENV}={v:?} is not a port (1 to 65535)"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{env_of, test_secret as secret};

    /// Node `nodeK` (any prefix) resolves to 10.0.0.K; `lo` to loopback; others fail.
    fn resolve(name: &str) -> std::result::Result<IpAddr, String> {
        if name == "lo" {
            return Ok("127.0.0.1".parse().unwrap());
        }
        let digits: String = name.chars().filter(char::is_ascii_digit).collect();
        match digits.parse::<u8>() {
            Ok(k) => Ok(IpAddr::from([10, 0, 0, k])),
            Err(_) => Err("no such host".into()),
        }
    }

    fn join(pairs: &[(&str, &str)]) -> Result<Membership> {
        let env = env_of(pairs);
        membership(&env, &resolve, secret())
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        join(pairs).unwrap_err().to_string()
    }

    #[test]
    fn block_distribution_gives_each_rank_its_node_and_local_index() {
        assert_eq!(
            block_layout(&[2, 2, 2, 1]),
            [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0)]
        );
        assert!(block_layout(&[]).is_empty());
    }

    #[test]
    fn a_step_gives_every_rank_its_node_and_port() {
        let m = join(&[
            ("SLURM_JOB_NODELIST", "node[01-02],node07"),
            ("SLURM_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_NTASKS", "5"),
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURMD_NODENAME", "node02"),
        ])
        .unwrap();
        let hosts: Vec<String> = m.hosts.iter().map(ToString::to_string).collect();
        assert_eq!(
            hosts,
            [
                "10.0.0.1:29600",
                "10.0.0.1:29601",
                "10.0.0.2:29600",
                "10.0.0.2:29601",
                "10.0.0.7:29600"
            ]
        );
        assert_eq!(m.rank, 3);
        // The step's own variables win over the job's, and the base port is configurable.
        let m = join(&[
            ("SLURM_STEP_NODELIST", "node3"),
            ("SLURM_STEP_TASKS_PER_NODE", "2"),
            ("SLURM_JOB_NODELIST", "node[1-4]"),
            ("SLURM_TASKS_PER_NODE", "1(x4)"),
            ("SLURM_STEP_NUM_TASKS", "2"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_PROCID", "1"),
            ("ITERSTORE_PORT", "4000"),
        ])
        .unwrap();
        assert_eq!(m.hosts.len(), 2);
        assert_eq!(m.hosts[1].to_string(), "10.0.0.3:4001");
        // One node may be loopback.
        let m = join(&[
            ("SLURM_NODELIST", "lo"),
            ("SLURM_TASKS_PER_NODE", "2"),
            ("SLURM_PROCID", "0"),
        ])
        .unwrap();
        assert_eq!(m.hosts[1].to_string(), "127.0.0.1:29601");
    }

    #[test]
    fn bad_steps_are_refused_naming_the_variable() {
        let base = [
            ("SLURM_JOB_NODELIST", "node[1-2]"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_PROCID", "0"),
        ];
        let with = |changes: &[(&'static str, &'static str)]| {
            let mut pairs: Vec<(&str, &str)> = base
                .iter()
                .filter(|(k, _)| !changes.iter().any(|(c, _)| c == k))
                .copied()
                .collect();
            pairs.extend(changes.iter().filter(|(_, v)| !v.is_empty()));
            err(&pairs)
        };
        for (changes, says) in [
            (
                &[("SLURM_JOB_NODELIST", "node[1-")][..],
                "SLURM_JOB_NODELIST: a '[' without ']' in \"node[1-\"",
            ),
            (
                &[("SLURM_TASKS_PER_NODE", "2(x2")],
                "SLURM_TASKS_PER_NODE: \"2(x2\" is not a task count",
            ),
            (&[("SLURM_TASKS_PER_NODE", "")], "SLURM_TASKS_PER_NODE is not"),
            (
                &[("SLURM_TASKS_PER_NODE", "2(x3)")],
                "SLURM_JOB_NODELIST lists 2 nodes but SLURM_TASKS_PER_NODE gives tasks for 3",
            ),
            (
                &[("SLURM_JOB_NODELIST", "node1,node1")],
                "lists node \"node1\" twice",
            ),
            (
                &[("SLURM_NTASKS", "5")],
                "SLURM_NTASKS=5 but SLURM_TASKS_PER_NODE adds up to 4 tasks",
            ),
            (&[("SLURM_PROCID", "")], "SLURM_PROCID is not: run under srun"),
            (&[("SLURM_PROCID", "x")], "SLURM_PROCID=\"x\""),
            (&[("SLURM_PROCID", "4")], "SLURM_PROCID=4 is not below the 4 tasks"),
            (
                &[("SLURM_PROCID", "1"), ("SLURM_LOCALID", "0")],
                "SLURM_PROCID=1 would be task 1 on node \"node1\" in Slurm's block distribution, but SLURM_LOCALID=0",
            ),
            (
                &[("SLURM_PROCID", "2"), ("SLURMD_NODENAME", "node1")],
                "but SLURMD_NODENAME=\"node1\"",
            ),
            (&[("ITERSTORE_PORT", "0")], "ITERSTORE_PORT=\"0\" is not a port"),
            (&[("ITERSTORE_PORT", "70000")], "ITERSTORE_PORT=\"70000\""),
            (
                &[("ITERSTORE_PORT", "65535")],
                "2 tasks on one node would need ports up to 65536",
            ),
            (
                &[("SLURM_JOB_NODELIST", "nodeX,node1")],
                "node \"nodeX\" of SLURM_JOB_NODELIST: no such host",
            ),
            (
                &[("SLURM_JOB_NODELIST", "lo,node1")],
                "resolves to 127.0.0.1 here, a loopback address",
            ),
        ] {
            let e = with(changes);
            assert!(e.contains(says), "{changes:?}: {e}");
            assert!(e.contains("slurm"), "{e}");
        }
    }
}
