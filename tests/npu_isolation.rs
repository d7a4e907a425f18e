//! Per-NPU isolation (`isolate_npu`) through the real receiver (`hcclwatch remediate`)
//! and the real kube client, against the stand-in API server (`common/fake_apiserver.rs`
//! with `common/fake_dra.rs`: no real API server can run here; the stand-in serves
//! `resource.k8s.io/v1` `DeviceTaintRule` and `ResourceSlice` with the real group,
//! version, fields and status codes). The ResourceSlices are seeded as Ascend's DRA driver
//! publishes them: driver `npu.huawei.com`, one pool per node named after the node,
//! devices `npu-<physical id>`.

mod common;

use common::receiver::{Receiver, Setup};
use common::value;
use serde_json::{Value, json};

const RULE: &str = r#"actions = ["isolate_npu"]"#;

fn npu_alert(status: &str, node: &str, npu: &str, fp: &str) -> Value {
    json!({
        "status": status,
        "labels": {"alertname": "HcclwatchNpuFaultSeparateNPU", "node": node, "npu": npu,
                   "code": "80E01801", "level": "SeparateNPU", "severity": "critical"},
        "annotations": {"summary": format!("NPU {npu} on {node} has fault 80E01801 (SeparateNPU)")},
        "startsAt": "2026-12-02T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fp,
    })
}

fn send(r: &Receiver, status: &str, node: &str, npu: &str, fp: &str) -> common::Response {
    let alert = npu_alert(status, node, npu, fp);
    r.post(&json!({
        "version": "4", "groupKey": "{}:{alertname=\"HcclwatchNpuFaultSeparateNPU\"}",
        "truncatedAlerts": 0, "status": status, "receiver": "hcclwatch-remediation",
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "alerts": [alert],
    }))
}

/// A receiver config whose one rule isolates the NPU of `HcclwatchNpuFaultSeparateNPU`.
fn config(s: &Setup, top: &str, rule: &str) -> String {
    s.config(top, rule).replace(
        "alertname = \"HcclwatchQuarantineRecommended\"",
        "alertname = \"HcclwatchNpuFaultSeparateNPU\"",
    )
}

/// Eight NPUs on each node, as the driver publishes them.
fn setup(nodes: &[&str]) -> Setup {
    let s = Setup::new(nodes);
    for n in nodes {
        s.api.add_resource_slice(n, &[0, 1, 2, 3, 4, 5, 6, 7]);
    }
    s
}

fn cordoned(s: &Setup, node: &str) -> bool {
    s.api.node(node)["spec"]["unschedulable"] == json!(true)
}

