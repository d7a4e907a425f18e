//! The 0.0.4 exposition passes Debian's `promtool check metrics` (Prometheus's own
//! linter), with every collector on and every NPU reading present. promtool comes from
//! the `prometheus` package, which the README's test command installs.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Daemon, Start, value};

fn promtool() -> String {
    let path = std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into());
    let ok = Command::new(&path)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "promtool not found: install Debian's `prometheus` package (scripts/test.sh does)"
    );
    path
}

fn check(text: &str) -> (bool, String) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let msg = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), msg)
}

#[test]
fn promtool_accepts_the_text_exposition() {
    let scen = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fake-dcmi/scenarios/16-npu.json"
    ))
    .expect("16-NPU scenario");
    let cfg = common::fake_config("");
    let d = Daemon::start(Start::new(&cfg).scenario(&scen));
    let s = d.wait_for("every collector", Duration::from_secs(20), |s| {
        [
            "npu_health",
            "npu_sensors",
            "npu_utilization",
            "npu_memory",
            "npu_network",
            "host",
        ]
        .iter()
        .all(|c| value(s, "hcclwatch_scrape_collector_success", &[("collector", c)]) == Some(1.0))
            && value(s, "hcclwatch_host_cpu_usage_ratio", &[]).is_some()
    });
    assert_eq!(value(&s, "hcclwatch_devices", &[]), Some(16.0));
    let (ok, msg) = check(&s);
    assert!(ok, "promtool check metrics failed:\n{msg}");
    assert!(
        msg.trim().is_empty(),
        "promtool reported lint problems:\n{msg}"
    );
}

#[test]
fn promtool_rejects_a_broken_exposition() {
    // The check must be able to fail: a counter without `_total` and a duplicate HELP.
    let (ok, msg) =
        check("# HELP x_bytes a\n# TYPE x_bytes counter\nx_bytes 1\n# HELP x_bytes a\n");
    assert!(
        !ok || !msg.trim().is_empty(),
        "promtool accepted a broken exposition"
    );
}

/// The probe families (histograms, per-link and per-node series) pass promtool too. Two
/// daemons form a real probe group over loopback TCP.
#[test]
fn promtool_accepts_the_probe_families() {
    let dir = tempfile::tempdir().unwrap();
    let key = common::write_key(dir.path(), "probe.key");
    let peers: Vec<String> = common::loopback_peers(2);
    let daemons: Vec<Daemon> = (0..2)
        .map(|rank| {
            let cfg = format!(
                "[web]\nlisten_address = \"127.0.0.1:0\"\n[telemetry]\nbackend = \"none\"\n\
                 [collective]\npeers = [\"{}\", \"{}\"]\nrank = {rank}\nkey_file = \"{}\"\n\
                 [probe]\nenabled = true\ninterval = \"100ms\"\nsmall_bytes = 1024\n\
                 link_bytes = 65536\nring_every = 2\nring_bytes = 65536\n",
                peers[0],
                peers[1],
                key.display()
            );
            Daemon::start(Start::new(&cfg))
        })
        .collect();
    let s = daemons[0].wait_for("probe histograms", Duration::from_secs(30), |s| {
        value(s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).is_some_and(|v| v >= 4.0)
            && s.contains("hcclwatch_collective_duration_seconds_bucket{op=\"all_reduce\",size_bytes=\"65536\"")
    });
    let rounds = value(&s, "hcclwatch_probe_rounds_total", &[("result", "ok")]).unwrap();
    // One RTT and one small all-reduce per round, recorded with the round's other numbers.
    assert_eq!(
        value(&s, "hcclwatch_link_rtt_seconds_count", &[]),
        Some(rounds)
    );
    assert_eq!(
        value(
            &s,
            "hcclwatch_collective_duration_seconds_count",
            &[("op", "all_reduce"), ("size_bytes", "1024")]
        ),
        Some(rounds)
    );
    assert_eq!(
        value(&s, "hcclwatch_link_rtt_seconds_bucket", &[("le", "+Inf")]),
        Some(rounds)
    );
    assert!(value(&s, "hcclwatch_link_rtt_seconds_sum", &[]).unwrap() > 0.0);
    let (ok, msg) = check(&s);
    assert!(ok, "promtool check metrics failed:\n{msg}");
    assert!(
        msg.trim().is_empty(),
        "promtool reported lint problems:\n{msg}"
    );
}
