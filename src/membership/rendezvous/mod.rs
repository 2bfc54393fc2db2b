//! [`rendezvous`]: processes that know only rank 0's address (`MASTER_ADDR`/`MASTER_PORT`
//! under `torchrun`, or an `mpirun` job given them) learn every rank's cluster address
//! from rank 0, before the cluster starts.
//!
//! Rank 0 listens on the master's port (on every interface, as `torchrun`'s own store
//! does). Every other rank takes a free port on the interface that reaches rank 0 (the
//! local address of its connection to it), connects (retrying with backoff until its
//! deadline), and checks in with its rank and that address, authenticated with the
//! cluster's secret (the frames: `frame`). Once all have checked in, rank 0 answers each
//! with the full list, also authenticated; if some never come, it tells the others which
//! ones, and every process fails naming them. Each connection is greeted in a thread of
//! its own with a deadline, so a silent or garbage-sending peer delays no one; a frame
//! that is malformed, unauthenticated, of another world size or for a rank already taken
//! is refused (and logged) naming the peer, and the rendezvous goes on without it.
//!
//! The ports are reserved only while the rendezvous runs: the cluster binds them again
//! when it starts, and another program may take one in between (as with
//! [`loopback_hosts`](crate::deploy::loopback_hosts)).

mod frame;
#[cfg(test)]
mod tests;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::frame::{Hello, Kind, Nonce};
use super::{Membership, Secret, MAX_HOSTLIST_HOSTS};
use crate::error::{warn_visible, Error, Result};

/// How long a rendezvous waits for every rank, unless [`RendezvousConfig::timeout`] says
/// otherwise.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(120);

/// The environment variable that moves the rendezvous off `MASTER_PORT`
/// ([`Membership::from_launcher_env`] reads it): under `torchrun`, whose own store already
/// listens on `MASTER_PORT`, the rendezvous takes the port after it unless this says
/// otherwise.
pub const RENDEZVOUS_PORT_ENV: &str = "ITERSTORE_RENDEZVOUS_PORT";

/// The environment variable with the rendezvous's timeout in seconds, for
/// [`Membership::from_launcher_env`] (default: [`RENDEZVOUS_TIMEOUT`]).
pub const RENDEZVOUS_TIMEOUT_ENV: &str = "ITERSTORE_RENDEZVOUS_TIMEOUT";

/// How long rank 0 gives one connection to check in, and rank 0's answer to be written.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after its own deadline a rank still waits for rank 0's answer, which names
/// the missing ranks once rank 0's deadline (no later than its own) has passed.
const REPLY_GRACE: Duration = Duration::from_secs(2);

/// The most connections rank 0 greets at once; more are closed unread.
const MAX_PENDING: usize = 256;

/// How long rank 0 waits to tell a refused rank why (meanwhile it accepts no one).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// How often rank 0 looks for new connections.
const POLL: Duration = Duration::from_millis(10);

/// The most ranks or refused peers one error names (the rest are counted).
const MAX_NAMED: usize = 16;

/// A rendezvous: where rank 0 listens, who this process is, the secret, the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RendezvousConfig {
    /// Rank 0's address (`MASTER_ADDR:MASTER_PORT`); rank 0 listens on its port.
    pub master: SocketAddr,
    /// This process's rank, `0..world`.
    pub rank: usize,
    /// The number of processes.
    pub world: usize,
    /// The cluster's secret, which authenticates every frame.
    pub secret: Secret,
    /// Rank 0 waits this long for every rank to check in; another rank waits this long
    /// for rank 0 to answer its connection, then as long again for the host list.
    pub timeout: Duration,
}

impl RendezvousConfig {
    /// Rank `rank` of `world` meeting at `master`, waiting at most [`RENDEZVOUS_TIMEOUT`].
    pub fn new(master: SocketAddr, rank: usize, world: usize, secret: Secret) -> Self {
        RendezvousConfig {
            master,
            rank,
            world,
            secret,
            timeout: RENDEZVOUS_TIMEOUT,
        }
    }