/// The audit records as (action, result) pairs, in order.
fn audit_steps(s: &Setup) -> Vec<(String, String)> {
    s.audit()
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap_or("").to_string(),
                r["result"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[test]
fn one_bad_npu_is_isolated_alone_and_released_when_its_alert_resolves() {
    let s = setup(&["npu-node-1"]);
    let r = s.start(&config(&s, "dry_run = false", RULE));
    let resp = send(&r, "firing", "npu-node-1", "3", "f3");
    assert_eq!(resp.status, 200, "{}", resp.body);
    let rules = s.api.device_taint_rules();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = rules.values().next().unwrap();
    let sel = &rule["spec"]["deviceSelector"];
    assert_eq!(sel["driver"], "npu.huawei.com");
    assert_eq!(sel["pool"], "npu-node-1");
    assert_eq!(sel["device"], "npu-3");
    assert_eq!(rule["spec"]["taint"]["effect"], "NoSchedule");
    assert_eq!(rule["spec"]["taint"]["key"], "hcclwatch.io/npu-unhealthy");
    assert_eq!(
        rule["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "hcclwatch"
    );
    assert_eq!(
        rule["metadata"]["annotations"]["hcclwatch.io/fingerprint"],
        "f3"
    );
    assert!(
        !cordoned(&s, "npu-node-1"),
        "one NPU must not cordon its node"
    );
    // The intent is on disk before the change, and the change is recorded after it.
    assert_eq!(
        audit_steps(&s),
        vec![
            pair("isolate_npu", "intent"),
            pair("isolate_npu", "applied")
        ]
    );
    let m = r.metrics();
    assert_eq!(
        value(&m, "hcclwatch_remediation_npus_isolated", &[]),
        Some(1.0),
        "{m}"
    );

    // Alertmanager repeats the alert: nothing more is created.
    assert_eq!(send(&r, "firing", "npu-node-1", "3", "f3").status, 200);
    assert_eq!(s.api.device_taint_rules().len(), 1);
    assert_eq!(
        audit_steps(&s).last(),
        Some(&pair("isolate_npu", "already_done"))
    );

    // The code clears: exactly that rule goes.
    assert_eq!(send(&r, "resolved", "npu-node-1", "3", "f3").status, 200);
    assert!(s.api.device_taint_rules().is_empty());
    let steps = audit_steps(&s);
    assert_eq!(
        &steps[steps.len() - 2..],
        &[pair("release", "intent"), pair("release", "applied")]
    );
    assert!(!cordoned(&s, "npu-node-1"));
    let m = r.metrics();
    assert_eq!(
        value(&m, "hcclwatch_remediation_npus_isolated", &[]),
        Some(0.0),
        "{m}"
    );
}

#[test]
fn a_second_npu_over_the_share_cordons_the_node_until_its_alert_resolves() {
    let s = setup(&["npu-node-1"]);
    let r = s.start(&config(&s, "dry_run = false", RULE));
    assert_eq!(send(&r, "firing", "npu-node-1", "3", "fa").status, 200);
    assert!(!cordoned(&s, "npu-node-1"));
    // 2 of 8 is over the shipped share (0.125): the node goes too.
    assert_eq!(send(&r, "firing", "npu-node-1", "5", "fb").status, 200);
    let devices: Vec<String> = s
        .api
        .device_taint_rules()
        .values()
        .map(|r| {
            r["spec"]["deviceSelector"]["device"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(devices.len(), 2, "{devices:?}");
    assert!(devices.contains(&"npu-3".into()) && devices.contains(&"npu-5".into()));
    assert!(
        cordoned(&s, "npu-node-1"),
        "over the share the node is cordoned"
    );
    let node = s.api.node("npu-node-1");
    assert_eq!(
        node["metadata"]["annotations"]["hcclwatch.io/quarantined-fingerprint"],
        "fb"
    );

    // The first NPU's alert resolving keeps the node: the second one quarantined it.
    assert_eq!(send(&r, "resolved", "npu-node-1", "3", "fa").status, 200);
    assert_eq!(s.api.device_taint_rules().len(), 1);
    assert!(cordoned(&s, "npu-node-1"));
    // The second resolves: its NPU and the node are released.
    assert_eq!(send(&r, "resolved", "npu-node-1", "5", "fb").status, 200);
    assert!(s.api.device_taint_rules().is_empty());
    assert!(!cordoned(&s, "npu-node-1"));
}

#[test]
fn a_device_the_driver_does_not_publish_or_a_bad_npu_label_is_refused() {
    let s = setup(&["npu-node-1"]);
    let rule = format!("{RULE}\nnpu = {{ fallback_to_node = false }}");
    let r = s.start(&config(&s, "dry_run = false", &rule));
    assert_eq!(send(&r, "firing", "npu-node-1", "9", "f9").status, 200);
    assert_eq!(send(&r, "firing", "npu-node-1", "3;x", "fe").status, 200);
    assert!(s.api.device_taint_rules().is_empty());
    assert!(!cordoned(&s, "npu-node-1"));
    let audit = s.audit();
    assert_eq!(audit.len(), 2, "{audit:?}");
    assert!(audit.iter().all(|a| a["result"] == "refused"), "{audit:?}");
    let detail = audit[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains("no device \"npu-9\"") && detail.contains("8 device(s)"),
        "{detail}"
    );
    assert!(
        audit[1]["detail"]
            .as_str()
            .unwrap()
            .contains("not an NPU physical id")
    );
}

/// Pins: with the shipped `fallback_to_node`, an NPU that cannot be isolated (no DRA in
/// the cluster, or a device the driver does not publish) takes its node out instead, and
/// the node is released when that alert resolves.
#[test]
fn without_dra_the_node_is_quarantined_instead_and_released_with_the_alert() {
    let s = setup(&["npu-node-1", "npu-node-2"]);
    s.api.remove_dra();
    let r = s.start(&config(&s, "dry_run = false", RULE));
    assert_eq!(send(&r, "firing", "npu-node-1", "3", "f3").status, 200);
    assert!(cordoned(&s, "npu-node-1"));
    assert!(!cordoned(&s, "npu-node-2"));
    let audit = s.audit();
    let first = audit[0]["detail"].as_str().unwrap();
    assert!(
        first.contains("serves no resource.k8s.io/v1 ResourceSlices")
            && first.contains("fallback_to_node"),
        "{first}"
    );
    assert_eq!(send(&r, "resolved", "npu-node-1", "3", "f3").status, 200);
    assert!(!cordoned(&s, "npu-node-1"), "{:?}", s.audit());
}

#[test]
fn the_npu_breaker_counts_npus_across_nodes() {
    let s = setup(&["n1", "n2"]);
    let top = "dry_run = false\n[breaker]\nmax_npus = 1";
    let r = s.start(&config(&s, top, RULE));
    assert_eq!(send(&r, "firing", "n1", "0", "f1").status, 200);
    assert_eq!(send(&r, "firing", "n2", "0", "f2").status, 200);
    assert_eq!(s.api.device_taint_rules().len(), 1);
    assert_eq!(
        audit_steps(&s).last(),
        Some(&pair("isolate_npu", "breaker_open"))
    );
    let detail = s.audit().last().unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains("breaker.max_npus"), "{detail}");
}

#[test]
fn dry_run_makes_the_same_decisions_and_changes_nothing() {
    // The same sequence live and in dry run; the decisions must match, with `applied`
    // read as `would_apply`.
    let run = |dry: bool| {
        let s = setup(&["npu-node-1"]);
        let r = s.start(&config(&s, &format!("dry_run = {dry}"), RULE));
        for (status, npu, fp) in [
            ("firing", "3", "fa"),
            ("firing", "3", "fa"),
            ("firing", "5", "fb"),
            ("resolved", "3", "fa"),
            ("resolved", "5", "fb"),
        ] {
            assert_eq!(send(&r, status, "npu-node-1", npu, fp).status, 200);
        }
        let writes = s.api.writes();
        let steps: Vec<(String, String)> = audit_steps(&s)
            .into_iter()
            .filter(|(_, result)| result != "intent")
            .map(|(a, result)| (a, result.replace("would_apply", "applied")))
            .collect();
        (steps, writes)
    };
    let (live, live_writes) = run(false);
    let (dry, dry_writes) = run(true);
    assert_eq!(live, dry);
    assert!(live.contains(&pair("cordon", "applied")), "{live:?}");
    assert!(!live_writes.is_empty());
    assert!(dry_writes.is_empty(), "dry run wrote {dry_writes:?}");
}

#[test]
fn no_isolation_without_its_audit_record() {
    let s = setup(&["npu-node-1"]);
    let cfg = config(&s, "dry_run = false", RULE)
        .replace(&s.audit_path().display().to_string(), "/dev/full");
    let r = s.start(&cfg);
    let resp = send(&r, "firing", "npu-node-1", "3", "fa");
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert!(s.api.device_taint_rules().is_empty());
}

/// Pins: an operator override that holds the NPU (or its node) healthy refuses the
/// isolation, audited; another NPU of the same node is still isolated.
#[test]
fn an_npu_held_healthy_by_an_operator_override_is_not_isolated() {
    let s = setup(&["npu-node-1"]);
    s.api.edit("npu-node-1", |n| {
        n["metadata"]["annotations"]["hcclwatch.io/override.npu.3"] = json!(
            r#"{"state": "healthy", "until": "2099-01-01T00:00:00Z", "reason": "vendor checked it", "by": "sre"}"#
        );
    });
    let r = s.start(&config(&s, "dry_run = false", RULE));
    assert_eq!(send(&r, "firing", "npu-node-1", "3", "f3").status, 200);
    assert!(s.api.device_taint_rules().is_empty());
    let last = s.audit().last().cloned().unwrap();
    assert_eq!(last["result"], "override_healthy", "{last}");
    assert!(last["detail"].as_str().unwrap().contains("NPU 3"), "{last}");
    assert_eq!(send(&r, "firing", "npu-node-1", "4", "f4").status, 200);
    assert_eq!(s.api.device_taint_rules().len(), 1);
}
