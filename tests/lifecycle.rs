//! A node's lifecycle beyond one alert, end to end through the real binaries: the receiver
//! (`hcclwatch remediate`) and the operator command (`hcclwatch override`), against the
//! stand-in Kubernetes API server (`common/fake_apiserver.rs`).
//!
//! - a node quarantined `escalation.max_incidents` times within the window escalates
//!   (across a restart of the receiver: the incidents are on the node): it stays cordoned
//!   when its alert resolves, `hcclwatch_node_escalated` says so, an Event
//!   is written, and only `hcclwatch override release` lets it go;
//! - a `healthy` override makes the receiver refuse a firing alert until the override's
//!   end, after which the next firing quarantines;
//! - a `quarantined` override keeps a node cordoned through its alert's resolution, and
//!   the receiver releases it at the override's end;
//! - dry-run records the same decisions, as `would_apply`;
//! - every change is audited (`intent`) before it is made.

mod common;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::receiver::{Receiver, Setup};
use common::value;
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

fn send(r: &Receiver, status: &str, node: &str, reason: &str, fp: &str) {
    let n = json!({
        "version": "4", "groupKey": "{}:{alertname=\"HcclwatchQuarantineRecommended\"}",
        "truncatedAlerts": 0, "status": status, "receiver": "hcclwatch-remediation",
        "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093", "alerts": [alert(status, node, reason, fp)],
    });
    let resp = r.post(&n);
    assert_eq!(resp.status, 200, "{}\n{}", resp.body, r.log());
}

/// Cordon and an event; every quarantine allowed (breaker, rate, cooldown out of the
/// way: the tests are about recurrence and overrides, not those rails).
fn config(s: &Setup, dry: bool, escalation: &str) -> String {
    s.config(
        &format!(
            "dry_run = {dry}\n[breaker]\nmax_nodes = 10\nmax_percent = 100.0\n[limits]\nnode_cooldown = \"0s\"\nmax_actions_per_minute = 100\n[escalation]\n{escalation}\n"
        ),
        r#"actions = ["cordon", "event"]"#,
    )
}

