//! Fault-to-cordon latency at the shipped settings: a benchmark, not a test. Run it with
//! `scripts/bench-latency.sh` (or `cargo test --release --test latency_bench -- --ignored
//! --nocapture`); it takes about half an hour and prints a table.
//!
//! Each run is the whole chain, configured from the shipped files and nothing else where a
//! file exists: eight `hcclwatch run` daemons on loopback with
//! `deploy/config/hcclwatch.toml` (its `[health]`, `[probe]` and `[telemetry.intervals]`
//! unchanged; only addresses, peers, the fake DCMI library, every node's probe send cap
//! and, for the caps, the busy budget are set), Debian's Prometheus with `alerts/hcclwatch-rules.yml` unchanged and
//! the global intervals of `deploy/prometheus/prometheus.yml`, Alertmanager with
//! `deploy/alertmanager/alertmanager.yml` (the remediation receiver's URL and token file
//! pointed at the local receiver), and `hcclwatch remediate` with
//! `deploy/kubernetes/remediate/remediate.toml`, not in dry-run, acting on the stand-in
//! Kubernetes API server of `common/fake_apiserver.rs`.
//!
//! After a warm-up (the engines' windows full, the fabric baseline learned), three faults
//! are injected at recorded times:
//! - **slow node** (node-2): the daemon is restarted with
//!   `probe.inject_throttle_bytes_per_second` (a SIGHUP does not apply `[probe]` keys; the
//!   restart is the injection, t0 is the moment the old process is stopped);
//! - **health critical** (node-5): the fake DCMI scenario's chip health becomes 3
//!   (critical), rewritten under the running daemon;
//! - **SeparateNPU code** (node-6): the chip reports fault code 0x80E3A201, whose level in
//!   the built-in table is SeparateNPU.
//!
//! For each, the time from injection to: the node at least `suspect` in some member's
//! `hcclwatch_node_state`, `quarantine_recommended` there, `HcclwatchQuarantineRecommended`
//! pending in Prometheus (its `activeAt`), firing, the receiver's first audit record for it
//! (the webhook received and decided), and the node cordoned in the API server. Daemons and
//! Prometheus are polled every second, the receiver and the API server every 250 ms.
//!
//! Every node's probe sends are capped (`LATENCY_BASE_THROTTLE`, default 25 MB/s, as the
//! demo caps them): uncapped, a 1 MiB probe on loopback takes about a millisecond, and on
//! two shared cores the scheduler's jitter of a millisecond or more made healthy members'
//! scores scatter by ±0.3 to ±1 in log units and kept the shipped fabric guard on. Capped,
//! a probe takes about 40 ms, so the same jitter is a few per cent, which is what a fabric
//! looks like to the engine. The slow node's cap is 20 MB/s (`LATENCY_THROTTLE`): 25 %
//! slower than its peers.
//!
//! Environment: `LATENCY_RUNS` (independent chains run side by side, default 3),
//! `LATENCY_WARMUP_ROUNDS` (default 12), `LATENCY_THROTTLE` and `LATENCY_BASE_THROTTLE`
//! (bytes per second, above), `LATENCY_TIMEOUT_SECONDS` (per run after injection, default 1800),
//! `LATENCY_STAGGER_SECONDS` (between chain starts, default 20), `LATENCY_PROBE_INTERVAL`
//! (a `probe.interval` to try instead of the shipped one), `LATENCY_HEALTH` (`[health]`
//! keys to change, `key=value,...`), `LATENCY_SHIPPED_DIR` (read the
//! shipped files from this directory instead, e.g. `git archive` of an older commit),
//! `LATENCY_OUT` (a file for the
//! per-run results as JSON lines).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::receiver::Setup;
use common::{Daemon, Start, fake_lib, free_port, http_get, loopback_peers, write_key};
use serde_json::{Value, json};

const MEMBERS: usize = 8;
/// The slow node's probe send cap unless `LATENCY_THROTTLE` says otherwise: 25 % slower
/// than [`BASE_THROTTLE`].
const THROTTLE: u64 = 20_000_000;
/// Every other node's probe send cap unless `LATENCY_BASE_THROTTLE` says otherwise (200
/// Mbit/s: a 1 MiB probe takes about 42 ms, far above loopback's scheduling jitter).
const BASE_THROTTLE: u64 = 25_000_000;
/// The fault-level table's SeparateNPU list has this code (data/fault-codes.json).
const SEPARATE_CODE: u32 = 0x80E3_A201;

