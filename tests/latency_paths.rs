//! Hard fault to cordon, by the two paths: a daemon's push straight to the receiver, and
//! Prometheus plus Alertmanager. A benchmark, not a test: run it with
//! `scripts/bench-latency.sh` (or `cargo test --test latency_paths -- --ignored
//! --nocapture --test-threads 1`).
//!
//! Each run is a fresh chain from the shipped files: three `hcclwatch run` daemons on
//! loopback in one probe group, reading `libfake_dcmi.so`, with `deploy/config/hcclwatch.toml`
//! (only addresses, peers, the fake library and `attribution.enabled = false` set, and for
//! the push path `[remediation.push]` pointed at the receiver over HTTPS, its certificate
//! verified against a CA made here); `hcclwatch remediate` with
//! `deploy/kubernetes/remediate/remediate.toml`, not in dry-run, on the stand-in Kubernetes
//! API server (`common/fake_apiserver.rs`), the breaker's share at 100 % (10 % of three
//! nodes is less than one); for the Alertmanager path, Debian's Prometheus with
//! `alerts/hcclwatch-rules.yml` and the intervals of `deploy/prometheus/prometheus.yml`,
//! and Debian's Alertmanager with `deploy/alertmanager/alertmanager.yml`, and no push.
//!
//! Once the group has completed two rounds (and, for Alertmanager, Prometheus scrapes every
//! daemon), after a random wait of 0 to 10 s (so that the fault falls anywhere in the probe
//! round and the scrape), DCMI delivers a fault event on node-1's chip: code 0x80E3A201,
//! level SeparateNPU in the built-in table. t0 is the moment the fake library says it
//! called the daemon's callback (`fake-dcmi: delivered fault event ... at unix_ms=`); the
//! run ends when the stand-in API server stores node-1 cordoned (waited on with its change
//! signal, not polled). Also kept: the receiver's intent record (its decision).
//!
//! With `LATENCY_INJECT=read` no event is delivered: the code is written into the chip's
//! readings and shows at the next health read (`telemetry.intervals.health`, 5 s shipped),
//! as for a daemon that cannot subscribe to DCMI's events (in a container without root);
//! t0 is the moment the scenario file is replaced.
//!
//! Environment: `LATENCY_RUNS` (per path, default 10), `LATENCY_PATHS` (`push`,
//! `alertmanager` or both, comma-separated; default both), `LATENCY_OUT` (a file for the
//! per-run results as JSON lines).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::receiver::Setup;
use common::{Daemon, Start, fake_lib, free_port, http_get, loopback_peers, write_key};
use serde_json::{Value, json};

const MEMBERS: usize = 3;
const FAULTY: usize = 1;
/// Level SeparateNPU in the built-in fault-level table (data/fault-codes.json).
const SEPARATE_CODE: u32 = 0x80E3_A201;

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        * 1e3
}

/// Sets `path` (dotted) in a TOML table, creating tables on the way.
fn set(t: &mut toml::Table, path: &str, v: impl Into<toml::Value>) {
    let mut cur = t;
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap();
    for p in parts {
        cur = cur
            .entry(p)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap();
    }
    cur.insert(last.to_string(), v.into());
}

fn shipped(p: &str) -> toml::Table {
    std::fs::read_to_string(repo(p)).unwrap().parse().unwrap()
}

fn node(i: usize) -> String {
    format!("node-{i}")
}

/// The shipped daemon configuration on loopback; `push`: the receiver's URL, token and CA.
fn daemon_config(
    peers: &[String],
    rank: usize,
    key: &Path,
    push: Option<(&str, &Path, &Path)>,
) -> String {
    let mut t = shipped("deploy/config/hcclwatch.toml");
    set(&mut t, "web.listen_address", "127.0.0.1:0");
    set(&mut t, "telemetry.backend", "dcmi");
    set(
        &mut t,
        "telemetry.dcmi_library",
        fake_lib().display().to_string(),
    );
    set(&mut t, "attribution.enabled", false);
    let names: Vec<toml::Value> = (0..peers.len()).map(|i| node(i).into()).collect();
    let peers: Vec<toml::Value> = peers.iter().map(|p| p.clone().into()).collect();
    set(&mut t, "collective.peers", peers);
    set(&mut t, "collective.peer_names", names);
    set(&mut t, "collective.rank", rank as i64);
    set(&mut t, "collective.key_file", key.display().to_string());
    set(&mut t, "probe.enabled", true);
    if let Some((url, token, ca)) = push {
        set(&mut t, "remediation.push.enabled", true);
        set(&mut t, "remediation.push.url", url);
        set(&mut t, "remediation.push.ca_file", ca.display().to_string());
        set(
            &mut t,
            "remediation.push.bearer_token_file",
            token.display().to_string(),
        );
        set(&mut t, "remediation.push.node_name", node(rank));
    }
    toml::to_string(&t).unwrap()
}

