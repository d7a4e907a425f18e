//! End to end with the real Prometheus and Alertmanager from Debian: six `hcclwatch run`
//! daemons on loopback read `libfake_dcmi.so` and probe each other; one of them (node-2) is
//! slowed by the engine's fault injection. Prometheus scrapes them every second and
//! evaluates the shipped rules, with only the `for:` holds shortened (minutes become
//! seconds) in a derived copy in the test's temporary directory. Alertmanager runs the
//! shipped example config, with the remediation webhook's URL and token file pointed at a
//! receiver inside this test. (The remediation receiver of the remediation issue has not
//! landed; this recorder stands in for it and checks what it would be sent.)
//!
//! Asserted: the quarantine alert fires for node-2 and reaches the receiver with its
//! labels and the bearer token; no alert fires for a healthy node (every firing alert is
//! about node-2); and every dashboard panel query returns data from the live Prometheus.
//!
//! Every process (daemons, Prometheus, Alertmanager) is killed on every exit path by drop
//! guards; the temporary directories go with them. The whole test is bounded by the waits
//! below (about two minutes at worst).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Daemon, KillOnDrop, Start, fake_lib, free_port, http_get, url_encode, write_key};

const MEMBERS: usize = 6;
const SLOW: usize = 2;
const TOKEN: &str = "e2e-remediation-token-7f3a";

fn daemon_config(peers: &[String], rank: usize, key: &Path, throttle: u64) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let names: Vec<String> = (0..peers.len()).map(|i| format!("node-{i}")).collect();
    format!(
        r#"
[web]
listen_address = "127.0.0.1:0"
[telemetry]
backend = "dcmi"
dcmi_library = "{lib}"
[telemetry.intervals]
inventory = "5s"
health = "1s"
sensors = "1s"
utilization = "1s"
memory = "1s"
network = "1s"
host = "2s"
[collective]
peers = [{peers}]
peer_names = [{names}]
rank = {rank}
key_file = "{key}"
connect_timeout = "5s"
exec_timeout = "5s"
[probe]
enabled = true
interval = "150ms"
small_bytes = 1024
link_bytes = 262144
ring_every = 5
ring_bytes = 262144
inject_throttle_bytes_per_second = {throttle}
[health]
# Six daemons, Prometheus and Alertmanager share two cores: see tests/probe.rs.
fabric_ratio = 3.0
z = 2.0
"#,
        lib = fake_lib().display(),
        peers = list(peers),
        names = list(&names),
        key = key.display()
    )
}

/// The example scenario with every reading present (no failing power call), and on node 4
/// one active fault code that no alert pages on, so the fault-code panels have data.
fn scenario(rank: usize) -> String {
    let mut s: serde_json::Value =
        serde_json::from_str(include_str!("fake-dcmi/scenarios/example.json")).unwrap();
    let chip = &mut s["cards"][0]["chips"][0];
    chip["fail"] = serde_json::json!({});
    if rank == 4 {
        chip["error_codes"] = serde_json::json!([0x80E0_1801u32]);
    }
    s.to_string()
}

/// The shipped rules with every `for:` hold scaled from minutes to seconds; nothing else
/// changes.
fn rules_with_short_holds() -> String {
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("alerts/hcclwatch-rules.yml"),
    )
    .unwrap();
    let mut scaled = 0;
    let out: Vec<String> = shipped
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if let Some(v) = t.strip_prefix("for: ")
                && let Some(n) = v.strip_suffix('m')
                && n.chars().all(|c| c.is_ascii_digit())
            {
                scaled += 1;
                return format!("{}for: {n}s", &l[..l.len() - t.len()]);
            }
            l.to_string()
        })
        .collect();
    assert!(scaled >= 25, "only {scaled} holds scaled");
    out.join("\n") + "\n"
}

/// Starts a server binary and waits for its `/-/ready`.
fn start_server(bin: &str, package: &str, args: &[String], addr: &str, log: &Path) -> KillOnDrop {
    let child = Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("starting {bin}: {e}; install {package} (scripts/test.sh does)")
        });
    let guard = KillOnDrop(Some(child));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if std::net::TcpStream::connect(addr).is_ok()
            && http_get(addr, "/-/ready", None).status == 200
        {
            return guard;
        }
        assert!(
            Instant::now() < deadline,
            "{bin} not ready on {addr}; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One webhook notification: the Authorization header and the JSON body.
struct Notification {
    authorization: Option<String>,
    body: serde_json::Value,
}

/// A webhook receiver on 127.0.0.1: every POST is answered 200 and forwarded.
fn receiver() -> (String, mpsc::Receiver<Notification>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            let mut auth = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if k.eq_ignore_ascii_case("authorization") {
                        auth = Some(v.trim().to_string());
                    }
                }
            }
            let mut body = vec![0u8; len];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            if let Ok(v) = serde_json::from_slice(&body)
                && tx
                    .send(Notification {
                        authorization: auth,
                        body: v,
                    })
                    .is_err()
            {
                return;
            }
        }
    });
    (addr, rx)
}

fn query(prom: &str, q: &str) -> serde_json::Value {
    let r = http_get(
        prom,
        &format!("/api/v1/query?query={}", url_encode(q)),
        None,
    );
    assert_eq!(r.status, 200, "{q}: {}", r.body);
    serde_json::from_str(&r.body).unwrap()
}