/// One injected fault.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    Slow,
    Critical,
    Separate,
}

impl Fault {
    const ALL: [Fault; 3] = [Fault::Slow, Fault::Critical, Fault::Separate];

    fn rank(self) -> usize {
        match self {
            Fault::Slow => 2,
            Fault::Critical => 5,
            Fault::Separate => 6,
        }
    }

    fn node(self) -> String {
        format!("node-{}", self.rank())
    }

    fn label(self) -> &'static str {
        match self {
            Fault::Slow => "slow node (throttled probe sends)",
            Fault::Critical => "hard fault: NPU health critical (3)",
            Fault::Separate => "hard fault: SeparateNPU fault code",
        }
    }
}

/// The stages, in chain order.
const STAGES: [&str; 6] = [
    "suspect",
    "quarantine_recommended",
    "alert pending",
    "alert firing",
    "webhook received",
    "node cordoned",
];

/// What one run saw of one fault: seconds from injection to each stage.
#[derive(Default, Clone)]
struct Seen {
    injected: f64,
    at: [Option<f64>; 6],
    /// The slow node's straggler score when it was recommended (median log-time residual).
    score: Option<f64>,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A shipped file: from `LATENCY_SHIPPED_DIR` when set (a checkout of other shipped
/// settings, for a before/after comparison), else from this repository.
fn repo(p: &str) -> PathBuf {
    match std::env::var_os("LATENCY_SHIPPED_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join(p),
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Sets `path` (dotted) in a TOML table, creating tables on the way.
fn set(t: &mut toml::Table, path: &str, v: toml::Value) {
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
    cur.insert(last.to_string(), v);
}

fn strings(v: &[String]) -> toml::Value {
    toml::Value::Array(v.iter().map(|s| toml::Value::String(s.clone())).collect())
}

/// The shipped daemon configuration with only what a loopback fleet must change.
fn daemon_config(peers: &[String], rank: usize, key: &Path, web: u16, throttle: u64) -> String {
    let mut t: toml::Table = std::fs::read_to_string(repo("deploy/config/hcclwatch.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let s = |v: String| toml::Value::String(v);
    set(&mut t, "web.listen_address", s(format!("127.0.0.1:{web}")));
    set(&mut t, "telemetry.backend", s("dcmi".into()));
    set(
        &mut t,
        "telemetry.dcmi_library",
        s(fake_lib().display().to_string()),
    );
    // No kubelet or API server for the attribution to read.
    set(&mut t, "attribution.enabled", toml::Value::Boolean(false));
    set(&mut t, "collective.peers", strings(peers));
    let names: Vec<String> = (0..peers.len()).map(|i| format!("node-{i}")).collect();
    set(&mut t, "collective.peer_names", strings(&names));
    set(&mut t, "collective.rank", toml::Value::Integer(rank as i64));
    set(&mut t, "collective.key_file", s(key.display().to_string()));
    set(&mut t, "probe.enabled", toml::Value::Boolean(true));
    set(
        &mut t,
        "probe.inject_throttle_bytes_per_second",
        toml::Value::Integer(throttle as i64),
    );
    // The send caps make a round about ten times longer than on a fabric (a 1 MiB probe
    // takes 40 ms, the 4 MiB ring a few hundred): the shipped busy budget (1 % of the
    // time) would measure the caps, and over it the group runs latency-sized rounds that
    // cannot see a slow sender. Five per cent leaves the budget on, out of the caps' way.
    set(&mut t, "probe.budget_busy_ratio", toml::Value::Float(0.05));
    if let Some(i) = probe_interval_override() {
        set(&mut t, "probe.interval", s(i));
    }
    for (k, v) in health_override() {
        set(&mut t, &format!("health.{k}"), toml::Value::Float(v));
    }
    toml::to_string(&t).unwrap()
}

/// `LATENCY_PROBE_INTERVAL`: a `probe.interval` to measure instead of the shipped one (to
/// see what a shorter cadence would buy before shipping it).
fn probe_interval_override() -> Option<String> {
    std::env::var("LATENCY_PROBE_INTERVAL")
        .ok()
        .filter(|v| !v.is_empty())
}

/// `LATENCY_HEALTH="fabric_ratio=3.0,z=2.0"`: `[health]` keys to change (when scheduler
/// noise on shared cores trips the shipped fabric guard, which suppresses every quarantine
/// alert; the output says so).
fn health_override() -> Vec<(String, f64)> {
    std::env::var("LATENCY_HEALTH")
        .unwrap_or_default()
        .split(',')
        .filter(|kv| !kv.trim().is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("LATENCY_HEALTH: key=value,...");
            (k.trim().to_string(), v.trim().parse().expect("a number"))
        })
        .collect()
}

/// The example scenario with every reading present, one chip, health and codes as given.
fn scenario(health: u32, codes: &[u32]) -> String {
    let mut s: Value =
        serde_json::from_str(include_str!("fake-dcmi/scenarios/example.json")).unwrap();
    let chip = &mut s["cards"][0]["chips"][0];
    chip["fail"] = json!({});
    chip["health"] = json!(health);
    chip["error_codes"] = json!(codes);
    s.to_string()
}

/// The shipped Prometheus example (its global intervals and external labels) with this
/// run's rule file, Alertmanager and targets.
fn prometheus_config(rules: &Path, am: &str, targets: &[String]) -> String {
    let mut v: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo("deploy/prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    v["rule_files"] = serde_yaml::from_str(&format!("[\"{}\"]", rules.display())).unwrap();
    v["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] =
        serde_yaml::from_str(&format!("[\"{am}\"]")).unwrap();
    let list: Vec<String> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{{targets: [\"{t}\"], labels: {{node: node-{i}}}}}"))
        .collect();
    v["scrape_configs"][0]["static_configs"] =
        serde_yaml::from_str(&format!("[{}]", list.join(", "))).unwrap();
    // The example's other job scrapes the receiver at an address that is not this run's.
    if let Some(jobs) = v["scrape_configs"].as_sequence_mut() {
        jobs.truncate(1);
    }
    serde_yaml::to_string(&v).unwrap()
}

/// The shipped Alertmanager example, its remediation receiver pointed at `hook`.
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

/// The shipped receiver configuration, not in dry-run, on the stand-in API server. The
/// breaker's share is raised: 10 % of an eight-node fleet is less than one node.
fn remediate_config(k8s: &Setup) -> String {
    let mut t: toml::Table =
        std::fs::read_to_string(repo("deploy/kubernetes/remediate/remediate.toml"))
            .unwrap()
            .parse()
            .unwrap();
    let d = k8s.dir.path();
    let s = |p: PathBuf| toml::Value::String(p.display().to_string());
    set(
        &mut t,
        "listen_address",
        toml::Value::String("127.0.0.1:0".into()),
    );
    set(&mut t, "dry_run", toml::Value::Boolean(false));
    set(&mut t, "audit_log", s(k8s.audit_path()));
    set(&mut t, "killswitch_file", s(d.join("pause")));
    set(&mut t, "auth.bearer_token_file", s(d.join("token")));
    set(&mut t, "kubernetes.kubeconfig", s(k8s.api.kubeconfig(d)));
    set(&mut t, "breaker.max_percent", toml::Value::Float(100.0));
    toml::to_string(&t).unwrap()
}

/// Whether any scrape shows `node` in one of `states`.
fn in_state(scrapes: &[String], node: &str, states: &[&str]) -> bool {
    scrapes.iter().any(|s| {
        states.iter().any(|st| {
            common::samples(s, "hcclwatch_node_state", &[("node", node), ("state", st)])
                .contains(&1.0)
        })
    })
}

/// One chain, end to end; returns what it saw of each fault.
fn run_once(id: usize) -> Vec<Seen> {
    let warmup = env_u64("LATENCY_WARMUP_ROUNDS", 12);
    let throttle = env_u64("LATENCY_THROTTLE", THROTTLE);
    let base = env_u64("LATENCY_BASE_THROTTLE", BASE_THROTTLE);
    let timeout = Duration::from_secs(env_u64("LATENCY_TIMEOUT_SECONDS", 1800));
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(MEMBERS);
    let webs: Vec<u16> = (0..MEMBERS).map(|_| free_port()).collect();
    let healthy = scenario(0, &[]);
    let mut daemons: Vec<Option<Daemon>> = (0..MEMBERS)
        .map(|r| {
            let cfg = daemon_config(&peers, r, &key, webs[r], base);
            Some(Daemon::start(Start::new(&cfg).scenario(&healthy)))
        })
        .collect();
    let addrs: Vec<String> = daemons
        .iter()
        .map(|d| d.as_ref().unwrap().addr.clone())
        .collect();

    let names: Vec<String> = (0..MEMBERS).map(|i| format!("node-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let k8s = Setup::new(&refs);
    let receiver = k8s.start(&remediate_config(&k8s));
    let am = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        dir.path().join("alertmanager.yml"),
        alertmanager_config(&receiver.addr, &k8s.dir.path().join("token")),
    )
    .unwrap();
    let _am = common::start_alertmanager(dir.path(), &am);
    let rules = repo("alerts/hcclwatch-rules.yml");
    std::fs::write(
        dir.path().join("prometheus.yml"),
        prometheus_config(&rules, &am, &addrs),
    )
    .unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let _prometheus = common::start_prometheus(dir.path(), &prom);

    // Warm-up: the engines' windows fill and the fabric baseline is learned.
    let rounds_ok = |s: &str| {
        common::samples(s, "hcclwatch_probe_rounds_total", &[("result", "ok")])
            .first()
            .copied()
            .unwrap_or(0.0)
    };
    let until = Instant::now() + Duration::from_secs(warmup * 60 + 300);
    // Polled slowly: scrapes cost the daemons CPU time that would show up in the probes.
    while rounds_ok(&daemons[0].as_ref().unwrap().scrape()) < warmup as f64 {
        assert!(
            Instant::now() < until,
            "run {id}: warm-up rounds not reached"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    for n in &names {
        assert_ne!(
            k8s.api.node(n)["spec"]["unschedulable"],
            true,
            "run {id}: {n} cordoned before any fault"
        );
    }
    eprintln!("run {id}: warm-up done ({warmup} rounds); injecting");

    let mut seen: Vec<Seen> = vec![Seen::default(); Fault::ALL.len()];
    // Hard faults: the scenario files are rewritten under the running daemons.
    seen[1].injected = now_unix();
    daemons[Fault::Critical.rank()]
        .as_ref()
        .unwrap()
        .set_scenario(&scenario(3, &[]));
    seen[2].injected = now_unix();
    daemons[Fault::Separate.rank()]
        .as_ref()
        .unwrap()
        .set_scenario(&scenario(0, &[SEPARATE_CODE]));
    // Slow node: a restart with the throttle on the same addresses.
    let slow = Fault::Slow.rank();
    seen[0].injected = now_unix();
    daemons[slow].take().unwrap().stop();
    let mut cfg = daemon_config(&peers, slow, &key, webs[slow], throttle);
    // The slow node stands for a slow component: it also shows the hardware sign such a
    // component's interface shows, so the shipped thresholds hold it the short hold (the
    // bench measures that path; without a sign the persistence horizon adds
    // `health.uncorroborated_hold` rounds).
    cfg = cfg.replace(
        "inject_hardware_signs = []",
        "inject_hardware_signs = [\"pcie\"]",
    );
    assert!(cfg.contains("inject_hardware_signs = [\"pcie\"]"), "{cfg}");
    daemons[slow] = Some(Daemon::start(Start::new(&cfg).scenario(&healthy)));

    let deadline = Instant::now() + timeout;
    let mut last_slow_poll = Instant::now() - Duration::from_secs(2);
    while Instant::now() < deadline && seen.iter().any(|s| s.at[5].is_none()) {
        let t = now_unix();
        if last_slow_poll.elapsed() >= Duration::from_secs(1) {
            last_slow_poll = Instant::now();
            poll_daemons(&daemons, &mut seen, t);
            poll_prometheus(&prom, &mut seen, t);
        }
        poll_remediation(&k8s, &mut seen, t);
        std::thread::sleep(Duration::from_millis(250));
    }
    let others: Vec<&String> = names
        .iter()
        .filter(|n| {
            !Fault::ALL.iter().any(|f| f.node() == **n)
                && k8s.api.node(n)["spec"]["unschedulable"] == true
        })
        .collect();
    if !others.is_empty() {
        eprintln!("run {id}: WARNING: healthy nodes cordoned: {others:?}");
    }
    seen
}

fn poll_daemons(daemons: &[Option<Daemon>], seen: &mut [Seen], t: f64) {
    let scrapes: Vec<String> = daemons
        .iter()
        .flatten()
        .map(|d| d.get("/metrics", None))
        .filter(|r| r.status == 200)
        .map(|r| r.body)
        .collect();
    for (f, s) in Fault::ALL.iter().zip(seen.iter_mut()) {
        let node = f.node();
        let first = |slot: &mut Option<f64>| {
            slot.get_or_insert(t - s.injected);
        };
        if s.at[0].is_none()
            && in_state(
                &scrapes,
                &node,
                &["suspect", "confirmed", "quarantine_recommended"],
            )
        {
            first(&mut s.at[0]);
        }
        if s.at[1].is_none() && in_state(&scrapes, &node, &["quarantine_recommended"]) {
            first(&mut s.at[1]);
            s.score = scrapes
                .iter()
                .flat_map(|x| common::samples(x, "hcclwatch_straggler_score", &[("node", &node)]))
                .reduce(f64::max);
        }
    }
}

fn poll_prometheus(prom: &str, seen: &mut [Seen], t: f64) {
    let r = http_get(prom, "/api/v1/alerts", None);
    if r.status != 200 {
        return;
    }
    let v: Value = serde_json::from_str(&r.body).unwrap();
    for a in v["data"]["alerts"].as_array().into_iter().flatten() {
        if a["labels"]["alertname"] != "HcclwatchQuarantineRecommended" {
            continue;
        }
        for (f, s) in Fault::ALL.iter().zip(seen.iter_mut()) {
            if a["labels"]["node"] != f.node().as_str() {
                continue;
            }
            if s.at[2].is_none()
                && let Some(ts) = a["activeAt"].as_str()
            {
                let active: jiff::Timestamp = ts.parse().unwrap();
                s.at[2] = Some(active.as_millisecond() as f64 / 1000.0 - s.injected);
            }
            if s.at[3].is_none() && a["state"] == "firing" {
                s.at[3] = Some(t - s.injected);
            }
        }
    }
}

fn poll_remediation(k8s: &Setup, seen: &mut [Seen], t: f64) {
    let audit = k8s.audit();
    for (f, s) in Fault::ALL.iter().zip(seen.iter_mut()) {
        let node = f.node();
        if s.at[4].is_none()
            && let Some(rec) = audit.iter().find(|r| {
                r["node"] == node.as_str()
                    && r["alertname"] == "HcclwatchQuarantineRecommended"
                    && r["status"] == "firing"
            })
        {
            let ts: jiff::Timestamp = rec["ts"].as_str().unwrap().parse().unwrap();
            s.at[4] = Some(ts.as_millisecond() as f64 / 1000.0 - s.injected);
        }
        if s.at[5].is_none() && k8s.api.node(&node)["spec"]["unschedulable"] == true {
            s.at[5] = Some(t - s.injected);
        }
    }
}

/// Median (the upper one of an even count) and maximum.
fn p50_max(mut v: Vec<f64>) -> Option<(f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[v.len() / 2], v[v.len() - 1]))
}

/// The settings the chain ran at, read from the shipped files.
fn settings_line() -> String {
    let d: toml::Table = std::fs::read_to_string(repo("deploy/config/hcclwatch.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let p: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo("deploy/prometheus/prometheus.yml")).unwrap(),
    )
    .unwrap();
    let rules = std::fs::read_to_string(repo("alerts/hcclwatch-rules.yml")).unwrap();
    // The alert's own lines only: up to the next rule.
    let hold = rules
        .split("- alert: HcclwatchQuarantineRecommended")
        .nth(1)
        .and_then(|r| {
            r.lines()
                .skip(1)
                .take_while(|l| !l.trim_start().starts_with("- "))
                .find_map(|l| l.trim().strip_prefix("for: "))
        })
        .unwrap_or("none")
        .to_string();
    let am: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(repo("deploy/alertmanager/alertmanager.yml")).unwrap(),
    )
    .unwrap();
    let gw = am["route"]["routes"][0]["group_wait"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let interval = probe_interval_override()
        .map(|i| {
            format!(
                "{i} (LATENCY_PROBE_INTERVAL; shipped {})",
                d["probe"]["interval"]
            )
        })
        .unwrap_or_else(|| d["probe"]["interval"].to_string());
    let throttle = env_u64("LATENCY_THROTTLE", THROTTLE);
    let base = env_u64("LATENCY_BASE_THROTTLE", BASE_THROTTLE);
    let loosened = health_override()
        .iter()
        .map(|(k, v)| format!(" {k} {v} (LATENCY_HEALTH)"))
        .collect::<String>();
    format!(
        "probe sends capped at {} B/s, the slow node's at {} B/s; probe.interval {interval}, telemetry health {}, [health] window {} confirm_rounds {} confirm_hold {} hard_consecutive_reads {}{loosened}; scrape {} evaluation {}; QuarantineRecommended for: {hold}; remediation group_wait {gw}",
        base,
        throttle,
        d["telemetry"]["intervals"]["health"],
        d["health"]["window"],
        d["health"]["confirm_rounds"],
        d["health"]["confirm_hold"],
        d["health"]["hard_consecutive_reads"],
        p["global"]["scrape_interval"].as_str().unwrap_or("?"),
        p["global"]["evaluation_interval"].as_str().unwrap_or("?"),
    )
}

#[test]
#[ignore = "a benchmark of about half an hour: scripts/bench-latency.sh"]
fn fault_to_cordon_latency_at_the_shipped_settings() {
    let runs = env_u64("LATENCY_RUNS", 3) as usize;
    let stagger = env_u64("LATENCY_STAGGER_SECONDS", 20);
    let settings = settings_line();
    eprintln!("settings: {settings}");
    let results: Vec<Result<Vec<Seen>, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..runs)
            .map(|id| {
                let h = sc.spawn(move || run_once(id));
                std::thread::sleep(Duration::from_secs(stagger));
                h
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().map_err(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                })
            })
            .collect()
    });
    let out = std::env::var_os("LATENCY_OUT");
    let mut lines = Vec::new();
    for (id, r) in results.iter().enumerate() {
        match r {
            Err(e) => println!("run {id}: FAILED: {e}"),
            Ok(seen) => {
                for (f, s) in Fault::ALL.iter().zip(seen) {
                    let v = json!({
                        "run": id, "fault": f.label(), "injected_unix": s.injected,
                        "stages": STAGES.iter().zip(s.at).map(|(n, a)| (n.to_string(), json!(a))).collect::<serde_json::Map<_, _>>(),
                        "straggler_score": s.score, "settings": settings,
                    });
                    println!("{v}");
                    lines.push(v.to_string());
                }
            }
        }
    }
    if let Some(p) = out {
        std::fs::write(p, lines.join("\n") + "\n").unwrap();
    }
    println!("\nSettings: {settings}\n");
    println!("| fault | stage | n | p50 (s) | max (s) |\n|---|---|---|---|---|");
    let ok: Vec<&Vec<Seen>> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    for (k, f) in Fault::ALL.iter().enumerate() {
        for (j, stage) in STAGES.iter().enumerate() {
            let v: Vec<f64> = ok.iter().filter_map(|s| s[k].at[j]).collect();
            let n = v.len();
            let cell = match p50_max(v) {
                Some((p, m)) => format!("{p:.0} | {m:.0}"),
                None => "— | —".into(),
            };
            println!("| {} | {stage} | {n} of {} | {cell} |", f.label(), ok.len());
        }
    }
    let scores: Vec<String> = ok
        .iter()
        .filter_map(|s| s[0].score)
        .map(|x| format!("{:.0} %", (x.exp() - 1.0) * 100.0))
        .collect();
    println!("\nSlow node's slowdown when recommended (exp(score) - 1): {scores:?}");
    assert!(!ok.is_empty(), "no run completed");
}
