//! The rendezvous over real sockets on 127.0.0.1, each rank a thread: ranks agree, a
//! missing rank is named, and wrong secrets, duplicates and garbage are refused without
//! disturbing the others. Every wait is bounded by the configs' short timeouts.

use super::*;
use std::io::{Read, Write};
use std::thread::JoinHandle;

use crate::membership::test_secret as secret;

fn other_secret() -> Secret {
    Secret::new(b"fedcba9876543210fedcba9876543210".to_vec()).unwrap()
}

/// A free port on 127.0.0.1 for rank 0 to listen on.
fn master() -> SocketAddr {
    crate::membership::loopback_hosts(1).unwrap()[0]
}

fn config(master: SocketAddr, rank: usize, world: usize, timeout: Duration) -> RendezvousConfig {
    let mut c = RendezvousConfig::new(master, rank, world, secret());
    c.timeout = timeout;
    c
}

/// Runs `cfg`'s rendezvous in a thread.
fn spawn(cfg: RendezvousConfig) -> JoinHandle<Result<Membership>> {
    std::thread::spawn(move || rendezvous(&cfg))
}

fn error(handle: JoinHandle<Result<Membership>>) -> String {
    handle.join().unwrap().unwrap_err().to_string()
}

#[test]
fn four_ranks_agree_on_every_address() {
    let at = master();
    let long = Duration::from_secs(20);
    // The others start first: they retry until rank 0 listens.
    let others: Vec<_> = (1..4).map(|r| spawn(config(at, r, 4, long))).collect();
    std::thread::sleep(Duration::from_millis(200));
    let lead = spawn(config(at, 0, 4, long));
    let mut all = vec![lead.join().unwrap().unwrap()];
    all.extend(others.into_iter().map(|h| h.join().unwrap().unwrap()));
    for (rank, m) in all.iter().enumerate() {
        assert_eq!(m.rank, rank);
        assert_eq!(m.hosts, all[0].hosts, "rank {rank} disagrees");
        assert_eq!(m.secret, secret());
    }
    let hosts = &all[0].hosts;
    assert_eq!(hosts.len(), 4);
    assert!(hosts.iter().all(|a| a.ip().is_loopback() && a.port() != 0));
    assert!(all[0].validate().is_ok(), "distinct addresses");
    // The rendezvous port is free again.
    assert!(TcpListener::bind(at).is_ok());
}

