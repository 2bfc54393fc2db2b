//! `iterstore run ... --processes P`: a launcher that starts P local processes on
//! 127.0.0.1 as one cluster and waits for them.
//!
//! It picks P free ports, writes a hosts file and a fresh random secret (mode 0600) into a
//! private temporary directory, and starts P copies of this binary with the same command
//! line, `--processes` replaced by `--hosts FILE --rank R --secret-file FILE` (and
//! `--metrics-addr HOST:PORT` by `HOST:PORT+R`: each its own endpoint). Their
//! output is copied line by line, prefixed with `[rank R]`. Only rank 0 writes `--output`
//! and `--json`. The exit status is the worst child's (the first to fail; of children
//! found failed at once, one killed by a signal before those that exited with an error):
//! when one fails, the others notice the lost peer and fail within seconds; any still running after a grace period are
//! killed. With `--restarts N` a child that dies of a signal (killed, crashed) is started
//! again with the same rank, hosts file and secret after the backoff the others wait
//! before they rejoin (at most N times per rank; see [`super::restarts`]). With `--cpu-quota F` each child runs in its own CPU group of F cores (a cgroup,
//! removed afterwards). Children die with the launcher (`PR_SET_PDEATHSIG`), also when it is killed.
//! An interrupt or termination request (SIGINT, SIGTERM) is passed on to the children as
//! SIGTERM, and the launcher waits for them (a grace period, then SIGKILL) before it
//! removes its directory and exits with an error: nothing is left behind.

use super::apps::Runnable;
use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by the SIGINT/SIGTERM handler; the wait loop passes the request on.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM set [`INTERRUPTED`] instead of killing the launcher.
fn catch_interrupts() {
    let handler = on_interrupt as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
    }
}

/// How long the other processes get to exit on their own once one has failed.
const GRACE: Duration = Duration::from_secs(20);

