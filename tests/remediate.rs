//! The remediation receiver (`hcclwatch remediate`), as a real process, against a stand-in
//! Kubernetes API server (`common/fake_apiserver.rs`: no real API server can run here; the
//! stand-in implements the node, status and event endpoints the receiver uses, with
//! resourceVersion conflicts, 403 and 404). The client is the real kube client, reached
//! through a kubeconfig. Alertmanager's notifications are posted as Alertmanager posts them
//! (payload version 4, bearer token).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::receiver::{Setup, TOKEN};
use common::{KillOnDrop, http_get, value};
use serde_json::{Value, json};

fn alert(status: &str, node: &str, reason: &str, fp: &str) -> Value {
    json!({
        "status": status,
        "labels": {"alertname": "HcclwatchQuarantineRecommended", "node": node, "reason": reason, "severity": "critical"},
        "annotations": {"summary": format!("Quarantine {node} ({reason})")},
        "startsAt": "2026-11-29T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fp,
    })
}

/// Posts one alert as Alertmanager would, with the test token.
fn send(
    r: &common::receiver::Receiver,
    status: &str,
    node: &str,
    reason: &str,
    fp: &str,
) -> common::Response {
    r.post(&notification(vec![alert(status, node, reason, fp)]))
}

fn notification(alerts: Vec<Value>) -> Value {
    let status = if alerts.iter().any(|a| a["status"] == "firing") {
        "firing"
    } else {
        "resolved"
    };
    json!({
        "version": "4", "groupKey": "{}:{alertname=\"HcclwatchQuarantineRecommended\"}",
        "truncatedAlerts": 0, "status": status, "receiver": "hcclwatch-remediation",
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "alerts": alerts,
    })
}

fn actions(m: &str, action: &str, result: &str, dry: &str) -> f64 {
    value(
        m,
        "hcclwatch_remediation_actions_total",
        &[("action", action), ("result", result), ("dry_run", dry)],
    )
    .unwrap_or(0.0)
}

fn taints(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            format!(
                "{}={}:{}",
                t["key"].as_str().unwrap(),
                t["value"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap()
            )
        })
        .collect()
}

fn condition<'a>(node: &'a Value, kind: &str) -> Option<&'a Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

const ALL_K8S: &str = r#"actions = ["cordon", "taint", "condition", "event"]"#;

#[test]
fn quarantine_and_release_with_every_kubernetes_action() {
    let s = Setup::new(&["n1", "n2"]);
    // A taint somebody else owns must survive both the quarantine and the release.
    s.api.edit(
        "n1",
        |n| {
            n["spec"]["taints"] =
                json!([{"key": "team.example.com/reserved", "value": "ml", "effect": "NoSchedule"}])
        },
    );
    let r = s.start(&s.config("dry_run = false", ALL_K8S));
    // The first PUT races with another writer: the receiver must re-read and retry.
    s.api.conflict_next_puts(1);
    let resp = send(&r, "firing", "n1", "straggler", "a1b2c3");
    assert_eq!(resp.status, 200, "{}\n{}", resp.body, r.log());

    let n = s.api.node("n1");
    assert_eq!(n["spec"]["unschedulable"], true);
    let t = taints(&n);
    assert!(
        t.contains(&"hcclwatch.io/quarantine=straggler:NoSchedule".to_string()),
        "{t:?}"
    );
    assert!(
        t.contains(&"team.example.com/reserved=ml:NoSchedule".to_string()),
        "{t:?}"
    );
    assert!(
        t.contains(&"racer.example.com/maintenance=yes:NoSchedule".to_string()),
        "the racing writer's taint was clobbered: {t:?}"
    );
    let a = &n["metadata"]["annotations"];
    assert_eq!(a["hcclwatch.io/quarantined-by"], "hcclwatch");
    assert_eq!(
        a["hcclwatch.io/quarantined-reason"],
        "HcclwatchQuarantineRecommended: straggler"
    );
    assert_eq!(a["hcclwatch.io/quarantined-fingerprint"], "a1b2c3");
    assert!(
        a["hcclwatch.io/quarantined-at"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
    let c = condition(&n, "NPUStraggler").expect("condition set");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "HcclwatchQuarantine");
    assert!(c["lastHeartbeatTime"].is_string());
    assert_eq!(
        condition(&n, "Ready").unwrap()["status"],
        "True",
        "other conditions untouched"
    );
    let ev = s.api.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0]["involvedObject"]["name"], "n1");
    assert_eq!(ev[0]["reason"], "HcclwatchQuarantine");
    assert_eq!(ev[0]["type"], "Warning");
    assert_eq!(
        s.api.node("n2")["spec"].get("unschedulable"),
        None,
        "n2 untouched"
    );

    let m = r.metrics();
    for a in ["cordon", "taint", "condition", "event"] {
        assert_eq!(actions(&m, a, "applied", "false"), 1.0, "{a}:\n{m}");
    }
    assert_eq!(
        value(&m, "hcclwatch_remediation_nodes_quarantined", &[]),
        Some(1.0)
    );
    assert_eq!(
        value(
            &m,
            "hcclwatch_remediation_webhook_requests_total",
            &[("code", "200")]
        ),
        Some(1.0)
    );

    // Resolved: exactly what hcclwatch did is undone.
    let resp = send(&r, "resolved", "n1", "straggler", "a1b2c3");
    assert_eq!(resp.status, 200, "{}", resp.body);
    let n = s.api.node("n1");
    assert_eq!(n["spec"]["unschedulable"], false);
    let t = taints(&n);
    assert!(!t.iter().any(|x| x.starts_with("hcclwatch.io/")), "{t:?}");
    assert!(
        t.contains(&"team.example.com/reserved=ml:NoSchedule".to_string()),
        "{t:?}"
    );
    assert!(
        t.contains(&"racer.example.com/maintenance=yes:NoSchedule".to_string()),
        "{t:?}"
    );
    let a = &n["metadata"]["annotations"];
    assert!(a.get("hcclwatch.io/quarantined-by").is_none(), "{a}");
    assert!(a["hcclwatch.io/released-at"].is_string());
    assert_eq!(condition(&n, "NPUStraggler").unwrap()["status"], "False");
    assert_eq!(s.api.events().len(), 2);
    // The release was one JSON patch guarded by a test on resourceVersion.
    assert!(
        s.api
            .writes()
            .iter()
            .any(|(v, _, ct)| v == "patch" && ct.starts_with("application/json-patch+json"))
    );
    let audit = s.audit();
    assert!(
        audit
            .iter()
            .any(|r| r["action"] == "release" && r["result"] == "applied")
    );
    assert!(
        audit
            .iter()
            .all(|r| r["who"].as_str().unwrap().starts_with("bearer@127.0.0.1"))
    );
}