/// Runs `hcclwatch override ARGS` against the stand-in API server, auditing to the
/// receiver's audit log; its exit status and output.
fn operator(s: &Setup, args: &[&str]) -> (bool, String) {
    let kubeconfig = s.api.kubeconfig(s.dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_hcclwatch"))
        .arg("override")
        .args(args)
        .args(["--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(["--audit-log", s.audit_path().to_str().unwrap()])
        .args(["--by", "alice"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn cordoned(node: &Value) -> bool {
    node["spec"]["unschedulable"] == true
}

fn annotation<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node["metadata"]["annotations"][key].as_str()
}

/// The index of the first audit record that matches.
fn find(audit: &[Value], f: impl Fn(&Value) -> bool) -> Option<usize> {
    audit.iter().position(f)
}

fn escalated_gauge(m: &str, node: &str) -> Option<f64> {
    value(m, "hcclwatch_node_escalated", &[("node", node)])
}

#[test]
fn a_recurring_node_escalates_and_only_a_person_releases_it() {
    // Five nodes: the breaker (100% of the fleet) counts each of n1's quarantines.
    let s = Setup::new(&["n1", "n2", "n3", "n4", "n5"]);
    let cfg = config(&s, false, "max_incidents = 3\nwindow = \"1h\"");
    let mut r = s.start(&cfg);
    let reasons = ["straggler", "link-flap", "hbm-ecc"];
    for (i, reason) in reasons.iter().enumerate() {
        if i == 2 {
            // The incidents live on the node: a restarted receiver still counts them.
            drop(r);
            r = s.start(&cfg);
        }
        let fp = format!("f{i}");
        send(&r, "firing", "n1", reason, &fp);
        assert!(
            cordoned(&s.api.node("n1")),
            "quarantine {i}: {:?}",
            s.audit()
        );
        if i < 2 {
            assert_eq!(
                escalated_gauge(&r.metrics(), "n1"),
                None,
                "escalated after {} quarantines",
                i + 1
            );
            send(&r, "resolved", "n1", reason, &fp);
            assert!(!cordoned(&s.api.node("n1")), "release {i}");
        }
    }
    // The third quarantine within the hour escalates the node.
    let n = s.api.node("n1");
    assert!(annotation(&n, "hcclwatch.io/escalated-at").is_some(), "{n}");
    let why = annotation(&n, "hcclwatch.io/escalated-reason").unwrap_or("");
    assert!(why.starts_with("3 quarantines within 1h"), "{why}");
    for reason in reasons {
        assert!(
            why.contains(&format!("HcclwatchQuarantineRecommended: {reason}")),
            "{why}"
        );
    }
    assert_eq!(escalated_gauge(&r.metrics(), "n1"), Some(1.0));
    assert!(
        s.api
            .wait_for_event("HcclwatchNodeEscalated", Duration::from_secs(10)),
        "no escalation event"
    );
    let audit = s.audit();
    let intent = find(&audit, |x| {
        x["action"] == "escalate" && x["result"] == "intent"
    });
    let applied = find(&audit, |x| {
        x["action"] == "escalate" && x["result"] == "applied"
    });
    assert!(
        matches!((intent, applied), (Some(i), Some(a)) if i < a),
        "escalation not audited before it was made: {audit:?}"
    );
    assert!(
        audit[applied.unwrap()]["detail"]
            .as_str()
            .unwrap()
            .contains("hbm-ecc"),
        "the record lists the incidents"
    );

    // Its alert resolves: it stays cordoned, through reconciles too.
    send(&r, "resolved", "n1", "hbm-ecc", "f2");
    let after = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let m = r.wait_metric("a reconcile after the resolution", |m| {
        value(
            m,
            "hcclwatch_remediation_last_reconcile_timestamp_seconds",
            &[],
        )
        .is_some_and(|t| t > after)
    });
    assert_eq!(escalated_gauge(&m, "n1"), Some(1.0), "{m}");
    assert!(
        cordoned(&s.api.node("n1")),
        "an escalated node was released"
    );
    let last = s.audit().into_iter().rfind(|x| x["action"] == "release");
    assert_eq!(last.unwrap()["result"], "escalated");

    // Releasing a node that is not escalated is refused, and changes nothing.
    let (ok, text) = operator(&s, &["release", "n2", "--reason", "nothing"]);
    assert!(!ok, "{text}");
    assert!(text.contains("not escalated"), "{text}");

    // A person releases it: the receiver undoes its quarantine.
    let (ok, text) = operator(&s, &["release", "n1", "--reason", "HBM replaced"]);
    assert!(ok, "{text}");
    let n = s
        .api
        .wait_for_node("n1", Duration::from_secs(20), |n| !cordoned(n));
    assert!(n.is_some(), "not released:\n{}", r.log());
    let n = n.unwrap();
    assert!(annotation(&n, "hcclwatch.io/escalated-at").is_none(), "{n}");
    assert!(
        annotation(&n, "hcclwatch.io/quarantined-by").is_none(),
        "{n}"
    );
    r.wait_metric("the escalation gauge to clear", |m| {
        escalated_gauge(m, "n1").is_none()
    });
    // Each side audits before it changes the node: the command's intent comes before the
    // receiver's release (which needs the command's change), the receiver's intent before
    // its own applied record. (The command's applied record and the receiver's release
    // race, both following the command's change.)
    let released = |x: &Value, result: &str| {
        x["who"] == "reconcile" && x["action"] == "release" && x["result"] == result
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while find(&s.audit(), |x| released(x, "applied")).is_none() {
        assert!(Instant::now() < deadline, "{:?}", s.audit());
        std::thread::sleep(Duration::from_millis(50));
    }
    let audit = s.audit();
    let cli = |result: &str| {
        find(&audit, |x| {
            x["who"] == "cli:alice" && x["action"] == "release" && x["result"] == result
        })
    };
    let (cli_intent, cli_done) = (cli("intent"), cli("applied"));
    let (rec_intent, rec_done) = (
        find(&audit, |x| released(x, "intent")),
        find(&audit, |x| released(x, "applied")),
    );
    assert!(
        matches!((cli_intent, cli_done, rec_intent, rec_done), (Some(a), Some(b), Some(c), Some(d)) if a < b && a < c && c < d),
        "{audit:?}"
    );
    assert!(
        s.api
            .wait_for_event("HcclwatchEscalationReleased", Duration::from_secs(5))
    );
}

/// Sends firing alerts for `node` (as Alertmanager repeats them) until it is cordoned;
/// false if it is not by the deadline.
fn fire_until_cordoned(s: &Setup, r: &Receiver, node: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        send(r, "firing", node, "straggler", "a1");
        if cordoned(&s.api.node(node)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// An RFC 3339 annotation as a time.
fn time(node: &Value, key: &str) -> SystemTime {
    let text = annotation(node, key).unwrap_or_else(|| panic!("no {key}: {node}"));
    SystemTime::from(text.parse::<jiff::Timestamp>().unwrap())
}

#[test]
fn a_healthy_override_refuses_quarantine_until_it_ends() {
    let s = Setup::new(&["n1", "n2"]);
    let r = s.start(&config(&s, false, ""));
    // The command's first update races with another writer: it re-reads and retries.
    s.api.conflict_next_puts(1);
    let (ok, text) = operator(
        &s,
        &[
            "set",
            "n1",
            "--state",
            "healthy",
            "--until",
            "4s",
            "--reason",
            "known flaky",
        ],
    );
    assert!(ok, "{text}");
    let n = s.api.node("n1");
    assert_eq!(annotation(&n, "hcclwatch.io/override"), Some("healthy"));
    assert_eq!(annotation(&n, "hcclwatch.io/override-by"), Some("alice"));
    assert!(
        n["spec"]["taints"]
            .to_string()
            .contains("racer.example.com"),
        "the racing writer's change was clobbered: {n}"
    );
    assert!(
        s.api
            .wait_for_event("HcclwatchOverrideSet", Duration::from_secs(5))
    );

    send(&r, "firing", "n1", "straggler", "a1");
    assert!(
        !cordoned(&s.api.node("n1")),
        "quarantined under a healthy override"
    );
    let rec = s
        .audit()
        .into_iter()
        .rfind(|x| x["action"] == "cordon")
        .unwrap();
    assert_eq!(rec["result"], "override_healthy", "{rec}");
    r.wait_metric("the refusal counted and the override shown", |m| {
        value(
            m,
            "hcclwatch_remediation_actions_total",
            &[
                ("action", "cordon"),
                ("result", "override_healthy"),
                ("dry_run", "false"),
            ],
        ) == Some(1.0)
            && value(
                m,
                "hcclwatch_remediation_override",
                &[("node", "n1"), ("state", "healthy")],
            ) == Some(1.0)
    });
    // Another node is not held; once a person holds it healthy, its quarantine is undone
    // by the reconcile loop, and the alert's repeats are refused.
    send(&r, "firing", "n2", "straggler", "b2");
    assert!(cordoned(&s.api.node("n2")));
    let (ok, text) = operator(
        &s,
        &[
            "set", "n2", "--state", "healthy", "--until", "1h", "--reason", "fine",
        ],
    );
    assert!(ok, "{text}");
    assert!(
        s.api
            .wait_for_node("n2", Duration::from_secs(20), |n| !cordoned(n))
            .is_some(),
        "{}",
        r.log()
    );
    send(&r, "firing", "n2", "straggler", "b2");
    assert!(!cordoned(&s.api.node("n2")));

    // At its end the override is over by itself: the next firing quarantines.
    assert!(
        fire_until_cordoned(&s, &r, "n1", Duration::from_secs(20)),
        "never quarantined after the override's end"
    );
    let n = s.api.node("n1");
    let until = time(&n, "hcclwatch.io/override-until");
    let at = time(&n, "hcclwatch.io/quarantined-at");
    assert!(
        at >= until,
        "quarantined at {at:?}, before the end {until:?}"
    );
    // The CLI's record came before the node changed.
    let audit = s.audit();
    let i = find(&audit, |x| {
        x["who"] == "cli:alice" && x["result"] == "intent"
    })
    .unwrap();
    let d = find(&audit, |x| {
        x["who"] == "cli:alice" && x["result"] == "applied"
    })
    .unwrap();
    assert!(i < d);
    assert_eq!(audit[i]["action"], "override");
}

#[test]
fn a_quarantined_override_holds_through_the_resolution_and_ends_at_its_time() {
    let s = Setup::new(&["n1", "n2"]);
    let r = s.start(&config(&s, false, ""));
    send(&r, "firing", "n1", "straggler", "c1");
    assert!(cordoned(&s.api.node("n1")));
    let (ok, text) = operator(
        &s,
        &[
            "set",
            "n1",
            "--state",
            "quarantined",
            "--until",
            "5s",
            "--reason",
            "RMA pending",
        ],
    );
    assert!(ok, "{text}");
    send(&r, "resolved", "n1", "straggler", "c1");
    let n = s.api.node("n1");
    assert!(cordoned(&n), "released under a quarantined override");
    assert_eq!(
        annotation(&n, "hcclwatch.io/quarantined-fingerprint"),
        Some("override")
    );
    let rec = s
        .audit()
        .into_iter()
        .rfind(|x| x["action"] == "release")
        .unwrap();
    assert_eq!(rec["result"], "override_quarantined", "{rec}");

    // A node the override names without any alert is cordoned by the reconcile loop.
    let (ok, text) = operator(
        &s,
        &[
            "set",
            "n2",
            "--state",
            "quarantined",
            "--until",
            "1h",
            "--reason",
            "burn-in",
        ],
    );
    assert!(ok, "{text}");
    assert!(
        s.api
            .wait_for_node("n2", Duration::from_secs(20), cordoned)
            .is_some(),
        "{}",
        r.log()
    );

    // At n1's override's end, the receiver releases what it held, and not before.
    let n = s
        .api
        .wait_for_node("n1", Duration::from_secs(30), |n| !cordoned(n));
    let n = n.unwrap_or_else(|| panic!("not released at the end:\n{}", r.log()));
    let until = time(&n, "hcclwatch.io/override-until");
    let released = time(&n, "hcclwatch.io/released-at");
    assert!(
        released >= until,
        "released at {released:?}, before {until:?}"
    );
    // Clearing n2's override now releases it too.
    let (ok, text) = operator(&s, &["clear", "n2"]);
    assert!(ok, "{text}");
    assert!(
        s.api
            .wait_for_node("n2", Duration::from_secs(20), |n| !cordoned(n))
            .is_some()
    );
}

/// The decisions of a run, as (node, action, result) with dry-run's `would_apply` read as
/// `applied` and live mode's `intent` records left out.
fn decisions(audit: &[Value]) -> Vec<(String, String, String)> {
    audit
        .iter()
        .filter(|r| r["result"] != "intent" && r["who"] != "cli:alice")
        .map(|r| {
            let result = r["result"].as_str().unwrap();
            let result = if result == "would_apply" {
                "applied"
            } else {
                result
            };
            (
                r["node"].as_str().unwrap().to_string(),
                r["action"].as_str().unwrap().to_string(),
                result.to_string(),
            )
        })
        .collect()
}

#[test]
fn dry_run_records_the_same_lifecycle_decisions() {
    let run = |dry: bool| {
        let s = Setup::new(&["n1", "n2"]);
        let r = s.start(&config(&s, dry, "max_incidents = 2\nwindow = \"1h\""));
        let (ok, text) = operator(
            &s,
            &[
                "set", "n2", "--state", "healthy", "--until", "1h", "--reason", "x",
            ],
        );
        assert!(ok, "{text}");
        send(&r, "firing", "n2", "straggler", "b1");
        send(&r, "firing", "n1", "straggler", "a1");
        send(&r, "resolved", "n1", "straggler", "a1");
        send(&r, "firing", "n1", "straggler", "a2");
        send(&r, "resolved", "n1", "straggler", "a2");
        let m = r.metrics();
        assert_eq!(escalated_gauge(&m, "n1"), Some(1.0), "dry_run={dry}: {m}");
        let writes: Vec<_> = s
            .api
            .writes()
            .into_iter()
            .filter(|(_, path, _)| !path.contains("events"))
            .collect();
        if dry {
            // Only the operator's own override reached the node.
            assert_eq!(writes.len(), 1, "dry run wrote: {writes:?}");
        }
        decisions(&s.audit())
    };
    let live = run(false);
    let dry = run(true);
    for want in [
        ("n2", "cordon", "override_healthy"),
        ("n1", "escalate", "applied"),
        ("n1", "release", "escalated"),
    ] {
        assert!(
            live.iter()
                .any(|(n, a, r)| (n.as_str(), a.as_str(), r.as_str()) == want),
            "{want:?} not in {live:?}"
        );
    }
    assert_eq!(dry, live);
}
