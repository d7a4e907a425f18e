//! The fast path for hard faults through the real binaries: `hcclwatch run` reading
//! `libfake_dcmi.so` pushes its own node's hard fault to `hcclwatch remediate`, which
//! cordons the node on the stand-in Kubernetes API server, audited before the change, and
//! releases it when the fault has cleared; in dry-run it records what it would do; over
//! HTTPS the daemon verifies the receiver against the configured CA. Also
//! the receiver's `/v1/push` endpoint by itself: credentials, validation, body limit.

mod common;

use std::time::{Duration, SystemTime};

use common::receiver::{Receiver, Setup, TOKEN};
use common::{Daemon, Start, fake_config, http_post, value};
use serde_json::{Value, json};

/// Level SeparateNPU in the built-in fault-level table.
const SEPARATE_NPU: u32 = 0x80E3_A201;
const NODE: &str = "npu-node-6";
const RULE: &str = r#"match_labels = { reason = "hard_fault" }
actions = ["cordon", "taint", "condition", "event"]
condition = { type = "NPUHardFault", reason = "HcclwatchHardFault" }"#;

fn chip(phy: u32) -> Value {
    json!({
        "phy_id": phy, "logic_id": phy,
        "chip": {"type": "Ascend", "name": "910B3", "version": "V1", "aicore_count": 20},
        "pcie": {"domain": 0, "bus": 0x61 + phy, "device": 0, "function": 0},
        "vdie_id": [phy + 1, 2, 3, 4, 5], "serial": "SN-A",
        "health": 0, "error_codes": [],
        "temperature_c": 45, "network_health": 0,
        "fail": {}, "hang_ms": {}, "drop_after_calls": null
    })
}

/// Two healthy chips, and the fault events delivered so far (each once, as DCMI does).
fn scenario(events: &[Value]) -> String {
    json!({
        "dcmi_version": "24.1.rc2",
        "cards": [{"card_id": 0, "chips": [chip(0), chip(1)]}],
        "fault_events": events,
    })
    .to_string()
}

/// Chip 1's SeparateNPU code occurring (`assertion` 1) or recovering (0), delivered as soon
/// as the fake re-reads the scenario.
fn event(assertion: u8) -> Value {
    event_on(1, assertion)
}

/// [`event`] on chip `device`.
fn event_on(device: u32, assertion: u8) -> Value {
    json!({"at_ms": 0, "card_id": 0, "device_id": device, "event_id": SEPARATE_NPU,
           "severity": 3, "assertion": assertion, "name": "chip isolated"})
}

/// A daemon that pushes to `r` as `NODE`, resolving one second after the fault clears.
fn daemon(s: &Setup, r: &Receiver) -> Daemon {
    daemon_to(s, &format!("http://{}", r.addr), "")
}

/// A daemon that pushes to `url`, with `extra` keys in `[remediation.push]`.
fn daemon_to(s: &Setup, url: &str, extra: &str) -> Daemon {
    let cfg = fake_config(&format!(
        r#"
[remediation.push]
enabled = true
url = "{url}"
bearer_token_file = "{token}"
node_name = "{NODE}"
resolve_after = "1s"
{extra}
"#,
        token = s.dir.path().join("token").display(),
    ));
    Daemon::start(Start::new(&cfg).scenario(&scenario(&[])))
}

fn cordoned(n: &Value) -> bool {
    n["spec"]["unschedulable"] == true
}

/// The audit records the push made (its `who` says so).
fn pushed(s: &Setup) -> Vec<Value> {
    s.audit()
        .into_iter()
        .filter(|r| r["who"].as_str().is_some_and(|w| w.starts_with("push:")))
        .collect()
}

