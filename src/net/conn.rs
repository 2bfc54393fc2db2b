//! One TCP connection of the event loop: its socket, where it is (handshaking, with its
//! deadline, or up, with its frame decoder and Bye flags), its queue of frames to write,
//! and when it last received and sent bytes.
//!
//! Owns: the connection's own state and writing its queue to the socket (vectored,
//! until `WouldBlock`); telling when a dialed socket has connected. Must not know: the
//! peer table or the phase (see [`super::peers`]), the poller, the senders' shared queues,
//! the counters — what it wrote is returned for the event loop to account — nor the
//! clock: times are `now` arguments.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

use super::frame::{self, FrameDecoder, FrameKind, HEADER_LEN};
use super::handshake::Handshake;
use super::seal::{FrameKeys, Opener, Sealer};
use super::timers::{Activity, Deadline};

/// Frames written per `write_vectored` call, at most.
const MAX_IOVECS: usize = 64;

/// Writes `iov` to `stream` as `writev` would, but with `MSG_NOSIGNAL`: a peer gone
/// (killed, its connection reset) is an `EPIPE` error to report, not a `SIGPIPE` that
/// would kill this process where the signal's default action is restored (the CLI does,
/// for its own output). `write_vectored` is `writev`, which raises the signal.
fn send_vectored(stream: &TcpStream, iov: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero `msghdr` is valid (no address, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // `IoSlice` is ABI-compatible with `iovec` on Unix; sendmsg only reads through it.
    msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: the socket is open for the call, and `msg` points at `iov`, which
    // outlives it.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A frame waiting to be written.
pub(crate) struct OutFrame {
    /// The whole frame.
    pub(crate) bytes: Vec<u8>,
    /// Whether its bytes count in the peer's shared queue bound (senders' frames do;
    /// handshake, heartbeat and bye bytes do not).
    pub(crate) counted: bool,
}

/// Where a connection is.
pub(crate) enum ConnState {
    /// Authenticating, until `deadline`.
    Handshaking {
        /// The state machine.
        hs: Box<Handshake>,
        /// When the connection is closed if not authenticated.
        deadline: Deadline,
    },
    /// Authenticated peer `rank`.
    Up {
        /// The peer's rank.
        rank: u32,
        /// Incoming frames (opened with the receiving key).
        decoder: FrameDecoder,
        /// Seals outgoing frames in order (the sending key).
        sealer: Sealer,
        /// Our Bye is queued: nothing goes after it.
        bye_sent: bool,
        /// The peer's Bye arrived.
        bye_received: bool,
    },
}

/// One TCP connection.
pub(crate) struct Conn {
    /// The socket.
    pub(crate) stream: TcpStream,
    /// The peer's address (for dialed connections, the configured one).
    pub(crate) addr: SocketAddr,
    /// The rank this connection dialed, if we dialed it.
    pub(crate) dialed: Option<u32>,
    /// Whether the TCP connection is established (dialed ones start unconnected).
    pub(crate) connected: bool,
    /// Handshaking or up.
    pub(crate) state: ConnState,
    /// Frames to write, in order.
    pub(crate) out: VecDeque<OutFrame>,
    /// Bytes of `out[0]` already written.
    out_off: usize,
    /// When bytes last arrived and were last written.
    pub(crate) activity: Activity,
    /// When the header of the frame whose body is still arriving was read (the frame's
    /// deadline runs from it).
    pub(crate) frame_started: Option<Instant>,
}

/// What one [`Conn::write_out`] wrote.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Bytes written.
    pub(crate) bytes: usize,
    /// Whole frames written.
    pub(crate) frames: u64,
    /// Bytes of whole counted frames written (to release from the peer's queue bound).
    pub(crate) released: usize,
    /// The write error that stopped it, if any.
    pub(crate) error: Option<String>,
}

impl Conn {
    /// A new connection starting its handshake at `now`: our hello queued first, the
    /// handshake due within `timeout`. `dialed`: the rank we dialed (`None`: accepted; an
    /// accepted socket is connected already, a dialed one once writable).
    pub(crate) fn handshaking(
        stream: TcpStream,
        addr: SocketAddr,
        dialed: Option<u32>,
        hs: Box<Handshake>,
        now: Instant,
        timeout: Duration,
    ) -> Conn {
        // Small protocol messages (a refresh request, a barrier) must not wait for
        // Nagle's algorithm and the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        let hello = hs.hello().to_vec();
        Conn {
            stream,
            addr,
            dialed,
            connected: dialed.is_none(),
            state: ConnState::Handshaking {
                hs,
                deadline: Deadline::after(now, timeout),
            },
            out: VecDeque::from([OutFrame {
                bytes: hello,
                counted: false,
            }]),
            out_off: 0,
            activity: Activity::new(now),
            frame_started: None,
        }
    }

    /// Whether this is an accepted connection still handshaking.
    pub(crate) fn pending_accept(&self) -> bool {
        self.dialed.is_none() && matches!(self.state, ConnState::Handshaking { .. })
    }

    /// The handshake completed at `now` with `rank`, giving the connection's `keys`: the
    /// connection is up.
    pub(crate) fn authenticated(
        &mut self,
        rank: u32,
        max_frame: usize,
        keys: &FrameKeys,
        now: Instant,
    ) {
        self.state = ConnState::Up {
            rank,
            decoder: FrameDecoder::new(max_frame, Opener::new(&keys.recv)),
            sealer: Sealer::new(&keys.send),
            bye_sent: false,
            bye_received: false,
        };
        self.activity = Activity::new(now);
    }

    /// Queues our Bye, once (only on an authenticated connection): nothing goes after it.
    pub(crate) fn queue_bye(&mut self) {
        if let ConnState::Up { bye_sent, .. } = &mut self.state {
            if !*bye_sent {
                *bye_sent = true;
                self.queue_control(FrameKind::Bye);
            }
        }
    }

    /// Queues a control frame (heartbeat or Bye; not counted), sealed.
    pub(crate) fn queue_control(&mut self, kind: FrameKind) {
        self.queue_frame(frame::control_frame(kind).to_vec(), false);
    }

    /// Seals `bytes` (an encoded frame, tags zeroed) as this connection's next frame and
    /// queues it; `counted`: whether it counts in the peer's shared queue bound. Only on
    /// an authenticated connection (before it, nothing but the handshake is sent).
    pub(crate) fn queue_frame(&mut self, mut bytes: Vec<u8>, counted: bool) {
        let ConnState::Up { sealer, .. } = &mut self.state else {
            debug_assert!(false, "a frame queued before the handshake completed");
            return;
        };
        sealer.seal(&mut bytes, HEADER_LEN);
        self.out.push_back(OutFrame { bytes, counted });
    }

    /// Whether a dialed socket has connected: `Ok(false)` not yet, `Err` why it failed.
    pub(crate) fn check_connected(&mut self) -> Result<bool, String> {
        if self.connected {
            return Ok(true);
        }
        match self.stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => return Err(format!("cannot connect: {e}")),
        }
        match self.stream.peer_addr() {
            Ok(_) => {
                self.connected = true;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(format!("cannot connect: {e}")),
        }
    }

    /// Writes as much of the output as the socket takes (nothing before it is connected).
    pub(crate) fn write_out(&mut self) -> Written {
        let mut w = Written::default();
        if !self.connected {
            return w;
        }
        while !self.out.is_empty() {
            let mut iov = [IoSlice::new(&[]); MAX_IOVECS];
            let mut n_iov = 0;
            for (i, f) in self.out.iter().take(MAX_IOVECS).enumerate() {
                let start = if i == 0 { self.out_off } else { 0 };
                iov[i] = IoSlice::new(&f.bytes[start..]);
                n_iov += 1;
            }
            match send_vectored(&self.stream, &iov[..n_iov]) {
                Ok(0) => {
                    w.error = Some("write returned 0".to_string());
                    break;
                }
                Ok(mut n) => {
                    w.bytes += n;
                    while n > 0 {
                        let left = self.out[0].bytes.len() - self.out_off;
                        if n >= left {
                            n -= left;
                            let f = self.out.pop_front().expect("a frame");
                            self.out_off = 0;
                            w.frames += 1;
                            if f.counted {
                                w.released += f.bytes.len();
                            }
                        } else {
                            self.out_off += n;
                            n = 0;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    w.error = Some(format!("write failed: {e}"));
                    break;
                }
            }
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether SIGPIPE is pending on this thread.
    fn sigpipe_pending() -> bool {
        // SAFETY: `set` is a valid, initialised signal set for sigpending to fill.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigpending(&mut set);
            libc::sigismember(&set, libc::SIGPIPE) == 1
        }
    }

    #[test]
    fn writing_to_a_closed_peer_fails_without_raising_sigpipe() {
        // SIGPIPE blocked on this thread: on Linux a blocked signal is never discarded,
        // even if ignored, so one raised by a write stays pending where the test sees it.
        // SAFETY: changes this thread's signal mask only; it ends with the test.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        assert!(!sigpipe_pending(), "pending before the test");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        drop(listener.accept().unwrap().0);
        let stream = TcpStream::from_std(ours);
        let frame = [0u8; 1024];
        let mut failed = None;
        // The first writes may land before the peer's reset arrives.
        for _ in 0..1000 {
            match send_vectored(&stream, &[IoSlice::new(&frame)]) {
                Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let e = failed.expect("writes to a closed peer kept succeeding");
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{e}"
        );
        // Once more after the reset: the EPIPE case, where writev would raise SIGPIPE.
        let again = send_vectored(&stream, &[IoSlice::new(&frame)]).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::BrokenPipe, "{again}");
        assert!(!sigpipe_pending(), "a write raised SIGPIPE");
    }
}
