//! Per-NPU isolation end to end, with every real part that can run here: three
//! `hcclwatch run` daemons on loopback read `libfake_dcmi.so` with
//! `health.hard_npu_scoped` on; the real Prometheus from Debian scrapes them and
//! evaluates the shipped rules; the real Alertmanager runs the shipped example config
//! (its route sends `HcclwatchNpuIsolationRecommended` to the receiver); the real
//! receiver (`hcclwatch remediate`, not in dry run) acts on the stand-in API server of
//! `common/fake_apiserver.rs` (no real API server can run here), which serves
//! `DeviceTaintRule` and the `ResourceSlice`s Ascend's DRA driver would publish.
//!
//! Asserted: a SeparateNPU fault code on node-1's NPU 0 isolates exactly that NPU (a
//! DeviceTaintRule for device `npu-0` in pool `node-1`), audited before it is made; no
//! node is cordoned, and no node-level quarantine alert fires for it; when the code
//! clears, the rule is deleted. Every process is killed on every exit path by drop
//! guards.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::receiver::Setup;
use common::{Daemon, Start, fake_lib, http_get, loopback_peers, url_encode, write_key};

const MEMBERS: usize = 3;
const BAD: usize = 1;
/// SeparateNPU in the shipped fault-level table.
const SEPARATE_NPU_CODE: u32 = 0x80E3_A201;

fn daemon_config(peers: &[String], rank: usize, key: &Path) -> String {
    let names = (0..peers.len())
        .map(|i| format!("\"node-{i}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let telemetry = format!(
        "[telemetry]\nbackend = \"dcmi\"\ndcmi_library = \"{}\"\n[telemetry.intervals]\nhealth = \"300ms\"\nnetwork = \"300ms\"\n",
        fake_lib().display()
    );
    let base = common::probe_config(peers, rank, key, 0);
    let rank_line = format!("rank = {rank}\n");
    assert!(base.contains("[telemetry]\nbackend = \"none\"\n") && base.contains(&rank_line));
    assert!(!base.contains("[health]"));
    base.replace("[telemetry]\nbackend = \"none\"\n", &telemetry)
        .replace(&rank_line, &format!("peer_names = [{names}]\n{rank_line}"))
        + "[health]\nhard_npu_scoped = true\n"
}

/// The example scenario with every reading present, and the given fault codes on its one
/// NPU (physical id 0).
fn scenario(codes: &[u32]) -> String {
    let mut s: serde_json::Value =
        serde_json::from_str(include_str!("fake-dcmi/scenarios/example.json")).unwrap();
    let chip = &mut s["cards"][0]["chips"][0];
    assert_eq!(chip["phy_id"], 0);
    chip["fail"] = serde_json::json!({});
    chip["error_codes"] = serde_json::json!(codes);
    s.to_string()
}

fn firing(prom: &str) -> Vec<serde_json::Value> {
    let q = url_encode("ALERTS{alertstate=\"firing\"}");
    let r = http_get(prom, &format!("/api/v1/query?query={q}"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_separate_npu_code_isolates_that_npu_only_and_clearing_it_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_key(dir.path(), "probe.key");
    let peers = loopback_peers(MEMBERS);
    let daemons: Vec<Daemon> = (0..MEMBERS)
        .map(|r| {
            let cfg = daemon_config(&peers, r, &key);
            Daemon::start(Start::new(&cfg).scenario(&scenario(&[])))
        })
        .collect();
    for d in &daemons {
        d.wait_for("the probe group to form", Duration::from_secs(60), |s| {
            common::value(s, "hcclwatch_probe_active", &[]) == Some(1.0)
        });
    }

    // The receiver, with the shipped kinds of rule: a node rule for the node-level
    // quarantine alert, and isolate_npu for the NPU's.
    let names: Vec<String> = (0..MEMBERS).map(|i| format!("node-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let k8s = Setup::new(&refs);
    // Eight NPUs per node as the driver publishes them (the fake DCMI reads one): one
    // isolated NPU is under the shipped share, so the node must stay schedulable.
    for n in &names {
        k8s.api.add_resource_slice(n, &[0, 1, 2, 3, 4, 5, 6, 7]);
    }
    let receiver = k8s.start(&k8s.config(
        "dry_run = false",
        "actions = [\"cordon\", \"taint\"]\n[[rules]]\nalertname = \"HcclwatchNpuIsolationRecommended\"\nactions = [\"isolate_npu\"]",
    ));
    // The shipped rules unchanged: the isolation alert has no hold.
    let rules = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("alerts/hcclwatch-rules.yml"),
    )
    .unwrap();
    let addrs: Vec<&str> = daemons.iter().map(|d| d.addr.as_str()).collect();
    let chain = common::alert_chain::AlertChain::start(
        dir.path(),
        &rules,
        &addrs,
        &receiver.addr,
        &k8s.dir.path().join("token"),
    );
    let prom = chain.prometheus.clone();

    // node-1's NPU 0 reports a SeparateNPU code.
    daemons[BAD].set_scenario(&scenario(&[SEPARATE_NPU_CODE]));
    let isolated = |rules: &std::collections::BTreeMap<String, serde_json::Value>| {
        rules.values().any(|r| {
            r["spec"]["deviceSelector"]["pool"] == "node-1"
                && r["spec"]["deviceSelector"]["device"] == "npu-0"
        })
    };
    let applied = || {
        k8s.audit()
            .into_iter()
            .any(|r| r["action"] == "isolate_npu" && r["result"] == "applied")
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while !isolated(&k8s.api.device_taint_rules()) || !applied() {
        assert!(
            Instant::now() < deadline,
            "NPU 0 of node-1 not isolated within 90 s; alerts: {}\nreceiver log:\n{}",
            http_get(&prom, "/api/v1/alerts", None).body,
            receiver.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(k8s.api.device_taint_rules().len(), 1);
    let audit = k8s.audit();
    let intent = audit
        .iter()
        .position(|r| r["action"] == "isolate_npu" && r["result"] == "intent")
        .expect("an intent record");
    let done = audit
        .iter()
        .position(|r| r["action"] == "isolate_npu" && r["result"] == "applied")
        .unwrap();
    assert!(intent < done, "{audit:?}");
    assert_eq!(audit[done]["node"], "node-1");
    assert_eq!(audit[done]["alertname"], "HcclwatchNpuIsolationRecommended");
    // The node-level path stayed quiet: no node is cordoned and no quarantine alert fires.
    for n in &names {
        assert_eq!(
            k8s.api.node(n)["spec"].get("unschedulable"),
            None,
            "{n} was cordoned"
        );
    }
    let alerts = firing(&prom);
    assert!(
        alerts
            .iter()
            .all(|a| a["metric"]["alertname"] != "HcclwatchQuarantineRecommended"),
        "{alerts:?}"
    );
    let s = daemons[BAD].scrape();
    assert_eq!(
        common::value(
            &s,
            "hcclwatch_npu_isolation_recommended",
            &[("npu", "0"), ("reason", "separate_npu_fault")]
        ),
        Some(1.0)
    );

    // The code clears: the alert resolves and the receiver deletes exactly that rule.
    daemons[BAD].set_scenario(&scenario(&[]));
    let deadline = Instant::now() + Duration::from_secs(120);
    while !k8s.api.device_taint_rules().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the rule was not deleted within 120 s of the code clearing; receiver log:\n{}",
            receiver.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for n in &names {
        assert_eq!(
            k8s.api.node(n)["spec"].get("unschedulable"),
            None,
            "{n} was cordoned"
        );
    }
}