#[test]
fn dry_run_by_default_changes_nothing_but_audits_and_counts() {
    let s = Setup::new(&["n1"]);
    let r = s.start(&s.config("", ALL_K8S));
    assert!(r.log().contains("DRY RUN"), "{}", r.log());
    let before = s.api.node("n1");
    let resp = send(&r, "firing", "n1", "straggler", "ff01");
    assert_eq!(resp.status, 200);
    assert_eq!(s.api.node("n1"), before, "dry run changed the node");
    assert!(s.api.writes().is_empty(), "{:?}", s.api.writes());
    let m = r.metrics();
    assert_eq!(actions(&m, "cordon", "would_apply", "true"), 1.0, "{m}");
    assert_eq!(value(&m, "hcclwatch_remediation_dry_run", &[]), Some(1.0));
    let audit = s.audit();
    let cordon = audit.iter().find(|r| r["action"] == "cordon").unwrap();
    assert_eq!(cordon["result"], "would_apply");
    assert_eq!(cordon["dry_run"], true);
    assert_eq!(cordon["fingerprint"], "ff01");
    assert_eq!(cordon["reason"], "straggler");
    // Duplicates stay idempotent in dry run too.
    send(&r, "firing", "n1", "straggler", "ff01");
    assert_eq!(actions(&r.metrics(), "cordon", "would_apply", "true"), 1.0);
}

#[test]
fn duplicates_and_retries_are_idempotent() {
    let s = Setup::new(&["n1"]);
    let r = s.start(&s.config("dry_run = false", ALL_K8S));
    let n = notification(vec![alert("firing", "n1", "straggler", "0abc")]);
    assert_eq!(r.post(&n).status, 200);
    let after_first = s
        .api
        .writes()
        .iter()
        .filter(|(v, p, _)| v == "update" && p.ends_with("/n1"))
        .count();
    for _ in 0..3 {
        assert_eq!(r.post(&n).status, 200);
    }
    let after = s
        .api
        .writes()
        .iter()
        .filter(|(v, p, _)| v == "update" && p.ends_with("/n1"))
        .count();
    assert_eq!(
        after, after_first,
        "a duplicate notification updated the node again"
    );
    assert_eq!(s.api.events().len(), 1, "a duplicate wrote another event");
    let t = taints(&s.api.node("n1"));
    assert_eq!(
        t.iter()
            .filter(|x| x.starts_with("hcclwatch.io/quarantine"))
            .count(),
        1,
        "{t:?}"
    );
    let m = r.metrics();
    assert_eq!(actions(&m, "cordon", "applied", "false"), 1.0);
    assert_eq!(actions(&m, "cordon", "already_done", "false"), 3.0, "{m}");
}