#[test]
fn a_missing_rank_is_named_by_every_process_in_time() {
    let at = master();
    let short = Duration::from_millis(1500);
    let started = Instant::now();
    let handles: Vec<_> = (0..3).map(|r| spawn(config(at, r, 4, short))).collect();
    for (rank, h) in handles.into_iter().enumerate() {
        let e = error(h);
        assert!(
            e.contains(&format!("rendezvous at {at} failed"))
                && e.contains("rank 3 of 4 never arrived within 1.5 s"),
            "rank {rank}: {e}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_wrong_secret_is_refused_and_the_right_rank_still_joins() {
    let at = master();
    let long = Duration::from_secs(20);
    let lead = spawn(config(at, 0, 2, long));
    let mut impostor = config(at, 1, 2, long);
    impostor.secret = other_secret();
    let e = error(spawn(impostor));
    assert!(e.contains("secret"), "{e}");
    assert!(e.contains("refused peer 127.0.0.1:"), "{e}");
    let real = spawn(config(at, 1, 2, long)).join().unwrap().unwrap();
    assert_eq!(real.hosts, lead.join().unwrap().unwrap().hosts);
}

#[test]
fn the_leader_names_a_refused_peer_when_it_gives_up() {
    let at = master();
    let lead = spawn(config(at, 0, 2, Duration::from_millis(1500)));
    let mut impostor = config(at, 1, 2, Duration::from_secs(5));
    impostor.secret = other_secret();
    let _ = error(spawn(impostor));
    let e = error(lead);
    assert!(e.contains("rank 1 of 2 never arrived"), "{e}");
    assert!(
        e.contains("refused: peer 127.0.0.1:") && e.contains("not authenticated"),
        "{e}"
    );
}

#[test]
fn duplicate_ranks_and_other_world_sizes_are_refused() {
    let at = master();
    let long = Duration::from_secs(20);
    let lead = spawn(config(at, 0, 3, long));
    // Two processes claim rank 1: whichever checks in second is refused, at once.
    let mut claims = vec![spawn(config(at, 1, 3, long)), spawn(config(at, 1, 3, long))];
    let started = Instant::now();
    let refused = loop {
        if let Some(i) = claims.iter().position(JoinHandle::is_finished) {
            break claims.remove(i);
        }
        assert!(
            started.elapsed() < long,
            "neither claim of rank 1 was refused"
        );
        std::thread::sleep(POLL);
    };
    let e = error(refused);
    assert!(
        e.contains("as rank 1: rank 1 already checked in from 127.0.0.1:"),
        "{e}"
    );
    let e = error(spawn(config(at, 2, 5, long)));
    assert!(
        e.contains("it expects 5 processes, rank 0 expects 3"),
        "{e}"
    );
    let last = spawn(config(at, 2, 3, long)).join().unwrap().unwrap();
    let hosts = lead.join().unwrap().unwrap().hosts;
    assert_eq!(claims.remove(0).join().unwrap().unwrap().hosts, hosts);
    assert_eq!(last.hosts, hosts);
}

#[test]
fn garbage_on_the_leaders_port_is_refused_without_disturbing_the_others() {
    let at = master();
    let long = Duration::from_secs(20);
    let lead = spawn(config(at, 0, 3, long));
    let connect = || {
        let started = Instant::now();
        loop {
            match TcpStream::connect(at) {
                Ok(s) => return s,
                Err(_) if started.elapsed() < long => std::thread::sleep(POLL),
                Err(e) => panic!("rank 0 never listened: {e}"),
            }
        }
    };
    // Text, a frame claiming a body of 4 GiB, a wrong version, and a peer that says
    // nothing and stays connected.
    let mut huge = b"ISRV\x01\x02".to_vec();
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    let mut streams = Vec::new();
    for bytes in [
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        huge,
        b"ISRV\x09\x02\0\0\0\x4b".to_vec(),
        (0..=255u8).cycle().take(100_000).collect(),
    ] {
        let mut s = connect();
        let _ = s.write_all(&bytes);
        streams.push(s);
    }
    let silent = connect();
    let members: Vec<_> = (1..3).map(|r| spawn(config(at, r, 3, long))).collect();
    let hosts = lead.join().unwrap().unwrap().hosts;
    for m in members {
        assert_eq!(m.join().unwrap().unwrap().hosts, hosts);
    }
    // Each garbage connection was closed (reset, when rank 0 left bytes unread), not
    // kept waiting.
    for mut s in streams {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        if let Err(e) = s.read_to_end(&mut got) {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
        }
    }
    drop(silent);
}

#[test]
fn a_process_that_is_not_rank_0_is_named() {
    // Something else on the master's port: it talks first, or not at all.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut talker, _) = listener.accept().unwrap();
        talker.write_all(b"SSH-2.0-OpenSSH\r\n").unwrap();
        let (quiet, _) = listener.accept().unwrap();
        (talker, quiet)
    });
    let e = rendezvous(&config(at, 1, 2, Duration::from_secs(5)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no challenge from rank 0 (not a rendezvous frame"),
        "{e}"
    );
    let started = Instant::now();
    let e = rendezvous(&config(at, 1, 2, Duration::from_millis(500)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no challenge from rank 0 (timed out)"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    drop(server.join().unwrap());
}

#[test]
fn rank_0_that_never_comes_is_named_in_time() {
    let at = master();
    let started = Instant::now();
    let e = rendezvous(&config(at, 2, 3, Duration::from_millis(500)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 0 did not answer within 0.5 s"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_world_of_one_needs_no_one() {
    let m = rendezvous(&config(master(), 0, 1, Duration::from_millis(100))).unwrap();
    assert_eq!(m.hosts.len(), 1);
    assert!(m.validate().is_ok());
}

#[test]
fn bad_settings_are_named() {
    let at = master();
    let t = Duration::from_secs(1);
    let e = |c: RendezvousConfig| rendezvous(&c).unwrap_err().to_string();
    assert!(e(config(at, 2, 2, t)).contains("rank 2 is not below the world size 2"));
    assert!(e(config(at, 0, 0, t)).contains("world size 0"));
    assert!(e(config(at, 0, MAX_HOSTLIST_HOSTS + 1, t)).contains("world size"));
    assert!(e(config("127.0.0.1:0".parse().unwrap(), 0, 2, t)).contains("has no port"));
    assert!(e(config(at, 0, 2, Duration::ZERO)).contains("timeout"));
    // Rank 0 must be where the master address points.
    let e = e(config("192.0.2.1:29500".parse().unwrap(), 0, 2, t));
    assert!(
        e.contains("rank 0 must run on the machine at 192.0.2.1"),
        "{e}"
    );
}

#[test]
fn long_lists_are_cut_and_counted() {
    let first: Vec<String> = (1..=MAX_NAMED).map(|r| r.to_string()).collect();
    assert_eq!(named(&first[..2], 2), "1, 2");
    let all = named(&first, 100);
    assert!(
        all.starts_with("1, 2, 3")
            && all.ends_with(&format!("{MAX_NAMED} and {} more", 100 - MAX_NAMED)),
        "{all}"
    );
}