#[test]
fn a_separate_npu_fault_event_is_pushed_cordoned_audited_first_and_released() {
    let s = Setup::new(&[NODE, "npu-node-7"]);
    let r = s.start(&s.config("dry_run = false", RULE));
    let d = daemon(&s, &r);
    // After its start the daemon resolves what it may have pushed before: nothing here.
    d.wait_for("the start's resolve", Duration::from_secs(20), |m| {
        value(
            m,
            "hcclwatch_remediation_push_requests_total",
            &[("status", "resolved"), ("result", "ok")],
        ) == Some(1.0)
    });
    assert!(!cordoned(&s.api.node(NODE)));
    assert_eq!(pushed(&s)[0]["result"], "not_ours", "{:?}", pushed(&s));

    d.set_scenario(&scenario(&[event(1)]));
    let n = s
        .api
        .wait_for_node(NODE, Duration::from_secs(20), cordoned)
        .unwrap_or_else(|| panic!("not cordoned:\n{}\n{}", d.log(), r.log()));
    let seen = SystemTime::now();
    assert!(!cordoned(&s.api.node("npu-node-7")), "only the faulty node");
    let a = &n["metadata"]["annotations"];
    assert_eq!(
        a["hcclwatch.io/quarantined-reason"],
        "HcclwatchQuarantineRecommended: hard_fault"
    );
    let fp = a["hcclwatch.io/quarantined-fingerprint"].as_str().unwrap();
    // The event is the rule's last action; its record follows it.
    r.wait_metric("the event's record", |m| {
        value(
            m,
            "hcclwatch_remediation_actions_total",
            &[
                ("action", "event"),
                ("result", "applied"),
                ("dry_run", "false"),
            ],
        ) == Some(1.0)
    });
    // The intent was on disk before the node changed; then every action is recorded.
    let recs = pushed(&s);
    let firing: Vec<&Value> = recs.iter().filter(|r| r["status"] == "firing").collect();
    assert_eq!(firing[0]["action"], "quarantine", "{firing:?}");
    assert_eq!(firing[0]["result"], "intent");
    assert_eq!(firing[0]["fingerprint"], fp);
    let intent_at: jiff::Timestamp = firing[0]["ts"].as_str().unwrap().parse().unwrap();
    assert!(SystemTime::from(intent_at) <= seen);
    for action in ["cordon", "taint", "condition", "event"] {
        assert!(
            firing
                .iter()
                .any(|r| r["action"] == action && r["result"] == "applied"),
            "{action}: {firing:?}"
        );
    }
    let m = r.metrics();
    let labels = [
        ("alertname", "HcclwatchQuarantineRecommended"),
        ("reason", "hard_fault"),
        ("source", "push"),
    ];
    assert_eq!(
        value(
            &m,
            "hcclwatch_remediation_alert_to_action_seconds_count",
            &labels
        ),
        Some(1.0),
        "{m}"
    );
    // From the daemon's first read of the fault to the cordon: within the 10 s target.
    let took = value(
        &m,
        "hcclwatch_remediation_alert_to_action_seconds_sum",
        &labels,
    )
    .unwrap();
    assert!((0.0..10.0).contains(&took), "{took} s");

    // The code recovers: one second later the push resolves and the node is released.
    d.set_scenario(&scenario(&[event(1), event(0)]));
    let n = s
        .api
        .wait_for_node(NODE, Duration::from_secs(20), |n| !cordoned(n))
        .unwrap_or_else(|| panic!("not released:\n{}\n{}", d.log(), r.log()));
    assert!(n["metadata"]["annotations"]["hcclwatch.io/quarantined-by"].is_null());
    r.wait_metric("the release's record", |m| {
        value(
            m,
            "hcclwatch_remediation_actions_total",
            &[
                ("action", "release"),
                ("result", "applied"),
                ("dry_run", "false"),
            ],
        ) == Some(1.0)
    });
    // The release records after the start's `not_ours` one.
    let recs = pushed(&s);
    let release: Vec<&Value> = recs
        .iter()
        .filter(|r| r["action"] == "release" && r["fingerprint"] == fp)
        .skip(1)
        .collect();
    assert_eq!(release[0]["result"], "intent", "{release:?}");
    assert!(
        release.iter().any(|r| r["result"] == "applied"),
        "{release:?}"
    );
    // The daemon counts each accepted push once its answer is in (after the change): the
    // firing, the start's resolution and this one.
    let m = d.wait_for("every push accepted", Duration::from_secs(10), |m| {
        [("firing", 1.0), ("resolved", 2.0)]
            .iter()
            .all(|(status, n)| {
                value(
                    m,
                    "hcclwatch_remediation_push_requests_total",
                    &[("status", status), ("result", "ok")],
                ) == Some(*n)
            })
    });
    assert_eq!(
        value(&m, "hcclwatch_remediation_push_firing", &[]),
        Some(0.0)
    );
}