#[test]
fn only_what_hcclwatch_did_is_undone() {
    let s = Setup::new(&["n1", "n2"]);
    // n1 was cordoned by an operator before the alert: the cordon is not hcclwatch's.
    s.api
        .edit("n1", |n| n["spec"]["unschedulable"] = json!(true));
    let cfg = s.config(
        "dry_run = false\n[breaker]\nmax_percent = 100.0\n[limits]\nnode_cooldown = \"0s\"\n",
        ALL_K8S,
    );
    let r = s.start(&cfg);
    send(&r, "firing", "n1", "straggler", "1111");
    let n = s.api.node("n1");
    assert_eq!(
        n["metadata"]["annotations"]["hcclwatch.io/quarantined-actions"],
        "taint,condition"
    );
    send(&r, "resolved", "n1", "straggler", "1111");
    let n = s.api.node("n1");
    assert_eq!(
        n["spec"]["unschedulable"], true,
        "hcclwatch uncordoned a node it did not cordon"
    );
    assert!(taints(&n).is_empty(), "{:?}", taints(&n));
    // A resolved alert for a node hcclwatch never touched leaves it alone.
    let before = s.api.node("n2");
    send(&r, "resolved", "n2", "straggler", "2222");
    assert_eq!(s.api.node("n2"), before);
    assert!(
        s.audit()
            .iter()
            .any(|x| x["node"] == "n2" && x["result"] == "not_ours")
    );
    // A different alert's resolution does not release n1's quarantine of another alert.
    send(&r, "firing", "n1", "hard_fault", "3333");
    send(&r, "resolved", "n1", "other", "4444");
    assert_eq!(
        s.api.node("n1")["metadata"]["annotations"]["hcclwatch.io/quarantined-fingerprint"],
        "3333"
    );
}

#[test]
fn manual_uncordon_is_recorded_counted_and_respected() {
    let s = Setup::new(&["n1"]);
    let r = s.start(&s.config("dry_run = false", ALL_K8S));
    send(&r, "firing", "n1", "straggler", "aaaa");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
    // An operator uncordons it by hand.
    s.api
        .edit("n1", |n| n["spec"]["unschedulable"] = json!(false));
    let m = r.wait_metric(
        "the manual override to be noticed by the reconcile loop",
        |m| value(m, "hcclwatch_remediation_manual_overrides_total", &[]) == Some(1.0),
    );
    assert!(m.contains("hcclwatch_remediation_manual_overrides_total 1"));
    assert!(
        s.api.node("n1")["metadata"]["annotations"]["hcclwatch.io/manual-override-at"].is_string()
    );
    // Alertmanager repeats the alert: hcclwatch does not cordon the node again.
    send(&r, "firing", "n1", "straggler", "aaaa");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], false);
    assert_eq!(
        actions(&r.metrics(), "cordon", "manual_override", "false"),
        1.0
    );
    // Counted once, not once per reconcile.
    r.wait_metric("another reconcile", |m| {
        value(
            m,
            "hcclwatch_remediation_last_reconcile_timestamp_seconds",
            &[],
        )
        .is_some()
    });
    assert_eq!(
        value(
            &r.metrics(),
            "hcclwatch_remediation_manual_overrides_total",
            &[]
        ),
        Some(1.0)
    );
    // Released and re-alerted within the cooldown: still not re-cordoned.
    send(&r, "resolved", "n1", "straggler", "aaaa");
    assert_eq!(
        value(
            &r.metrics(),
            "hcclwatch_remediation_manual_overrides_total",
            &[]
        ),
        Some(1.0),
        "the release counted the same override again"
    );
    send(&r, "firing", "n1", "straggler", "bbbb");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], false);
    assert!(actions(&r.metrics(), "cordon", "manual_override_cooldown", "false") >= 1.0);
}

#[test]
fn circuit_breaker_trips_and_recovers() {
    let names: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let s = Setup::new(&refs);
    let cfg = s.config(
        "dry_run = false\n[breaker]\nmax_nodes = 2\nmax_percent = 100.0\nwindow = \"3s\"\n[limits]\nmax_actions_per_minute = 100\n",
        r#"actions = ["cordon"]"#,
    );
    let r = s.start(&cfg);
    send(&r, "firing", "n1", "straggler", "01");
    send(&r, "firing", "n2", "straggler", "02");
    send(&r, "firing", "n3", "straggler", "03");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
    assert_eq!(s.api.node("n2")["spec"]["unschedulable"], true);
    assert_eq!(
        s.api.node("n3")["spec"].get("unschedulable"),
        None,
        "the breaker let a third node through"
    );
    let m = r.metrics();
    assert_eq!(
        value(&m, "hcclwatch_remediation_breaker_open", &[]),
        Some(1.0),
        "{m}"
    );
    assert_eq!(actions(&m, "cordon", "breaker_open", "false"), 1.0);
    assert!(
        r.log().contains("CIRCUIT BREAKER OPEN"),
        "not logged loudly:\n{}",
        r.log()
    );
    // The window slides past the first two quarantines: the breaker closes by itself.
    r.wait_metric("the breaker to close", |m| {
        value(m, "hcclwatch_remediation_breaker_open", &[]) == Some(0.0)
    });
    send(&r, "firing", "n3", "straggler", "03");
    assert_eq!(s.api.node("n3")["spec"]["unschedulable"], true);
}

