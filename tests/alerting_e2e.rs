//! End to end with the real Prometheus and Alertmanager from Debian: six `hcclwatch run`
//! daemons on loopback read `libfake_dcmi.so` and probe each other; one of them (node-2) is
//! slowed by the engine's fault injection. Prometheus scrapes them every second and
//! evaluates the shipped rules, with only the `for:` holds shortened (minutes become
//! seconds) in a derived copy in the test's temporary directory. Alertmanager runs the
//! shipped example config, with the remediation webhook's URL and token file pointed at the
//! real remediation receiver (`hcclwatch remediate`, not in dry-run), which acts on the
//! stand-in Kubernetes API server of `common/fake_apiserver.rs` (no real API server can
//! run here).
//!
//! Asserted: the quarantine alert fires for node-2, reaches the receiver with its labels
//! and the bearer token, and node-2 (only node-2) is cordoned and tainted; no alert fires
//! for a healthy node (every firing alert is about node-2); and every dashboard panel query
//! returns data from the live Prometheus (but the NPU fabric dashboard's: no device plane
//! runs here).
//!
//! Every process (daemons, Prometheus, Alertmanager, the receiver) is killed on every exit
//! path by drop guards; the temporary directories go with them. The whole test is bounded
//! by the waits below (about seven minutes at worst: six group formations of up to a
//! minute each, the servers' starts, then 180 s for the cordon).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::receiver::Setup;
use common::{
    Daemon, SLOW_THROTTLE, Start, fake_lib, http_get, loopback_peers, url_encode, write_key,
};

const MEMBERS: usize = 6;
const SLOW: usize = 2;