#[test]
fn in_dry_run_the_push_is_recorded_as_would_apply_and_nothing_changes() {
    let s = Setup::new(&[NODE]);
    let r = s.start(&s.config("dry_run = true", RULE));
    let d = daemon(&s, &r);
    d.set_scenario(&scenario(&[event(1)]));
    r.wait_metric("the would-be quarantine", |m| {
        value(
            m,
            "hcclwatch_remediation_actions_total",
            &[
                ("action", "cordon"),
                ("result", "would_apply"),
                ("dry_run", "true"),
            ],
        ) == Some(1.0)
    });
    assert!(s.api.writes().is_empty(), "{:?}", s.api.writes());
    assert!(!cordoned(&s.api.node(NODE)));
    assert!(
        pushed(&s).iter().any(|r| r["action"] == "cordon"
            && r["result"] == "would_apply"
            && r["dry_run"] == true)
    );
    // Dry-run is timed too: the histogram says what live mode would have taken.
    let m = r.metrics();
    assert_eq!(
        value(
            &m,
            "hcclwatch_remediation_alert_to_action_seconds_count",
            &[("source", "push")]
        ),
        Some(1.0)
    );
}

fn push_body(node: &str) -> Value {
    json!({"version": "1", "node": node, "status": "firing", "reason": "hard_fault",
           "onset": "2026-12-02T10:00:00Z", "fingerprint": "0a1b2c3d4e5f6071", "summary": "s"})
}

fn post(r: &Receiver, body: &[u8], auth: Option<&str>) -> common::Response {
    let mut h = vec![("Content-Type", "application/json")];
    if let Some(a) = auth {
        h.push(("Authorization", a));
    }
    http_post(&r.addr, "/v1/push", &h, body)
}

#[test]
fn the_push_endpoint_checks_credentials_input_and_size() {
    let s = Setup::new(&[NODE]);
    let r = s.start(&s.config("dry_run = false", RULE));
    let bearer = format!("Bearer {TOKEN}");
    let body = push_body(NODE).to_string();
    assert_eq!(post(&r, body.as_bytes(), None).status, 401);
    assert_eq!(post(&r, body.as_bytes(), Some("Bearer wrong")).status, 401);
    let bad = post(
        &r,
        push_body("Bad_Node").to_string().as_bytes(),
        Some(&bearer),
    );
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.contains("not a Kubernetes node name"),
        "{}",
        bad.body
    );
    // A push is a few hundred bytes; 16 KiB is refused whatever max_body_bytes says.
    let mut big = push_body(NODE);
    big["summary"] = json!("x".repeat(20 << 10));
    let r413 = post(&r, big.to_string().as_bytes(), Some(&bearer));
    assert_eq!(r413.status, 400);
    assert!(
        r413.body.contains("larger than 16384 bytes"),
        "{}",
        r413.body
    );
    assert!(s.api.writes().is_empty());
    assert!(
        s.audit().is_empty(),
        "nothing rejected is acted on or audited"
    );
    // The killswitch holds a push back like any alert.
    std::fs::write(s.dir.path().join("pause"), "").unwrap();
    let ok = post(&r, body.as_bytes(), Some(&bearer));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(!cordoned(&s.api.node(NODE)));
    assert!(s.audit().iter().all(|a| a["result"] == "paused"));
    std::fs::remove_file(s.dir.path().join("pause")).unwrap();
    let ok = post(&r, body.as_bytes(), Some(&bearer));
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert!(cordoned(&s.api.node(NODE)));
    // Idempotent: the same push again (a retry) quarantines nothing more (only the
    // condition's heartbeat is refreshed).
    let again = post(&r, body.as_bytes(), Some(&bearer));
    assert_eq!(again.status, 200);
    let audit = s.audit();
    let cordons = |result: &str| {
        audit
            .iter()
            .filter(|a| a["action"] == "cordon" && a["result"] == result)
            .count()
    };
    assert_eq!(
        (cordons("applied"), cordons("already_done")),
        (1, 1),
        "{audit:?}"
    );
}

