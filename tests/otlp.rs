//! OTLP export against an in-test OTLP/HTTP receiver that decodes the protobuf requests
//! with `opentelemetry-proto` (the OpenTelemetry Collector is not packaged here). The
//! daemon reads `libfake_dcmi.so` as on a real node.
//!
//! - What arrives over OTLP equals what `/metrics` shows: every family, by name, unit and
//!   value, with the resource attributes; gzip on.
//! - The endpoint down, then up: scraping and probing go on, the failure counter rises,
//!   delivery resumes.
//! - Traces: with `otlp.traces` a span per probe round arrives with child spans per
//!   collective; without it, none.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{Daemon, Start, fake_config, free_port, loopback_peers, value, write_key};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message as _;

const SCENARIO: &str = include_str!("fake-dcmi/scenarios/example.json");

/// One request as received.
#[derive(Debug, Clone)]
struct Req {
    path: String,
    gzip: bool,
    body: Vec<u8>,
}

/// An OTLP/HTTP receiver on a given listener; answers with `status` (200 unless changed).
struct Receiver {
    rx: mpsc::Receiver<Req>,
    status: Arc<AtomicU16>,
    seen: Arc<Mutex<Vec<Req>>>,
}

fn receiver(listener: TcpListener) -> Receiver {
    let (tx, rx) = mpsc::channel();
    let status = Arc::new(AtomicU16::new(200));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (st, sn) = (status.clone(), seen.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let tx = tx.clone();
            let (st, sn) = (st.clone(), sn.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let (mut len, mut gzip) = (0usize, false);
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap_or((h, ""));
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "content-encoding" => gzip = v.trim() == "gzip",
                            _ => {}
                        }
                    }
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    if gzip {
                        let mut d = flate2::read::GzDecoder::new(&body[..]);
                        let mut out = Vec::new();
                        d.read_to_end(&mut out).expect("valid gzip body");
                        body = out;
                    }
                    let code = st.load(Ordering::SeqCst);
                    let reason = if code == 200 {
                        "OK"
                    } else {
                        "Service Unavailable"
                    };
                    let _ = stream.write_all(
                        format!("HTTP/1.1 {code} {reason}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n").as_bytes(),
                    );
                    if code == 200 {
                        let req = Req { path, gzip, body };
                        sn.lock().unwrap().push(req.clone());
                        let _ = tx.send(req);
                    }
                }
            });
        }
    });
    Receiver { rx, status, seen }
}

impl Receiver {
    /// The next request on `path` within the timeout.
    fn next(&self, path: &str, timeout: Duration) -> Req {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = self
                .rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {path} request within {timeout:?}"));
            if r.path == path {
                return r;
            }
        }
    }
}

fn any(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|a| a.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn kv(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|a| (a.key.clone(), any(&a.value)))
        .collect()
}

/// Attributes (or labels) and a value.
type Point = (BTreeMap<String, String>, f64);
/// name → (unit, is_sum, points).
type Points = BTreeMap<String, (String, bool, Vec<Point>)>;

fn points(req: &ExportMetricsServiceRequest) -> Points {
    let mut out = Points::new();
    for rm in &req.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let (dps, sum) = match &m.data {
                    Some(metric::Data::Gauge(g)) => (&g.data_points, false),
                    Some(metric::Data::Sum(s)) => {
                        assert_eq!(s.aggregation_temporality, 2, "{}: cumulative", m.name);
                        (&s.data_points, true)
                    }
                    other => panic!("{}: unexpected data {other:?}", m.name),
                };
                let e = out
                    .entry(m.name.clone())
                    .or_insert_with(|| (m.unit.clone(), sum, Vec::new()));
                for p in dps {
                    let v = match p.value {
                        Some(number_data_point::Value::AsDouble(d)) => d,
                        Some(number_data_point::Value::AsInt(i)) => i as f64,
                        None => f64::NAN,
                    };
                    e.2.push((kv(&p.attributes), v));
                }
            }
        }
    }
    out
}

