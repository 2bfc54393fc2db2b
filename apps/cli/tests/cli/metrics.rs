//! `iterstore run ... --metrics-addr`: a cluster of two processes launched by
//! `--processes 2` serves one Prometheus endpoint per process (the port plus the rank),
//! scraped while the run goes on and parsed by a real parser of the text format.

use openmetrics_parser::{prometheus, MetricNumber, PrometheusValue};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port `p` of 127.0.0.1 such that `p` and `p + 1` are both free right now.
fn two_free_ports() -> u16 {
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = first.local_addr().unwrap().port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two consecutive free ports");
}

/// The counters and gauges of one scrape of `addr` (`name{labels}` → value), or `None`
/// if nothing answers there (yet).
fn scrape(addr: SocketAddr) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let exposition = prometheus::parse_prometheus(body).expect("valid Prometheus text");
    let mut out = BTreeMap::new();
    for (name, family) in &exposition.families {
        for sample in family.iter_samples() {
            let value = match &sample.value {
                PrometheusValue::Counter(c) => c.value,
                PrometheusValue::Gauge(n) => *n,
                _ => continue,
            };
            let value = match value {
                MetricNumber::Int(i) => i as f64,
                MetricNumber::Float(f) => f,
            };
            let labels: Vec<String> = (sample.get_labelset().unwrap().iter())
                .map(|(k, v)| format!("{k}=\"{v}\""))
                .collect();
            out.insert(format!("{name}{{{}}}", labels.join(",")), value);
        }
    }
    Some(out)
}

/// Kills the launcher (and so its children) if the test ends before it does.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_running_mf_cluster_answers_scrapes_with_clock_lag_and_bytes_per_peer() {
    let port = two_free_ports();
    let child = Command::new(env!("CARGO_BIN_EXE_iterstore"))
        .args([
            "run",
            "mf",
            "--synthetic",
            "small",
            "--iters",
            "300",
            "--workers",
            "1",
        ])
        .args(["--processes", "2", "-q", "--metrics-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the iterstore binary runs");
    let mut running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    for rank in 0..2u16 {
        let addr = SocketAddr::from(([127, 0, 0, 1], port + rank));
        let (me, peer) = (rank.to_string(), (1 - rank).to_string());
        let samples = loop {
            // The endpoint answers from the start; wait until this rank's worker exists
            // and it has sent its peer something (the cluster's start-up messages).
            let lag = format!("iterstore_worker_clock_lag{{worker=\"{me}\"}}");
            let sent = format!("iterstore_peer_sent_bytes_total{{peer=\"{peer}\"}}");
            let got = scrape(addr)
                .filter(|s| s.contains_key(&lag) && s.get(&sent).is_some_and(|b| *b > 0.0));
            if let Some(samples) = got {
                break samples;
            }
            assert!(
                running.0.try_wait().unwrap().is_none(),
                "the run ended before rank {rank}'s endpoint answered"
            );
            assert!(
                Instant::now() < deadline,
                "rank {rank} at {addr} never answered"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let get = |name: &str| {
            *samples
                .get(name)
                .unwrap_or_else(|| panic!("rank {rank}: no {name} in {:#?}", samples.keys()))
        };
        assert_eq!(get("iterstore_process_rank{}"), f64::from(rank));
        // One worker a process: worker `rank`, never behind itself.
        assert_eq!(
            get(&format!("iterstore_worker_clock_lag{{worker=\"{me}\"}}")),
            0.0
        );
        assert!(
            get(&format!(
                "iterstore_peer_sent_bytes_total{{peer=\"{peer}\"}}"
            )) > 0.0
        );
        assert!(get(&format!("iterstore_peer_queued_bytes{{peer=\"{peer}\"}}")) >= 0.0);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
}