#[test]
fn bad_payloads_and_bad_credentials_act_on_nothing() {
    let s = Setup::new(&["n1"]);
    let r = s.start(&s.config("dry_run = false\nmax_body_bytes = 4096", ALL_K8S));
    let good = notification(vec![alert("firing", "n1", "straggler", "abcd")]).to_string();
    assert_eq!(r.post_raw(&good, None).status, 401);
    assert_eq!(r.post_raw(&good, Some("Bearer wrong-token")).status, 401);
    assert_eq!(r.post_raw(&good, Some("Basic dXNlcjpwYXNz")).status, 401);
    let auth = format!("Bearer {TOKEN}");
    let bad_node = notification(vec![alert("firing", "N1_bad", "straggler", "abcd")]).to_string();
    let mut v3 = notification(vec![alert("firing", "n1", "straggler", "abcd")]);
    v3["version"] = json!("3");
    let no_fp = notification(vec![alert("firing", "n1", "straggler", "not-hex!")]).to_string();
    let big = format!("{{\"version\":\"4\",\"pad\":\"{}\"}}", "x".repeat(8192));
    for (what, body) in [
        ("not JSON", "{not json".to_string()),
        ("wrong version", v3.to_string()),
        ("bad node name", bad_node),
        ("bad fingerprint", no_fp),
        ("too large", big),
        (
            "no alerts",
            "{\"version\":\"4\",\"status\":\"firing\",\"alerts\":[]}".to_string(),
        ),
    ] {
        let resp = r.post_raw(&body, Some(&auth));
        assert_eq!(resp.status, 400, "{what}: {}", resp.body);
    }
    assert!(
        s.api.writes().is_empty(),
        "a rejected request changed something: {:?}",
        s.api.writes()
    );
    assert!(s.audit().is_empty());
    let m = r.metrics();
    assert_eq!(
        value(
            &m,
            "hcclwatch_remediation_webhook_requests_total",
            &[("code", "401")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &m,
            "hcclwatch_remediation_webhook_requests_total",
            &[("code", "400")]
        ),
        Some(6.0)
    );
    assert!(r.log().contains("webhook payload rejected"), "{}", r.log());
    // The receiver is still fine afterwards.
    assert_eq!(r.post_raw(&good, Some(&auth)).status, 200);
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
}

#[test]
fn restart_in_the_middle_of_a_quarantine_rebuilds_state_from_annotations() {
    let s = Setup::new(&["n1", "n2", "n3"]);
    let cfg = s.config(
        "dry_run = false\n[breaker]\nmax_nodes = 1\nmax_percent = 100.0\nwindow = \"1h\"\n",
        ALL_K8S,
    );
    let r = s.start(&cfg);
    send(&r, "firing", "n1", "straggler", "c0ffee");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
    drop(r);

    let r = s.start(&cfg);
    let m = r.metrics();
    assert_eq!(
        value(&m, "hcclwatch_remediation_nodes_quarantined", &[]),
        Some(1.0),
        "{m}"
    );
    // The breaker window came back from the annotations: a second node is refused.
    send(&r, "firing", "n2", "straggler", "beef");
    assert_eq!(s.api.node("n2")["spec"].get("unschedulable"), None);
    // A repeat of n1's alert is recognised as already done, and its resolution releases it.
    send(&r, "firing", "n1", "straggler", "c0ffee");
    assert_eq!(
        actions(&r.metrics(), "cordon", "already_done", "false"),
        1.0
    );
    send(&r, "resolved", "n1", "straggler", "c0ffee");
    let n = s.api.node("n1");
    assert_eq!(n["spec"]["unschedulable"], false);
    assert!(taints(&n).is_empty());
}

#[test]
fn exec_hook_gets_the_alert_and_is_killed_on_timeout() {
    let s = Setup::new(&["n1", "n2"]);
    let out = s.dir.path().join("hook.out");
    let script = s.dir.path().join("hook.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$HCCLWATCH_NODE $HCCLWATCH_STATUS $HCCLWATCH_REASON $HCCLWATCH_LABEL_SEVERITY\" > {out}\ncat >> {out}\necho drained\n", out = out.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let rule = format!(
        "actions = [\"exec\"]\nexec = {{ argv = [\"{}\"], timeout = \"5s\" }}\n[[rules]]\nalertname = \"HcclwatchQuarantineRecommended\"\nmatch_labels = {{ reason = \"slowhook\" }}\nactions = [\"exec\"]\nexec = {{ argv = [\"sleep\", \"30\"], timeout = \"300ms\" }}",
        script.display()
    );
    // The slow rule must come first to match its alerts.
    let rule = rule.replacen(
        "actions = [\"exec\"]\nexec = {",
        "match_labels = { reason = \"straggler\" }\nactions = [\"exec\"]\nexec = {",
        1,
    );
    let r = s.start(&s.config("dry_run = false\n[breaker]\nmax_percent = 100.0", &rule));
    assert_eq!(send(&r, "firing", "n1", "straggler", "e1").status, 200);
    let text = std::fs::read_to_string(&out).unwrap();
    let first = text.lines().next().unwrap();
    assert_eq!(first, "n1 firing straggler critical");
    let stdin: Value = serde_json::from_str(&text[first.len()..]).unwrap();
    assert_eq!(stdin["node"], "n1");
    assert_eq!(stdin["fingerprint"], "e1");
    let audit = s.audit();
    let rec = audit
        .iter()
        .find(|x| x["action"] == "exec" && x["node"] == "n1")
        .unwrap();
    assert_eq!(rec["result"], "applied");
    assert!(rec["detail"].as_str().unwrap().contains("drained"), "{rec}");

    let start = Instant::now();
    assert_eq!(send(&r, "firing", "n2", "slowhook", "e2").status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "the hook was not killed at its timeout"
    );
    let audit = s.audit();
    let rec = audit
        .iter()
        .find(|x| x["action"] == "exec" && x["node"] == "n2")
        .unwrap();
    assert_eq!(rec["result"], "failed");
    assert!(
        rec["detail"].as_str().unwrap().contains("timed out"),
        "{rec}"
    );
}

#[test]
fn forbidden_unknown_node_killswitch_and_selectors() {
    let s = Setup::new(&["n1", "n2", "cp1"]);
    s.api.edit("cp1", |n| {
        n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = json!("")
    });
    s.api.deny("patch", "nodes/status");
    let r = s.start(&s.config(
        "dry_run = false\n[selectors]\ndeny = [\"node-role.kubernetes.io/control-plane\"]",
        ALL_K8S,
    ));
    // 403 on the status subresource: the condition fails and says what RBAC is missing;
    // the rest is applied.
    send(&r, "firing", "n1", "straggler", "d1");
    let audit = s.audit();
    let c = audit.iter().find(|x| x["action"] == "condition").unwrap();
    assert_eq!(c["result"], "failed");
    assert!(c["detail"].as_str().unwrap().contains("forbidden"), "{c}");
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
    // 404: audited, nothing else.
    assert_eq!(send(&r, "firing", "ghost", "straggler", "d2").status, 200);
    assert!(
        s.audit()
            .iter()
            .any(|x| x["node"] == "ghost" && x["result"] == "not_found")
    );
    // Deny selector.
    send(&r, "firing", "cp1", "straggler", "d3");
    assert_eq!(s.api.node("cp1")["spec"].get("unschedulable"), None);
    assert!(
        s.audit()
            .iter()
            .any(|x| x["node"] == "cp1" && x["result"] == "refused")
    );
    // Killswitch.
    std::fs::write(s.dir.path().join("pause"), "").unwrap();
    send(&r, "firing", "n2", "straggler", "d4");
    assert_eq!(s.api.node("n2")["spec"].get("unschedulable"), None);
    assert!(
        s.audit()
            .iter()
            .any(|x| x["node"] == "n2" && x["result"] == "paused")
    );
    assert_eq!(
        value(&r.metrics(), "hcclwatch_remediation_killswitch_active", &[]),
        Some(1.0)
    );
}

#[test]
fn webhook_action_posts_json_with_retries() {
    use std::io::{Read, Write};
    let s = Setup::new(&["n1"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/drain", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The first attempt gets a 503, the second a 200.
        for (i, stream) in listener.incoming().enumerate() {
            let mut st = stream.unwrap();
            let mut buf = vec![0u8; 65536];
            let mut got = Vec::new();
            loop {
                let n = st.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        let code = if i == 0 {
                            "503 Service Unavailable"
                        } else {
                            "200 OK"
                        };
                        st.write_all(
                            format!(
                                "HTTP/1.1 {code}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            )
                            .as_bytes(),
                        )
                        .unwrap();
                        tx.send(body.to_string()).unwrap();
                        break;
                    }
                }
            }
        }
    });
    let rule = format!(
        "actions = [\"webhook\"]\nwebhook = {{ url = \"{url}\", retries = 3, backoff = \"50ms\" }}"
    );
    let r = s.start(&s.config("dry_run = false", &rule));
    assert_eq!(send(&r, "firing", "n1", "straggler", "f1").status, 200);
    let first: Value =
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    let second: Value =
        serde_json::from_str(&rx.recv_timeout(Duration::from_secs(5)).unwrap()).unwrap();
    assert_eq!(first, second);
    assert_eq!(second["node"], "n1");
    assert_eq!(second["labels"]["reason"], "straggler");
    let rec = s
        .audit()
        .into_iter()
        .find(|x| x["action"] == "webhook")
        .unwrap();
    assert_eq!(rec["result"], "applied");
    assert!(
        rec["detail"].as_str().unwrap().contains("2 attempt"),
        "{rec}"
    );
}

#[test]
fn check_flag_reports_config_problems() {
    let dir = tempfile::tempdir().unwrap();
    let p: &Path = &dir.path().join("r.toml");
    std::fs::write(p, "audit_log = \"/tmp/x\"\n[auth]\n[[rules]]\nalertname = \"A\"\nactions = [\"cordon\", \"explode\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args(["remediate", "--config.file", p.to_str().unwrap(), "--check"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("r.toml") && err.contains("explode"), "{err}");
    let ok =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes/remediate/remediate.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .args([
            "remediate",
            "--config.file",
            ok.to_str().unwrap(),
            "--check",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shipped Slurm hook, with a stand-in `scontrol` that records its arguments and
/// reports the node's current drain reason (there is no Slurm controller here).
#[test]
fn slurm_drain_hook_drains_and_resumes_only_its_own_drains() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    let reason = dir.path().join("reason");
    let fake = dir.path().join("scontrol");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\nif [ \"$1\" = show ]; then echo \"   State=DRAIN Reason=$(cat {reason})\"; fi\n",
            calls = calls.display(),
            reason = reason.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hook = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/hooks/slurm-drain.sh");
    let run = |status: &str, node: &str| {
        Command::new(&hook)
            .env("SCONTROL", &fake)
            .env("HCCLWATCH_NODE", node)
            .env("HCCLWATCH_STATUS", status)
            .env("HCCLWATCH_ALERTNAME", "HcclwatchQuarantineRecommended")
            .env("HCCLWATCH_REASON", "straggler")
            .env("HCCLWATCH_FINGERPRINT", "abc")
            .output()
            .unwrap()
    };
    let out = run("firing", "npu-node-7");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&calls).unwrap();
    assert!(log.contains("update nodename=npu-node-7 state=drain reason=hcclwatch: HcclwatchQuarantineRecommended straggler (abc)"), "{log}");

    std::fs::write(
        &reason,
        "hcclwatch: HcclwatchQuarantineRecommended straggler (abc)",
    )
    .unwrap();
    assert!(run("resolved", "npu-node-7").status.success());
    assert!(
        std::fs::read_to_string(&calls)
            .unwrap()
            .contains("update nodename=npu-node-7 state=resume")
    );

    // An administrator's drain is left alone.
    std::fs::write(&calls, "").unwrap();
    std::fs::write(&reason, "disk replacement (admin)").unwrap();
    let out = run("resolved", "npu-node-8");
    assert!(out.status.success());
    assert!(!std::fs::read_to_string(&calls).unwrap().contains("resume"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("left npu-node-8 alone"));
    // Odd node names are refused, not passed to scontrol.
    assert!(!run("firing", "x;rm -rf /").status.success());
}

/// End to end with the real Alertmanager (Debian's prometheus-alertmanager): its
/// webhook_configs point at the receiver (non-dry-run, bearer token from a file), a test
/// alert is pushed with `amtool`, the node is cordoned and tainted in the stand-in API
/// server, and released when the alert is resolved (pushed again with an end time).
#[test]
fn alertmanager_drives_quarantine_and_release_end_to_end() {
    let s = Setup::new(&["npu-node-1", "npu-node-2", "npu-node-3"]);
    let r = s.start(&s.config("dry_run = false\n[breaker]\nmax_percent = 100.0", ALL_K8S));
    let am_port = common::free_port();
    let am = format!("127.0.0.1:{am_port}");
    let cfg = format!(
        r#"route:
  receiver: hcclwatch-remediation
  group_by: [alertname, node]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hcclwatch-remediation
    webhook_configs:
      - url: http://{addr}/webhook
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials_file: {token}
"#,
        addr = r.addr,
        token = s.dir.path().join("token").display()
    );
    std::fs::write(s.dir.path().join("am.yml"), cfg).unwrap();
    std::fs::create_dir(s.dir.path().join("am-data")).unwrap();
    let child = Command::new("prometheus-alertmanager")
        .args([
            format!("--config.file={}", s.dir.path().join("am.yml").display()),
            format!("--storage.path={}", s.dir.path().join("am-data").display()),
            format!("--web.listen-address={am}"),
            "--cluster.listen-address=".to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(s.dir.path().join("am.log")).unwrap())
        .spawn()
        .expect("start prometheus-alertmanager (scripts/test.sh installs it)");
    let _am = KillOnDrop(Some(child));
    // The real Alertmanager says it is ready only when asked: its readiness endpoint is
    // polled (the one wait here not woken by the fake API server's own event).
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(&am).is_err()
        || http_get(&am, "/-/ready", None).status != 200
    {
        assert!(
            Instant::now() < deadline,
            "alertmanager not ready: {}",
            std::fs::read_to_string(s.dir.path().join("am.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let amtool = |extra: &[&str]| {
        let mut args = vec![
            "alert".to_string(),
            "add".to_string(),
            format!("--alertmanager.url=http://{am}"),
            "--annotation=summary=Quarantine npu-node-2 (straggler)".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(
            [
                "alertname=HcclwatchQuarantineRecommended",
                "node=npu-node-2",
                "reason=straggler",
                "severity=critical",
            ]
            .map(String::from),
        );
        let out = Command::new("amtool").args(&args).output().expect("amtool");
        assert!(
            out.status.success(),
            "amtool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    amtool(&[]);
    let n = s
        .api
        .wait_for_node("npu-node-2", Duration::from_secs(30), |n| {
            n["spec"]["unschedulable"] == true
        })
        .unwrap_or_else(|| panic!("not cordoned; receiver log:\n{}", r.log()));
    assert!(taints(&n).contains(&"hcclwatch.io/quarantine=straggler:NoSchedule".to_string()));
    assert_eq!(
        n["metadata"]["annotations"]["hcclwatch.io/quarantined-by"],
        "hcclwatch"
    );
    assert_eq!(s.api.node("npu-node-1")["spec"].get("unschedulable"), None);
    assert_eq!(s.api.node("npu-node-3")["spec"].get("unschedulable"), None);

    // Resolve: the same alert with an end time now.
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    amtool(&[&format!("--end={now}")]);
    let n = s
        .api
        .wait_for_node("npu-node-2", Duration::from_secs(30), |n| {
            n["spec"]["unschedulable"] == false
        })
        .unwrap_or_else(|| panic!("not released; receiver log:\n{}", r.log()));
    // The release event is written after the release's audit record.
    assert!(
        s.api
            .wait_for_event("HcclwatchReleased", Duration::from_secs(30)),
        "no release event; receiver log:\n{}",
        r.log()
    );
    assert!(taints(&n).is_empty(), "{:?}", taints(&n));
    assert!(
        n["metadata"]["annotations"]
            .get("hcclwatch.io/quarantined-by")
            .is_none()
    );
    let audit = s.audit();
    assert!(audit.iter().any(|x| x["action"] == "release"
        && x["result"] == "applied"
        && x["node"] == "npu-node-2"));
}

#[test]
fn released_node_is_not_quarantined_again_within_its_cooldown_and_basic_auth_works() {
    let s = Setup::new(&["n1"]);
    std::fs::write(s.dir.path().join("password"), "s3cret-pass\n").unwrap();
    let cfg = s
        .config("dry_run = false\n[breaker]\nmax_percent = 100.0", ALL_K8S)
        .replace(
            &format!(
                "bearer_token_file = \"{}\"",
                s.dir.path().join("token").display()
            ),
            &format!(
                "basic_username = \"alertmanager\"\nbasic_password_file = \"{}\"",
                s.dir.path().join("password").display()
            ),
        );
    let r = s.start(&cfg);
    // base64("alertmanager:s3cret-pass")
    let auth = "Basic YWxlcnRtYW5hZ2VyOnMzY3JldC1wYXNz";
    let post = |a: Value| r.post_raw(&notification(vec![a]).to_string(), Some(auth));
    assert_eq!(
        send(&r, "firing", "n1", "straggler", "c1").status,
        401,
        "a bearer token is not basic auth"
    );
    assert_eq!(post(alert("firing", "n1", "straggler", "c1")).status, 200);
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
    assert_eq!(post(alert("resolved", "n1", "straggler", "c1")).status, 200);
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], false);
    // It comes back within limits.node_cooldown (30m by default): not quarantined again.
    assert_eq!(post(alert("firing", "n1", "straggler", "c2")).status, 200);
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], false);
    let rec = s
        .audit()
        .into_iter()
        .rfind(|x| x["action"] == "cordon")
        .unwrap();
    assert_eq!(rec["result"], "cooldown");
    assert!(
        rec["who"]
            .as_str()
            .unwrap()
            .starts_with("basic:alertmanager@"),
        "{rec}"
    );
}

/// Pins: no action before the receiver has read the nodes once (the breaker's fleet size
/// and window are unknown until then): the webhook answers 503 and changes nothing. It
/// used to cordon with a fleet of "1" and an empty breaker window.
#[test]
fn no_action_before_the_first_reconcile() {
    let s = Setup::new(&["n1", "n2"]);
    s.api.deny("list", "nodes");
    let r = s.spawn(&s.config("dry_run = false", ALL_K8S));
    let resp = send(&r, "firing", "n1", "straggler", "e1");
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert_eq!(s.api.node("n1")["spec"].get("unschedulable"), None);
    assert!(s.api.writes().is_empty(), "{:?}", s.api.writes());
    // Once the nodes can be read, the same alert is acted on.
    s.api.allow("list", "nodes");
    r.wait_metric("the first reconcile", |m| {
        value(
            m,
            "hcclwatch_remediation_last_reconcile_timestamp_seconds",
            &[],
        )
        .is_some_and(|v| v > 0.0)
    });
    assert_eq!(send(&r, "firing", "n1", "straggler", "e1").status, 200);
    assert_eq!(s.api.node("n1")["spec"]["unschedulable"], true);
}

/// Pins: the audit record is written and synced before the node is changed; when it
/// cannot be written the action is refused with 503 and the failure counted. The receiver
/// used to cordon the node and only log that the audit write failed.
#[test]
fn no_action_without_its_audit_record() {
    let s = Setup::new(&["n1"]);
    let cfg = s
        .config("dry_run = false", ALL_K8S)
        .replace(&s.audit_path().display().to_string(), "/dev/full");
    let r = s.start(&cfg);
    let resp = send(&r, "firing", "n1", "straggler", "f00d");
    assert_eq!(resp.status, 503, "{}", resp.body);
    assert!(resp.body.contains("audit"), "{}", resp.body);
    assert_eq!(
        s.api.node("n1")["spec"].get("unschedulable"),
        None,
        "the node was changed without an audit record"
    );
    assert!(s.api.writes().is_empty(), "{:?}", s.api.writes());
    let m = r.metrics();
    assert!(
        value(&m, "hcclwatch_remediation_audit_failures_total", &[]).is_some_and(|v| v >= 1.0),
        "{m}"
    );
}

/// Pins: a Kubernetes call that never answers is cut off by kubernetes.timeout (503, so
/// Alertmanager retries), and it holds only its own node: an alert for another node is
/// acted on meanwhile. One global lock used to be held across every API call, so a hung
/// GET stopped the receiver for good.
#[test]
fn a_hung_api_call_times_out_and_blocks_only_its_node() {
    let s = Setup::new(&["n1", "n2"]);
    let r = s.start(
        &s.config(
            "dry_run = false\n[breaker]\nmax_percent = 100.0\n",
            r#"actions = ["cordon"]"#,
        )
        .replace("[kubernetes]\n", "[kubernetes]\ntimeout = \"3s\"\n"),
    );
    s.api.hang_get("n1");
    let addr = r.addr.clone();
    let stuck = std::thread::spawn(move || {
        let t = Instant::now();
        let body = notification(vec![alert("firing", "n1", "straggler", "aa")]).to_string();
        let resp = common::http_post(
            &addr,
            "/webhook",
            &[
                ("Content-Type", "application/json"),
                ("Authorization", &format!("Bearer {TOKEN}")),
            ],
            body.as_bytes(),
        );
        (resp.status, t.elapsed())
    });
    // n1's request holds its node's lock from here on.
    assert!(
        s.api.wait_for_hung_get("n1", Duration::from_secs(10)),
        "n1's GET never reached the API server"
    );
    let t = Instant::now();
    assert_eq!(send(&r, "firing", "n2", "straggler", "bb").status, 200);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "n2 waited {:?} behind n1's hung call",
        t.elapsed()
    );
    assert_eq!(s.api.node("n2")["spec"]["unschedulable"], true);
    let (status, took) = stuck.join().unwrap();
    assert_eq!(status, 503);
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(s.api.node("n1")["spec"].get("unschedulable"), None);
}

/// The decisions of a run, as (node, action, result) with dry-run's `would_apply` read as
/// `applied` and live mode's `intent` records left out.
fn decisions(audit: &[Value]) -> Vec<(String, String, String)> {
    audit
        .iter()
        .filter(|r| r["result"] != "intent")
        .map(|r| {
            let result = r["result"].as_str().unwrap();
            (
                r["node"].as_str().unwrap().to_string(),
                r["action"].as_str().unwrap().to_string(),
                if result == "would_apply" {
                    "applied"
                } else {
                    result
                }
                .to_string(),
            )
        })
        .collect()
}

/// Pins: dry-run decides exactly as live mode (idempotence, breaker, a release only by the
/// alert that caused it, the cooldown after a release), because it keeps a shadow of what
/// live mode would have written. Dry-run used to release a node for any resolved alert and
/// to forget the cooldown.
#[test]
fn dry_run_decides_exactly_as_live_mode() {
    let sequence: &[(&str, &str, &str)] = &[
        ("firing", "n1", "a1"),
        ("firing", "n1", "a1"),
        ("firing", "n2", "b2"),
        ("firing", "n3", "c3"),
        ("resolved", "n1", "ff"),
        ("resolved", "n1", "a1"),
        ("firing", "n1", "d4"),
        ("resolved", "n3", "c3"),
        ("resolved", "n2", "b2"),
    ];
    let run = |dry: bool| {
        let s = Setup::new(&["n1", "n2", "n3", "n4"]);
        let top = format!(
            "dry_run = {dry}\n[breaker]\nmax_nodes = 2\nmax_percent = 100.0\n[limits]\nmax_actions_per_minute = 100\n"
        );
        let r = s.start(&s.config(&top, ALL_K8S));
        for (status, node, fp) in sequence {
            assert_eq!(send(&r, status, node, "straggler", fp).status, 200);
        }
        let d = decisions(&s.audit());
        if dry {
            assert!(
                s.api.writes().is_empty(),
                "dry run wrote: {:?}",
                s.api.writes()
            );
        }
        d
    };
    let live = run(false);
    let dry = run(true);
    assert!(
        live.iter()
            .any(|(n, a, r)| n == "n1" && a == "release" && r == "applied"),
        "{live:?}"
    );
    assert!(live.iter().any(|(_, _, r)| r == "breaker_open"), "{live:?}");
    assert!(live.iter().any(|(_, _, r)| r == "cooldown"), "{live:?}");
    assert_eq!(dry, live);
}