/// Families of a 0.0.4 scrape as OTLP names: name → [(labels, value)].
fn scrape_families(text: &str) -> BTreeMap<String, Vec<Point>> {
    let mut types = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(r) = line.strip_prefix("# TYPE ") {
            let (n, t) = r.split_once(' ').unwrap();
            types.insert(n.to_string(), t.to_string());
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, val) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((m, l)) => (m, common::parse_labels(l.trim_end_matches('}'))),
            None => (series, Vec::new()),
        };
        let labels: BTreeMap<String, String> = labels.into_iter().collect();
        let v: f64 = match val {
            "+Inf" => f64::INFINITY,
            x => x.parse().unwrap(),
        };
        let otel = match types.get(name).map(String::as_str) {
            Some("counter") => name.strip_suffix("_total").unwrap().to_string(),
            _ => name.to_string(),
        };
        out.entry(otel).or_default().push((labels, v));
    }
    out
}

#[test]
fn otlp_metrics_equal_the_scrape_with_units_resource_and_gzip() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let rx = receiver(listener);
    let cfg = fake_config(&format!(
        "[collectors]\nhost = false\n[otlp]\nendpoint = \"{endpoint}\"\ninterval = \"500ms\"\ncompression = \"gzip\"\n"
    ));
    let mut start = Start::new(&cfg).scenario(SCENARIO);
    start.env = vec![
        ("NODE_NAME", "npu-node-a".to_string()),
        ("POD_NAME", "hcclwatch-x7k2p".to_string()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "k8s.cluster.name=training-a".to_string(),
        ),
    ];
    let d = Daemon::start(start);
    d.wait_for("the first NPU readings", Duration::from_secs(20), |s| {
        value(s, "hcclwatch_npu_temperature_celsius", &[("npu", "0")]).is_some()
    });
    // A scrape, then an export taken after it that carries every family of the scrape.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (scrape, req, raw) = loop {
        let scrape = d.scrape();
        let raw = rx.next("/v1/metrics", Duration::from_secs(10));
        let req = ExportMetricsServiceRequest::decode(&raw.body[..]).expect("protobuf request");
        let p = points(&req);
        let fams = scrape_families(&scrape);
        let missing: Vec<&String> = fams
            .keys()
            .filter(|n| !n.starts_with("hcclwatch_otlp_") && !p.contains_key(*n))
            .collect();
        if missing.is_empty() {
            break (scrape, req, raw);
        }
        assert!(
            Instant::now() < deadline,
            "families never exported over OTLP: {missing:?}"
        );
    };
    assert!(raw.gzip, "the request was not gzip-compressed");

    // Resource attributes.
    let res = kv(&req.resource_metrics[0]
        .resource
        .as_ref()
        .unwrap()
        .attributes);
    assert_eq!(res["service.name"], "hcclwatch");
    assert_eq!(res["service.version"], env!("CARGO_PKG_VERSION"));
    assert!(!res["host.name"].is_empty());
    assert_eq!(res["k8s.node.name"], "npu-node-a");
    assert_eq!(res["k8s.pod.name"], "hcclwatch-x7k2p");
    assert_eq!(res["k8s.cluster.name"], "training-a");

    // Names, units and values of the device families match the scrape exactly (the fake's
    // readings are constant, so "the same moment" is any moment).
    let p = points(&req);
    let fams = scrape_families(&scrape);
    let mut compared = 0;
    for (name, samples) in fams.iter().filter(|(n, _)| n.starts_with("hcclwatch_npu_")) {
        let (_, _, got) = &p[name];
        for (labels, v) in samples {
            let g = got
                .iter()
                .find(|(a, _)| a == labels)
                .unwrap_or_else(|| panic!("{name}{labels:?} not in the OTLP export: {got:?}"));
            assert_eq!(g.1, *v, "{name}{labels:?}");
            compared += 1;
        }
        assert_eq!(got.len(), samples.len(), "{name}: extra OTLP points");
    }
    assert!(compared > 30, "only {compared} points compared");
    assert_eq!(p["hcclwatch_npu_temperature_celsius"].0, "Cel");
    assert_eq!(p["hcclwatch_npu_hbm_used_bytes"].0, "By");
    assert_eq!(p["hcclwatch_npu_voltage_volts"].0, "V");
    assert_eq!(p["hcclwatch_npu_aicore_frequency_hertz"].0, "Hz");
    assert_eq!(p["hcclwatch_npu_utilization_ratio"].0, "1");
    let ecc = &p["hcclwatch_npu_hbm_ecc_errors"];
    assert!(ecc.1, "a counter is an OTLP sum");
    assert_eq!(ecc.0, "{error}");

    // The hardware semantic conventions carry the same readings.
    let t = &p["hw.temperature"];
    assert_eq!(t.0, "Cel");
    let die =
        t.2.iter()
            .find(|(a, _)| a["hw.id"] == "npu0-die")
            .expect("hw.temperature of npu0");
    assert_eq!(
        die.1,
        value(
            &scrape,
            "hcclwatch_npu_temperature_celsius",
            &[("npu", "0")]
        )
        .unwrap()
    );
    assert_eq!(die.0["hw.type"], "temperature");
    let status = &p["hw.status"].2;
    assert!(
        status
            .iter()
            .any(|(a, v)| a["hw.state"] == "ok" && *v == 1.0 && a["hw.id"] == "npu0")
    );
    let errors = &p["hw.errors"].2;
    assert!(
        errors
            .iter()
            .any(|(a, v)| a["error.type"] == "hbm_ecc_corrected" && *v == 3.0),
        "{errors:?}"
    );

    // /metrics reports the export's success.
    let s = d.wait_for("an OTLP success timestamp", Duration::from_secs(10), |s| {
        value(
            s,
            "hcclwatch_otlp_last_success_timestamp_seconds",
            &[("signal", "metrics")],
        )
        .is_some()
    });
    assert_eq!(
        value(
            &s,
            "hcclwatch_otlp_export_failures_total",
            &[("signal", "metrics")]
        ),
        Some(0.0)
    );
}