    /// Checks the settings, naming the offending one.
    pub fn validate(&self) -> Result<()> {
        let bad = |why: String| Error::config("rendezvous", why);
        if self.world == 0 || self.world > MAX_HOSTLIST_HOSTS {
            return Err(bad(format!(
                "world size {} is outside 1..={MAX_HOSTLIST_HOSTS}",
                self.world
            )));
        }
        if self.rank >= self.world {
            return Err(bad(format!(
                "rank {} is not below the world size {}",
                self.rank, self.world
            )));
        }
        if self.master.port() == 0 {
            return Err(bad(format!(
                "the master address {} has no port",
                self.master
            )));
        }
        if self.timeout.is_zero() {
            return Err(bad("the timeout must not be zero".into()));
        }
        Ok(())
    }
}

/// Meets the other processes at `config.master` and returns this process's membership:
/// every rank's address as rank 0 collected them (see the module docs). Fails, naming what
/// is missing, when a rank does not arrive or rank 0 does not answer in time, and when
/// rank 0 refuses this process (another secret, world size or a rank already taken).
///
/// ```no_run
/// use iterstore::{Cluster, Config};
/// use iterstore::deploy::{rendezvous, RendezvousConfig, Secret};
///
/// # fn main() -> iterstore::Result<()> {
/// let secret = Secret::from_env("ITERSTORE_SECRET")?;
/// let master = "10.0.0.1:29500".parse().unwrap();
/// let membership = rendezvous(&RendezvousConfig::new(master, 3, 8, secret))?;
/// let cluster = Cluster::start(Config::new(4).with_membership(membership))?;
/// # Ok(())
/// # }
/// ```
pub fn rendezvous(config: &RendezvousConfig) -> Result<Membership> {
    config.validate()?;
    if config.rank == 0 {
        lead(config)
    } else {
        check_in(config)
    }
}

/// The error of the rendezvous at `cfg.master`.
fn failed(cfg: &RendezvousConfig, why: impl std::fmt::Display) -> Error {
    Error::failed(format!("rendezvous at {}", cfg.master), why)
}

/// `d` in seconds, as the errors say it.
fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// The first [`MAX_NAMED`] of `items`, comma-separated, and how many more of `total`
/// there are.
fn named(items: &[String], total: usize) -> String {
    let shown = items.len().min(MAX_NAMED);
    let mut text = items[..shown].join(", ");
    if total > shown {
        text += &format!(" and {} more", total - shown);
    }
    text
}

/// The unspecified address of `ip`'s family.
fn any_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// A rank that checked in, with its open connection.
struct Member {
    stream: TcpStream,
    peer: SocketAddr,
    hello: Hello,
    /// The address of rank 0 this rank reached.
    local: IpAddr,
}

/// How the greeting of one connection ended.
enum Greeting {
    /// An authenticated check-in (its rank not yet checked against the others).
    Arrived(Member),
    /// Anything else, and why.
    Refused { peer: SocketAddr, why: String },
}

/// Rank 0's side: collects every rank's check-in, then answers each with the list.
fn lead(cfg: &RendezvousConfig) -> Result<Membership> {
    let deadline = Instant::now() + cfg.timeout;
    let master_ip = cfg.master.ip();
    if !master_ip.is_unspecified() {
        TcpListener::bind((master_ip, 0)).map_err(|e| {
            failed(
                cfg,
                format!(
                    "rank 0 must run on the machine at {master_ip}, but cannot listen there: {e}"
                ),
            )
        })?;
    }
    let any = any_of(master_ip);
    let reserved = TcpListener::bind((any, 0))
        .and_then(|l| l.local_addr().map(|a| (l, a.port())))
        .map_err(|e| {
            failed(
                cfg,
                format!("rank 0 cannot reserve a port for the cluster: {e}"),
            )
        });
    let (reserved, port) = reserved?;
    if cfg.world == 1 {
        let ip = if master_ip.is_unspecified() {
            Ipv4Addr::LOCALHOST.into()
        } else {
            master_ip
        };
        drop(reserved);
        return Ok(Membership::new(
            0,
            vec![SocketAddr::new(ip, port)],
            cfg.secret.clone(),
        ));
    }
    let listener = TcpListener::bind((any, cfg.master.port()))
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| {
            let port = cfg.master.port();
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    " (another program holds it — under torchrun, its own store: set \
                     {RENDEZVOUS_PORT_ENV} to a free port, the same for every process)"
                )
            } else {
                String::new()
            };
            failed(
                cfg,
                format!("rank 0 cannot listen on port {port}: {e}{hint}"),
            )
        })?;
    let mut hall = Hall::new(cfg);
    while hall.arrived < cfg.world {
        if Instant::now() >= deadline {
            return Err(hall.give_up());
        }
        hall.accept(&listener, deadline);
        hall.receive();
    }
    drop(listener);
    let members: Vec<Member> = hall.members.into_iter().flatten().collect();
    let own_ip = members
        .iter()
        .map(|m| m.local)
        .find(|ip| !ip.is_loopback())
        .or_else(|| members.first().map(|m| m.local))
        .unwrap_or(master_ip);
    let hosts: Vec<SocketAddr> = std::iter::once(SocketAddr::new(own_ip, port))
        .chain(members.iter().map(|m| m.hello.addr))
        .collect();
    let membership = Membership::new(0, hosts, cfg.secret.clone());
    let reply_deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    if let Err(e) = membership.validate() {
        tell(cfg, members, reply_deadline, |_| Err(e.to_string()));
        return Err(failed(cfg, e));
    }
    tell(cfg, members, reply_deadline, |nonce| {
        Ok(frame::hosts(cfg.secret.bytes(), nonce, &membership.hosts))
    });
    drop(reserved);
    Ok(membership)
}

