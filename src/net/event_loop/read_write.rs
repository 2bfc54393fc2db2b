//! The event loop's reading and writing: a connection's readiness, reading until
//! `WouldBlock` into the handshake or the frame decoder, delivering messages, Bye, and
//! moving the senders' frames to a connection and writing them out.
//!
//! Owns: the bytes on the sockets and the traffic counters. Must not know: the rules of
//! the peer table ([`crate::net::peers`]) or the timers ([`crate::net::timers`]) — it
//! reports what happened (a peer authenticated, closed or lost; bytes moved at `now`) and
//! they decide.

use std::io::{self, Read};

use serde::de::DeserializeOwned;

use super::{now, EventLoop};
use crate::net::conn::{Conn, ConnState, OutFrame};
use crate::net::frame::{self, FrameKind};
use crate::net::seal::FrameKeys;
use crate::net::shared::PeerStatus;
use crate::net::{Deliver, NetEvent};

impl<M: DeserializeOwned> EventLoop<M> {
    /// Handles readiness of the connection in `slot`.
    pub(super) fn conn_ready(&mut self, slot: usize, deliver: &mut Deliver<M>) {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        match conn.check_connected() {
            Ok(true) => {}
            Ok(false) => return,
            Err(why) => return self.handshake_failed(slot, why, None),
        }
        self.read(slot, deliver);
        if self.conns.get(slot).is_some_and(|c| c.is_some()) {
            self.flush(slot);
        }
    }