#[test]
fn quarantine_alert_reaches_the_receiver_and_only_for_the_slow_node() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers: Vec<String> = (0..MEMBERS)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let scenarios: Vec<String> = (0..MEMBERS).map(scenario).collect();
    let configs: Vec<String> = (0..MEMBERS)
        .map(|r| daemon_config(&peers, r, &key, if r == SLOW { 20_000_000 } else { 0 }))
        .collect();
    let daemons: Vec<Daemon> = (0..MEMBERS)
        .map(|r| Daemon::start(Start::new(&configs[r]).scenario(&scenarios[r])))
        .collect();
    // Prometheus starts once the group has formed, as it would scrape a running fleet.
    for d in &daemons {
        d.wait_for("the probe group to form", Duration::from_secs(60), |s| {
            common::value(s, "hcclwatch_probe_active", &[]) == Some(1.0)
        });
    }

    let (hook, notifications) = receiver();
    let am_port = free_port();
    let am_addr = format!("127.0.0.1:{am_port}");
    let token = dir.path().join("remediate-token");
    std::fs::write(&token, TOKEN).unwrap();
    let am_cfg = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/alertmanager/alertmanager.yml"),
    )
    .unwrap()
    .replace(
        "http://hcclwatch-remediate.hcclwatch.svc:9479/webhook",
        &format!("http://{hook}/webhook"),
    )
    .replace(
        "/etc/alertmanager/secrets/hcclwatch-remediate-token",
        token.to_str().unwrap(),
    );
    assert!(
        am_cfg.contains(&hook),
        "the example's remediation URL changed; update this test"
    );
    std::fs::write(dir.path().join("alertmanager.yml"), am_cfg).unwrap();
    std::fs::create_dir(dir.path().join("am-data")).unwrap();
    let _am = start_server(
        "prometheus-alertmanager",
        "prometheus-alertmanager",
        &[
            format!(
                "--config.file={}",
                dir.path().join("alertmanager.yml").display()
            ),
            format!("--storage.path={}", dir.path().join("am-data").display()),
            format!("--web.listen-address={am_addr}"),
            "--cluster.listen-address=".to_string(),
        ],
        &am_addr,
        &dir.path().join("alertmanager.log"),
    );

    std::fs::write(dir.path().join("rules.yml"), rules_with_short_holds()).unwrap();
    let targets: String = daemons
        .iter()
        .enumerate()
        .map(|(i, d)| {
            format!(
                "      - targets: [\"{}\"]\n        labels: {{node: node-{i}}}\n",
                d.addr
            )
        })
        .collect();
    let prom_cfg = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n  external_labels: {{cluster: e2e}}\n\
         rule_files: [\"{rules}\"]\n\
         alerting:\n  alertmanagers:\n    - static_configs: [{{targets: [\"{am_addr}\"]}}]\n\
         scrape_configs:\n  - job_name: hcclwatch\n    honor_labels: true\n    static_configs:\n{targets}",
        rules = dir.path().join("rules.yml").display()
    );
    std::fs::write(dir.path().join("prometheus.yml"), prom_cfg).unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let _prometheus = start_server(
        "prometheus",
        "prometheus",
        &[
            format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ),
            format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()),
            format!("--web.listen-address={prom}"),
        ],
        &prom,
        &dir.path().join("prometheus.log"),
    );

    // The quarantine notification for node-2 arrives at the receiver.
    let deadline = Instant::now() + Duration::from_secs(90);
    let alert = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = notifications.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "no quarantine notification within 90 s; Prometheus alerts: {}\nnode-0 log tail:\n{}",
                http_get(&prom, "/api/v1/alerts", None).body,
                daemons[0].log().lines().rev().take(20).collect::<Vec<_>>().join("\n")
            )
        });
        assert_eq!(
            n.authorization.as_deref(),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert_eq!(n.body["version"], "4");
        assert_eq!(n.body["receiver"], "hcclwatch-remediation");
        let found = n.body["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == "HcclwatchQuarantineRecommended"
                    && a["status"] == "firing"
            })
            .cloned();
        if let Some(a) = found {
            break a;
        }
    };
    let labels = &alert["labels"];
    assert_eq!(labels["node"], "node-2", "{alert}");
    assert_eq!(labels["reason"], "straggler", "{alert}");
    assert_eq!(labels["severity"], "critical");
    assert_eq!(labels["action"], "quarantine");
    assert_eq!(labels["cluster"], "e2e");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("node-2"),
        "{alert}"
    );
    assert!(
        alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .ends_with("#hcclwatchquarantinerecommended")
    );

    // No alert fires for a healthy node: every firing alert is about node-2.
    let alerts = query(&prom, "ALERTS{alertstate=\"firing\"}");
    let firing = alerts["data"]["result"].as_array().unwrap();
    assert!(!firing.is_empty());
    for a in firing {
        assert_eq!(
            a["metric"]["node"], "node-2",
            "an alert fires that is not about the slow node: {a}"
        );
    }

    // Every dashboard panel query returns data from the live Prometheus.
    let queries = common::dashboard_queries();
    assert!(queries.len() > 40, "{} queries", queries.len());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut empty: Vec<String>;
    loop {
        empty = queries
            .iter()
            .filter(|(_, q)| {
                let v = query(&prom, q);
                v["data"]["result"].as_array().is_none_or(|r| r.is_empty())
            })
            .map(|(what, q)| format!("{what}: {q}"))
            .collect();
        // Range windows fill as samples arrive; give them until the deadline, no longer.
        if empty.is_empty() || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}",
        empty.join("\n")
    );
}