/// The shared probing config (tests/common), reading the fake DCMI library at short
/// intervals, with the members named node-0.. as the Prometheus targets are.
fn daemon_config(peers: &[String], rank: usize, key: &Path, throttle: u64) -> String {
    let names = (0..peers.len())
        .map(|i| format!("\"node-{i}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let telemetry = format!(
        "[telemetry]\nbackend = \"dcmi\"\ndcmi_library = \"{}\"\n[telemetry.intervals]\ninventory = \"5s\"\nhealth = \"1s\"\nsensors = \"1s\"\nutilization = \"1s\"\nmemory = \"1s\"\nnetwork = \"1s\"\nhost = \"2s\"\n",
        fake_lib().display()
    );
    // The subject here is the alert chain, not the thresholds: see `with_loosened_health`.
    let base = common::with_loosened_health(common::probe_config(peers, rank, key, throttle));
    let rank_line = format!("rank = {rank}\n");
    assert!(base.contains("[telemetry]\nbackend = \"none\"\n") && base.contains(&rank_line));
    // Rounds every 150 ms with 256 KiB probes are far above any production budget, so the
    // budgets are set out of reach (1 TiB an hour, all of the wall time), not off: the
    // budget panels still get their series. Otherwise a member slowed by the shared cores
    // exceeds its busy budget and HcclwatchProbeBudgetExceeded fires for a healthy node
    // (seen in CI). The budget alert has its own promtool tests.
    assert!(base.contains("[probe]\n"));
    base.replace("[telemetry]\nbackend = \"none\"\n", &telemetry)
        .replace(&rank_line, &format!("peer_names = [{names}]\n{rank_line}"))
        .replace(
            "[probe]\n",
            "[probe]\nbudget_bytes_per_hour = 1099511627776\nbudget_busy_ratio = 1.0\n",
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
        // 0x80E21007 is NotHandleFault in the fault-level table: no alert pages on it.
        chip["error_codes"] = serde_json::json!([0x80E2_1007u32]);
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

/// What `daemon`'s state API says of node-2 (its member entry and its transitions, with
/// their evidence) and whether it sees a fabric event or a crowd: why a failed wait failed.
fn view_of_node_2(daemon: &Daemon) -> String {
    let body = daemon.get("/api/v1/state", None).body;
    let Ok(st) = serde_json::from_str::<serde_json::Value>(&body) else {
        return format!("no state: {body}");
    };
    let of_node_2 = |key: &str| -> Vec<serde_json::Value> {
        st[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["node"] == "node-2")
            .cloned()
            .collect()
    };
    serde_json::json!({
        "member": of_node_2("members"),
        "transitions": of_node_2("transitions"),
        "fabric_degraded": st["fabric_degraded"],
        "crowd": st["crowd"],
    })
    .to_string()
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
    let peers: Vec<String> = loopback_peers(MEMBERS);
    let scenarios: Vec<String> = (0..MEMBERS).map(scenario).collect();
    let configs: Vec<String> = (0..MEMBERS)
        .map(|r| daemon_config(&peers, r, &key, if r == SLOW { SLOW_THROTTLE } else { 0 }))
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

    // The remediation receiver, acting for real on a stand-in API server with the fleet's
    // nodes.
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("node-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let k8s = Setup::new(&refs);
    let receiver = k8s.start(&k8s.config(
        "dry_run = false\n[breaker]\nmax_percent = 100.0",
        r#"actions = ["cordon", "taint", "condition", "event"]"#,
    ));
    let addrs: Vec<&str> = daemons.iter().map(|d| d.addr.as_str()).collect();
    let chain = common::alert_chain::AlertChain::start(
        dir.path(),
        &rules_with_short_holds(),
        &addrs,
        &receiver.addr,
        &k8s.dir.path().join("token"),
    );
    let prom = chain.prometheus.clone();

    // The quarantine alert for node-2 reaches the receiver, which cordons and taints it and
    // then records the applied cordon in its audit log. The node changes on the API server
    // before the receiver writes its audit line (seen in CI), so the wait is for both.
    let deadline = Instant::now() + Duration::from_secs(180);
    let applied_cordon = || {
        k8s.audit()
            .into_iter()
            .find(|r| r["action"] == "cordon" && r["result"] == "applied")
    };
    while k8s.api.node("node-2")["spec"]["unschedulable"] != true || applied_cordon().is_none() {
        assert!(
            Instant::now() < deadline,
            "node-2 not quarantined within 180 s; Prometheus alerts: {}\nnode-0's view of node-2: {}\nnode-0 log tail:\n{}\nreceiver log (debug lines left out):\n{}",
            http_get(&prom, "/api/v1/alerts", None).body,
            view_of_node_2(&daemons[0]),
            daemons[0]
                .log()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n"),
            receiver
                .log()
                .lines()
                .filter(|l| !l.contains("level=debug"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let node = k8s.api.node("node-2");
    let taints: Vec<&str> = node["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["value"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(taints, vec!["straggler"], "{node}");
    let rec = applied_cordon().expect("an applied cordon in the audit log");
    assert_eq!(rec["node"], "node-2");
    assert_eq!(rec["alertname"], "HcclwatchQuarantineRecommended");
    assert_eq!(rec["reason"], "straggler");
    assert_eq!(rec["status"], "firing");
    assert!(rec["who"].as_str().unwrap().starts_with("bearer@"), "{rec}");
    assert!(!rec["fingerprint"].as_str().unwrap().is_empty());
    for (i, n) in names.iter().enumerate() {
        if i != SLOW {
            assert_eq!(
                k8s.api.node(n)["spec"].get("unschedulable"),
                None,
                "{n} was touched"
            );
        }
    }

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

    // Every dashboard panel query returns data from the live Prometheus, except the NPU
    // fabric dashboard's: these daemons run no hccn_tool and no device plane, so its
    // series do not exist here (its queries are still parsed and checked against the
    // exported names in tests/deploy.rs).
    let queries: Vec<(String, String)> = common::dashboard_queries()
        .into_iter()
        .filter(|(what, _)| !what.starts_with("npu-fabric.json/"))
        .collect();
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