    /// Reads everything available on `slot` and handles it.
    pub(super) fn read(&mut self, slot: usize, deliver: &mut Deliver<M>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        while let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) {
            match conn.stream.read(&mut scratch) {
                Ok(0) => {
                    self.eof(slot);
                    break;
                }
                Ok(n) => {
                    conn.activity.received(now());
                    if !self.input(slot, &scratch[..n], deliver) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken(slot, format!("read failed: {e}"));
                    break;
                }
            }
        }
        self.scratch = scratch;
    }

    /// The connection in `slot` broke (I/O error).
    pub(super) fn broken(&mut self, slot: usize, why: String) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        match conn.state {
            ConnState::Handshaking { .. } => self.handshake_failed(slot, why, None),
            ConnState::Up { rank, .. } => self.lose(rank, why),
        }
    }

    /// The peer closed `slot`.
    pub(super) fn eof(&mut self, slot: usize) {
        let Some(conn) = self.conns[slot].as_ref() else {
            return;
        };
        match &conn.state {
            ConnState::Handshaking { hs, .. } => {
                // A peer we dialed that closes once it has our proof refused it (it
                // reveals nothing else to a dialer whose proof does not verify).
                match (conn.dialed, hs.claimed_peer()) {
                    (Some(_), Some(rank)) => {
                        let refusal = crate::net::handshake::Refusal::ClosedAfterProof { rank };
                        self.handshake_failed(slot, refusal.to_string(), Some(&refusal))
                    }
                    _ => self.handshake_failed(slot, "closed during the handshake".into(), None),
                }
            }
            ConnState::Up {
                rank,
                bye_received: true,
                ..
            } => self.close_gracefully(*rank),
            ConnState::Up { rank, .. } => {
                self.lose(*rank, "closed the connection without Bye".into())
            }
        }
    }

    /// Handles bytes read from `slot`; false if the connection is gone.
    pub(super) fn input(&mut self, slot: usize, bytes: &[u8], deliver: &mut Deliver<M>) -> bool {
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        let bytes = if let ConnState::Handshaking { hs, .. } = &mut conn.state {
            let mut out = Vec::new();
            let peers = &self.peers;
            let result = hs.feed(bytes, &mut out, |r| peers.settled(r));
            if !out.is_empty() {
                conn.out.push_back(OutFrame {
                    bytes: out,
                    counted: false,
                });
            }
            match result {
                Ok(None) => return true,
                Err(refusal) => {
                    self.handshake_failed(slot, refusal.to_string(), Some(&refusal));
                    return false;
                }
                Ok(Some(done)) => {
                    self.promote(slot, done.peer_rank, &done.keys);
                    &bytes[done.consumed..]
                }
            }
        } else {
            bytes
        };
        if bytes.is_empty() {
            return true;
        }
        let Some(conn) = self.conns[slot].as_mut() else {
            return false;
        };
        let ConnState::Up { rank, decoder, .. } = &mut conn.state else {
            return true;
        };
        let rank = *rank;
        self.shared.count_received_bytes(rank, bytes.len() as u64);
        let mut frames = std::mem::take(&mut self.frames);
        let fed = decoder.feed(bytes, &mut frames);
        // A frame's deadline runs from its header: restart it when a frame completed.
        conn.frame_started = match (decoder.pending_body(), conn.frame_started) {
            (None, _) => None,
            (Some(_), Some(t)) if frames.is_empty() => Some(t),
            (Some(_), _) => Some(now()),
        };
        self.shared.count_received_frames(rank, frames.len() as u64);
        let mut alive = true;
        for f in frames.drain(..) {
            if !alive {
                break;
            }
            match f.kind {
                FrameKind::Data => match frame::decode_data::<M>(&f.body) {
                    Ok(msg) => deliver(NetEvent::Msg {
                        from: rank,
                        msg,
                        bytes: f.body.len() + frame::WIRE_HEADER_LEN + crate::net::seal::TAG_LEN,
                    }),
                    Err(e) => {
                        self.lose(rank, format!("bad frame: {e}"));
                        alive = false;
                    }
                },
                FrameKind::Heartbeat => {}
                FrameKind::Bye => self.on_bye(slot, rank),
            }
        }
        self.frames = frames;
        if let (true, Err(e)) = (alive, fed) {
            self.lose(rank, format!("bad frame: {e}"));
            alive = false;
        }
        alive && self.conns[slot].is_some()
    }

    /// The handshake of `slot` completed with `rank`.
    pub(super) fn promote(&mut self, slot: usize, rank: u32, keys: &FrameKeys) {
        let now = now();
        let max_frame = self.cfg.max_frame;
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        conn.authenticated(rank, max_frame, keys, now);
        let addr = conn.addr;
        self.peers.authenticated(rank, slot);
        self.shared.set_status(rank, PeerStatus::Up);
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: rank {rank} at {addr} authenticated"
        );
    }

    /// The peer `rank` (on `slot`) said Bye: no more sends to it; flush, answer Bye.
    pub(super) fn on_bye(&mut self, slot: usize, rank: u32) {
        tracing::debug!(
            rank = self.rank(),
            "iterstore net: {} said Bye",
            self.peers.name(rank)
        );
        self.move_queue(slot, rank);
        self.shared.set_status(rank, PeerStatus::Closed);
        if let Some(Conn {
            state: ConnState::Up { bye_received, .. },
            ..
        }) = self.conns[slot].as_mut()
        {
            *bye_received = true;
        }
        self.send_bye(slot);
    }

    /// Queues our Bye on `slot` (once).
    pub(super) fn send_bye(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut() {
            conn.queue_bye();
        }
    }

    /// Moves the frames senders queued for `rank` to `slot`'s output (unless our Bye is
    /// already out); returns the peer's status.
    pub(super) fn move_queue(&mut self, slot: usize, rank: u32) -> PeerStatus {
        let Some(
            conn @ Conn {
                state: ConnState::Up {
                    bye_sent: false, ..
                },
                ..
            },
        ) = self.conns[slot].as_mut()
        else {
            return PeerStatus::Closed;
        };
        let (frames, status) = self.shared.take(rank);
        for bytes in frames {
            conn.queue_frame(bytes, true);
        }
        status
    }

    /// Moves every peer's queued frames to its connection and writes what it can; a peer
    /// declared lost by a sender (queue over the hard bound) is closed here.
    pub(super) fn pump_queues(&mut self) {
        for (rank, slot) in self.peers.up() {
            if let PeerStatus::Lost(reason) = self.move_queue(slot, rank) {
                self.lose(rank, reason);
                continue;
            }
            self.flush(slot);
        }
    }

    /// Writes as much of `slot`'s output as the socket takes.
    pub(super) fn flush(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot).and_then(|c| c.as_mut()) else {
            return;
        };
        if !conn.connected {
            return;
        }
        let written = conn.write_out();
        if written.bytes > 0 {
            conn.activity.sent(now());
        }
        let up = match conn.state {
            ConnState::Up {
                rank,
                bye_sent,
                bye_received,
                ..
            } => Some((rank, bye_sent && bye_received && conn.out.is_empty())),
            ConnState::Handshaking { .. } => None,
        };
        if let Some((rank, _)) = up {
            self.shared
                .count_sent(rank, written.bytes as u64, written.frames);
            if written.released > 0 {
                self.shared.release(rank, written.released);
            }
        }
        match (written.error, up) {
            (Some(why), _) => self.broken(slot, why),
            (None, Some((rank, true))) => self.close_gracefully(rank),
            _ => {}
        }
    }
}