#[test]
fn the_push_goes_over_https_verified_against_the_configured_ca() {
    let s = Setup::new(&[NODE]);
    let d = s.dir.path();
    // A CA and the receiver's certificate for localhost, signed by it.
    let (ca, cert, key) = common::test_ca("localhost");
    std::fs::write(d.join("ca.crt"), ca).unwrap();
    std::fs::write(d.join("server.crt"), cert).unwrap();
    std::fs::write(d.join("server.key"), key).unwrap();
    std::fs::write(
        d.join("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let top = format!(
        "dry_run = false\nweb_config_file = \"{}\"",
        d.join("web.yml").display()
    );
    // Listening; until it has read the nodes it answers 503, and the push retries.
    let r = s.spawn(&s.config(&top, RULE));
    let port = r.addr.rsplit_once(':').unwrap().1;
    let daemon = daemon_to(
        &s,
        &format!("https://localhost:{port}"),
        &format!("ca_file = \"{}\"", d.join("ca.crt").display()),
    );
    daemon.set_scenario(&scenario(&[event(1)]));
    s.api
        .wait_for_node(NODE, Duration::from_secs(30), cordoned)
        .unwrap_or_else(|| panic!("not cordoned over https:\n{}\n{}", daemon.log(), r.log()));
    // The daemon counts the accepted push once the answer is in (after the cordon).
    daemon.wait_for("the accepted push", Duration::from_secs(10), |m| {
        value(
            m,
            "hcclwatch_remediation_push_requests_total",
            &[("status", "firing"), ("result", "ok")],
        ) == Some(1.0)
    });
}

/// Pins: with `health.hard_npu_scoped`, a chip's own fault is pushed as that NPU's verdict
/// and the receiver's `isolate_npu` rule takes only that NPU out (a DeviceTaintRule for
/// its DRA device), within the 10 s target from the fault event; the node stays
/// schedulable; a second NPU over the share cordons the node; when the codes recover, the
/// rules are deleted and the node released.
#[test]
fn with_npu_scoping_a_pushed_fault_isolates_the_npu_only() {
    let s = Setup::new(&[NODE]);
    s.api.add_resource_slice(NODE, &[0, 1, 2, 3, 4, 5, 6, 7]);
    let cfg = s
        .config("dry_run = false", RULE)
        .replace(
            "[[rules]]\nalertname = \"HcclwatchQuarantineRecommended\"",
            "[[rules]]\nalertname = \"HcclwatchNpuIsolationRecommended\"\nactions = [\"isolate_npu\"]\n[[rules]]\nalertname = \"HcclwatchQuarantineRecommended\"",
        );
    let r = s.start(&cfg);
    let d = Daemon::start(
        Start::new(&fake_config(&format!(
            r#"
[health]
hard_npu_scoped = true
[remediation.push]
enabled = true
url = "http://{}"
bearer_token_file = "{}"
node_name = "{NODE}"
resolve_after = "1s"
"#,
            r.addr,
            s.dir.path().join("token").display(),
        )))
        .scenario(&scenario(&[])),
    );
    // After its start the daemon resolves what it may have pushed before: the node and
    // each of its two NPUs.
    d.wait_for("the start's resolves", Duration::from_secs(20), |m| {
        value(
            m,
            "hcclwatch_remediation_push_requests_total",
            &[("status", "resolved"), ("result", "ok")],
        ) == Some(3.0)
    });
    d.set_scenario(&scenario(&[event(1)]));
    let started = std::time::Instant::now();
    assert!(
        s.api
            .wait_for_device_taint_rules(Duration::from_secs(20), |rules| {
                rules
                    .values()
                    .any(|r| r["spec"]["deviceSelector"]["device"] == "npu-1")
            }),
        "NPU 1 not isolated:\n{}\n{}",
        d.log(),
        r.log()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.api.device_taint_rules().len(), 1);
    assert!(
        !cordoned(&s.api.node(NODE)),
        "one NPU must not cordon the node"
    );
    // The rule exists before its applied record is written: wait for the record.
    r.wait_metric("the isolation's record", |m| {
        value(
            m,
            "hcclwatch_remediation_actions_total",
            &[
                ("action", "isolate_npu"),
                ("result", "applied"),
                ("dry_run", "false"),
            ],
        ) == Some(1.0)
    });
    let isolated = pushed(&s)
        .into_iter()
        .find(|r| r["action"] == "isolate_npu" && r["result"] == "applied")
        .expect("an applied isolation from the push");
    assert_eq!(isolated["alertname"], "HcclwatchNpuIsolationRecommended");
    assert_eq!(isolated["reason"], "separate_npu_fault");

    // A second NPU of the node: two of its eight are over the shipped share (0.125), so the
    // node goes too, through the node rule's rails.
    d.set_scenario(&scenario(&[event(1), event_on(0, 1)]));
    s.api
        .wait_for_node(NODE, Duration::from_secs(20), cordoned)
        .unwrap_or_else(|| panic!("not cordoned over the share:\n{}\n{}", d.log(), r.log()));
    assert_eq!(s.api.device_taint_rules().len(), 2);

    // Both recover: both rules go, and the node is released with the alert that took it.
    d.set_scenario(&scenario(&[
        event(1),
        event_on(0, 1),
        event(0),
        event_on(0, 0),
    ]));
    assert!(
        s.api
            .wait_for_device_taint_rules(Duration::from_secs(20), |rules| rules.is_empty()),
        "the rules were not deleted:\n{}",
        r.log()
    );
    s.api
        .wait_for_node(NODE, Duration::from_secs(20), |n| !cordoned(n))
        .unwrap_or_else(|| panic!("not released:\n{}", r.log()));
}
