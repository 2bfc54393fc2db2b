//! The Prometheus endpoint (`Config::metrics_addr`): a cluster of two processes over TCP
//! is scraped during and between runs, and what it serves is parsed by a real parser of
//! both text formats (`openmetrics-parser`): clock lag per worker, bytes per peer,
//! specialization coverage, run and checkpoint durations.

use crate::util::{over_tcp, within, TempDir};
use iterstore::{Cluster, Config, Mode};
use openmetrics_parser::{
    openmetrics, prometheus, MetricNumber, OpenMetricsType, OpenMetricsValue, PrometheusValue,
};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The body of `GET /metrics` at `addr`, asking for OpenMetrics or not, and its
/// content type.
fn scrape(addr: SocketAddr, openmetrics: bool) -> (String, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = if openmetrics {
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n"
    } else {
        ""
    };
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{accept}\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .expect("a content type");
    (content_type.to_string(), body.to_string())
}

/// A sample's family and labels (`name{label="value",...}`) and its value.
type Samples = BTreeMap<String, f64>;

/// The key of a sample of `family` with `labels`.
fn key<'a>(family: &str, labels: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let labels: Vec<String> = labels.map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{family}{{{}}}", labels.join(","))
}

/// Counters and gauges of an OpenMetrics text, after checking its families' types and
/// units; histograms by their sample count (`family_count`).
fn parse_openmetrics(text: &str) -> Samples {
    let exposition = openmetrics::parse_openmetrics(text).expect("valid OpenMetrics");
    let mut out = Samples::new();
    for (name, family) in &exposition.families {
        // A unit in the name is declared too (but for histograms, which this parser
        // refuses a unit).
        for unit in ["seconds", "bytes"] {
            if name.ends_with(&format!("_{unit}"))
                && family.family_type != OpenMetricsType::Histogram
            {
                assert_eq!(family.unit, unit, "{name}");
            }
        }
        for sample in family.iter_samples() {
            let labels = sample.get_labelset().unwrap();
            let value = match (&family.family_type, &sample.value) {
                (OpenMetricsType::Counter, OpenMetricsValue::Counter(c)) => {
                    // An OpenMetrics counter's samples are its family's name plus `_total`.
                    let total = format!("{name}_total");
                    out.insert(key(&total, labels.iter()), c.value.as_f64());
                    continue;
                }
                (OpenMetricsType::Gauge, OpenMetricsValue::Gauge(n)) => n.as_f64(),
                (OpenMetricsType::Histogram, OpenMetricsValue::Histogram(h)) => {
                    let count = h.count.expect("a histogram's count") as f64;
                    out.insert(key(&format!("{name}_count"), labels.iter()), count);
                    continue;
                }
                (t, v) => panic!("{name}: a {t} family with value {v:?}"),
            };
            out.insert(key(name, labels.iter()), value);
        }
    }
    out
}

/// Counters and gauges of a Prometheus text (format 0.0.4).
fn parse_prometheus(text: &str) -> Samples {
    let exposition = prometheus::parse_prometheus(text).expect("valid Prometheus text");
    let mut out = Samples::new();
    for (name, family) in &exposition.families {
        for sample in family.iter_samples() {
            let labels = sample.get_labelset().unwrap();
            let value = match &sample.value {
                PrometheusValue::Counter(c) => c.value,
                PrometheusValue::Gauge(n) => *n,
                _ => continue,
            };
            let value = match value {
                MetricNumber::Int(i) => i as f64,
                MetricNumber::Float(f) => f,
            };
            out.insert(key(name, labels.iter()), value);
        }
    }
    out
}

