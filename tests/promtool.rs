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