/// Runs `argv` (the launcher's own command line) as `processes` local processes.
pub(crate) fn launch(app: &dyn Runnable, processes: usize, argv: &[OsString]) -> Result<()> {
    app.app_config()?.validate()?;
    let dir = TempDir::new()?;
    let ports: Vec<u16> = iterstore::deploy::loopback_hosts(processes)
        .context("reserving local ports")?
        .iter()
        .map(std::net::SocketAddr::port)
        .collect();
    let hosts = dir.path().join("hosts");
    let text: String = ports
        .iter()
        .enumerate()
        .map(|(r, p)| format!("{r} 127.0.0.1:{p}\n"))
        .collect();
    std::fs::write(&hosts, text).with_context(|| format!("writing {}", hosts.display()))?;
    let secret = dir.path().join("secret");
    write_secret(&secret)?;
    let exe = std::env::current_exe().context("finding this program's path")?;
    // One CPU group per process (removed after the processes, below).
    let groups = match app.cluster().cpu_quota {
        None => Vec::new(),
        Some(cores) => (0..processes)
            .map(|r| super::cgroup::CpuGroup::create(&format!("r{r}"), cores))
            .collect::<Result<Vec<_>>>()
            .context("--cpu-quota")?,
    };
    catch_interrupts();
    let base = child_args(argv);
    let metrics = app.cluster().metrics_addr;
    let metrics_of = |rank: usize| -> Result<Option<std::net::SocketAddr>> {
        let Some(mut addr) = metrics else {
            return Ok(None);
        };
        if addr.port() != 0 {
            let port = u16::try_from(usize::from(addr.port()) + rank).ok();
            let port = port.with_context(|| {
                format!("--metrics-addr {addr}: process {rank}'s port would be past 65535")
            })?;
            addr.set_port(port);
        }
        Ok(Some(addr))
    };
    // Checked before any process starts.
    metrics_of(processes - 1)?;
    tracing::info!(
        "launching {processes} processes on 127.0.0.1 (ports {})",
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    let start = |rank: usize| -> Result<Running> {
        let mut cmd = Command::new(&exe);
        cmd.args(&base)
            .arg("--hosts")
            .arg(&hosts)
            .arg("--rank")
            .arg(rank.to_string())
            .arg("--secret-file")
            .arg(&secret)
            .args(
                metrics_of(rank)?
                    .map(|a| ["--metrics-addr".to_string(), a.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .env_remove("ITERSTORE_SECRET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        iterstore::deploy::die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting process {rank} ({})", exe.display()))?;
        if let Some(group) = groups.get(rank) {
            if let Err(e) = group.add(child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context(format!("placing process {rank} in its CPU group")));
            }
        }
        let copiers = [
            copy_lines(rank, child.stdout.take(), false),
            copy_lines(rank, child.stderr.take(), true),
        ];
        Ok(Running {
            rank,
            child,
            copiers,
            status: None,
            respawns: 0,
            respawn_at: None,
            dead: None,
        })
    };
    let mut children: Vec<Running> = Vec::with_capacity(processes);
    for rank in 0..processes {
        children.push(start(rank)?);
    }
    let restarts = app.cluster().restarts;
    let worst = wait_all(&mut children, restarts, &start);
    drop(groups);
    drop(dir);
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted: the {processes} processes were stopped");
    }
    match worst {
        None => Ok(()),
        Some((rank, status)) => bail!("process {rank} of {processes} failed ({status})"),
    }
}

/// One started child and the threads copying its output.
struct Running {
    rank: usize,
    child: Child,
    copiers: [Option<std::thread::JoinHandle<()>>; 2],
    status: Option<std::process::ExitStatus>,
    /// Times this rank was started again after it died (`--restarts`).
    respawns: u32,
    /// When it is to be started again, once it died and may be.
    respawn_at: Option<Instant>,
    /// How it died, while it waits to be started again.
    dead: Option<std::process::ExitStatus>,
}

impl Running {
    /// Whether it died of a signal the launcher did not send: killed or crashed, the loss
    /// `--restarts` starts it again for (one that exited with an error is not: its error
    /// is its own, and another try would end the same).
    fn died(status: &std::process::ExitStatus) -> bool {
        std::os::unix::process::ExitStatusExt::signal(status).is_some()
            && !INTERRUPTED.load(Ordering::SeqCst)
    }

    /// Whether its process is still there to signal (not reaped, not waiting to be
    /// started again).
    fn alive(&self) -> bool {
        self.status.is_none() && self.respawn_at.is_none()
    }

    /// Starts this dead child again with `start` once its backoff has passed. With
    /// `stopping` (another child failed, or the launcher was interrupted) it stays dead:
    /// `Err` with whether it died of a signal and how, as for any failed child; so too if
    /// it cannot be started.
    fn respawn(
        &mut self,
        stopping: bool,
        start: &dyn Fn(usize) -> Result<Running>,
    ) -> std::result::Result<(), (bool, String)> {
        let dead = self
            .dead
            .map_or_else(|| "died".to_string(), |s| s.to_string());
        if stopping {
            self.status = self.dead;
            self.respawn_at = None;
            return Err((true, dead));
        }
        if self.respawn_at.is_some_and(|at| Instant::now() < at) {
            return Ok(());
        }
        for t in self.copiers.iter_mut().filter_map(Option::take) {
            let _ = t.join();
        }
        match start(self.rank) {
            Ok(mut fresh) => {
                fresh.respawns = self.respawns + 1;
                *self = fresh;
                Ok(())
            }
            Err(e) => {
                self.status = self.dead;
                self.respawn_at = None;
                Err((true, format!("{dead}; starting it again failed: {e:#}")))
            }
        }
    }
}

/// Waits for every child; once one fails, the rest get [`GRACE`] to exit, then are
/// killed. Returns the first failure (rank and status), if any.
///
/// With `restarts` > 0, a child that dies of a signal (killed, crashed) is started again
/// by `start` with the same rank, at most `restarts` times per rank, after the backoff
/// the other processes wait before they rejoin; this is not a failure unless the others
/// have failed meanwhile or the launcher was interrupted.
fn wait_all(
    children: &mut [Running],
    restarts: u32,
    start: &dyn Fn(usize) -> Result<Running>,
) -> Option<(usize, String)> {
    let mut first_failure: Option<(usize, String)> = None;
    let mut deadline: Option<Instant> = None;
    let mut passed_on = false;
    loop {
        if !passed_on && INTERRUPTED.load(Ordering::SeqCst) {
            passed_on = true;
            for c in children.iter().filter(|c| c.alive()) {
                // SAFETY: kill(2) on a child we started and have not reaped.
                unsafe { libc::kill(c.child.id() as libc::pid_t, libc::SIGTERM) };
            }
            deadline.get_or_insert(Instant::now() + GRACE);
        }
        let mut running = 0;
        // Failures seen in this pass: the cause first (a child killed by a signal, before
        // those that exited with an error, usually on losing it), then by rank.
        let mut failed: Option<(bool, usize, String)> = None;
        let stopping = first_failure.is_some() || passed_on;
        for c in children.iter_mut().filter(|c| c.status.is_none()) {
            if c.respawn_at.is_some() {
                match c.respawn(stopping, start) {
                    Ok(()) => running += 1,
                    Err((signaled, why)) => {
                        if failed.as_ref().is_none_or(|f| signaled && !f.0) {
                            failed = Some((signaled, c.rank, why));
                        }
                    }
                }
                continue;
            }
            match c.child.try_wait() {
                Ok(Some(status))
                    if Running::died(&status) && c.respawns < restarts && !stopping =>
                {
                    let k = c.respawns + 1;
                    let wait = super::restarts::backoff(k);
                    tracing::warn!(
                        "process {} died ({status}); starting it again in {} s (restart {k} of {restarts} for it)",
                        c.rank,
                        wait.as_secs()
                    );
                    c.respawn_at = Some(Instant::now() + wait);
                    c.dead = Some(status);
                    running += 1;
                }
                Ok(Some(status)) => {
                    c.status = Some(status);
                    let signaled = std::os::unix::process::ExitStatusExt::signal(&status).is_some();
                    if !status.success() && failed.as_ref().is_none_or(|f| signaled && !f.0) {
                        failed = Some((signaled, c.rank, status.to_string()));
                    }
                }
                Ok(None) => running += 1,
                Err(e) => {
                    let _ = c.child.kill();
                    first_failure.get_or_insert((c.rank, format!("cannot wait for it: {e}")));
                }
            }
        }
        if let (None, Some((_, rank, status))) = (&first_failure, failed) {
            first_failure = Some((rank, status));
            deadline = Some(Instant::now() + GRACE);
        }
        if running == 0 {
            break;
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            for c in children.iter_mut().filter(|c| c.alive()) {
                tracing::warn!(
                    "process {} did not exit after process failure; killing it",
                    c.rank
                );
                let _ = c.child.kill();
                c.status = c.child.wait().ok();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in children.iter_mut() {
        for t in c.copiers.iter_mut().filter_map(Option::take) {
            let _ = t.join();
        }
    }
    first_failure
}

/// Copies `from` line by line to the launcher's stdout (or stderr), prefixed by the rank.
fn copy_lines(
    rank: usize,
    from: Option<impl Read + Send + 'static>,
    stderr: bool,
) -> Option<std::thread::JoinHandle<()>> {
    let from = from?;
    std::thread::Builder::new()
        .name(format!("launch-copy-{rank}"))
        .spawn(move || {
            for line in BufReader::new(from)
                .split(b'\n')
                .map_while(std::result::Result::ok)
            {
                let line = String::from_utf8_lossy(&line);
                let text = format!("[rank {rank}] {}\n", line.trim_end_matches('\r'));
                let _ = if stderr {
                    std::io::stderr().lock().write_all(text.as_bytes())
                } else {
                    std::io::stdout().lock().write_all(text.as_bytes())
                };
            }
        })
        .ok()
}

/// The command line for a child: everything after the program name, without the
/// launcher's own options (`--processes P`, `--cpu-quota F`, or `--processes=P`, ...) and
/// `--metrics-addr`, which each child gets its own of.
fn child_args(argv: &[OsString]) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut skip_next = false;
    for a in argv.iter().skip(1) {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        // The launcher's own options.
        for own in ["--processes", "--cpu-quota", "--metrics-addr"] {
            if a == OsStr::new(own) {
                skip_next = true;
            }
        }
        if skip_next
            || a.to_str().is_some_and(|s| {
                ["--processes=", "--cpu-quota=", "--metrics-addr="]
                    .iter()
                    .any(|own| s.starts_with(own))
            })
        {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Writes 32 random bytes, hex-encoded, to `path`, readable by this user only.
fn write_secret(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let hex = iterstore::deploy::fresh_secret()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(hex.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// A private temporary directory, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory under the system's temporary directory, readable by this user
    /// only, removed when dropped.
    pub(crate) fn new() -> Result<TempDir> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path =
            std::env::temp_dir().join(format!("iterstore-launch-{}-{nanos}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(TempDir(path))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_get_the_command_line_without_the_launchers_options() {
        let argv: Vec<OsString> = [
            "iterstore",
            "run",
            "mf",
            "--processes",
            "2",
            "--workers",
            "1",
            "--processes=3",
            "--cpu-quota",
            "0.5",
            "--cpu-quota=1",
            "--metrics-addr",
            "127.0.0.1:9400",
            "--metrics-addr=127.0.0.1:9400",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            child_args(&argv),
            ["run", "mf", "--workers", "1"].map(OsString::from)
        );
    }
}