/// Sends every member of `members` its answer: the frame `answer` makes for its nonce, or
/// a refusal saying why not. A member that cannot be told is warned about (it will fail
/// on its own, and the cluster will name it).
fn tell(
    cfg: &RendezvousConfig,
    members: Vec<Member>,
    deadline: Instant,
    answer: impl Fn(&Nonce) -> std::result::Result<Vec<u8>, String>,
) {
    for mut m in members {
        let bytes = answer(&m.hello.nonce)
            .unwrap_or_else(|why| frame::refused(cfg.secret.bytes(), &m.hello.nonce, &why));
        if let Err(e) = frame::write_by(&mut m.stream, &bytes, deadline) {
            warn_visible(&format!(
                "rendezvous at {}: cannot answer rank {} at {}: {e}",
                cfg.master, m.hello.rank, m.peer
            ));
        }
    }
}

/// Rank 0's waiting room: who has checked in, who was refused, the greetings under way.
struct Hall<'a> {
    cfg: &'a RendezvousConfig,
    members: Vec<Option<Member>>,
    /// Ranks checked in, rank 0 included.
    arrived: usize,
    /// The first [`MAX_NAMED`] peers refused, and why.
    refusals: Vec<String>,
    /// How many peers were refused in all.
    refused: usize,
    pending: Arc<AtomicUsize>,
    sender: Sender<Greeting>,
    receiver: Receiver<Greeting>,
}

impl<'a> Hall<'a> {
    fn new(cfg: &'a RendezvousConfig) -> Self {
        let (sender, receiver) = mpsc::channel();
        Hall {
            cfg,
            members: (0..cfg.world).map(|_| None).collect(),
            arrived: 1,
            refusals: Vec::new(),
            refused: 0,
            pending: Arc::new(AtomicUsize::new(0)),
            sender,
            receiver,
        }
    }

