//! [`MetricsServer`]: the thread that answers `GET /metrics` with the encoded registry.
//!
//! A minimal HTTP/1.1 responder, one request per connection and one connection at a time,
//! bounded everywhere: the listener is polled (non-blocking, every [`POLL`]) so the
//! thread sees [`MetricsServer::stop`] promptly; a request head must arrive within
//! [`REQUEST_DEADLINE`] and fit in [`MAX_REQUEST`] bytes; a response is written with a
//! timeout. A bad or slow client costs the next scraper at most those seconds. It knows
//! nothing of what the registry holds.

use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::registry::Registry;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the listener is polled for a connection (and the stop flag checked).
const POLL: Duration = Duration::from_millis(50);
/// The most bytes of a request head read; a longer one is refused.
const MAX_REQUEST: usize = 8 << 10;
/// How long a client has to send its request head.
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// How long writing a response may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The content type of OpenMetrics text, served to scrapers that accept it.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The endpoint's thread, serving until [`stop`](Self::stop) (or drop).
pub(crate) struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `registry` on `listener` (already bound) from a thread named for `rank`.
    pub(crate) fn spawn(
        listener: TcpListener,
        registry: Registry,
        rank: u32,
    ) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("iterstore-metrics-{rank}"))
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((stream, peer)) => {
                            if let Err(e) = answer(stream, &registry) {
                                tracing::debug!("metrics endpoint {addr}: client {peer}: {e}");
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(POLL);
                        }
                        Err(e) => {
                            tracing::warn!("metrics endpoint {addr}: accepting: {e}");
                            std::thread::sleep(POLL);
                        }
                    }
                }
            })?;
        tracing::info!("process {rank}: metrics at http://{addr}/metrics");
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread and waits for it (within a request's deadlines). Idempotent.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Reads one request from `stream` and answers it.
fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let response = match read_head(&mut stream)? {
        Some(head) => respond(&head, registry),
        None => reply("400 Bad Request", "text/plain", "bad request\n"),
    };
    stream.write_all(&response)?;
    stream.flush()
}

/// The request head (up to its blank line), or `None` if it is too long, not text, or cut
/// short; `Err` if the client did not send it in time.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&head, b"\r\n\r\n").or_else(|| find(&head, b"\n\n")) {
            head.truncate(end);
            return Ok(String::from_utf8(head).ok());
        }
        if head.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The response to a request with head `head`.
fn respond(head: &str, registry: &Registry) -> Vec<u8> {
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return reply("404 Not Found", "text/plain", "try /metrics\n");
    }
    if method != "GET" {
        return reply("405 Method Not Allowed", "text/plain", "GET only\n");
    }
    // Content negotiation: OpenMetrics for a scraper that accepts it (Prometheus does),
    // the Prometheus text format for everyone else.
    let openmetrics = lines.any(|l| {
        l.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("accept")
                && value.contains("application/openmetrics-text")
        })
    });
    let mut body = String::new();
    let encoded = if openmetrics {
        text::encode(&mut body, registry)
    } else {
        prometheus_text::encode(&mut body, registry)
    };
    match encoded {
        Ok(()) if openmetrics => reply("200 OK", OPENMETRICS, &body),
        Ok(()) => reply("200 OK", prometheus_text::CONTENT_TYPE, &body),
        Err(_) => reply(
            "500 Internal Server Error",
            "text/plain",
            "encoding failed\n",
        ),
    }
}

/// An HTTP/1.1 response that closes the connection.
fn reply(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    /// A server of one counter (at 3) on a free port.
    fn server() -> MetricsServer {
        let mut registry = Registry::with_prefix("t");
        let c: Counter = Counter::default();
        c.inc_by(3);
        registry.register("things", "Things", c);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        MetricsServer::spawn(listener, registry, 0).unwrap()
    }

    /// Sends `request` and returns the whole response.
    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_both_formats_by_accept_header_and_nothing_else() {
        let mut server = server();
        let addr = server.addr();
        let plain = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(plain.starts_with("HTTP/1.1 200 OK\r\n"), "{plain}");
        assert!(plain.contains("text/plain; version=0.0.4"), "{plain}");
        assert!(plain.contains("\nt_things_total 3\n"), "{plain}");
        let om = get(
            addr,
            "GET /metrics?x=1 HTTP/1.1\r\naccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
        );
        assert!(om.contains(OPENMETRICS), "{om}");
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(get(addr, "GET / HTTP/1.0\r\n\r\n").contains("404"));
        assert!(get(addr, "POST /metrics HTTP/1.0\r\n\r\n").contains("405"));
        // Too long a head: refused (or, if the server closed on the unread rest before
        // this client read the answer, the connection reset).
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let long = format!("GET /metrics HTTP/1.0\r\nX: {}\r\n\r\n", "a".repeat(20_000));
        let mut out = String::new();
        match s
            .write_all(long.as_bytes())
            .and_then(|()| s.read_to_string(&mut out))
        {
            Ok(_) => assert!(out.contains("400 Bad Request"), "{out}"),
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ),
                "{e}"
            ),
        }
        server.stop();
        assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    }

    #[test]
    fn a_silent_client_does_not_keep_others_waiting_for_long() {
        let mut server = server();
        let addr = server.addr();
        let _silent = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        let reply = get(addr, "GET /metrics HTTP/1.1\r\n\r\n");
        assert!(reply.contains("200 OK"), "{reply}");
        assert!(started.elapsed() < REQUEST_DEADLINE + Duration::from_secs(3));
        server.stop();
    }
}