fn remediate_config(k8s: &Setup) -> String {
    let mut t = shipped("deploy/kubernetes/remediate/remediate.toml");
    let d = k8s.dir.path();
    set(&mut t, "listen_address", "127.0.0.1:0");
    set(&mut t, "dry_run", false);
    set(&mut t, "audit_log", k8s.audit_path().display().to_string());
    set(
        &mut t,
        "killswitch_file",
        d.join("pause").display().to_string(),
    );
    set(
        &mut t,
        "auth.bearer_token_file",
        d.join("token").display().to_string(),
    );
    set(
        &mut t,
        "kubernetes.kubeconfig",
        k8s.api.kubeconfig(d).display().to_string(),
    );
    set(&mut t, "breaker.max_percent", 100.0);
    toml::to_string(&t).unwrap()
}

/// A CA, the receiver's certificate for localhost signed by it, and a web config that
/// serves TLS with it, in `dir`; returns the web config's path.
fn tls_files(dir: &Path) -> PathBuf {
    let (ca, cert, key) = common::test_ca("localhost");
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("server.crt"), cert).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    web
}

/// The shipped Prometheus example with this run's rules, Alertmanager and targets.
fn prometheus_config(am: &str, daemons: &[String], receiver: &str) -> String {
    let mut v: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo("deploy/prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    let rules = repo("alerts/hcclwatch-rules.yml");
    v["rule_files"] = serde_yaml::from_str(&format!("[\"{}\"]", rules.display())).unwrap();
    v["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] =
        serde_yaml::from_str(&format!("[\"{am}\"]")).unwrap();
    let list: Vec<String> = daemons
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{{targets: [\"{t}\"], labels: {{node: node-{i}}}}}"))
        .collect();
    v["scrape_configs"][0]["static_configs"] =
        serde_yaml::from_str(&format!("[{}]", list.join(", "))).unwrap();
    v["scrape_configs"][1]["static_configs"][0]["targets"] =
        serde_yaml::from_str(&format!("[\"{receiver}\"]")).unwrap();
    serde_yaml::to_string(&v).unwrap()
}

fn alertmanager_config(hook: &str, token: &Path) -> String {
    let shipped = std::fs::read_to_string(repo("deploy/alertmanager/alertmanager.yml")).unwrap();
    let cfg = shipped
        .replace(
            "http://hcclwatch-remediate.hcclwatch.svc:9479/webhook",
            &format!("http://{hook}/webhook"),
        )
        .replace(
            "/etc/alertmanager/secrets/hcclwatch-remediate-token",
            token.to_str().unwrap(),
        );
    assert!(cfg.contains(hook), "the example's remediation URL changed");
    cfg
}

/// The example scenario (one chip), with the fault events delivered so far.
fn scenario(events: &[Value]) -> String {
    let mut s: Value =
        serde_json::from_str(include_str!("fake-dcmi/scenarios/example.json")).unwrap();
    s["cards"][0]["chips"][0]["fail"] = json!({});
    s["fault_events"] = json!(events);
    s.to_string()
}

/// When the fake says it delivered the SeparateNPU event, unix ms.
fn delivered_at(log: &str) -> Option<f64> {
    let tag = format!("fake-dcmi: delivered fault event 0x{SEPARATE_CODE:08X} at unix_ms=");
    log.lines()
        .find_map(|l| l.split_once(&tag).map(|(_, t)| t.trim().parse().unwrap()))
}

/// A small, seeded uniform draw in [0, 1) (no extra dependency for one number a run).
fn uniform(seed: u64) -> f64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// One run of one path: (ms from the event to the intent record, to the cordon).
fn run_once(path: &str, id: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(MEMBERS);
    let names: Vec<String> = (0..MEMBERS).map(node).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let k8s = Setup::new(&refs);
    let token = k8s.dir.path().join("token");
    // The push path over HTTPS (the receiver's certificate verified against the CA);
    // until the receiver has read the nodes it answers 503, and pushes are retried.
    let receiver = if path == "push" {
        let top = tls_files(k8s.dir.path());
        let mut cfg: toml::Table = remediate_config(&k8s).parse().unwrap();
        set(&mut cfg, "web_config_file", top.display().to_string());
        k8s.spawn(&toml::to_string(&cfg).unwrap())
    } else {
        k8s.start(&remediate_config(&k8s))
    };
    let url = format!(
        "https://localhost:{}",
        receiver.addr.rsplit_once(':').unwrap().1
    );
    let ca = k8s.dir.path().join("ca.crt");
    let push = (path == "push").then_some((url.as_str(), token.as_path(), ca.as_path()));
    let daemons: Vec<Daemon> = (0..MEMBERS)
        .map(|r| {
            let cfg = daemon_config(&peers, r, &key, push);
            Daemon::start(Start::new(&cfg).scenario(&scenario(&[])))
        })
        .collect();
    let mut _servers = Vec::new();
    let prom = format!("127.0.0.1:{}", free_port());
    if path == "alertmanager" {
        let am = format!("127.0.0.1:{}", free_port());
        std::fs::write(
            dir.path().join("alertmanager.yml"),
            alertmanager_config(&receiver.addr, &token),
        )
        .unwrap();
        _servers.push(common::start_alertmanager(dir.path(), &am));
        let addrs: Vec<String> = daemons.iter().map(|d| d.addr.clone()).collect();
        std::fs::write(
            dir.path().join("prometheus.yml"),
            prometheus_config(&am, &addrs, &receiver.addr),
        )
        .unwrap();
        _servers.push(common::start_prometheus(dir.path(), &prom));
    }
    // Ready: the group has completed two rounds, and Prometheus scrapes every daemon.
    let rounds = |d: &Daemon| {
        common::value(
            &d.scrape(),
            "hcclwatch_probe_rounds_total",
            &[("result", "ok")],
        )
        .unwrap_or(0.0)
    };
    let until = Instant::now() + Duration::from_secs(300);
    loop {
        let up = path != "alertmanager" || {
            let r = http_get(
                &prom,
                "/api/v1/query?query=count(up%7Bjob%3D%22hcclwatch%22%7D%3D%3D1)",
                None,
            );
            r.body.contains(&format!("\"{MEMBERS}\""))
        };
        if up && rounds(&daemons[FAULTY]) >= 2.0 {
            break;
        }
        assert!(
            Instant::now() < until,
            "{path} run {id}: the chain did not get ready"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_ne!(k8s.api.node(&node(FAULTY))["spec"]["unschedulable"], true);
    let wait = uniform(id as u64 * 7919 + path.len() as u64) * 10.0;
    std::thread::sleep(Duration::from_secs_f64(wait));
    let by_read = std::env::var("LATENCY_INJECT").is_ok_and(|v| v == "read");
    let written = now_ms();
    if by_read {
        // No event: the code shows at the next health read (a daemon that cannot
        // subscribe, e.g. in a container without root).
        let mut s: Value = serde_json::from_str(&scenario(&[])).unwrap();
        s["cards"][0]["chips"][0]["error_codes"] = json!([SEPARATE_CODE]);
        daemons[FAULTY].set_scenario(&s.to_string());
    } else {
        daemons[FAULTY].set_scenario(&scenario(&[json!({
            "at_ms": 0, "card_id": 0, "device_id": 0, "event_id": SEPARATE_CODE,
            "severity": 3, "assertion": 1, "name": "chip isolated"})]));
    }
    let cordoned = k8s
        .api
        .wait_for_node(&node(FAULTY), Duration::from_secs(600), |n| {
            n["spec"]["unschedulable"] == true
        });
    let seen = now_ms();
    assert!(
        cordoned.is_some(),
        "{path} run {id}: not cordoned within 10 minutes:\n{}\n{}",
        daemons[FAULTY].log(),
        receiver.log()
    );
    let t0 = if by_read {
        written
    } else {
        delivered_at(&daemons[FAULTY].log()).expect("the fake logs its delivery")
    };
    let intent = k8s
        .audit()
        .into_iter()
        .find(|r| r["result"] == "intent" && r["node"] == node(FAULTY).as_str())
        .and_then(|r| r["ts"].as_str()?.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond() as f64)
        .expect("an intent record before the cordon");
    for (i, n) in names.iter().enumerate() {
        if i != FAULTY {
            assert_ne!(
                k8s.api.node(n)["spec"]["unschedulable"],
                true,
                "{n} cordoned"
            );
        }
    }
    (intent - t0, seen - t0)
}

/// The `q` quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[test]
#[ignore = "a benchmark: scripts/bench-latency.sh"]
fn hard_fault_to_cordon_by_path() {
    let runs: usize = std::env::var("LATENCY_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let paths = std::env::var("LATENCY_PATHS").unwrap_or_else(|_| "push,alertmanager".into());
    let out = std::env::var("LATENCY_OUT").ok();
    let mut summary = Vec::new();
    for path in paths.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        assert!(
            ["push", "alertmanager"].contains(&path),
            "unknown path {path}"
        );
        let mut cordon = Vec::new();
        for id in 0..runs {
            let (intent, done) = run_once(path, id);
            eprintln!(
                "{path} run {id}: intent {intent:.0} ms, cordoned {done:.0} ms after the fault event"
            );
            if let Some(f) = &out {
                use std::io::Write as _;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(f)
                    .unwrap();
                writeln!(
                    file,
                    "{}",
                    json!({"path": path, "run": id, "intent_ms": intent, "cordoned_ms": done})
                )
                .unwrap();
            }
            cordon.push(done / 1e3);
        }
        cordon.sort_by(f64::total_cmp);
        summary.push(format!(
            "{path:>12}: {runs} runs, median {:.2} s, p95 {:.2} s, min {:.2} s, max {:.2} s",
            quantile(&cordon, 0.5),
            quantile(&cordon, 0.95),
            cordon[0],
            cordon[cordon.len() - 1]
        ));
    }
    println!("\nDCMI fault event (SeparateNPU code) to node cordoned:");
    for s in summary {
        println!("{s}");
    }
}
