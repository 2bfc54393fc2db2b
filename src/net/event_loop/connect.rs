//! The event loop's connections before authentication: accepting (at most
//! [`MAX_PENDING_ACCEPTS`] handshaking at once), dialing a lower rank, and acting on a
//! failed dial or handshake (close it, log it, redial, note a refusal for the timeout
//! error).
//!
//! Owns: the sockets' side of connecting. Must not know: which rank to dial when, or
//! whether a failure is fatal — the peer table decides ([`crate::net::peers`]) — nor
//! reading and writing ([`super::read_write`]).

use std::io;

use mio::net::TcpStream;
use serde::de::DeserializeOwned;

use super::{now, EventLoop, MAX_PENDING_ACCEPTS};
use crate::net::conn::{Conn, ConnState};
use crate::net::handshake::{self, Handshake, Role};
use crate::net::peers::DialFailed;

impl<M: DeserializeOwned> EventLoop<M> {
    /// A new handshake for our end `role`.
    pub(super) fn handshake(&self, role: Role) -> io::Result<Box<Handshake>> {
        Ok(Box::new(Handshake::new(
            role,
            self.rank(),
            self.peers.size(),
            self.cfg.cluster_id,
            &self.cfg.secret,
            handshake::fresh_nonce()?,
        )))
    }

    /// Accepts every pending connection and starts its handshake.
    pub(super) fn accept_all(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            let (stream, addr) = match listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(rank = self.rank(), "iterstore net: accept failed: {e}");
                    return;
                }
            };
            self.make_room_for_an_accept();
            let hs = match self.handshake(Role::Acceptor) {
                Ok(hs) => hs,
                Err(e) => {
                    self.warn_stranger(addr, format_args!("no nonce: {e}"));
                    continue;
                }
            };
            let timeout = self.cfg.handshake_timeout;
            let conn = Conn::handshaking(stream, addr, None, hs, now(), timeout);
            match self.add_conn(conn) {
                Ok(slot) => {
                    tracing::debug!(rank = self.rank(), peer = %addr, "iterstore net: accepted a connection");
                    self.flush(slot);
                }
                Err(e) => {
                    tracing::warn!(rank = self.rank(), peer = %addr, "iterstore net: cannot register: {e}")
                }
            }
        }
    }

    /// With [`MAX_PENDING_ACCEPTS`] accepted connections handshaking, closes the oldest
    /// of them that has not yet sent a hello claiming a listed rank (else the oldest): the
    /// newest, which may be a listed peer's, always gets its chance, and a peer that has
    /// said who it is keeps its place while idle sockets come and go.
    fn make_room_for_an_accept(&mut self) {
        let pending = || self.conns.iter().flatten().filter(|c| c.pending_accept());
        if pending().count() < MAX_PENDING_ACCEPTS {
            return;
        }
        let oldest = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| match c {
                Some(c) if c.pending_accept() => match &c.state {
                    // Those that have said who they are (a listed rank's hello) go last.
                    ConnState::Handshaking { deadline, hs } => {
                        Some((hs.claimed_peer().is_some(), deadline.at(), slot, c.addr))
                    }
                    _ => None,
                },
                _ => None,
            })
            .min();
        if let Some((_, _, slot, addr)) = oldest {
            self.warn_stranger(
                addr,
                format_args!(
                    "closed an unauthenticated connection: {MAX_PENDING_ACCEPTS} handshakes pending, it was the oldest"
                ),
            );
            self.drop_conn(slot);
        }
    }

    /// Dials `rank` now.
    pub(super) fn dial(&mut self, rank: u32) {
        let addr = self.peers.addr(rank);
        let attempt = TcpStream::connect(addr).and_then(|stream| {
            let hs = self.handshake(Role::Dialer { target: rank })?;
            let timeout = self.cfg.handshake_timeout;
            self.add_conn(Conn::handshaking(
                stream,
                addr,
                Some(rank),
                hs,
                now(),
                timeout,
            ))
        });
        match attempt {
            Ok(slot) => {
                tracing::debug!(
                    rank = self.rank(),
                    "iterstore net: dialing {}",
                    self.peers.name(rank)
                );
                self.peers.dialing(rank, slot);
            }
            Err(e) => self.dial_failed(rank, format!("cannot connect: {e}")),
        }
    }

    /// A dial of `rank` failed (transiently): close it and retry after a pause.
    pub(super) fn dial_failed(&mut self, rank: u32, why: String) {
        let failed = self.peers.dial_failed(rank, why.clone(), now());
        self.after_dial_failure(rank, &why, failed);
    }

    /// Acts on what the peer table made of a failed dial of `rank`.
    pub(super) fn after_dial_failure(&mut self, rank: u32, why: &str, failed: DialFailed) {
        let DialFailed::Retry { close, pause } = failed else {
            return;
        };
        if let Some(slot) = close {
            self.drop_conn(slot);
        }
        if let Some(pause) = pause {
            tracing::debug!(
                rank = self.rank(),
                "iterstore net: dialing {} failed ({why}); retrying in {pause:?}",
                self.peers.name(rank)
            );
        }
    }

    /// A connection's handshake failed or the connection broke before authentication.
    /// `refusal` says whether the peer was refused (wrong cluster, bad proof...) as opposed
    /// to an I/O problem.
    pub(super) fn handshake_failed(
        &mut self,
        slot: usize,
        why: String,
        refusal: Option<&handshake::Refusal>,
    ) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        let (addr, dialed) = (conn.addr, conn.dialed);
        let claimed = match &conn.state {
            ConnState::Handshaking { hs, .. } => hs.claimed_peer(),
            _ => None,
        };
        if let Some(rank) = dialed {
            let refused = refusal.is_some();
            match self
                .peers
                .dial_handshake_failed(rank, why.clone(), refused, now())
            {
                DialFailed::Fatal => {
                    // The peer we are configured to reach refuses us, or is not who we
                    // expect: retrying will not help.
                    tracing::warn!(
                        rank = self.rank(),
                        "iterstore net: handshake with {} failed: {why}",
                        self.peers.name(rank)
                    );
                    self.drop_conn(slot);
                }
                failed => self.after_dial_failure(rank, &why, failed),
            }
            return;
        }
        if let Some(r) = refusal {
            self.warn_stranger(addr, format_args!("refused connection: {why}"));
            if let Some(claimed) = r.claimed_rank() {
                self.peers
                    .note_refusal(claimed, format!("refused a connection from {addr}: {why}"));
            }
        } else {
            if let Some(c) = claimed {
                // The peer saw our proof and closed: it most likely refused it.
                self.peers.note_refusal(
                    c,
                    format!(
                        "a connection from {addr} claiming this rank {why} (it may have \
                         refused our proof: a different secret or settings)"
                    ),
                );
            }
            self.warn_stranger(
                addr,
                format_args!("closed unauthenticated connection: {why}"),
            );
        }
        self.drop_conn(slot);
    }
}