    /// Greets every connection waiting on `listener`, each in a thread of its own.
    fn accept(&mut self, listener: &TcpListener, deadline: Instant) {
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(_) => return, // Out of descriptors, say: try again at the next poll.
            };
            if self.pending.load(Ordering::Acquire) >= MAX_PENDING {
                self.refuse(peer, format!("more than {MAX_PENDING} connections at once"));
                continue;
            }
            self.pending.fetch_add(1, Ordering::AcqRel);
            let (pending, sender) = (self.pending.clone(), self.sender.clone());
            let (secret, world) = (self.cfg.secret.clone(), self.cfg.world);
            let until = deadline.min(Instant::now() + HANDSHAKE_TIMEOUT);
            let spawned = std::thread::Builder::new()
                .name("iterstore-rendezvous".into())
                .spawn(move || {
                    let greeting = greet(stream, peer, &secret, world, until);
                    pending.fetch_sub(1, Ordering::AcqRel);
                    let _ = sender.send(greeting);
                });
            if let Err(e) = spawned {
                self.pending.fetch_sub(1, Ordering::AcqRel);
                self.refuse(peer, format!("no thread to greet it: {e}"));
            }
        }
    }

    /// Takes in the greetings that ended, waiting at most [`POLL`] for one.
    fn receive(&mut self) {
        let mut next = self.receiver.recv_timeout(POLL).ok();
        while let Some(greeting) = next {
            match greeting {
                Greeting::Arrived(m) => self.admit(m),
                Greeting::Refused { peer, why } => self.refuse(peer, why),
            }
            next = self.receiver.try_recv().ok();
        }
    }

    /// Admits a checked-in rank, or refuses it (and tells it why).
    fn admit(&mut self, mut m: Member) {
        let (rank, world) = (m.hello.rank as usize, m.hello.world as usize);
        let why = if world != self.cfg.world {
            format!(
                "it expects {world} processes, rank 0 expects {}",
                self.cfg.world
            )
        } else if rank == 0 || rank >= world {
            format!("rank {rank} is not one of 1..{world}")
        } else if let Some(first) = &self.members[rank] {
            format!("rank {rank} already checked in from {}", first.peer)
        } else {
            self.members[rank] = Some(m);
            self.arrived += 1;
            return;
        };
        let why = format!("as rank {rank}: {why}");
        let bytes = frame::refused(
            self.cfg.secret.bytes(),
            &m.hello.nonce,
            &format!("refused peer {}: {why}", m.peer),
        );
        let _ = frame::write_by(&mut m.stream, &bytes, Instant::now() + REFUSAL_TIMEOUT);
        self.refuse(m.peer, why);
    }

    /// Records and logs that `peer` was refused (the first [`MAX_NAMED`]; then once that
    /// more are not logged).
    fn refuse(&mut self, peer: SocketAddr, why: String) {
        self.refused += 1;
        if self.refusals.len() < MAX_NAMED {
            let why = format!("peer {peer}: {why}");
            warn_visible(&format!("rendezvous at {}: refused {why}", self.cfg.master));
            self.refusals.push(why);
        } else if self.refused == MAX_NAMED + 1 {
            warn_visible(&format!(
                "rendezvous at {}: refused more peers (not logged one by one)",
                self.cfg.master
            ));
        }
    }

    /// The error naming the ranks that never arrived (and the peers refused), told to
    /// every rank that did.
    fn give_up(self) -> Error {
        let missing = self.cfg.world - self.arrived;
        let first: Vec<String> = (1..self.cfg.world)
            .filter(|&r| self.members[r].is_none())
            .take(MAX_NAMED)
            .map(|r| r.to_string())
            .collect();
        let mut why = format!(
            "{} {} of {} never arrived within {}",
            if missing == 1 { "rank" } else { "ranks" },
            named(&first, missing),
            self.cfg.world,
            secs(self.cfg.timeout)
        );
        if !self.refusals.is_empty() {
            why += &format!("; refused: {}", named(&self.refusals, self.refused));
        }
        let members = self.members.into_iter().flatten().collect();
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        tell(self.cfg, members, deadline, |_| Err(why.clone()));
        failed(self.cfg, why)
    }
}

/// Greets one connection to rank 0: a challenge, then the peer's authenticated check-in,
/// all by `deadline`.
fn greet(
    mut stream: TcpStream,
    peer: SocketAddr,
    secret: &Secret,
    world: usize,
    deadline: Instant,
) -> Greeting {
    let refused = |why: String| Greeting::Refused { peer, why };
    if let Err(e) = stream.set_nonblocking(false) {
        return refused(e.to_string());
    }
    let _ = stream.set_nodelay(true);
    let challenge = match frame::nonce() {
        Ok(n) => n,
        Err(e) => return refused(e),
    };
    if let Err(e) = frame::write_by(&mut stream, &frame::challenge(&challenge), deadline) {
        return refused(format!("sending it a challenge: {e}"));
    }
    let body = match frame::read(&mut stream, deadline, &[Kind::Hello], world) {
        Ok((_, body)) => body,
        Err(e) => return refused(format!("no check-in: {e}")),
    };
    match frame::read_hello(secret.bytes(), &challenge, &body) {
        Ok(hello) => match stream.local_addr() {
            Ok(local) => Greeting::Arrived(Member {
                stream,
                peer,
                hello,
                local: local.ip(),
            }),
            Err(e) => refused(e.to_string()),
        },
        Err(e) => {
            let why = format!("its check-in is {e}");
            if let Some(nonce) = frame::hello_nonce(&body) {
                let text = format!("refused peer {peer}: {why}");
                let _ = frame::write_by(
                    &mut stream,
                    &frame::refused(secret.bytes(), &nonce, &text),
                    deadline,
                );
            }
            refused(why)
        }
    }
}