/// `samples[name]`, or a failure listing what there is.
fn get(samples: &Samples, name: &str) -> f64 {
    *samples
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {:#?}", samples.keys()))
}

#[test]
fn a_running_cluster_of_two_processes_serves_metrics_that_parse() {
    let dir = TempDir::new("metrics");
    let path = dir.path().to_path_buf();
    let config = Config::new(2)
        .with_mode(Mode::Virtual)
        .with_metrics_addr("127.0.0.1:0".parse().unwrap());
    let scraped = within(120, move || {
        over_tcp(config, 2, |cluster| {
            let addr = cluster.metrics_addr().expect("an endpoint");
            let t = cluster.create_table::<f64>("t", 4)?;
            let iteration = |w: &mut iterstore::Worker<'_>| {
                for row in 0..8 {
                    let mut v = [0.0; 4];
                    w.read(&t, row, &mut v)?;
                    w.update(&t, row, &[1.0; 4])?;
                }
                w.clock()
            };
            cluster.virtual_iteration(iteration)?;
            for _ in 0..3 {
                cluster.run(iteration)?;
            }
            cluster.checkpoint(&path, "metrics test")?;
            // Branches: fork two, switch to one, free the other.
            let (a, b) = (
                cluster.fork(cluster.live_branch())?,
                cluster.fork(cluster.live_branch())?,
            );
            cluster.switch(a)?;
            cluster.free(b)?;
            // During a run: scraped from a worker, between its CLOCKs.
            let during = cluster.run(|w| {
                iteration(w)?;
                let samples = (w.id() % 2 == 0).then(|| parse_prometheus(&scrape(addr, false).1));
                iteration(w)?;
                Ok(samples)
            })?;
            let (om_type, om) = scrape(addr, true);
            let (plain_type, plain) = scrape(addr, false);
            Ok((
                cluster.rank(),
                during
                    .into_iter()
                    .flatten()
                    .next()
                    .expect("one worker scraped"),
                (om_type, parse_openmetrics(&om)),
                (plain_type, parse_prometheus(&plain)),
            ))
        })
    });
    for (rank, during, (om_type, om), (plain_type, plain)) in scraped {
        let (me, other) = (rank.to_string(), (1 - rank).to_string());
        let workers = [2 * rank, 2 * rank + 1];
        assert_eq!(get(&during, "iterstore_process_rank{}"), rank as f64);
        for w in workers {
            let clock = get(
                &during,
                &format!("iterstore_worker_clock{{worker=\"{w}\"}}"),
            );
            assert!(
                (4.0..=7.0).contains(&clock),
                "worker {w} mid-run at clock {clock}"
            );
        }
        assert!(
            om_type.starts_with("application/openmetrics-text"),
            "{om_type}"
        );
        assert!(
            plain_type.starts_with("text/plain; version=0.0.4"),
            "{plain_type}"
        );
        for samples in [&om, &plain] {
            // 3 runs of one clock, then one of two: every worker at clock 5, none behind.
            for w in workers {
                let of = |m: &str| get(samples, &format!("iterstore_{m}{{worker=\"{w}\"}}"));
                assert_eq!(of("worker_clock"), 5.0, "worker {w}");
                assert_eq!(of("worker_clock_lag"), 0.0, "worker {w}");
                let waited = of("worker_staleness_wait_seconds_total");
                assert!(
                    (0.0..120.0).contains(&waited),
                    "worker {w} waited {waited} s"
                );
            }
            let peer = |m: &str| format!("iterstore_peer_{m}{{peer=\"{other}\"}}");
            assert!(get(samples, &peer("sent_bytes_total")) > 0.0);
            assert!(get(samples, &peer("received_bytes_total")) > 0.0);
            assert!(get(samples, &peer("sent_frames_total")) > 0.0);
            assert!(get(samples, &peer("received_frames_total")) > 0.0);
            assert!(get(samples, &peer("queued_bytes")) >= 0.0);
            assert!(
                !samples
                    .keys()
                    .any(|k| k.contains(&format!("peer=\"{me}\""))),
                "no traffic with itself"
            );
            assert_eq!(get(samples, "iterstore_runs_total{}"), 4.0);
            assert!(get(samples, "iterstore_run_barrier_wait_seconds_total{}") >= 0.0);
            assert!(get(samples, "iterstore_accesses_total{path=\"tape\"}") >= 3.0 * 32.0);
            assert_eq!(
                get(samples, "iterstore_accesses_total{path=\"unplanned\"}"),
                0.0
            );
            assert!(get(samples, "iterstore_data_clock{}") >= 3.0);
            let ops = |op: &str| {
                get(
                    samples,
                    &format!("iterstore_branch_ops_total{{op=\"{op}\"}}"),
                )
            };
            assert_eq!(
                [ops("fork"), ops("switch"), ops("free"), ops("park")],
                [2.0, 1.0, 1.0, 0.0]
            );
            assert_eq!(get(samples, "iterstore_branches{}"), 2.0);
            assert_eq!(get(samples, "iterstore_live_branch{}"), 1.0);
        }
        assert_eq!(get(&om, "iterstore_run_duration_seconds_count{}"), 4.0);
        assert_eq!(
            get(&om, "iterstore_checkpoint_duration_seconds_count{}"),
            1.0
        );
    }
}

#[test]
fn an_address_that_cannot_be_bound_fails_the_start_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let err = Cluster::start(Config::new(1).with_metrics_addr(addr)).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("metrics_addr") && text.contains(&addr.to_string()),
        "{text}"
    );
    let cluster = Cluster::start(Config::new(1)).unwrap();
    assert_eq!(cluster.metrics_addr(), None, "no endpoint unless asked for");
}

#[test]
fn local_processes_serve_one_endpoint_each_and_stop_serving_at_shutdown() {
    let config = Config::new(1).with_metrics_addr("127.0.0.1:0".parse().unwrap());
    let addrs = within(60, move || {
        Cluster::run_local_processes(config, 2, |c| {
            let addr = c.metrics_addr().expect("an endpoint");
            let t = c.create_table::<i64>("t", 1)?;
            c.run(|w| {
                w.update(&t, 0, &[1])?;
                w.clock()
            })?;
            let samples = parse_prometheus(&scrape(addr, false).1);
            assert_eq!(get(&samples, "iterstore_process_rank{}"), c.rank() as f64);
            assert_eq!(get(&samples, "iterstore_runs_total{}"), 1.0);
            Ok(addr)
        })
        .unwrap()
    });
    assert_ne!(addrs[0], addrs[1]);
    for addr in addrs {
        assert!(TcpStream::connect(addr).is_err(), "{addr} still served");
    }
}
