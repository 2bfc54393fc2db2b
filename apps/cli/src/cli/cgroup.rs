//! [`CpuGroup`]: a cgroup (v1 `cpu` controller) with a CPU quota, so that a process
//! started in it runs like a machine of that many cores (`--cpu-quota` of the launcher,
//! and `iterstore plan --validate`'s emulated machines). Needs root and
//! `/sys/fs/cgroup/cpu`; the group is removed when dropped (once its processes are gone).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Where cgroup v1's `cpu` controller is mounted.
const ROOT: &str = "/sys/fs/cgroup/cpu";
/// The scheduling period the quota is a share of, in microseconds: short, so that a
/// throttled process stalls its peers for milliseconds, not for most of a 100 ms period.
const PERIOD_US: u64 = 10_000;

/// A cgroup `iterstore-<pid>-<name>` limited to `cores` cores' worth of CPU time.
#[derive(Debug)]
pub(crate) struct CpuGroup {
    path: PathBuf,
}

impl CpuGroup {
    /// Whether CPU groups can be made here (root, cgroup v1's `cpu` controller).
    pub(crate) fn available() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        root && PathBuf::from(ROOT).join("cpu.cfs_quota_us").exists()
    }

    /// Creates the group `name` (unique to this process) limited to `cores` cores.
    pub(crate) fn create(name: &str, cores: f64) -> Result<Self> {
        if !Self::available() {
            bail!(
                "a CPU quota needs root and cgroup v1's cpu controller at {ROOT} (not found \
                 or not root)"
            );
        }
        if !(cores > 0.0 && cores.is_finite()) {
            bail!("a CPU quota of {cores} cores: give a positive number");
        }
        let path = PathBuf::from(ROOT).join(format!("iterstore-{}-{name}", std::process::id()));
        std::fs::create_dir(&path).with_context(|| format!("creating {}", path.display()))?;
        let group = Self { path };
        let quota = ((cores * PERIOD_US as f64).round() as u64).max(1000);
        group.write("cpu.cfs_period_us", &PERIOD_US.to_string())?;
        group.write("cpu.cfs_quota_us", &quota.to_string())?;
        Ok(group)
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let path = self.path.join(file);
        std::fs::write(&path, value)
            .with_context(|| format!("writing {value} to {}", path.display()))
    }

    /// Moves process `pid` (all its threads) into the group.
    pub(crate) fn add(&self, pid: u32) -> Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // A group can only be removed once it is empty: the processes may take a moment
        // to be reaped.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!("could not remove {}", self.path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_limits_a_process_and_is_removed_when_dropped() {
        if !CpuGroup::available() {
            eprintln!("skipped: needs root and {ROOT}");
            return;
        }
        let path;
        {
            let g = CpuGroup::create("test", 0.25).unwrap();
            path = g.path.clone();
            let quota = std::fs::read_to_string(path.join("cpu.cfs_quota_us")).unwrap();
            assert_eq!(quota.trim(), "2500");
            let mut child = std::process::Command::new("sleep")
                .arg("5")
                .spawn()
                .unwrap();
            g.add(child.id()).unwrap();
            let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap();
            assert!(
                procs.lines().any(|l| l == child.id().to_string()),
                "{procs}"
            );
            child.kill().unwrap();
            child.wait().unwrap();
        }
        assert!(!path.exists(), "{} left behind", path.display());
        assert!(CpuGroup::create("bad", 0.0).is_err());
    }
}