/// Another rank's side: checks in with rank 0 and receives the list.
fn check_in(cfg: &RendezvousConfig) -> Result<Membership> {
    let deadline = Instant::now() + cfg.timeout;
    let mut stream = connect(cfg.master, deadline).map_err(|e| {
        failed(
            cfg,
            format!("rank 0 did not answer within {} ({e})", secs(cfg.timeout)),
        )
    })?;
    let _ = stream.set_nodelay(true);
    let reserved = stream
        .local_addr()
        .and_then(|local| TcpListener::bind((local.ip(), 0)))
        .and_then(|l| l.local_addr().map(|a| (l, a)));
    let (reserved, addr) = reserved.map_err(|e| {
        failed(
            cfg,
            format!(
                "rank {} cannot reserve a port for the cluster: {e}",
                cfg.rank
            ),
        )
    })?;
    let greet_deadline = deadline.max(Instant::now() + cfg.timeout.min(HANDSHAKE_TIMEOUT));
    let challenge: Nonce = frame::read(&mut stream, greet_deadline, &[Kind::Challenge], cfg.world)
        .and_then(|(_, body)| body.try_into().map_err(|_| "a bad challenge".to_string()))
        .map_err(|e| {
            failed(
                cfg,
                format!("no challenge from rank 0 ({e}): is something else listening there?"),
            )
        })?;
    let nonce = frame::nonce().map_err(|e| failed(cfg, e))?;
    let hello = Hello {
        rank: cfg.rank as u32,
        world: cfg.world as u32,
        addr,
        nonce,
    };
    frame::write_by(
        &mut stream,
        &frame::hello(cfg.secret.bytes(), &challenge, &hello),
        greet_deadline,
    )
    .map_err(|e| failed(cfg, format!("checking in with rank 0: {e}")))?;
    let reply_deadline = Instant::now() + cfg.timeout + REPLY_GRACE;
    let (kind, body) = frame::read(
        &mut stream,
        reply_deadline,
        &[Kind::Hosts, Kind::Refused],
        cfg.world,
    )
    .map_err(|e| {
        failed(
            cfg,
            format!(
                "rank {} checked in, but no host list came from rank 0 within {}: {e}",
                cfg.rank,
                secs(cfg.timeout + REPLY_GRACE)
            ),
        )
    })?;
    if kind == Kind::Refused {
        let (text, authentic) = frame::read_refusal(cfg.secret.bytes(), &nonce, &body);
        return Err(failed(
            cfg,
            if authentic {
                format!("rank 0 says: {text}")
            } else {
                format!("rank 0 refused this process with a message this process's secret does not authenticate (is the secret the same?): {text}")
            },
        ));
    }
    let hosts = frame::read_hosts(cfg.secret.bytes(), &nonce, &body)
        .map_err(|e| failed(cfg, format!("rank 0's host list: {e}")))?;
    if hosts.get(cfg.rank) != Some(&addr) {
        return Err(failed(
            cfg,
            format!(
                "rank 0's host list does not give rank {} its address {addr}",
                cfg.rank
            ),
        ));
    }
    let membership = Membership::new(cfg.rank, hosts, cfg.secret.clone());
    membership.validate()?;
    drop(reserved);
    Ok(membership)
}

/// A connection to `master`, retried with backoff until `deadline`; the last error.
fn connect(master: SocketAddr, deadline: Instant) -> std::result::Result<TcpStream, String> {
    let mut wait = Duration::from_millis(50);
    let mut last = "timed out".to_string();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(last);
        }
        match TcpStream::connect_timeout(&master, left.min(HANDSHAKE_TIMEOUT)) {
            Ok(s) => return Ok(s),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(wait.min(deadline.saturating_duration_since(Instant::now())));
        wait = (wait * 2).min(Duration::from_secs(1));
    }
}