/// The one point of `name` whose attributes include all of `want`.
fn point(p: &Points, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    let (_, _, pts) = p.get(name)?;
    let hits: Vec<f64> = pts
        .iter()
        .filter(|(a, _)| {
            want.iter()
                .all(|(k, v)| a.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
        .collect();
    assert!(
        hits.len() <= 1,
        "{name}{want:?} matches {} points",
        hits.len()
    );
    hits.first().copied()
}

/// OTLP carries the readings the fake DCMI scenario holds, converted to SI units, with
/// the numbers taken from the scenario file itself (not from the Prometheus side).
#[test]
fn otlp_carries_the_scenario_readings_in_si_units() {
    let scenario: serde_json::Value = serde_json::from_str(SCENARIO).unwrap();
    let chip = &scenario["cards"][0]["chips"][0];
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let rx = receiver(listener);
    let cfg = fake_config(&format!(
        "[collectors]\nhost = false\n[otlp]\nendpoint = \"{endpoint}\"\ninterval = \"500ms\"\n"
    ));
    let d = Daemon::start(Start::new(&cfg).scenario(SCENARIO));
    d.wait_for("the first NPU readings", Duration::from_secs(20), |s| {
        value(s, "hcclwatch_npu_hbm_used_bytes", &[("npu", "0")]).is_some()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let p = loop {
        let raw = rx.next("/v1/metrics", Duration::from_secs(10));
        let p = points(&ExportMetricsServiceRequest::decode(&raw.body[..]).unwrap());
        if point(&p, "hcclwatch_npu_hbm_used_bytes", &[("npu", "0")]).is_some()
            && point(&p, "hcclwatch_npu_utilization_ratio", &[("unit", "aicore")]).is_some()
        {
            break p;
        }
        assert!(Instant::now() < deadline, "no export with the HBM reading");
    };
    let npu0 = [("npu", "0")];
    let num = |v: &serde_json::Value| v.as_f64().unwrap();
    let mib = 1024.0 * 1024.0;
    assert_eq!(
        point(&p, "hcclwatch_npu_temperature_celsius", &npu0),
        Some(num(&chip["temperature_c"]))
    );
    assert_eq!(
        point(&p, "hcclwatch_npu_voltage_volts", &npu0),
        Some(num(&chip["voltage_cv"]) / 100.0)
    );
    assert_eq!(
        point(&p, "hcclwatch_npu_aicore_frequency_hertz", &npu0),
        Some(num(&chip["aicore_mhz"]) * 1e6)
    );
    assert_eq!(
        point(&p, "hcclwatch_npu_hbm_total_bytes", &npu0),
        Some(num(&chip["hbm"]["total_mb"]) * mib)
    );
    assert_eq!(
        point(&p, "hcclwatch_npu_hbm_used_bytes", &npu0),
        Some(num(&chip["hbm"]["used_mb"]) * mib)
    );
    assert_eq!(
        point(
            &p,
            "hcclwatch_npu_utilization_ratio",
            &[("npu", "0"), ("unit", "aicore")]
        ),
        Some(num(&chip["utilization"]["aicore"]) / 100.0)
    );
    assert_eq!(
        point(
            &p,
            "hcclwatch_npu_hbm_ecc_errors",
            &[("npu", "0"), ("type", "single"), ("scope", "lifetime")]
        ),
        Some(num(&chip["ecc_hbm"]["total_single"]))
    );
    // The hardware conventions carry the same readings.
    assert_eq!(
        point(&p, "hw.temperature", &[("hw.id", "npu0-die")]),
        Some(num(&chip["temperature_c"]))
    );
    assert_eq!(
        point(&p, "hw.gpu.memory.usage", &[("hw.id", "npu0")]),
        Some(num(&chip["hbm"]["used_mb"]) * mib)
    );
    assert_eq!(
        point(&p, "hw.errors", &[("error.type", "hbm_ecc_corrected")]),
        Some(num(&chip["ecc_hbm"]["total_single"]))
    );
    // The scenario refuses power (-8255): no value is invented on either side.
    assert_eq!(chip["fail"]["dcmi_get_device_power_info"], -8255);
    assert!(!p.contains_key("hcclwatch_npu_power_watts"));
    assert!(!p.contains_key("hw.power"));
}

fn probe_pair(dir: &std::path::Path, otlp: [&str; 2]) -> (Vec<Daemon>, Vec<String>) {
    let key = write_key(dir, "probe.key");
    let peers: Vec<String> = loopback_peers(2);
    let list = peers
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let daemons = (0..2)
        .map(|r| {
            let cfg = fake_config(&format!(
                "[collectors]\nhost = false\n[collective]\npeers = [{list}]\nrank = {r}\nkey_file = \"{}\"\nconnect_timeout = \"5s\"\nexec_timeout = \"5s\"\n[probe]\nenabled = true\ninterval = \"200ms\"\nsmall_bytes = 1024\nlink_bytes = 65536\nring_every = 2\nring_bytes = 65536\n{}",
                key.display(),
                otlp[r]
            ));
            Daemon::start(Start::new(&cfg).scenario(SCENARIO))
        })
        .collect();
    (daemons, peers)
}

fn rounds_ok(s: &str) -> f64 {
    value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap_or(0.0)
}

#[test]
fn endpoint_down_then_up_loses_nothing_else_and_delivery_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let otlp =
        format!("[otlp]\nendpoint = \"{endpoint}\"\ninterval = \"500ms\"\ntimeout = \"1s\"\n");
    let (daemons, _) = probe_pair(dir.path(), [&otlp, ""]);
    let d = &daemons[0];
    // Nothing listens: exports fail, while scrapes, telemetry and probing go on.
    let s = d.wait_for("OTLP failures", Duration::from_secs(30), |s| {
        value(
            s,
            "hcclwatch_otlp_export_failures_total",
            &[("signal", "metrics")],
        )
        .is_some_and(|v| v >= 2.0)
            && rounds_ok(s) > 0.0
    });
    assert!(
        value(
            &s,
            "hcclwatch_otlp_last_success_timestamp_seconds",
            &[("signal", "metrics")]
        )
        .is_none()
    );
    assert!(value(&s, "hcclwatch_npu_temperature_celsius", &[("npu", "0")]).is_some());
    let before = rounds_ok(&s);
    d.wait_for("probing to go on", Duration::from_secs(20), |s| {
        rounds_ok(s) >= before + 5.0
    });
    assert!(
        d.log().contains("OTLP export failed"),
        "the failure is not logged"
    );

    // The receiver comes up on that port: delivery resumes.
    let rx = receiver(TcpListener::bind(("127.0.0.1", port)).unwrap());
    let req = rx.next("/v1/metrics", Duration::from_secs(30));
    let p = points(&ExportMetricsServiceRequest::decode(&req.body[..]).unwrap());
    assert!(
        p.contains_key("hcclwatch_probe_rounds"),
        "probe metrics are exported too"
    );
    let s = d.wait_for("a success after the outage", Duration::from_secs(20), |s| {
        value(
            s,
            "hcclwatch_otlp_last_success_timestamp_seconds",
            &[("signal", "metrics")],
        )
        .is_some()
    });
    let failures = value(
        &s,
        "hcclwatch_otlp_export_failures_total",
        &[("signal", "metrics")],
    )
    .unwrap();
    assert!(failures >= 2.0);

    // A receiver answering 503 counts as a failure too, then recovers.
    rx.status.store(503, Ordering::SeqCst);
    d.wait_for("a failure on 503", Duration::from_secs(30), |s| {
        value(
            s,
            "hcclwatch_otlp_export_failures_total",
            &[("signal", "metrics")],
        )
        .is_some_and(|v| v > failures)
    });
    rx.status.store(200, Ordering::SeqCst);
    let n = rx.seen.lock().unwrap().len();
    let s = d.wait_for("delivery after the 503s", Duration::from_secs(30), |_| {
        rx.seen.lock().unwrap().len() > n
    });
    assert!(
        value(
            &s,
            "hcclwatch_otlp_last_success_timestamp_seconds",
            &[("signal", "metrics")]
        )
        .is_some()
    );
}

#[test]
fn probe_rounds_are_traced_only_when_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let la = TcpListener::bind("127.0.0.1:0").unwrap();
    let lb = TcpListener::bind("127.0.0.1:0").unwrap();
    let (ea, eb) = (la.local_addr().unwrap(), lb.local_addr().unwrap());
    let (ra, rb) = (receiver(la), receiver(lb));
    let a = format!("[otlp]\nendpoint = \"http://{ea}\"\ninterval = \"500ms\"\ntraces = true\n");
    let b = format!("[otlp]\nendpoint = \"http://{eb}\"\ninterval = \"500ms\"\n");
    let (_daemons, _) = probe_pair(dir.path(), [&a, &b]);

    // Rounds with a ring all-reduce among the spans, each child linked to its round.
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut spans = Vec::new();
    loop {
        let req = ra.next("/v1/traces", Duration::from_secs(20));
        let t = ExportTraceServiceRequest::decode(&req.body[..]).unwrap();
        for rs in t.resource_spans {
            let res = kv(&rs.resource.as_ref().unwrap().attributes);
            assert_eq!(res["service.name"], "hcclwatch");
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
        let roots: Vec<_> = spans.iter().filter(|s| s.name == "probe.round").collect();
        let ring = spans
            .iter()
            .any(|s| s.name == "probe.all_reduce" && kv(&s.attributes)["bytes"] == "65536");
        if roots.len() >= 2 && ring {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not enough spans: {:?}",
            spans.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    }
    let roots: Vec<_> = spans.iter().filter(|s| s.name == "probe.round").collect();
    let mut linked = 0;
    for root in &roots {
        let ra = kv(&root.attributes);
        assert_eq!(ra["peers"], "2");
        assert_eq!(ra["result"], "ok");
        let children: Vec<_> = spans
            .iter()
            .filter(|s| s.parent_span_id == root.span_id)
            .collect();
        for c in &children {
            assert_eq!(c.trace_id, root.trace_id);
            assert!(c.start_time_unix_nano >= root.start_time_unix_nano);
            let a = kv(&c.attributes);
            for key in ["op", "algorithm", "bytes", "peers", "busbw", "result"] {
                assert!(a.contains_key(key), "{} lacks {key}: {a:?}", c.name);
            }
        }
        let names: BTreeSet<&str> = children.iter().map(|c| c.name.as_str()).collect();
        if names.is_superset(&BTreeSet::from([
            "probe.barrier",
            "probe.all_reduce",
            "probe.exchange",
            "probe.all_gather",
        ])) {
            linked += 1;
        }
    }
    assert!(
        linked >= 1,
        "no round has its children: {:?}",
        spans
            .iter()
            .map(|s| (&s.name, hex(&s.parent_span_id)))
            .collect::<Vec<_>>()
    );
    let ring = spans
        .iter()
        .find(|s| s.name == "probe.all_reduce" && kv(&s.attributes)["bytes"] == "65536")
        .unwrap();
    let a = kv(&ring.attributes);
    assert_eq!(a["op"], "all_reduce");
    assert!(a["busbw"].parse::<f64>().unwrap() > 0.0);

    // Without traces: metrics arrive, traces do not.
    for _ in 0..3 {
        rb.next("/v1/metrics", Duration::from_secs(10));
    }
    assert!(
        rb.seen
            .lock()
            .unwrap()
            .iter()
            .all(|r| r.path != "/v1/traces"),
        "traces arrived although otlp.traces is off"
    );
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn shutdown_flushes_within_its_deadline() {
    // Up: the final flush delivers although the next export is an hour away.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let rx = receiver(listener);
    let cfg = fake_config(&format!(
        "[collectors]\nhost = false\n[otlp]\nendpoint = \"{endpoint}\"\ninterval = \"1h\"\nshutdown_timeout = \"3s\"\n"
    ));
    let d = Daemon::start(Start::new(&cfg).scenario(SCENARIO));
    d.wait_for("readings", Duration::from_secs(20), |s| {
        value(s, "hcclwatch_npu_temperature_celsius", &[("npu", "0")]).is_some()
    });
    assert!(rx.seen.lock().unwrap().is_empty());
    assert!(d.stop().success());
    let req = rx.next("/v1/metrics", Duration::from_secs(5));
    let p = points(&ExportMetricsServiceRequest::decode(&req.body[..]).unwrap());
    assert!(
        p.contains_key("hcclwatch_npu_temperature_celsius"),
        "{:?}",
        p.keys().collect::<Vec<_>>()
    );

    // Down: the daemon still exits, bounded by the deadline, not by the retries.
    let port = free_port();
    let cfg = fake_config(&format!(
        "[otlp]\nendpoint = \"http://127.0.0.1:{port}\"\ninterval = \"1h\"\ntimeout = \"5s\"\nshutdown_timeout = \"1s\"\n"
    ));
    let d = Daemon::start(Start::new(&cfg).scenario(SCENARIO));
    // The final flush is still retrying against nothing when the deadline passes.
    let t = Instant::now();
    let (status, log) = d.stop_logged();
    assert!(status.success(), "{status}\n{log}");
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "shutdown took {:?}",
        t.elapsed()
    );
    assert!(
        !log.contains("panicked"),
        "a thread panicked at shutdown:\n{log}"
    );
}
